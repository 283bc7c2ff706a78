"""The resolve stage: recipe -> identified source, probed toolchain, pinned wheels -> derivation.

Everything here is cheap on a warm machine (stat caches only), which is what makes a cache hit fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmforge.errors import FetchError, RequirementError, SourceError, ToolchainError
from rocmforge.plan.derivation import Dependency, Derivation, make_derivation
from rocmforge.recipe.model import Recipe, ToolchainSpec
from rocmforge.sources.identity import SourceIdentity, identify_source, needs_fetch
from rocmforge.sources.inputs import (
    NotFetchedError,
    ResolvedInput,
    UnlockedInputError,
    UrlFetcher,
    UrllibFetcher,
    resolve_inputs,
    unlocked_message,
)
from rocmforge.sources.patches import patch_digests
from rocmforge.sources.requirements import Fetcher, ResolvedRequirement, resolve_requirements
from rocmforge.store import layout
from rocmforge.store.locate import host_cache
from rocmforge.store.store import Store
from rocmforge.toolchain.probe import Toolchain
from rocmforge.toolchain.system import resolve_toolchain


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """A recipe with every input pinned down, and the derivation built from them."""

    recipe: Recipe
    source: SourceIdentity
    toolchain: Toolchain
    requirements: tuple[ResolvedRequirement, ...]
    derivation: Derivation
    inputs: tuple[ResolvedInput, ...] = ()
    provisional: tuple[str, ...] = ()
    dependencies: tuple[Dependency, ...] = ()


def _unresolved_toolchain(spec: ToolchainSpec, why: str) -> Toolchain:
    declared = {"kind": spec.kind, "python": spec.python}
    if spec.kind == "rocm":
        declared["rocm"] = spec.rocm or ""
    if spec.kind == "rocm-sdk":
        declared["rocm-sdk"] = spec.sdk_version or ""
    return Toolchain(
        fingerprint={**declared, "provisional": why},
        python=Path(spec.python),
        python_prefix=Path("/"),
        python_version=spec.python,
    )


def check_digests(recipe: Recipe, requirements: Sequence[ResolvedRequirement]) -> None:
    """Raise :class:`RequirementError` if a fetched wheel does not match its locked digest."""
    digests = recipe.requirements.digests
    if not digests:
        return
    for req in requirements:
        pin = f"{req.name}=={req.version}"
        expected = digests.get(pin)
        if expected is None:
            continue
        algo, _, want = expected.partition(":")
        got = req.sha256 if algo == "sha256" else req.blake3
        if got != want:
            raise RequirementError(
                f"{recipe.file}: requirements.digests.{pin}: expected {expected}, but the "
                f"fetched wheel {req.wheel.name} has {algo}:{got}; if that wheel is the one you "
                f"want, run `rocmforge lock {recipe.file}`"
            )


def _toolchain(
    spec: ToolchainSpec, cache_dir: Path, memo: dict[str, Toolchain] | None
) -> Toolchain:
    if memo is None:
        return resolve_toolchain(spec, cache_dir=cache_dir)
    key = repr(spec)
    found = memo.get(key)
    if found is None:
        found = memo[key] = resolve_toolchain(spec, cache_dir=cache_dir)
    return found


def resolve(
    recipe: Recipe,
    *,
    store: Store,
    fetcher: Fetcher | None,
    url_fetcher: UrlFetcher | None = None,
    provisional: bool = False,
    dependencies: Sequence[Dependency] = (),
    toolchains: dict[str, Toolchain] | None = None,
) -> Resolved:
    """Resolve every input of ``recipe``; fetch what is missing through ``fetcher``.

    With ``provisional=True`` (``plan``), what cannot be resolved here without a large download
    or a missing toolchain is noted in ``Resolved.provisional`` (and in the derivation) instead
    of raising: a toolchain that is not installed, a remote git source not yet in the mirror
    cache (never cloned just to plan), and - once anything is provisional - requirements and
    archive inputs not fetched yet. Such a hash names no real build.

    ``dependencies`` are the entries of the recipes this one is built against (the whole
    closure, see :mod:`rocmforge.plan.graph`); a provisional one makes this hash provisional too.

    Fetched wheels are checked against the recipe's locked digests (:func:`check_digests`),
    unless something is provisional.

    ``toolchains`` memoizes resolved toolchains by spec across the nodes of one graph (one
    command sees one consistent toolchain and probes it once, not once per node).
    """
    notes: list[str] = [
        f"recipes: {d.name} {d.version} is provisional" for d in dependencies if d.provisional
    ]
    # A url input without sha256 is not locked: realize stops here, before anything is fetched
    # or built; plan notes it (below, after the toolchain) and so fetches nothing else either.
    unlocked = [s for _, s in sorted(recipe.inputs.items()) if s.url and s.sha256 is None]
    if unlocked and not provisional:
        raise SourceError(unlocked_message(unlocked[0], recipe.file))
    host_found = True
    try:
        toolchain = _toolchain(recipe.toolchain, Path(host_cache()), toolchains)
    except ToolchainError as exc:
        if not provisional:
            raise
        notes.append(f"toolchain: {exc}")
        toolchain = _unresolved_toolchain(recipe.toolchain, str(exc))
        host_found = False
    # (a provisional dependency does not hide an SDK that is not locked: plan still says so)
    if recipe.toolchain.kind == "rocm-sdk" and host_found:
        from rocmforge.lock.sdkwheels import provisional_sdk, resolve_sdk

        try:
            # plan never downloads an SDK (gigabytes): not fetched yet is provisional
            sdk_fetcher = None if provisional else fetcher
            toolchain = resolve_sdk(recipe, toolchain, store=store, fetcher=sdk_fetcher)
        except (ToolchainError, RequirementError) as exc:
            if not provisional:
                raise
            notes.append(f"toolchain: {exc}")
            toolchain = provisional_sdk(toolchain, str(exc))
    notes.extend(f"inputs: {UnlockedInputError(u)}; run `rocmforge lock` where the URL is "
                 "reachable" for u in unlocked)  # fmt: skip
    spec = recipe.source
    if provisional and needs_fetch(spec, cache=store.sources_dir):
        what = "submodules not resolved: " if spec.submodules else ""
        notes.append(f"source: commit {spec.rev} ({what}not fetched yet)")
        source = SourceIdentity(kind="git", commit=spec.rev, patches=patch_digests(spec.patches))
    else:
        source = identify_source(spec, cache=store.sources_dir)
    try:
        reqs = recipe.requirements
        locked = {pin: (wheel, b3, reqs.digests.get(pin, "").removeprefix("sha256:"))
                  for pin, (wheel, b3) in reqs.locked_wheels.items()}  # fmt: skip
        requirements = resolve_requirements(
            reqs.build,
            python_version=toolchain.python_version,
            wheel_dir=store.sources_dir / layout.SOURCES_WHEELS,
            cache_dir=store.cache_dir,
            fetcher=None if notes else fetcher,
            locked=locked,
        )
    except RequirementError as exc:
        if not provisional:
            raise
        notes.append(f"requirements: {exc}")
        requirements = ()
    try:
        inputs = resolve_inputs(
            recipe.inputs,
            cache=store.sources_dir,
            fetcher=None if notes else (url_fetcher or UrllibFetcher()),
        )
    except (NotFetchedError, FetchError) as exc:
        # Only what a fetch could still change is provisional; a bad input (an unsafe or
        # unreadable archive, a wrong sha256) is refused by plan exactly as by realize.
        if not provisional:
            raise
        if not isinstance(exc, UnlockedInputError):  # noted above
            notes.append(f"inputs: {exc}")
        inputs = ()
    if not notes:  # a provisional resolve may not have the wheels a digest is about
        check_digests(recipe, requirements)
    derivation = make_derivation(
        recipe,
        source=source,
        toolchain=toolchain.fingerprint,
        requirements=requirements,
        inputs={i.name: i.to_json() for i in inputs},
        provisional=notes,
        dependencies=dependencies,
    )
    return Resolved(
        recipe=recipe,
        source=source,
        toolchain=toolchain,
        requirements=requirements,
        derivation=derivation,
        inputs=inputs,
        provisional=tuple(notes),
        dependencies=tuple(dependencies),
    )
