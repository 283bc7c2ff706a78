"""Which libraries a built wheel links, and who provides each one.

Every ELF file in a wheel is read for its dynamic section: ``DT_NEEDED`` (the sonames it links),
``DT_RUNPATH`` / ``DT_RPATH``. Each soname is then resolved the way the dynamic loader would on
the build machine: first inside the wheel (a ``$ORIGIN`` runpath), then the runpath's absolute
directories, then the loader's default directories (``/etc/ld.so.conf.d`` and the multiarch
defaults). The place found says who provides it:

* ``wheel`` — a file of the same wheel;
* ``package`` — a file a system package owns (name and version from dpkg or rpm; covered by the
  toolchain's package manifest);
* ``rocm`` — a file under a ROCm root the fingerprint covers;
* ``python`` — a file under the toolchain Python's content-hashed prefix;
* ``system`` — a file under ``/usr`` on a machine without a package database, content-hashed
  by the system manifest (``ROCMFORGE_SYSTEM_MANIFEST=content``);
* ``unhashed`` — anywhere else (``/usr/local``, a hand-copied library): the build is refused,
  since the input hash does not cover what the wheel will load;
* ``missing`` — not found on this machine (it may come from another wheel at run time).
"""

from __future__ import annotations

import glob
import mmap
import os
import shutil
import struct
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from rocmforge.errors import RocmforgeError

_ELF_MAGIC = b"\x7fELF"
_SHDR = struct.Struct("<IIQQQQIIQQ")
_DYN = struct.Struct("<qQ")
_SHT_DYNAMIC = 6
_DT_NULL, _DT_NEEDED, _DT_RPATH, _DT_RUNPATH = 0, 1, 15, 29
_DEFAULT_DIRS = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)
_MAX_ELF = 1 << 32


class ElfError(RocmforgeError):
    """An ELF file in a wheel cannot be read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Dynamic:
    """The dynamic-linking facts of one ELF file."""

    needed: tuple[str, ...]
    runpath: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """One library a wheel member links: the soname, who provides it and where it was found."""

    member: str
    soname: str
    provider: str
    package: str = ""
    version: str = ""
    path: str = ""

    def describe(self) -> str:
        """Return ``links libyaml-0.so.2 from libyaml-0-2 0.2.5-1`` (or ``from the wheel`` ...)."""
        from rocmforge.store.showtext import link_text

        return link_text(self.soname, self.provider, self.package, self.version, self.path)

    def to_json(self) -> dict[str, str]:
        """Return the link as JSON-ready data (empty fields left out)."""
        out = {"member": self.member, "soname": self.soname, "provider": self.provider}
        for key in ("package", "version", "path"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


def read_dynamic(data: Any) -> Dynamic | None:
    """Return the ``DT_NEEDED`` and runpath entries of an ELF64 LE image, or None if not ELF.

    ``data`` is ``bytes`` or an ``mmap`` of the file (a multi-GB library is never read whole).
    """
    if bytes(data[:4]) != _ELF_MAGIC or len(data) < 64:
        return None
    if data[4] != 2 or data[5] != 1:
        return Dynamic(needed=(), runpath=())  # 32-bit or big-endian: not linked by CPython x86-64
    try:
        shoff = int(struct.unpack_from("<Q", data, 0x28)[0])
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        if shoff == 0 or shentsize != _SHDR.size:
            return Dynamic(needed=(), runpath=())
        headers = [_SHDR.unpack_from(data, shoff + i * _SHDR.size) for i in range(shnum)]
        for h in headers:
            if h[1] != _SHT_DYNAMIC:
                continue
            strtab = headers[h[6]]
            str_off, str_size = strtab[4], strtab[5]
            needed: list[str] = []
            runpath: list[str] = []
            for pos in range(h[4], h[4] + h[5], _DYN.size):
                tag, val = _DYN.unpack_from(data, pos)
                if tag == _DT_NULL:
                    break
                if tag in (_DT_NEEDED, _DT_RPATH, _DT_RUNPATH) and val < str_size:
                    end = data.find(b"\0", str_off + val)
                    if end < 0:
                        raise ElfError("unterminated string in the ELF dynamic string table")
                    text = bytes(data[str_off + val : end]).decode("utf-8", "replace")
                    if tag == _DT_NEEDED:
                        needed.append(text)
                    else:
                        runpath += [p for p in text.split(":") if p]
            return Dynamic(needed=tuple(needed), runpath=tuple(runpath))
    except (struct.error, ValueError, IndexError) as exc:
        raise ElfError(f"damaged ELF dynamic section: {exc}") from exc
    return Dynamic(needed=(), runpath=())


def loader_dirs() -> list[str]:
    """Return the dynamic loader's search directories (``ld.so.conf.d``, then the defaults)."""
    dirs: list[str] = []
    for conf in sorted(glob.glob("/etc/ld.so.conf.d/*.conf")):
        try:
            with open(conf, encoding="utf-8", errors="replace") as f:
                for line in f:
                    line = line.split("#", 1)[0].strip()
                    if line.startswith("/") and not line.startswith("include"):
                        dirs.append(line)
        except OSError:
            continue
    return list(dict.fromkeys([*dirs, *_DEFAULT_DIRS]))


def wheel_dynamic(wheel: Path) -> tuple[dict[str, Dynamic], set[str]]:
    """Return ``({member: Dynamic}, all member names)`` for the ELF files in ``wheel``."""
    out: dict[str, Dynamic] = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            for info in zf.infolist():
                if info.is_dir() or info.file_size > _MAX_ELF:
                    continue
                with zf.open(info) as src:
                    if src.read(4) != _ELF_MAGIC:
                        continue
                with tempfile.TemporaryFile() as tmp, zf.open(info) as src:
                    shutil.copyfileobj(src, tmp, 1 << 20)
                    tmp.flush()
                    with mmap.mmap(tmp.fileno(), 0, access=mmap.ACCESS_READ) as data:
                        dyn = read_dynamic(data)
                if dyn is not None and dyn.needed:
                    out[info.filename] = dyn
    except (OSError, zipfile.BadZipFile) as exc:
        raise ElfError(f"cannot read wheel {wheel}: {exc}") from exc
    return out, names


def _under(path: str, roots: Iterable[str]) -> str | None:
    for root in roots:
        if root and (path == root or path.startswith(root.rstrip("/") + "/")):
            return root
    return None


def resolve_links(
    dynamic: tuple[Mapping[str, Dynamic], set[str]],
    *,
    owner_of: Mapping[str, tuple[str, str]],
    roots: Mapping[str, Sequence[str]],
    search: Sequence[str] | None = None,
) -> list[Link]:
    """Resolve every ``DT_NEEDED`` of every ELF member of a wheel.

    ``dynamic`` is what :func:`wheel_dynamic` read from the wheel; ``owner_of`` maps a host
    path to ``(package, version)`` (see ``manifest.find_owners``); ``roots`` maps ``rocm`` /
    ``python`` to the hashed roots of the toolchain.
    """
    members, names = dynamic
    dirs = list(search) if search is not None else loader_dirs()
    links: list[Link] = []
    for member, dyn in sorted(members.items()):
        origin = str(PurePosixPath(member).parent)
        for soname in dyn.needed:
            links.append(
                _resolve(member, soname, origin, dyn.runpath, names, dirs, owner_of, roots)
            )
    return links


def _resolve(
    member: str,
    soname: str,
    origin: str,
    runpath: Sequence[str],
    names: set[str],
    dirs: Sequence[str],
    owner_of: Mapping[str, tuple[str, str]],
    roots: Mapping[str, Sequence[str]],
) -> Link:
    host_dirs: list[str] = []
    for entry in runpath:
        if "$ORIGIN" in entry or "${ORIGIN}" in entry:
            rel = entry.replace("${ORIGIN}", "$ORIGIN").replace("$ORIGIN", origin)
            inside = os.path.normpath(os.path.join(rel, soname)).lstrip("./")
            if inside in names:
                return Link(member=member, soname=soname, provider="wheel", path=inside)
        elif entry.startswith("/"):
            host_dirs.append(entry)
    for d in [*host_dirs, *dirs]:
        path = os.path.join(d, soname)
        if not os.path.exists(path):
            continue
        for candidate in (path, os.path.realpath(path)):
            if candidate in owner_of:
                pkg, version = owner_of[candidate]
                return Link(
                    member=member,
                    soname=soname,
                    provider="package",
                    package=pkg,
                    version=version,
                    path=path,
                )
        for kind, kind_roots in roots.items():
            if _under(os.path.realpath(path), kind_roots) or _under(path, kind_roots):
                return Link(member=member, soname=soname, provider=kind, path=path)
        return Link(member=member, soname=soname, provider="unhashed", path=path)
    return Link(member=member, soname=soname, provider="missing")


def candidate_paths(
    members: Mapping[str, Dynamic], search: Sequence[str] | None = None
) -> set[str]:
    """Return the host paths (and their real paths) the sonames of ``members`` may resolve to."""
    dirs = list(search) if search is not None else loader_dirs()
    out: set[str] = set()
    for dyn in members.values():
        for soname in dyn.needed:
            for d in [*(r for r in dyn.runpath if r.startswith("/")), *dirs]:
                p = os.path.join(d, soname)
                if os.path.exists(p):
                    out.update((p, os.path.realpath(p)))
    return out


def links_json(links: Sequence[Link]) -> list[dict[str, Any]]:
    """Return ``links`` as JSON-ready data."""
    return [link.to_json() for link in links]
