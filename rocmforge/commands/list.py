"""``rocmforge list``: every store entry with size, age, last use and roots (from the index)."""

from __future__ import annotations

import argparse
from typing import Any

from rocmforge.commands._common import add_json_option, add_store_option, emit_json, open_store


def register(sub: Any) -> None:
    """Add the ``list`` command."""
    p = sub.add_parser(
        "list", help="list store entries: hash, name, version, size, created, last used, roots"
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge list``: print every indexed entry, oldest first."""
    if not args.json:
        from rocmforge.store.query import list_summary

        _print_summary(list_summary(open_store(args)))
        return 0
    from rocmforge.store.query import list_entries

    emit_json([e.to_json() for e in list_entries(open_store(args))])
    return 0


def _print_summary(rows: list[tuple[str, str, str, int, float, float, int]]) -> None:
    """Print rows as :func:`rocmforge.commands.query.print_table` does, without row objects."""
    import sys

    from rocmforge.commands.query import human_size, human_time

    minutes: dict[int, str] = {}

    def when(ts: float) -> str:  # the table shows minutes: format each minute once
        m = int(ts // 60) if ts else -1
        text = minutes.get(m)
        if text is None:
            text = minutes[m] = human_time(m * 60 if ts else 0)
        return text

    header = ("HASH", "NAME", "VERSION", "SIZE", "CREATED (UTC)", "LAST USED (UTC)", "ROOTS")
    table = [header]
    table.extend(
        (h[:12], name, version, human_size(size), when(created), when(last), str(n) if n else "-")
        for h, name, version, size, created, last, n in rows
    )
    widths = [max(map(len, col)) for col in zip(*table, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    sys.stdout.write("".join(fmt.format(*r).rstrip() + "\n" for r in table))
