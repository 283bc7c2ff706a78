"""What ``doctor RECIPE|STACK`` adds for a build to come: free disk at the store, the MAX_JOBS
this machine affords, the expected build time where it is known, and numbered next steps that
name the target given (generic over it; a recipe on ROCm SDK wheels adds AMD's index to the
install step, for the ``rocm[libraries]`` its wheel requires)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Build times that are known, by package name: ``(cores, single-arch, text)``, from
#: shared/ROCM.md "Time and size" (PyTorch's own CI: a cold single-arch gfx942 build is 1-2 h on
#: 64 cores, an estimate; multi-arch nightlies take up to 7 h). Said for a machine with at
#: least that many cores; on fewer the time is unknown (the figure is shown as the reference).
KNOWN_TIMES: dict[str, tuple[int, str, str]] = {
    "torch": (64, "1-2 h cold", "up to 7 h cold (multi-arch)"),
}

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


def build_time(recipe: Any, cores: int | None, entries_dir: Path | None) -> str:
    """``NAME: <expected time>`` for ``recipe`` on this machine: the previous build's time in
    the store (its telemetry), else :data:`KNOWN_TIMES` where this machine has the cores that
    figure is for, else ``unknown`` (with the figure for the cores it is known for)."""
    from rocmforge.recipe.lints import recipe_archs
    from rocmforge.store.showtext import duration

    name = recipe.package.name
    if entries_dir is not None:
        from rocmforge.observe.record import previous_record

        found = previous_record(entries_dir, name)
        if found is not None:
            path, record = found
            took = sum(s.seconds for s in record.steps)
            if took > 0:
                return f"{name}: about {duration(took)} (the previous build here, {path.name})"
    known = KNOWN_TIMES.get(name)
    if known is None:
        return f"{name}: unknown"
    at, single, multi = known
    text = single if len({a for _, a in recipe_archs(recipe)}) <= 1 else multi
    if cores is not None and cores >= at:
        return f"{name}: {text} on {at}+ cores (an estimate)"
    return f"{name}: unknown on {cores or '?'} cores ({text} on {at} cores, an estimate)"


def time_line(recipes: Sequence[Any], cores: int | None, entries_dir: Path | None) -> str:
    """The ``time:`` line of the resources: :func:`build_time` of each recipe."""
    return "  time:      " + "; ".join(build_time(r, cores, entries_dir) for r in recipes)


def _sdk_requirement(recipe: Any) -> str:
    """The ``rocm[...]==VERSION`` the recipe's wheel requires (as its ``[env]`` writes it), else
    ``rocm[libraries,device-<gfx>...]`` for the declared version and ISAs."""
    import re

    for value in recipe.env.values():
        m = re.search(r"(?<![\w-])rocm\[[^\]]*\]==[^|\s,;]+", value)
        if m:
            return m.group(0)
    spec = recipe.toolchain
    isas = [f for f in spec.families if re.fullmatch(r"gfx[0-9a-f]{3,4}", f)]
    return f"rocm[{','.join(['libraries', *(f'device-{i}' for i in isas)])}]=={spec.sdk_version}"


def sdk_index(recipes: Sequence[Any]) -> tuple[str, str, str] | None:
    """``(index URL, requirement, where the URL comes from)`` when a recipe builds on ROCm SDK
    wheels: its wheel requires ``rocm[libraries,...]==VERSION``, which pip finds only on AMD's
    index. The URL is the one ``lock`` uses (:func:`rocmforge.toolchain.rocmsdk.index_args`:
    the recipe's ``[toolchain] index``, or a mirror in ``ROCMFORGE_SDK_ARGS``); without any,
    rocmsdk's example index."""
    from rocmforge.toolchain.rocmsdk import EXAMPLE_INDEX, index_args

    for r in recipes:
        spec = r.toolchain
        if spec.kind != "rocm-sdk":
            continue
        args = list(index_args(spec))
        urls = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--index-url"]
        req = _sdk_requirement(r)
        if not urls:
            return EXAMPLE_INDEX, req, "the recipe names none: AMD's index for MI300, an example"
        own = urls[-1] == spec.index
        return urls[-1], req, "the recipe's [toolchain] index" if own else "ROCMFORGE_SDK_ARGS"
    return None


def next_steps(
    target: str, *, stack: bool, names: Sequence[str], recipes: Sequence[Any] = ()
) -> list[str]:
    """The numbered steps from here to an installed, tested build of ``target`` (a recipe or a
    stack file as the user named it); ``recipes``: its recipes (for AMD's index)."""
    from rocmforge.util.shownpath import shown_path

    t = shown_path(target)
    what = "the stack's recipes" if stack else "the recipe"
    sdk = sdk_index(recipes)
    wanted = " ".join(names) or "NAME"
    index = f"--extra-index-url {sdk[0]} " if sdk is not None else ""
    install = [
        f"     uv pip install --find-links wheels -c wheels/constraints.txt {index}{wanted}",
    ]
    if sdk is not None:
        install.append(
            f"     (--extra-index-url: AMD's index, where the {sdk[1]} the wheel requires comes "
            f"from; {sdk[2]})"
        )
    else:
        install.append(
            "     (a wheel that requires packages built elsewhere needs their index too: "
            "--extra-index-url URL)"
        )
    install.append(
        "     pip takes the sha256 in -c as --require-hashes for every package: pip install "
        "--no-deps --find-links wheels -r wheels/constraints.txt, then pip install "
        f"--find-links wheels {index}{wanted}"
    )
    return [
        "next steps:",
        f"  1. rocmforge lock {t}      # pins refs, requirements and SDK wheels of {what}",
        "  2. git add the recipes and *.lock files lock rewrote, and commit them: the pins are "
        "the build's inputs",
        f"  3. rocmforge realize {t} -o result   # builds what is missing, dependencies first",
        f"  4. rocmforge export {t} --to wheels   # the closure's wheels and constraints.txt",
        *install,
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
