"""``rocmforge list``: every store entry with size, age, last use and roots (from the index)."""

from __future__ import annotations

import argparse
from typing import Any

from rocmforge.cli.commands._common import add_json_option, add_store_option, emit_json, open_store


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
        import sys

        from rocmforge.store.query import list_summary
        from rocmforge.util.table import format_summary

        sys.stdout.write(format_summary(list_summary(open_store(args))))
        return 0
    from rocmforge.store.query import list_entries

    emit_json([e.to_json() for e in list_entries(open_store(args))])
    return 0
