"""``rocmforge query``: find entries by name, version, env flag, age (from the index) or GPU
acceptance (``--accepted [--on ARCH]``: the runs kept in ``accepted/<hash>/``)."""

from __future__ import annotations

import argparse

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    emit_json,
    open_store,
    print_read,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def register(sub: Any) -> None:
    """Add the ``query`` command."""
    p = sub.add_parser("query", help=COMMANDS["query"])
    p.add_argument("--name", help="package name (matched as pip does: case, -, _ and . alike)")
    p.add_argument("--version", help="exact package version")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE|KEY~SUBSTR",
        help="hashed env flag equal to VALUE, or containing SUBSTR (repeatable: all must match)",
    )
    p.add_argument("--since", metavar="WHEN", help="built since: a duration (7d, 12h) or a date")
    p.add_argument(
        "--built-against",
        metavar="HASH",
        help="entries built against this entry (hash, prefix or path), directly or transitively",
    )
    p.add_argument(
        "--accepted",
        action="store_true",
        help="entries with a passing acceptance run (rocmforge test); text shows the newest "
        "run's headline, --json the runs",
    )
    p.add_argument(
        "--on",
        metavar="ARCH",
        help="with --accepted: the passing run was on a node with this GPU arch (gfx942, sm_90)",
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge query``: print the matching entries (one line each); 0 even if none match."""
    if args.on and not args.accepted:
        from rocmforge.errors import UsageError

        raise UsageError(f"query --on {args.on}: --on goes with --accepted")
    if not (args.json or args.env or args.since or args.built_against or args.accepted):
        from rocmforge.store.readers import entry_table

        if print_read(args, lambda root, _: entry_table(root, args.name, args.version)):
            return 0
    from rocmforge.store.query import parse_env_filter, parse_since, query_entries

    filters = [parse_env_filter(e) for e in args.env]
    since = parse_since(args.since) if args.since else None
    store = open_store(args)
    found = query_entries(
        store,
        name=args.name,
        version=args.version,
        env=filters,
        since=since,
        built_against=args.built_against,
        accepted=args.accepted,
        arch=args.on,
    )
    if args.json:
        emit_json([e.to_json() for e in found])
    else:
        print_table(
            found,
            env_keys=list(dict.fromkeys(f.key for f in filters)),
            accepted=args.accepted,
        )
    return 0


def _headline(entry: Any) -> str:
    """The newest matching run's headline (``query --accepted``), ``(+N)`` for the others."""
    runs = entry.accepted or ()
    if not runs:
        return "-"
    more = f" (+{len(runs) - 1})" if len(runs) > 1 else ""
    return str(runs[-1].headline()) + more


def print_table(
    entries: Sequence[Any], env_keys: Sequence[str] = (), accepted: bool = False
) -> None:
    """Print entries as ``list`` does (:func:`rocmforge.util.table.format_summary`), then one
    column per ``env_keys`` (the values ``query --env`` matched on), then with ``accepted``
    the newest passing run's headline (``query --accepted``)."""
    import sys

    from rocmforge.util.table import format_summary

    rows = (
        (
            e.row.hash,
            e.row.name,
            e.row.version,
            e.row.size,
            e.row.created,
            e.last_used,
            len(e.roots),
            *(e.env.get(k, "-") for k in env_keys),
            *((_headline(e),) if accepted else ()),
        )
        for e in entries
    )
    sys.stdout.write(format_summary(rows, [*env_keys, *(("ACCEPTED",) if accepted else ())]))
