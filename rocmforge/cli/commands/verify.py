"""``rocmforge verify [TARGET...]``: re-hash published files; check the index against entries.

Exit status: 0 nothing wrong (or everything repaired), 1 problems found (missing, modified,
orphaned, unindexed, stale-index, damaged, corrupt-index), 2 bad input, 3 the store cannot be
read. Works on a read-only store; the repairs need write access.
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_json_option, add_store_option, emit_json, open_store


def register(sub: Any) -> None:
    """Add the ``verify`` command."""
    p = sub.add_parser(
        "verify",
        help=COMMANDS["verify"],
        epilog="exit status: 0 ok, 1 problems found, 2 bad input, 3 store unreadable",
    )
    p.add_argument(
        "targets", nargs="*", metavar="TARGET", help="entries to check (default: the whole store)"
    )
    p.add_argument(
        "--repair-index",
        action="store_true",
        help="rebuild the index from entries/ if it disagrees, then verify again",
    )
    p.add_argument(
        "--repair",
        action="store_true",
        help="also move damaged entries and stray files to quarantine/ (realize rebuilds them)",
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge verify``: print each problem; exit 1 if any is left."""
    from rocmforge.store.verify import verify_store

    report = verify_store(
        open_store(args), args.targets, repair_index=args.repair_index, repair=args.repair
    )
    if args.json:
        emit_json(report.to_json())
    else:
        for p in report.repaired:
            print(f"repaired: {p}")
        for p in report.problems:
            print(p)
        state = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        print(f"verified {report.entries} entries, {report.files} files: {state}")
    return 0 if report.ok else 1
