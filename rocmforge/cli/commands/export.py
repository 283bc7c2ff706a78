"""``rocmforge export TARGET... --to DIR``: a closure's wheels for pip and uv, offline, with
each entry's acceptance runs in ``DIR/accepted/<hash>/``; ``--require-accepted [--on ARCH]``
writes nothing unless every entry has a passing run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    emit_json,
    open_store,
    resolve_targets,
)


def register(sub: Any) -> None:
    """Add the ``export`` command."""
    p = sub.add_parser(
        "export",
        help=COMMANDS["export"],
    )
    p.add_argument(
        "targets", nargs="+", metavar="TARGET", help="stack or recipe file, hash or entry path"
    )
    p.add_argument("--to", required=True, metavar="DIR", help="the directory to write")
    p.add_argument(
        "--require-accepted",
        action="store_true",
        help="export nothing unless every entry has a passing acceptance run (rocmforge test; "
        "a dependency counts when a passing run of an entry with it tested its wheels)",
    )
    p.add_argument(
        "--on",
        metavar="ARCH",
        help="with --require-accepted: the passing run must be on a node with this GPU arch "
        "(gfx942, sm_90)",
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Export every wheel of each TARGET's closure into ``--to DIR``."""
    from rocmforge.cache.export import export

    if args.on and not args.require_accepted:
        from rocmforge.errors import UsageError

        raise UsageError(f"export --on {args.on}: --on goes with --require-accepted")
    store = open_store(args)
    entries: dict[str, Any] = {}
    for target in args.targets:
        for entry in resolve_targets(store, target):
            entries[entry.hash] = entry
            for h in entry.meta.built_against:  # a hash target brings its closure too
                entries.setdefault(h, store.resolve(h))
    with store.shared_lock():
        if args.require_accepted:  # (push.py's gate: a verb imports only its own module)
            from rocmforge.store.accepted import require_accepted

            require_accepted(store.root, list(entries.values()), args.on, verb="export")
        report = export(entries.values(), Path(args.to))
    if args.json:
        emit_json(report.to_json())
        return 0
    for w in report.wheels:
        print(f"{w.project} {w.version} {w.file}")
    runs = f", {len(report.runs)} acceptance runs in accepted/" if report.runs else ""
    print(f"exported {len(report.wheels)} wheels to {report.dest} (simple/, constraints.txt{runs})")
    return 0
