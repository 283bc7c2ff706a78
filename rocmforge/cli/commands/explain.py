"""``rocmforge explain A B``: the key paths whose values differ between two builds."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_json_option, add_store_option, emit_json, open_store


def register(sub: Any) -> None:
    """Add the ``explain`` command."""
    p = sub.add_parser(
        "explain",
        help=COMMANDS["explain"],
        description="A and B may each be a recipe file, an input hash (or unique prefix), a "
        "store path or a wheel (its stamp is read). Prints only the key paths that differ.",
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge explain A B``: print one line per differing key; 0 in either case."""
    from rocmforge.sources.requirements import PipFetcher
    from rocmforge.trust.explain import descend, diff_derivations, load_side

    # Comparing recipes plans them (fetching requirements into the store's caches).
    recipes = [t for t in (args.a, args.b) if str(t).endswith(".toml") and os.path.isfile(t)]
    store = open_store(args, create=bool(recipes))
    fetcher = PipFetcher()
    a = load_side(args.a, store=store, fetcher=fetcher)
    b = load_side(args.b, store=store, fetcher=fetcher)
    diffs = descend(diff_derivations(a.derivation, b.derivation), store)
    if args.json:
        emit_json(
            {
                "a": a.to_json(),
                "b": b.to_json(),
                "identical": not diffs,
                "differences": [d.to_json() for d in diffs],
            }
        )
        return 0
    if not diffs:
        print(f"identical derivations (input hash {a.hash})")
        return 0
    for d in diffs:
        print(d)
    return 0
