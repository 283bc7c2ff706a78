"""``rocmforge pin NAME TARGET``: a named gc root that keeps an entry through every policy."""

from __future__ import annotations

import argparse
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    emit_json,
    entry_of,
    is_recipe_target,
    open_store,
    stack_entries,
)


def register(sub: Any) -> None:
    """Add the ``pin`` command."""
    p = sub.add_parser("pin", help=COMMANDS["pin"])
    p.add_argument("name", metavar="NAME", help="pin name (letters, digits, '.', '_', '-')")
    p.add_argument(
        "target",
        metavar="TARGET",
        help="recipe file, input hash (prefix), entry dir or path; or a stack file: "
        "NAME.<package> for each built entry of its closure",
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge pin NAME TARGET``: create or move the pin ``NAME`` to TARGET's entry."""
    from rocmforge.recipe.stack import load_stack
    from rocmforge.store.roots import check_pin_name, pin

    check_pin_name(args.name)
    store = open_store(args)
    if is_recipe_target(args.target) and load_stack(args.target) is not None:
        entries = stack_entries(store, args.target)
        with store.shared_lock():
            made_all = [pin(store, f"{args.name}.{name}", e) for name, e in entries]
        if args.json:
            emit_json([{"name": m.name, "entry": m.entry, "path": str(m.path)} for m in made_all])
        else:
            for m in made_all:
                print(f"pinned {m.name} -> {m.entry}")
        return 0
    with store.shared_lock():  # the entry cannot be collected between resolving and pinning
        made = pin(store, args.name, entry_of(store, args.target))
    if args.json:
        emit_json({"name": made.name, "entry": made.entry, "path": str(made.path)})
    else:
        print(f"pinned {made.name} -> {made.entry}")
    return 0
