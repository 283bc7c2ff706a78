"""What covers a ROCm root: its packages' versions, or its content.

The ROCm probe hashes hipcc, its clang and the version string; a build also reads the headers,
the math libraries (rocBLAS, MIOpen, RCCL, hipBLASLt ...) and the device bitcode under the root.
This module covers the rest of the root:

* Files a package owns are covered by that package's version (``rocm.coverage.packages``)
  *and* checked against the database's own digests (dpkg's ``md5sums``; rpm's ``FILEDIGESTS``
  and symlink targets, :mod:`rocmforge.toolchain.rpmdb`); a packaged file edited in place shows
  up under ``rocm.coverage.modified`` with its blake3, so editing ``hip_runtime.h`` changes the
  hash.
* Files no package owns (a root unpacked from a tarball, copied, or built from source) are
  content-hashed (``rocm.coverage.unowned``: count and one digest; per top-level directory).

For the Debian layout (root ``/usr``) only the ROCm packages are checked: the owners of
``include/hip``, the device bitcode directory, ``bin/hipcc`` and the version file. Any other root
is walked whole. Results are cached by the stat signature of every file and directory read; the
realize memo watches the directories, the version file and (for a packaged root) every ROCm
package file.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rocmforge.store import layout
from rocmforge.toolchain import rpmdb
from rocmforge.toolchain.manifest import (
    HostDatabase,
    _database,
    _list_file,
    _native_arch,
    _read_list,
    _usr_path,
    parse_dpkg_status,
)
from rocmforge.util.hashing import blake3_hex, file_blake3
from rocmforge.util.statcache import StatCache

ROOT_VERSION = 1

#: Under a ``/usr`` root, the places whose owners are "the ROCm packages".
USR_MARKERS = (
    "include/hip",
    "include/rocm-core",
    "lib/x86_64-linux-gnu/amdgcn",
    "bin/hipcc",
    "bin/hipconfig",
)


def _md5(path: str) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


#: A packaged file's recorded digest: (hashlib algorithm, hex digest), or ("link", target).
Sum = tuple[str, str]


def _md5sums(info: Path, key: str) -> dict[str, str]:
    name, _, arch = key.partition(":")
    out: dict[str, str] = {}
    for candidate in (info / f"{name}:{arch}.md5sums", info / f"{name}.md5sums"):
        try:
            with open(candidate, encoding="utf-8", errors="surrogateescape") as f:
                for line in f:
                    digest, _, rel = line.rstrip("\n").partition("  ")
                    if rel:
                        out[_usr_path("/" + rel)] = digest
            return out
        except OSError:
            continue
    return out


def _owned_under(
    prefixes: Iterable[str], db: HostDatabase
) -> tuple[dict[str, str], dict[str, Sum], dict[str, list[str]]]:
    """Return (packages {name: version}, sums {path: Sum}, files per package) under prefixes."""
    wanted = tuple(p.rstrip("/") for p in prefixes)

    def under(p: str) -> bool:
        return any(p == w or p.startswith(w + "/") for w in wanted)

    if db.kind == "rpm":
        return _rpm_owned_under(under, db)
    if db.kind != "dpkg":
        return {}, {}, {}
    root = Path(db.base + db.path)
    try:
        status = (root / "status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}, {}, {}
    installed = parse_dpkg_status(status)
    native = _native_arch(installed)
    packages: dict[str, str] = {}
    sums: dict[str, Sum] = {}
    files: dict[str, list[str]] = {}
    for key, (version, arch) in installed.items():
        paths = [_usr_path(p) for p in _read_list(_list_file(root / "info", key))]
        hits = [p for p in paths if under(p)]
        if not hits:
            continue
        name = key.partition(":")[0] if arch in (native, "all") else key
        packages[name] = version
        md5 = _md5sums(root / "info", key)
        files[name] = [p for p in paths if p in md5]
        sums.update({p: ("md5", md5[p]) for p in files[name]})
    return packages, sums, files


def _rpm_owned_under(
    under: Callable[[str], bool], db: HostDatabase
) -> tuple[dict[str, str], dict[str, Sum], dict[str, list[str]]]:
    """:func:`_owned_under` for rpm: every verifiable file's digest or link target.

    Paths are this machine's: under a ``sysroot`` (tests) rpm's paths get its prefix.
    """
    base = db.base
    hits: list[tuple[rpmdb.RpmPackage, list[tuple[str, rpmdb.RpmFile]]]] = []
    arches: list[str] = []
    for pkg in rpmdb.query(db.path, db.sysroot):
        arches.append(pkg.arch)
        mapped = [(base + _usr_path(f.path, base), f) for f in pkg.files if f.installed]
        if any(under(p) for p, _ in mapped):
            hits.append((pkg, mapped))
    native = rpmdb.native_arch(arches)
    packages: dict[str, str] = {}
    sums: dict[str, Sum] = {}
    files: dict[str, list[str]] = {}
    for pkg, mapped in hits:
        key = rpmdb.package_key(pkg, native)
        rpmdb.add_version(packages, key, pkg.version)
        mine = files.setdefault(key, [])
        for p, f in mapped:
            if f.verifiable:
                mine.append(p)
                link = stat.S_ISLNK(f.mode)
                sums[p] = ("link", f.linkto) if link else (pkg.digest_algo, f.digest)
    return packages, sums, files


def _digest_of(path: str, algo: str) -> str:
    return _md5(path) if algo == "md5" else rpmdb.file_digest(path, algo)


def scan_root(
    root: Path, db: HostDatabase | Path | None = None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """Cover the ROCm install at ``root``: return (fingerprint part, all guards, memo guards).

    ``db``: the package database (detected when None; a Path is a dpkg admin directory).
    """
    db = _database(db)
    usr = str(root) == "/usr"
    if usr:
        markers = [str(root / m) for m in USR_MARKERS if os.path.lexists(root / m)]
        packages, sums, files = _owned_under(markers, db)
        # Under /usr every other file is the system manifest's business.
        paths = sorted({p for fs in files.values() for p in fs})
        walk_dirs: list[str] = []
    else:
        packages, sums, files = _owned_under([str(root), os.path.realpath(root)], db)
        paths, walk_dirs = [], []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            walk_dirs.append(dirpath)
            links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            dirnames[:] = [d for d in dirnames if d not in links]
            paths += [os.path.join(dirpath, n) for n in sorted([*filenames, *links])]
    modified: dict[str, str] = {}
    unowned: dict[str, list[str]] = {}
    guards: list[str] = list(walk_dirs)
    for p in paths:
        rel = os.path.relpath(p, root)
        if os.path.islink(p):
            if p not in sums:
                unowned.setdefault(rel.split("/", 1)[0], []).append(f"{rel}\tlink:{os.readlink(p)}")
            elif sums[p] != ("link", os.readlink(p)):  # rpm records targets; dpkg none
                modified[rel] = f"link:{os.readlink(p)}"
            continue
        try:
            if p in sums:
                algo, digest = sums[p]
                if algo == "link" or _digest_of(p, algo) != digest:  # "link": no longer one
                    modified[rel] = file_blake3(p)
            else:
                unowned.setdefault(rel.split("/", 1)[0], []).append(f"{rel}\t{file_blake3(p)}")
        except OSError:
            continue  # a packaged file that is gone: the package version still says what it was
        guards.append(p)
    part: dict[str, Any] = {
        "packages": dict(sorted(packages.items())),
        "modified": dict(sorted(modified.items())),
        "unowned": {
            top: {"files": len(lines), "blake3": blake3_hex("\n".join(lines).encode())}
            for top, lines in sorted(unowned.items())
        },
    }
    memo = [*walk_dirs, *(guards if usr else [])]
    return part, guards, memo


def _db_guards(db: HostDatabase) -> list[str]:
    """The database files a coverage depends on (dpkg: its status file, as always)."""
    return [f"{db.base}{db.path}/status"] if db.kind == "dpkg" else db.guards()


def root_coverage(
    root: Path, *, cache_dir: Path, db: HostDatabase | Path | None = None
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Return ``(rocm.coverage fingerprint part, memo guards)`` for ``root`` (stat-cached)."""
    db = _database(db)
    cache = StatCache(cache_dir / layout.CACHE_ROCMROOT)
    key = f"rocmroot|{ROOT_VERSION}|{root}|{db.kind}|{db.sysroot}|{db.path}"
    hit = cache.get(key)
    if isinstance(hit, dict) and isinstance(hit.get("memo"), list):
        return dict(hit["part"]), tuple(hit["memo"])
    part, guards, memo = scan_root(root, db)
    dbg = _db_guards(db)
    cache.put(key, {"part": part, "memo": [*dbg, *memo]}, [*dbg, *guards])
    return part, (*dbg, *memo)
