"""``rocmforge list``: every store entry with size, age, last use and roots (from the index)."""

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
    from typing import Any


def register(sub: Any) -> None:
    """Add the ``list`` command."""
    p = sub.add_parser(
        "list", help=COMMANDS["list"]
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge list``: print every indexed entry, oldest first."""
    if not args.json:
        from rocmforge.store.readers import entry_table

        if print_read(args, lambda root, _: entry_table(root)):
            return 0
        import sys

        from rocmforge.store.query import list_summary
        from rocmforge.util.table import format_summary

        sys.stdout.write(format_summary(list_summary(open_store(args))))
        return 0
    from rocmforge.store.query import list_entries

    emit_json([e.to_json() for e in list_entries(open_store(args))])
    return 0
