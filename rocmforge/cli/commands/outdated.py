"""``rocmforge outdated TARGET...``: newer releases of a recipe's or stack's pins, as a table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_json_option, emit_json
from rocmforge.errors import UsageError


def register(sub: Any) -> None:
    """Add the ``outdated`` command."""
    p = sub.add_parser(
        "outdated",
        help=COMMANDS["outdated"],
        description="For each recipe of TARGET's closure (a stack: every member): the newest "
        "release tag of its git remote, the newest version of its package on the indexes of "
        "ROCMFORGE_PIP_ARGS, and for a rocm-sdk toolchain the newest rocm-sdk-core on the SDK "
        "index, beside what the recipe pins. Pre-releases are left out. Exit 0 (a report); "
        "`rocmforge lock` then writes what the new trees decide.",
    )
    p.add_argument("recipes", nargs="+", metavar="TARGET", help="recipe or stack file")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print one row per pin: recipe, pin, current, newest (marked when newer), where."""
    from rocmforge.lock.outdated import outdated
    from rocmforge.plan.graph import closure_files

    for r in args.recipes:
        if not Path(r).is_file():
            raise UsageError(f"outdated: {r}: no such recipe or stack file")
    rows = outdated(closure_files(args.recipes))
    if args.json:
        emit_json([row.to_json() for row in rows])
        return 0
    table = [("RECIPE", "PIN", "CURRENT", "NEWEST", "WHERE")]
    for row in rows:
        newest = row.newest or ("unreachable" if row.error else "none found")
        mark = " *" if row.outdated else ""
        table.append(
            (
                row.recipe.name,
                f"{row.kind}: {row.name}",
                row.current or "-",
                newest + mark,
                row.error or row.where,
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[4])
    n = sum(row.outdated for row in rows)
    print(f"{n} pin{'s' if n != 1 else ''} with a newer release (*)" if n else "all pins current")
    return 0
