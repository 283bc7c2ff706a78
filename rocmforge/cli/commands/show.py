"""``rocmforge show TARGET``: everything about one store entry."""

from __future__ import annotations

import argparse
import os

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

    from rocmforge.store.query import EntryDetails


def register(sub: Any) -> None:
    """Add the ``show`` command."""
    p = sub.add_parser("show", help=COMMANDS["show"])
    p.add_argument(
        "target", metavar="TARGET", help="input hash (prefix), entry name or path, or a wheel"
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge show TARGET``: print the entry's identity, files, inputs and run facts
    (:func:`rocmforge.store.showtext.show_text`)."""
    if not args.json:
        from rocmforge.store.readers import show_text_of

        if print_read(args, lambda root, _: show_text_of(root, args.target)):
            return 0
    from rocmforge.store.showtext import show_text

    info = _show(args)
    if args.json:
        emit_json(info.to_json())
        return 0
    text = show_text(
        os.fspath(info.entry.path),
        info.entry.meta.to_json(),
        info.derivation,
        info.provenance,
        indexed=info.indexed,
        last_used=info.last_used,
        roots=info.roots,
        accepted=[r.facts() for r in info.accepted],
    )
    print(text, end="")
    return 0


def _show(args: argparse.Namespace) -> EntryDetails:
    from rocmforge.store.query import show_entry

    return show_entry(open_store(args), args.target)
