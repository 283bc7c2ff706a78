"""Resolving, locking and installing the wheels of a ``kind = "rocm-sdk"`` toolchain.

``lock`` resolves each concrete wheel (:func:`rocmforge.toolchain.rocmsdk.wheel_names`) within the
declared version (post releases included) from the SDK index, fetches it into the store like any
requirement wheel and returns its pin and sha256 for ``[toolchain] wheels``; ``resolve`` finds the
locked wheels in the store (fetching what is missing), checks their digests and adds them to the
host toolchain's fingerprint; the check venv gets the runtime wheels when the built wheel requires
the SDK, and the ``rocm_sdk`` module of the locked ``rocm`` sdist (``[toolchain] module``: found in
the index or find-links by file name and fetched as a file; pip never sees it, so its
``setup.py``, which probes the GPU, never runs). Without a configured index, plan, lint, doctor
and ``lock --check`` still work (provisional); realize stops before building and says where to
point the index.
"""

from __future__ import annotations

import dataclasses
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

from rocmforge.errors import CheckError, RequirementError, SourceError, ToolchainError
from rocmforge.recipe.model import Recipe, ToolchainSpec
from rocmforge.sources.requirements import Fetcher, PipFetcher, resolve_requirements
from rocmforge.store import layout
from rocmforge.store.store import Store
from rocmforge.toolchain.probe import Toolchain
from rocmforge.toolchain.rocmsdk import (
    MODULE,
    SELECTOR,
    SdkWheel,
    fingerprint,
    index_args,
    is_runtime,
    locked_module,
    locked_pins,
    module_dist_info,
    no_index_message,
    requirement,
    same_release,
    sdist_name,
    tree_path,
    wheel_names,
)
from rocmforge.util.hashing import file_sha256

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
    """The error realize stops with when the recipe's SDK wheels (or its ``rocm_sdk`` module) are
    not all locked, or None (also for a recipe without a ``rocm-sdk`` toolchain)."""
    spec = recipe.toolchain
    if spec.kind != "rocm-sdk":
        return None
    _, missing = locked_pins(spec)
    if missing:
        key = "toolchain.wheels"
        what = f"the ROCm SDK {spec.sdk_version} is not locked ({', '.join(missing)})"
    elif locked_module(spec) is None:
        key = "toolchain.module"
        what = f"the rocm_sdk module of ROCm SDK {spec.sdk_version} is not locked"
    else:
        return None
    if not index_args(spec):
        return ToolchainError(no_index_message(spec, what))
    return ToolchainError(f"{key}: {what}; run `rocmforge lock {recipe.file}`")


# -- the rocm sdist (source of the rocm_sdk module) ------------------------------------------------


def index_locations(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(index URLs, find-links) named by pip options ``args`` (a later ``--index-url`` wins)."""
    main: list[str] = []
    extra: list[str] = []
    links: list[str] = []
    no_index = False
    it = iter(args)
    for arg in it:
        opt, eq, val = arg.partition("=")
        if opt in ("--index-url", "-i", "--extra-index-url", "--find-links", "-f"):
            value = val if eq else next(it, "")
            if opt in ("--index-url", "-i"):
                main = [value]
            elif opt == "--extra-index-url":
                extra.append(value)
            else:
                links.append(value)
        elif arg == "--no-index":
            no_index = True
    return ([] if no_index else [*main, *extra]), links


def listing(where: str) -> list[tuple[str, str]]:
    """(file name, location) of the files a find-links directory or a PEP 503 page lists."""
    from urllib.parse import unquote, urljoin, urlsplit

    path = where[len("file://") :] if where.startswith("file://") else where
    if "://" not in path:
        try:
            return [(n, os.path.join(path, n)) for n in sorted(os.listdir(path))]
        except OSError:
            return []
    import urllib.request

    try:
        with urllib.request.urlopen(where, timeout=60) as resp:
            page = resp.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for href in re.findall(r"""href\s*=\s*["']([^"']+)["']""", page):
        url = urljoin(where, href)
        out.append((unquote(os.path.basename(urlsplit(url).path)), url))
    return out


def project_pages(project: str, args: Sequence[str]) -> list[str]:
    """The PEP 503 pages of ``project`` (a normalized name) on the indexes of pip options
    ``args``, then their find-links locations (each read by :func:`listing`)."""
    indexes, links = index_locations(args)
    return [f"{u.rstrip('/')}/{project}/" for u in indexes] + links


def _sdists(args: Sequence[str]) -> list[tuple[str, str]]:
    """(version, location) of every ``rocm-<version>.tar.gz`` the index options reach."""
    found: dict[str, str] = {}
    for page in project_pages(SELECTOR, args):
        for name, where in listing(page):
            m = re.fullmatch(rf"{SELECTOR}-(.+)\.tar\.gz", name, re.IGNORECASE)
            if m and m.group(1) not in found:
                found[m.group(1)] = where
    return sorted(found.items())


def _download(where: str, dest: Path) -> None:
    """Copy (a path) or download (a URL) ``where`` to ``dest`` atomically (temp, fsync,
    rename), checking the ``#sha256=`` an index page gives with the link."""
    from urllib.parse import urldefrag

    from rocmforge.sources.inputs import DigestMismatchError, UrllibFetcher, fetch_verified

    url, fragment = urldefrag(where)
    if "://" not in url:
        url = Path(url).absolute().as_uri()
    want = fragment.partition("sha256=")[2] if fragment.startswith("sha256=") else None
    try:
        fetch_verified(url, dest.parent, UrllibFetcher(), name=lambda _: dest.name,
                       sha256=want or None)  # fmt: skip
    except DigestMismatchError:
        raise ToolchainError(
            f"{url}: the download does not have the sha256 its index gives"
        ) from None
    except (OSError, SourceError) as exc:
        raise ToolchainError(f"cannot fetch {where}: {exc}") from exc


def _module(recipe: Recipe, pin: str, *, store: Store, fetch: bool) -> SdkWheel:
    """The locked ``rocm`` sdist in the store (fetched if missing and ``fetch``)."""
    spec = recipe.toolchain
    version = pin.partition("==")[2]
    path = store.sources_dir / layout.SOURCES_WHEELS / sdist_name(version)
    if not path.is_file():
        if not fetch:
            raise RequirementError(f"{pin} (the rocm_sdk module's sdist) has not been fetched yet")
        args = index_args(spec)
        if not args:
            raise ToolchainError(no_index_message(spec, f"{pin} is not fetched"))
        where = dict(_sdists(args)).get(version)
        if where is None:
            raise ToolchainError(
                f"toolchain.module.{pin}: no {sdist_name(version)} in {' '.join(args)}"
            )
        _download(where, path)
    return SdkWheel(name=SELECTOR, version=version, wheel=path, sha256=file_sha256(path))


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
    module = locked_module(spec)
    assert module is not None  # unlocked_sdk said so
    wheels = _fetch(recipe, list(pins.values()), store=store, fetcher=fetcher)
    wheels += (_module(recipe, module, store=store, fetch=fetcher is not None),)
    for w in wheels:
        pin = f"{w.name}=={w.version}"
        table = spec.sdk_module if w.name == SELECTOR else spec.sdk_wheels
        algo, _, want = table[pin].partition(":")
        if algo == "sha256" and w.sha256 != want:
            raise RequirementError(
                f"{recipe.file}: toolchain.{'module' if w.name == SELECTOR else 'wheels'}.{pin}: "
                f"expected sha256:{want}, but the fetched "
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


def origins(files: Sequence[tuple[str, str, str]], args: Sequence[str]) -> dict[str, str]:
    """Where each ``(pin, project, file name)`` is found with the pip options ``args``: the
    first index (its URL, as configured) whose project page lists the file, else the first
    find-links location that does. A file found nowhere is left out."""
    indexes, links = index_locations(args)
    pages: dict[str, set[str]] = {}

    def names(where: str) -> set[str]:
        if where not in pages:
            pages[where] = {n for n, _ in listing(where)}
        return pages[where]

    found: dict[str, str] = {}
    for pin, project, name in files:
        for index in indexes:
            if name in names(f"{index.rstrip('/')}/{project}/"):
                found[pin] = index
                break
        else:
            for link in links:
                if name in names(link):
                    found[pin] = link
                    break
    return found


def _origin_changes(
    recipe: Recipe, wheels: dict[str, str], module: dict[str, str], *, store: Store
) -> tuple[list[Change], dict[str, str] | None]:
    """Record in ``[toolchain] origins`` where each locked pin of ``wheels`` and ``module``
    (pin -> digest, as now locked) was found; the changes and the new table (None: keep)."""
    spec = recipe.toolchain
    files = [
        (pin, re.sub(r"[-_.]+", "-", pin.partition("==")[0]).lower(), w.name)
        for pin in wheels
        for w in [_wheel_file(store, pin)]
        if w is not None
    ]
    files += [(pin, SELECTOR, sdist_name(pin.partition("==")[2])) for pin in module]
    table = origins(files, index_args(spec))
    if table == dict(spec.sdk_origins):
        return [], None
    changes: list[Change] = [(f"toolchain.origins.{p}", w, table.get(p))
                             for p, w in spec.sdk_origins.items() if table.get(p) != w]  # fmt: skip
    changes += [(f"toolchain.origins.{p}", None, w) for p, w in table.items()
                if p not in spec.sdk_origins]  # fmt: skip
    return changes, table


def _wheel_file(store: Store, pin: str) -> Path | None:
    """The store's file of the locked SDK wheel ``pin`` (fetched by lock), or None."""
    name, _, version = pin.partition("==")
    stem = f"{re.sub(r'[-.]+', '_', name)}-{version}-"
    for path in sorted((store.sources_dir / layout.SOURCES_WHEELS).glob(f"{stem}*.whl")):
        return path
    return None


#: The start of a note that a pin's recorded origin is no longer configured (information only).
MOVED = "origin moved: "


def moved_origins(spec: ToolchainSpec) -> list[str]:
    """Notes for locked pins whose recorded origin is none of the locations configured now
    (the index moved: the digests still decide, a re-lock records the new place)."""
    indexes, links = index_locations(index_args(spec))
    here = {u.rstrip("/") for u in [*indexes, *links]}
    return [
        f"{MOVED}toolchain.origins.{pin}: locked from {where}, which is not configured now "
        f"({', '.join(sorted(here)) or 'no index'}); the digest still decides which file it is"
        for pin, where in sorted(spec.sdk_origins.items())
        if where.rstrip("/") not in here
    ]


def lock_sdk(
    recipe: Recipe, *, store: Store, write: bool, upgrade: Sequence[str] = ()
) -> tuple[list[Change], dict[str, str] | None, dict[str, str] | None, list[str]]:
    """Bring ``[toolchain] wheels`` and ``[toolchain] module`` up to date: the changes, the new
    wheels table, the new module table (None: keep) and notes (what is provisional). The
    origins table is :func:`lock_origins`'s.

    Pins already locked for the declared version are kept unless ``upgrade`` names them (or is
    ``["*"]``; the module's name is ``rocm``). With ``write=False`` (``lock --check``) nothing
    is fetched: missing or stale pins are reported, so it works without the SDK index. An SDK
    not locked at all is a provisional note, not a change (a shipped recipe on CI or a laptop:
    digests need the index, and realize stops on it); a partly locked or stale one is a change.
    """
    spec = recipe.toolchain
    pins, missing = locked_pins(spec)
    module = locked_module(spec)
    norm = {re.sub(r"[-_.]+", "-", u).lower() for u in upgrade}
    redo = [n for n in pins if "*" in upgrade or n in norm]
    redo_module = module is not None and ("*" in upgrade or SELECTOR in norm)
    stale = [p for p in spec.sdk_wheels if p not in pins.values()]
    stale_module = [p for p in spec.sdk_module if p != module]
    if not write:
        if missing and not pins and not stale and module is None and not stale_module:
            what = f"the ROCm SDK {spec.sdk_version} is not locked ({', '.join(missing)})"
            if not index_args(spec):
                return [], None, None, [f"provisional: {no_index_message(spec, what)}"]
            where = " ".join(index_args(spec))
            note = (f"provisional: toolchain.wheels: {what}; run `rocmforge lock` where the SDK "
                    f"index is reachable ({where})")  # fmt: skip
            return [], None, None, [note]
        changes: list[Change] = [(f"toolchain.wheels.{n}", None, "not locked") for n in missing]
        changes += [(f"toolchain.wheels.{p}", spec.sdk_wheels[p], None) for p in stale]
        if module is None:
            changes.append((f"toolchain.module.{SELECTOR}", None, "not locked"))
        changes += [(f"toolchain.module.{p}", spec.sdk_module[p], None) for p in stale_module]
        return changes, None, None, moved_origins(spec)
    changes, table = _lock_wheels(recipe, pins, missing, redo, stale, store=store)
    more, module_table = _lock_module(recipe, module, redo_module, stale_module, store=store)
    return [*changes, *more], table, module_table, moved_origins(recipe.toolchain)


def lock_origins(
    recipe: Recipe,
    wheels: dict[str, str] | None,
    module: dict[str, str] | None,
    *,
    store: Store,
) -> tuple[list[Change], dict[str, str] | None]:
    """After :func:`lock_sdk` wrote ``wheels`` and ``module`` (None: the recipe's are kept),
    record where each pin came from; the changes and the new ``[toolchain] origins`` table."""
    spec = recipe.toolchain
    return _origin_changes(
        recipe,
        dict(spec.sdk_wheels) if wheels is None else wheels,
        dict(spec.sdk_module) if module is None else module,
        store=store,
    )


def _lock_wheels(
    recipe: Recipe,
    pins: dict[str, str],
    missing: Sequence[str],
    redo: Sequence[str],
    stale: Sequence[str],
    *,
    store: Store,
) -> tuple[list[Change], dict[str, str] | None]:
    spec = recipe.toolchain
    if not missing and not redo and not stale:
        _fetch(recipe, list(pins.values()), store=store, fetcher=PipFetcher())
        return [], None
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
    wanted = set(wheel_names(spec.families))
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
    changes: list[Change] = [(f"toolchain.wheels.{p}", d, None)
                             for p, d in spec.sdk_wheels.items() if p not in table]  # fmt: skip
    changes += [(f"toolchain.wheels.{p}", spec.sdk_wheels.get(p), d) for p, d in table.items()
                if spec.sdk_wheels.get(p) != d]  # fmt: skip
    return changes, (table if changes else None)


def _lock_module(
    recipe: Recipe, module: str | None, redo: bool, stale: Sequence[str], *, store: Store
) -> tuple[list[Change], dict[str, str] | None]:
    """Lock the newest ``rocm`` sdist of the declared release (post releases included) by
    sha256, found by file name in the index or find-links and fetched as a file."""
    spec = recipe.toolchain
    if module is not None and not redo and not stale:
        _module(recipe, module, store=store, fetch=True)
        return [], None
    args = index_args(spec)
    if not args:
        raise ToolchainError(no_index_message(spec, "lock"))
    from packaging.version import InvalidVersion, Version

    assert spec.sdk_version is not None
    found = []
    for version, _ in _sdists(args):
        try:
            if same_release(version, spec.sdk_version):
                found.append((Version(version), version))
        except InvalidVersion:
            continue
    if not found:
        raise RequirementError(
            f"{recipe.file}: toolchain.module: the index has no {SELECTOR} sdist (the source of "
            f"the {MODULE} module) for ROCm SDK {spec.sdk_version} ({' '.join(args)})"
        )
    pin = f"{SELECTOR}=={max(found)[1]}"
    got = _module(recipe, pin, store=store, fetch=True)
    table = {pin: f"sha256:{got.sha256}"}
    changes: list[Change] = [(f"toolchain.module.{p}", d, None)
                             for p, d in spec.sdk_module.items() if p not in table]  # fmt: skip
    if spec.sdk_module.get(pin) != table[pin]:
        changes.append((f"toolchain.module.{pin}", spec.sdk_module.get(pin), table[pin]))
    return changes, (table if changes else None)


def requires_sdk(wheel: Path) -> bool:
    """True if the built ``wheel`` declares a requirement on the SDK (``rocm[...]`` or a
    ``rocm-sdk-*`` wheel) in its METADATA."""
    from rocmforge.wheel.metadata import requires_dist

    for line in requires_dist(wheel):
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""
        if name == "rocm" or name.startswith("rocm-sdk-"):
            return True
    return False


def device_extras(wheel: Path) -> list[str]:
    """The ISAs the built ``wheel`` asks the SDK's device wheels for: the ``device-<gfx>``
    extras of its ``rocm[...]`` requirements (``rocm[libraries,device-gfx942]==10.0.0``)."""
    from rocmforge.wheel.metadata import requires_dist

    found: list[str] = []
    for line in requires_dist(wheel):
        m = re.match(r"\s*rocm\s*\[([^\]]*)\]", line, re.IGNORECASE)
        for extra in m.group(1).split(",") if m else ():
            isa = extra.strip().lower().removeprefix("device-")
            if extra.strip().lower().startswith("device-") and isa not in found:
                found.append(isa)
    return found


def check_device_extras(built: Sequence[Path], sdk: Sequence[SdkWheel]) -> None:
    """Refuse a built wheel whose ``rocm[device-<gfx>]`` extras name an ISA the locked SDK has
    no ``rocm-sdk-device-<gfx>`` for: installed elsewhere, pip would fetch kernels this build
    was never checked with (``device-all`` asks for every locked one)."""
    names = {w.name for w in sdk}
    device = "rocm-sdk-device-"
    have = sorted(n.removeprefix(device) for n in names if n.startswith(device))
    if any(n.startswith("rocm-sdk-libraries-") for n in names):
        return  # a legacy per-family SDK: the family wheel holds the device code
    for wheel in built:
        missing = [i for i in device_extras(wheel) if i != "all" and i not in have]
        if missing:
            raise CheckError(
                f"{wheel.name}: requires rocm[device-{missing[0]}], but the locked SDK has no "
                f"rocm-sdk-device-{missing[0]} (its device wheels: {', '.join(have) or 'none'}):"
                f" add {missing[0]} to [toolchain] families and run `rocmforge lock`, or drop "
                "the extra"
            )


def runtime_dirs(built: Sequence[Path], sdk: Sequence[SdkWheel], sources_dir: Path) -> list[Path]:
    """What the check venv gets when a built wheel requires the SDK: the top-level directories
    of the runtime wheels (all but devel: ``_rocm_sdk_core``, ``rocm_sdk_core``, their
    dist-info ...) and the ``rocm_sdk`` module with its ``rocm-<version>.dist-info`` in the
    unpacked tree, to hard-link into site-packages as pip would install
    them (the family wheels share their pure package, which pip overwrites and a strict
    installer refuses)."""
    if not sdk or not any(requires_sdk(w) for w in built):
        return []
    check_device_extras(built, sdk)
    tree = tree_path(sources_dir, sdk)
    tops: set[str] = set()
    for w in sdk:
        if not is_runtime(w.name):
            continue
        if w.name == SELECTOR:  # the rocm_sdk module copied out of the rocm sdist
            tops.update((MODULE, module_dist_info(w.version)))
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
