"""``rocmforge lock TARGET...``: pin ``[source] ref`` to a commit and requirements to digests.

A TARGET is a recipe or a stack file; every recipe it is built against (``[requirements]
recipes``) is locked too, dependencies first.
"""

from __future__ import annotations

import argparse
import os
import re
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
        help="re-resolve the build requirements (only NAME if given) within the specifiers; "
        "NAME==VERSION moves the recipe of package NAME to that release (its tag vVERSION: "
        "rev, ref, the version keys) and, for a stack's torch, its companions, derived pins and "
        "build requirements with it",
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


def _lock_closure(targets: list[str], *, store: Any, write: bool, upgrade: list[str]) -> list[Any]:
    """Lock every recipe of the targets' closure: rev and requirements, then what the pinned
    tree decides (Triton's LLVM, AOTriton), then url-only inputs; one report per recipe."""
    from rocmforge.lock.derived import lock_derived, merge
    from rocmforge.lock.locker import lock_inputs, lock_recipe
    from rocmforge.plan.graph import closure_files

    reports = []
    for r in closure_files(targets):  # stacks expanded, dependencies first
        first = lock_recipe(r, store=store, fetcher=_LazyPipFetcher(),
                            write=write, upgrade=upgrade, inputs=False)  # fmt: skip
        # a url the tree replaced is not fetched: derived pins come before the url-only inputs
        derived = lock_derived(r, store=store, write=write, fetch=write)
        rest = lock_inputs(r, store=store, write=write)
        reports.append(merge(merge(first, derived), rest))
    return reports


def _move(
    targets: list[str], releases: list[tuple[str, str]], *, store: Any, write: bool
) -> list[Any]:
    """``--upgrade NAME==VERSION``: move each named recipe to its release; a stack's torch takes
    its companions along (read from the new torch tree, also under ``--check``)."""
    import dataclasses

    from rocmforge.lock.companions import lock_companions, move_release
    from rocmforge.plan.graph import closure_files
    from rocmforge.recipe.stack import load_stack

    closure = [Path(p) for p in closure_files(targets)]
    reports: list[Any] = []
    for name, version in releases:
        move = move_release(closure, name, version, write=write)
        report = move.report
        if report.changes and not write:
            note = (f"moving to {name} {version} (tag {move.tag}, commit {move.rev[:12]}): its "
                    "derived pins and build requirements follow when written")  # fmt: skip
            report = dataclasses.replace(report, notes=(*report.notes, note))
        reports.append(report)
        if re.sub(r"[-_.]+", "-", name).lower() != "torch":
            continue
        local = _local_part(move.recipe)  # a move keeps it
        for target in targets:
            if load_stack(Path(target)) is not None:
                reports += lock_companions(Path(target), store=store, write=write,
                                           moved=(move.rev, version + local))  # fmt: skip
    return reports


def _local_part(recipe: Path) -> str:
    """The ``+local`` part of the recipe's ``[package] version`` (``+rocm10.0``), or ``""``."""
    from rocmforge.recipe.load import load_recipe

    _, plus, local = load_recipe(recipe).package.version.partition("+")
    return plus + local


def run(args: argparse.Namespace) -> int:
    """``rocmforge lock RECIPE...``: write the resolved values back into each recipe."""
    store = open_store(args, create=True)
    upgrade = list(args.upgrade or [])
    recipes = list(args.recipes)
    for i, name in enumerate(upgrade):  # `lock --upgrade RECIPE`: the recipe is not a NAME
        if name.endswith(".toml") or os.sep in name:
            recipes.insert(0, name)
            upgrade[i] = "*"
    if not recipes:
        raise UsageError("lock: name at least one RECIPE")
    from rocmforge.lock.companions import parse_release

    releases = [r for r in map(parse_release, upgrade) if r is not None]
    upgrade = [u for u in upgrade if parse_release(u) is None]
    if releases:
        if args.companions:
            raise UsageError("lock: --upgrade NAME==VERSION moves the companions itself: drop "
                             "--companions")  # fmt: skip
        reports = _move(recipes, releases, store=store, write=not args.check)
        if not args.check:
            reports += _lock_closure(recipes, store=store, write=True, upgrade=upgrade)
    elif args.companions:
        if upgrade:
            raise UsageError("lock: --companions and --upgrade do not go together")
        from rocmforge.lock.companions import lock_companions

        reports = [
            report
            for stack in recipes
            for report in lock_companions(Path(stack), store=store, write=not args.check)
        ]
    else:
        reports = _lock_closure(recipes, store=store, write=not args.check, upgrade=upgrade)
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
