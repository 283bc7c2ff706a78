"""``rocmforge pins``: list the named gc roots."""

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
    """Add the ``pins`` command."""
    p = sub.add_parser("pins", help=COMMANDS["pins"])
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge pins``: print ``NAME -> ENTRY`` for every pin."""
    if not args.json:
        from rocmforge.store.readers import pins_text

        if print_read(args, lambda root, _: pins_text(root)):
            return 0
    from rocmforge.store.roots import pins

    found = pins(open_store(args))
    if args.json:
        emit_json([{"name": p.name, "entry": p.entry, "path": str(p.path)} for p in found])
    else:
        for p in found:
            print(f"{p.name} -> {p.entry or '(dangling)'}")
    return 0
