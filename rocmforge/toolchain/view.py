"""Declared views: a sandbox ``/usr`` holding only the declared system packages (the Nix way).

With ``[toolchain] packages = [...]`` the build does not see the host's whole ``/usr``: it sees a
farm of hardlinks (and copies of the toolchain's own executables) to the files of

* the declared packages,
* a base: ``build-essential`` and every ``Essential: yes`` package,
* the packages owning the toolchain's executables and the shared libraries its Python links,
* for a ROCm root under ``/usr``, the ROCm packages,

and the dependency closure of all of them (``Depends`` and ``Pre-Depends``, first installed
alternative, virtual packages through ``Provides``). Only these packages' versions enter the
fingerprint, so an ``apt-get install`` or upgrade of anything else leaves the hash alone. The
alternatives symlinks under ``/usr`` (``/usr/bin/cc`` -> ``/etc/alternatives/cc``) are recreated.

The closure is cached by the stat signature of dpkg's database; the farm lives in
``store/cache/views/<digest>/`` keyed by the closure's package versions and is built once
(about 1.4 s for build-essential + libyaml-dev, 77 packages).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rocmforge.errors import ToolchainError
from rocmforge.store import layout
from rocmforge.toolchain.manifest import DPKG_ROOT, _read_list, _usr_path, find_owners
from rocmforge.util.hashing import blake3_hex
from rocmforge.util.statcache import StatCache

VIEW_VERSION = 1
BASE = ("build-essential",)
_NAME = re.compile(r"^\s*([A-Za-z0-9.+-]+)")


def _stanzas(text: str) -> dict[str, dict[str, str]]:
    """Return ``{name: fields}`` of the installed packages (multi-arch: first one wins)."""
    out: dict[str, dict[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        last = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and last:
                fields[last] += " " + line.strip()
            elif ":" in line:
                last, _, value = line.partition(":")
                fields[last] = value.strip()
        if fields.get("Status") == "install ok installed" and fields.get("Package"):
            out.setdefault(fields["Package"], fields)
    return out


def _names(field: str) -> list[list[str]]:
    """Parse a ``Depends`` field into alternatives: ``[[a, b], [c]]`` for ``a | b, c``."""
    out = []
    for group in field.split(","):
        alts = [m.group(1) for a in group.split("|") if (m := _NAME.match(a))]
        if alts:
            out.append(alts)
    return out


def closure(roots: Iterable[str], db: Path = DPKG_ROOT) -> dict[str, tuple[str, str]]:
    """Return ``{package: (version, architecture)}``: ``roots``, the base and their closure.

    A declared package that is not installed is a :class:`ToolchainError` naming the apt line.
    """
    try:
        status = (db / "status").read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ToolchainError(f"toolchain.packages: cannot read dpkg's database: {exc}") from exc
    installed = _stanzas(status)
    provides: dict[str, str] = {}
    for name, fields in installed.items():
        for alts in _names(fields.get("Provides", "")):
            provides.setdefault(alts[0], name)

    def real(name: str) -> str | None:
        name = name.partition(":")[0]
        return name if name in installed else provides.get(name)

    wanted = list(roots)
    missing = [n for n in wanted if real(n) is None]
    if missing:
        raise ToolchainError(
            "toolchain.packages: not installed on this machine: "
            + ", ".join(missing)
            + f" (apt-get install {' '.join(missing)})"
        )
    essential = [n for n, f in installed.items() if f.get("Essential") == "yes"]
    stack = [*wanted, *BASE, *essential]
    seen: dict[str, tuple[str, str]] = {}
    while stack:
        pkg = real(stack.pop())
        if pkg is None or pkg in seen:
            continue
        fields = installed[pkg]
        seen[pkg] = (fields.get("Version", ""), fields.get("Architecture", ""))
        for key in ("Pre-Depends", "Depends"):
            for alts in _names(fields.get(key, "")):
                found = next((r for a in alts if (r := real(a)) is not None), None)
                if found is not None:
                    stack.append(found)
    return seen


def view_packages(
    declared: Iterable[str],
    *,
    files: Iterable[str],
    linked: Callable[[], Iterable[str]],
    alternatives: Mapping[str, str],
    cache_dir: Path,
    db: Path = DPKG_ROOT,
) -> tuple[dict[str, str], dict[str, str]]:
    """Return ``({package: version}, alternatives links)`` the declared view shows.

    ``files`` are host files the toolchain runs (its executables, ROCm marker files) and
    ``linked()`` the libraries it loads (read only on a cache miss): their owning packages join
    the roots. ``alternatives`` are the manifest's ``/usr`` links into ``/etc/alternatives``;
    those whose final target a view package owns are kept. Stat-cached on dpkg's database.
    """
    paths = sorted(set(files))
    declared = sorted(set(declared))
    cache = StatCache(cache_dir / layout.CACHE_VIEW)
    digest = blake3_hex(
        "\0".join([*paths, *sorted(f"{k}{v}" for k, v in alternatives.items())]).encode()
    )
    key = f"view|{VIEW_VERSION}|{db}|{','.join(declared)}|{digest}"
    hit = cache.get(key)
    if isinstance(hit, dict) and isinstance(hit.get("packages"), dict):
        return dict(hit["packages"]), dict(hit["links"])
    paths += sorted(set(linked()))
    owners = {pkg for pkg, _ in find_owners(paths, db).values()}
    found = closure([*declared, *sorted(owners)], db)
    packages = {name: version for name, (version, _) in sorted(found.items())}
    finals = {v.partition("=>")[2]: p for p, v in alternatives.items()}
    owned_finals = {f for f, (pkg, _) in find_owners(finals, db).items() if pkg in packages}
    links = {p: v for p, v in sorted(alternatives.items()) if v.partition("=>")[2] in owned_finals}
    cache.put(
        key,
        {"packages": packages, "links": links},
        [str(db / "status"), str(db / "info"), *paths],
    )
    return packages, links


def view_digest(packages: Mapping[str, str], links: Mapping[str, str]) -> str:
    """The cache key of a farm: the packages' versions and the alternatives links."""
    text = "\n".join(
        [str(VIEW_VERSION), *(f"{k}={v}" for k, v in sorted(packages.items()))]
        + [f"{k}->{v}" for k, v in sorted(links.items())]
    )
    return blake3_hex(text.encode())[:32]


def _place(src: str, dst: str, copies: frozenset[tuple[int, int]]) -> None:
    if os.path.lexists(dst):
        return
    try:
        st = os.lstat(src)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.symlink(os.readlink(src), dst)
    elif stat.S_ISDIR(st.st_mode):
        os.makedirs(dst, exist_ok=True)
    elif stat.S_ISREG(st.st_mode):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if (st.st_dev, st.st_ino) in copies:
            shutil.copy2(src, dst)
            return
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)


def _identities(paths: Iterable[str]) -> frozenset[tuple[int, int]]:
    found = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        found.add((st.st_dev, st.st_ino))
    return frozenset(found)


def prepare_view(
    packages: Mapping[str, str],
    links: Mapping[str, str],
    *,
    cache_dir: Path,
    db: Path = DPKG_ROOT,
    copies: Iterable[str] = (),
) -> Path:
    """Return the ``usr`` directory of the farm for ``packages`` (built once, then reused).

    ``links`` maps loose symlinks under ``/usr`` (alternatives) to their targets. The files
    ``copies`` name (the toolchain's guards: what the realize memo checks by stat) are copied,
    not hard-linked: a new link moves the linked file's ctime, and every memo on the machine
    that guards the file would then miss once (and its hash be recomputed).
    """
    farm = cache_dir / layout.CACHE_VIEWS / view_digest(packages, links)
    if (farm / ".complete").exists():
        return farm / "usr"
    tmp = farm.with_name(f".{farm.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "usr").mkdir(parents=True)
    keep = _identities(copies)
    try:
        info = db / "info"
        for name in packages:
            for listed in [info / f"{name}.list", *sorted(info.glob(f"{name}:*.list"))]:
                for raw in _read_list(listed):
                    p = _usr_path(raw)
                    if p.startswith("/usr/") and not p.startswith("/usr/local"):
                        _place(p, str(tmp) + p, keep)
        for path, target in links.items():
            dst = str(tmp) + path
            if not os.path.lexists(dst):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.symlink(target.partition("=>")[0], dst)
        (tmp / ".complete").write_text("")
        try:
            os.rename(tmp, farm)
        except OSError:
            if not (farm / ".complete").exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process finished it first
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ToolchainError(f"cannot prepare the declared /usr view in {farm}: {exc}") from exc
    return farm / "usr"


def alternatives_links(unowned: Mapping[str, str]) -> dict[str, str]:
    """The loose symlinks under /usr into /etc/alternatives: ``{path: "TARGET=>FINAL"}``."""
    return {
        p: d.removeprefix("link:")
        for p, d in unowned.items()
        if d.startswith("link:/etc/alternatives/")
    }


def view_fingerprint(packages: Mapping[str, str], links: Mapping[str, str]) -> dict[str, Any]:
    """The fingerprint keys a declared view sets (replacing the whole-system manifest's)."""
    return {
        "database": "dpkg",
        "view": "declared",
        "packages": dict(sorted(packages.items())),
        "alternatives": dict(sorted(links.items())),
    }


def linked_libraries(files: Iterable[str]) -> set[str]:
    """Return the host paths of the shared libraries the ELF ``files`` link (one level)."""
    from rocmforge.toolchain.elf import ElfError, loader_dirs, read_dynamic

    dirs = loader_dirs()
    out: set[str] = set()
    for f in files:
        try:
            with open(f, "rb") as fh:
                data = fh.read()
            dyn = read_dynamic(data)
        except (OSError, ElfError):
            continue
        if dyn is None:
            continue
        for soname in dyn.needed:
            for d in [*(r for r in dyn.runpath if r.startswith("/")), *dirs]:
                p = os.path.join(d, soname)
                if os.path.exists(p):
                    out.update((p, os.path.realpath(p)))
                    break
    return out
