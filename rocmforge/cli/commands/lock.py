"""``rocmforge lock TARGET...``: pin ``[source] ref`` to a commit and requirements to digests.

A TARGET is a recipe or a stack file; every recipe it is built against (``[requirements]
recipes``) is locked too, dependencies first.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_json_option, add_store_option, emit_json, open_store
from rocmforge.errors import UsageError


def register(sub: Any) -> None:
    """Add the ``lock`` command."""
    p = sub.add_parser(
        "lock",
        help=COMMANDS["lock"],
        description="Resolve [source] ref to a full commit (written to rev) and the build "
        "requirements to their exact closure of wheels (written to the recipe's lock file, "
        "NAME.lock beside NAME.toml; a recipe of exact pins only gets [requirements] digests). "
        "A stack, or a recipe built against other recipes, locks its whole closure. "
        "Comments and layout of the recipe are kept byte for byte outside the changed values. "
        "Pins that the pinned tree decides (Triton's LLVM from its cmake/llvm-info.json, AOTriton "
        "from torch's cmake/External/aotriton.cmake) are read from that tree and written; "
        "--check names each that disagrees, with both values and the tree file. "
        "The resolver is uv if installed, else pip; ROCMFORGE_PIP_ARGS passes index options.",
    )
    p.add_argument("recipes", nargs="*", metavar="TARGET", help="recipe or stack file")
    p.add_argument("--check", action="store_true",
                   help="only report; exit 1 if lock would change something here (what only a "
                        "machine that reaches the index or the source can lock or check is "
                        "said as not locked yet / not checked here, exit 0)")  # fmt: skip
    p.add_argument(
        "--companions",
        action="store_true",
        help="RECIPE is a stack: pin its triton (torch's ci_commit_pins/triton.txt), torchvision "
        "and torchaudio (released with that torch) from the stack's torch tree",
    )
    p.add_argument(
        "--upgrade",
        nargs="?",
        const="*",
        action="append",
        metavar="NAME",
        help="re-resolve the build requirements (only NAME if given) within the specifiers",
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def _unchanged(report: Any) -> str:
    """The one answer for a recipe ``lock`` would not change here: already locked, not locked
    yet (what the notes above say only another machine can pin), or locked as far as this
    machine can check."""
    unlocked, unchecked = report.pending()
    if unlocked:
        rest = f"; not checked here: {', '.join(unchecked)}" if unchecked else ""
        return (f"not locked yet: {', '.join(unlocked)} (run `rocmforge lock {report.recipe}` "
                f"where the index or source is reachable; see above){rest}; nothing else to "
                "change")  # fmt: skip
    if unchecked:
        return (f"locked as far as this machine can check: {', '.join(unchecked)} not checked "
                "here (see above)")  # fmt: skip
    return "already locked"


class _LazyPipFetcher:
    """A PipFetcher imported on first use: a no-op ``lock --check`` never needs one."""

    def fetch(self, pin: Any, *, python_version: str, dest: Path) -> Path:
        """Fetch ``pin`` with :class:`rocmforge.sources.requirements.PipFetcher`."""
        from rocmforge.sources.requirements import PipFetcher

        return PipFetcher().fetch(pin, python_version=python_version, dest=dest)


def run(args: argparse.Namespace) -> int:
    """``rocmforge lock RECIPE...``: write the resolved values back into each recipe."""
    from rocmforge.lock.locker import lock_inputs, lock_recipe
    from rocmforge.plan.graph import closure_files

    store = open_store(args, create=True)
    upgrade = list(args.upgrade or [])
    recipes = list(args.recipes)
    for i, name in enumerate(upgrade):  # `lock --upgrade RECIPE`: the recipe is not a NAME
        if name.endswith(".toml") or os.sep in name:
            recipes.insert(0, name)
            upgrade[i] = "*"
    if not recipes:
        raise UsageError("lock: name at least one RECIPE")
    if args.companions:
        if upgrade:
            raise UsageError("lock: --companions and --upgrade do not go together")
        from rocmforge.lock.companions import lock_companions

        reports = [
            report
            for stack in recipes
            for report in lock_companions(Path(stack), store=store, write=not args.check)
        ]
    else:
        from rocmforge.lock.derived import lock_derived, merge

        closure = closure_files(recipes)  # stacks expanded, dependencies first
        reports = []
        for r in closure:
            first = lock_recipe(r, store=store, fetcher=_LazyPipFetcher(),
                                write=not args.check, upgrade=upgrade, inputs=False)  # fmt: skip
            # then what the (now pinned) tree decides: Triton's LLVM, AOTriton; and last the
            # url-only inputs still without a sha256 (fetched: a url the tree replaced is not)
            derived = lock_derived(r, store=store, write=not args.check, fetch=not args.check)
            rest = lock_inputs(r, store=store, write=not args.check)
            reports.append(merge(merge(first, derived), rest))
    if args.json:
        emit_json([r.to_json() for r in reports])
    else:
        for report in reports:
            for note in report.notes:
                print(f"{report.recipe}: {note}")
            if not report.changes:
                print(f"{report.recipe}: {_unchanged(report)}")
                continue
            verb = "updated" if report.written else "would change"
            print(f"{report.recipe}: {verb}")
            for c in report.changes:
                why = f" ({c.why})" if c.why else ""
                print(f"  {c.key}: {c.old or '(none)'} -> {c.new or '(removed)'}{why}")
    return 1 if args.check and any(r.changes for r in reports) else 0
