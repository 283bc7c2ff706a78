"""``rocmforge export TARGET... --to DIR``: a closure's wheels for pip and uv, offline."""

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
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Export every wheel of each TARGET's closure into ``--to DIR``."""
    from rocmforge.cache.export import export

    store = open_store(args)
    entries: dict[str, Any] = {}
    for target in args.targets:
        for entry in resolve_targets(store, target):
            entries[entry.hash] = entry
            for h in entry.meta.built_against:  # a hash target brings its closure too
                entries.setdefault(h, store.resolve(h))
    with store.shared_lock():
        report = export(entries.values(), Path(args.to))
    if args.json:
        emit_json(report.to_json())
        return 0
    for w in report.wheels:
        print(f"{w.project} {w.version} {w.file}")
    print(f"exported {len(report.wheels)} wheels to {report.dest} (simple/, constraints.txt)")
    return 0
