"""What ``doctor RECIPE|STACK`` adds for a build to come: free disk at the store, the MAX_JOBS
this machine affords, and numbered next steps that name the target given (generic over it)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The memory one compile job of a large C++/HIP build can take (PyTorch's ROCm kernels reach
#: about this); MAX_JOBS is bounded by the RAM over it as well as by the cores.
GIB_PER_JOB = 2


def free_disk(store: Path) -> int | None:
    """Free bytes on the filesystem the store is (or will be) on: its nearest existing
    directory; None when none can be read."""
    for d in (store, *store.parents):
        if d.is_dir():
            try:
                return shutil.disk_usage(d).free
            except OSError:
                return None
    return None


def jobs_afforded(ram_bytes: int | None, cores: int | None) -> int:
    """The MAX_JOBS this machine affords: the cores, at most one job per :data:`GIB_PER_JOB`
    GiB of RAM, at least 1."""
    by_ram = ram_bytes // (GIB_PER_JOB * 1024**3) if ram_bytes else None
    options = [n for n in (cores, by_ram) if n]
    return max(1, min(options)) if options else 1


def max_jobs_line(
    ram_bytes: int | None, cores: int | None, advice: Any, *, names: Sequence[str]
) -> str:
    """The one ``MAX_JOBS:`` line: the advice from the telemetry of a previous build when there
    is one (:class:`rocmforge.observe.advice.JobsAdvice`, which realize applies), else the
    estimate from the RAM and the cores (:func:`jobs_afforded`); each says which it is."""
    if advice is not None:
        return (
            f"  MAX_JOBS:  {advice.jobs}, from the telemetry of the previous build "
            f"{Path(advice.source).name}: {advice.text()} (realize sets it unless the recipe's "
            "[env] or the passed-through environment does)"
        )
    jobs = jobs_afforded(ram_bytes, cores)
    who = " or ".join(names) or "it"
    return (
        f"  MAX_JOBS:  {jobs}, estimated from the RAM and cores (cores {cores or '?'}, "
        f"{GIB_PER_JOB} GiB of RAM per compile job; no build of {who} with telemetry in the "
        f"store yet): set MAX_JOBS={jobs} in the environment of a recipe that passes it through"
    )


def resource_lines(
    store: Path, ram_bytes: int | None, cores: int | None, advice: Any, *, names: Sequence[str]
) -> list[str]:
    """``disk:`` and ``MAX_JOBS:`` lines for the machine report."""
    from rocmforge.util.sizes import format_size

    free = free_disk(store)
    return [
        f"  disk:      {format_size(free) + ' free' if free is not None else 'unknown'} at {store}",
        max_jobs_line(ram_bytes, cores, advice, names=names),
    ]


def next_steps(target: str, *, stack: bool, names: Sequence[str]) -> list[str]:
    """The numbered steps from here to an installed, tested build of ``target`` (a recipe or a
    stack file as the user named it)."""
    from rocmforge.util.shownpath import shown_path

    t = shown_path(target)
    what = "the stack's recipes" if stack else "the recipe"
    return [
        "next steps:",
        f"  1. rocmforge lock {t}      # pins refs, requirements and SDK wheels of {what}",
        "  2. git add the recipes and *.lock files lock rewrote, and commit them: the pins are "
        "the build's inputs",
        f"  3. rocmforge realize {t} -o result   # builds what is missing, dependencies first",
        f"  4. rocmforge export {t} --to wheels   # the closure's wheels and constraints.txt",
        "     pip install --find-links wheels -c wheels/constraints.txt "
        f"{' '.join(names) or 'NAME'}",
        "     (a wheel that requires packages built elsewhere, e.g. torch's rocm[libraries], "
        "needs their index too: --extra-index-url URL)",
        f"  5. rocmforge test {t}   # on the GPU node: the acceptance checks "
        "(docs/gpu-acceptance.md)",
    ]


def stack_recipes(path: str) -> tuple[str, list[Path]] | None:
    """``(stack name, its recipe files)`` when ``path`` is a stack file, else None."""
    from rocmforge.recipe.stack import load_stack

    if not os.path.isfile(path):
        return None
    stack = load_stack(path)
    return (stack.name, list(stack.recipes)) if stack is not None else None
