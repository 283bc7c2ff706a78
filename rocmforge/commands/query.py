"""``rocmforge query``: find entries by name, version, env flag or age (from the index)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from rocmforge.commands._common import add_json_option, add_store_option, emit_json, open_store


def register(sub: Any) -> None:
    """Add the ``query`` command."""
    p = sub.add_parser("query", help="find store entries by name, version, env flag or age")
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
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge query``: print the matching entries (one line each); 0 even if none match."""
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
    )
    if args.json:
        emit_json([e.to_json() for e in found])
    else:
        print_table(found, env_keys=list(dict.fromkeys(f.key for f in filters)))
    return 0


def human_size(n: float) -> str:
    """Return ``n`` bytes as ``1.5M``-style text."""
    for unit in ("B", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}T"


def human_time(ts: float) -> str:
    """Return a timestamp as ``2025-01-31 12:00`` (UTC)."""
    if not ts:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def print_table(entries: Sequence[Any], env_keys: Sequence[str] = ()) -> None:
    """Print entries as a table: hash prefix, name, version, size, created, last used, roots,
    then one column per ``env_keys`` (the values ``query --env`` matched on)."""
    header = (
        "HASH", "NAME", "VERSION", "SIZE", "CREATED (UTC)", "LAST USED (UTC)", "ROOTS", *env_keys
    )  # fmt: skip
    rows = [
        (
            e.row.hash[:12],
            e.row.name,
            e.row.version,
            human_size(e.row.size),
            human_time(e.row.created),
            human_time(e.last_used),
            str(len(e.roots)) if e.roots else "-",
            *(e.env.get(k, "-") for k in env_keys),
        )
        for e in entries
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for r in (header, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
