"""``rocmforge pin NAME TARGET``: a named gc root that keeps an entry through every policy."""

from __future__ import annotations

import argparse
from typing import Any

from rocmforge.commands._common import (
    add_json_option,
    add_store_option,
    emit_json,
    entry_of,
    open_store,
)


def register(sub: Any) -> None:
    """Add the ``pin`` command."""
    p = sub.add_parser("pin", help="keep an entry through every gc under a name")
    p.add_argument("name", metavar="NAME", help="pin name (letters, digits, '.', '_', '-')")
    p.add_argument(
        "target", metavar="TARGET", help="recipe file, input hash (prefix), entry dir or path"
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge pin NAME TARGET``: create or move the pin ``NAME`` to TARGET's entry."""
    from rocmforge.store.roots import check_pin_name, pin

    check_pin_name(args.name)
    store = open_store(args)
    with store.shared_lock():  # the entry cannot be collected between resolving and pinning
        made = pin(store, args.name, entry_of(store, args.target))
    if args.json:
        emit_json({"name": made.name, "entry": made.entry, "path": str(made.path)})
    else:
        print(f"pinned {made.name} -> {made.entry}")
    return 0
