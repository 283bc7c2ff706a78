"""``rocmforge list``: every store entry with size, age, last use and roots (from the index)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
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


def _print_summary(rows: Iterable[tuple[str, str, str, int, float, float, int]]) -> None:
    """Print rows as :func:`rocmforge.commands.query.print_table` does, without row objects.

    One pass builds the seven cells of each row, formatting each distinct minute and size once;
    the widths are taken per column and the lines joined in one write.
    """
    import sys

    from rocmforge.commands.query import human_size, human_time

    minutes: dict[float, str] = {-1.0: human_time(0)}
    sizes: dict[int, str] = {}
    table: list[tuple[str, str, str, str, str, str, str]] = [
        ("HASH", "NAME", "VERSION", "SIZE", "CREATED (UTC)", "LAST USED (UTC)", "ROOTS")
    ]
    add = table.append
    for h, name, version, size, created, last, n in rows:
        # the table shows minutes: a timestamp in minute m prints as m * 60 (0 prints as "-")
        mc = created // 60 if created else -1.0
        c = minutes.get(mc)
        if c is None:
            c = minutes[mc] = human_time(mc * 60)
        ml = last // 60 if last else -1.0
        u = minutes.get(ml)
        if u is None:
            u = minutes[ml] = human_time(ml * 60)
        z = sizes.get(size)
        if z is None:
            z = sizes[size] = human_size(size)
        add((h[:12], name, version, z, c, u, str(n) if n else "-"))
    widths = [max(map(len, col)) for col in zip(*table, strict=True)]
    # the last column unpadded: no cell ends in a space, so no line needs stripping
    fmt = "  ".join(f"%-{w}s" for w in widths[:-1]) + "  %s\n"
    sys.stdout.write("".join([fmt % r for r in table]))
