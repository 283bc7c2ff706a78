"""Resolving, locking and installing the wheels of a ``kind = "rocm-sdk"`` toolchain.

``lock`` resolves each concrete wheel (:func:`rocmforge.toolchain.rocmsdk.wheel_names`) within the
declared version (post releases included) from the SDK index, fetches it into the store like any
requirement wheel and returns its pin and sha256 for ``[toolchain] wheels``; ``resolve`` finds the
locked wheels in the store (fetching what is missing), checks their digests and adds them to the
host toolchain's fingerprint; the check venv gets the runtime wheels when the built wheel requires
the SDK. Without a configured index, plan, lint, doctor and ``lock --check`` still work
(provisional); realize stops before building and says where to point the index.
"""

from __future__ import annotations

import dataclasses
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

from rocmforge.errors import RequirementError, ToolchainError
from rocmforge.recipe.model import Recipe
from rocmforge.sources.requirements import Fetcher, PipFetcher, resolve_requirements
from rocmforge.store import layout
from rocmforge.store.store import Store
from rocmforge.toolchain.probe import Toolchain
from rocmforge.toolchain.rocmsdk import (
    SdkWheel,
    fingerprint,
    index_args,
    is_runtime,
    locked_pins,
    no_index_message,
    requirement,
    tree_path,
    wheel_names,
)

Change = tuple[str, str | None, str | None]


def _fetch(
    recipe: Recipe, pins: Sequence[str], *, store: Store, fetcher: Fetcher | None
) -> tuple[SdkWheel, ...]:
    spec = recipe.toolchain
    args = index_args(spec)
    sdk_fetcher: Fetcher | None = None
    if fetcher is not None and args:
        sdk_fetcher = PipFetcher(extra_args=args)
    try:
        found = resolve_requirements(
            pins,
            python_version=spec.python,
            wheel_dir=store.sources_dir / layout.SOURCES_WHEELS,
            cache_dir=store.cache_dir,
            fetcher=sdk_fetcher,
        )
    except RequirementError as exc:
        if fetcher is not None and not args:
            raise ToolchainError(no_index_message(spec, f"{exc}")) from exc
        raise
    return tuple(
        SdkWheel(name=r.name, version=r.version, wheel=r.wheel, sha256=r.sha256) for r in found
    )


def unlocked_sdk(recipe: Recipe) -> ToolchainError | None:
    """The error realize stops with when the recipe's SDK wheels are not (all) locked, or None
    (also for a recipe without a ``rocm-sdk`` toolchain)."""
    spec = recipe.toolchain
    if spec.kind != "rocm-sdk":
        return None
    _, missing = locked_pins(spec)
    if not missing:
        return None
    what = f"the ROCm SDK {spec.sdk_version} is not locked ({', '.join(missing)})"
    if not index_args(spec):
        return ToolchainError(no_index_message(spec, what))
    return ToolchainError(f"toolchain.wheels: {what}; run `rocmforge lock {recipe.file}`")


def resolve_sdk(
    recipe: Recipe, host: Toolchain, *, store: Store, fetcher: Fetcher | None
) -> Toolchain:
    """Return ``host`` with the recipe's locked SDK wheels: fingerprint, guards, ``sdk``.

    Raises :class:`ToolchainError` when the SDK is not locked or cannot be fetched (no index),
    :class:`RequirementError` when a wheel does not match its locked digest.
    """
    spec = recipe.toolchain
    unlocked = unlocked_sdk(recipe)
    if unlocked is not None:
        raise unlocked
    pins, _ = locked_pins(spec)
    wheels = _fetch(recipe, list(pins.values()), store=store, fetcher=fetcher)
    for w in wheels:
        pin = f"{w.name}=={w.version}"
        algo, _, want = spec.sdk_wheels[pin].partition(":")
        if algo == "sha256" and w.sha256 != want:
            raise RequirementError(
                f"{recipe.file}: toolchain.wheels.{pin}: expected sha256:{want}, but the fetched "
                f"wheel {w.wheel.name} has sha256:{w.sha256}; if that wheel is the one you want, "
                f"run `rocmforge lock --upgrade {w.name} {recipe.file}`"
            )
    return dataclasses.replace(
        host,
        fingerprint={**host.fingerprint, "kind": "rocm-sdk", "rocm-sdk": fingerprint(wheels)},
        guards=tuple(dict.fromkeys([*host.guards, *(str(w.wheel) for w in wheels)])),
        sdk=wheels,
    )


def provisional_sdk(host: Toolchain, why: str) -> Toolchain:
    """``host`` with an SDK that could not be resolved (``plan``): noted, not hashed for real."""
    return dataclasses.replace(
        host,
        fingerprint={**host.fingerprint, "kind": "rocm-sdk", "rocm-sdk": {"provisional": why}},
    )


def lock_sdk(
    recipe: Recipe, *, store: Store, write: bool, upgrade: Sequence[str] = ()
) -> tuple[list[Change], dict[str, str] | None, list[str]]:
    """Bring ``[toolchain] wheels`` up to date: the changes, the new table (None: keep) and
    notes (what is provisional).

    Wheels already locked for the declared version are kept unless ``upgrade`` names them (or is
    ``["*"]``). With ``write=False`` (``lock --check``) nothing is fetched: missing or stale pins
    are reported, so it works without the SDK index. An SDK not locked at all is a provisional
    note, not a change (a shipped recipe on CI or a laptop: digests need the index, and realize
    stops on it); a partly locked or stale one is a change.
    """
    spec = recipe.toolchain
    pins, missing = locked_pins(spec)
    wanted = set(wheel_names(spec.families))
    norm = {re.sub(r"[-_.]+", "-", u).lower() for u in upgrade}
    redo = [n for n in pins if "*" in upgrade or n in norm]
    stale = [p for p in spec.sdk_wheels if p not in pins.values()]
    if not write:
        if missing and not pins and not stale:
            what = f"the ROCm SDK {spec.sdk_version} is not locked ({', '.join(missing)})"
            if not index_args(spec):
                return [], None, [f"provisional: {no_index_message(spec, what)}"]
            where = " ".join(index_args(spec))
            return [], None, [f"provisional: toolchain.wheels: {what}; run `rocmforge lock` "
                              f"where the SDK index is reachable ({where})"]  # fmt: skip
        changes: list[Change] = [(f"toolchain.wheels.{n}", None, "not locked") for n in missing]
        changes += [(f"toolchain.wheels.{p}", spec.sdk_wheels[p], None) for p in stale]
        return changes, None, []
    if not missing and not redo and not stale:
        _fetch(recipe, list(pins.values()), store=store, fetcher=PipFetcher())
        return [], None, []
    todo = [*missing, *redo]
    args = index_args(spec)
    if not args:
        raise ToolchainError(no_index_message(spec, "lock"))
    from rocmforge.sources.resolver import resolve_closure

    assert spec.sdk_version is not None
    resolution = resolve_closure(
        [requirement(n, spec.sdk_version) for n in todo],
        python_version=spec.python,
        extra_args=args,
    )
    new = {n: f"{n}=={v}" for n, v in resolution.pins if n in wanted and n in todo}
    gone = [n for n in todo if n not in new]
    if gone:
        raise RequirementError(
            f"{recipe.file}: toolchain: the index has no {', '.join(gone)} for ROCm SDK "
            f"{spec.sdk_version}"
        )
    keep = {n: p for n, p in pins.items() if n not in new}
    wheels = _fetch(recipe, [*keep.values(), *new.values()], store=store, fetcher=PipFetcher())
    table = {f"{w.name}=={w.version}": f"sha256:{w.sha256}" for w in wheels}
    changes = [(f"toolchain.wheels.{p}", d, None) for p, d in spec.sdk_wheels.items()
               if p not in table]  # fmt: skip
    changes += [(f"toolchain.wheels.{p}", spec.sdk_wheels.get(p), d) for p, d in table.items()
                if spec.sdk_wheels.get(p) != d]  # fmt: skip
    return changes, (table if changes else None), []


def requires_sdk(wheel: Path) -> bool:
    """True if the built ``wheel`` declares a requirement on the SDK (``rocm[...]`` or a
    ``rocm-sdk-*`` wheel) in its METADATA."""
    from rocmforge.check import requires_dist

    for line in requires_dist(wheel):
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""
        if name == "rocm" or name.startswith("rocm-sdk-"):
            return True
    return False


def runtime_dirs(built: Sequence[Path], sdk: Sequence[SdkWheel], sources_dir: Path) -> list[Path]:
    """What the check venv gets when a built wheel requires the SDK: the top-level directories
    of the runtime wheels (all but devel: ``_rocm_sdk_core``, ``rocm_sdk_core``, their
    dist-info ...) in the unpacked tree, to hard-link into site-packages as pip would install
    them (the family wheels share their pure package, which pip overwrites and a strict
    installer refuses)."""
    if not sdk or not any(requires_sdk(w) for w in built):
        return []
    tree = tree_path(sources_dir, sdk)
    tops: set[str] = set()
    for w in sdk:
        if not is_runtime(w.name):
            continue
        try:
            with zipfile.ZipFile(w.wheel) as zf:
                tops.update(n.split("/", 1)[0] for n in zf.namelist() if "/" in n)
        except (OSError, zipfile.BadZipFile) as exc:
            raise ToolchainError(f"{w.wheel}: cannot read the SDK wheel: {exc}") from exc
    return [tree / t for t in sorted(tops) if (tree / t).is_dir()]


def sdk_sources(sdk: Sequence[SdkWheel], sources_dir: Path) -> list[str]:
    """The source caches a build on ``sdk`` uses (for gc): its wheels and the unpacked tree."""
    if not sdk:
        return []
    tree = tree_path(sources_dir, sdk).relative_to(sources_dir).as_posix()
    return [*(f"{layout.SOURCES_WHEELS}/{w.wheel.name}" for w in sdk), tree]
