"""``rocmforge unpin NAME``: remove a named gc root (the entry itself stays until a gc)."""

from __future__ import annotations

import argparse
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_store_option, open_store


def register(sub: Any) -> None:
    """Add the ``unpin`` command."""
    p = sub.add_parser("unpin", help=COMMANDS["unpin"])
    p.add_argument("name", metavar="NAME")
    add_store_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge unpin NAME``: remove the pin ``NAME``."""
    from rocmforge.store.roots import pins, unpin

    store = open_store(args)
    members = [p.name for p in pins(store) if p.name.startswith(f"{args.name}.")]
    if members and args.name not in {p.name for p in pins(store)}:  # a stack's pins
        for name in members:
            removed = unpin(store, name)
            print(f"unpinned {removed.name} (was {removed.entry or 'dangling'})")
        return 0
    removed = unpin(store, args.name)
    print(f"unpinned {removed.name} (was {removed.entry or 'dangling'})")
    return 0
