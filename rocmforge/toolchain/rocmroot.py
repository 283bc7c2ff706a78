"""What covers a ROCm root: its packages' versions, or its content.

The ROCm probe hashes hipcc, its clang and the version string; a build also reads the headers,
the math libraries (rocBLAS, MIOpen, RCCL, hipBLASLt ...) and the device bitcode under the root.
This module covers the rest of the root:

* Files a dpkg package owns are covered by that package's version (``rocm.coverage.packages``)
  *and* checked against dpkg's own ``md5sums``; a packaged file edited in place shows up under
  ``rocm.coverage.modified`` with its blake3, so editing ``hip_runtime.h`` changes the hash.
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rocmforge.store import layout
from rocmforge.toolchain.manifest import (
    DPKG_ROOT,
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
    prefixes: Iterable[str], db: Path
) -> tuple[dict[str, str], dict[str, str], dict[str, list[str]]]:
    """Return (packages {name: version}, md5 {path: digest}, files per package) under prefixes."""
    try:
        status = (db / "status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}, {}, {}
    installed = parse_dpkg_status(status)
    native = _native_arch(installed)
    wanted = tuple(p.rstrip("/") for p in prefixes)
    packages: dict[str, str] = {}
    md5: dict[str, str] = {}
    files: dict[str, list[str]] = {}
    for key, (version, arch) in installed.items():
        paths = [_usr_path(p) for p in _read_list(_list_file(db / "info", key))]
        hits = [p for p in paths if any(p == w or p.startswith(w + "/") for w in wanted)]
        if not hits:
            continue
        name = key.partition(":")[0] if arch in (native, "all") else key
        packages[name] = version
        sums = _md5sums(db / "info", key)
        files[name] = [p for p in paths if p in sums]
        md5.update({p: sums[p] for p in files[name]})
    return packages, md5, files


def scan_root(root: Path, db: Path = DPKG_ROOT) -> tuple[dict[str, Any], list[str], list[str]]:
    """Cover the ROCm install at ``root``: return (fingerprint part, all guards, memo guards)."""
    usr = str(root) == "/usr"
    if usr:
        markers = [str(root / m) for m in USR_MARKERS if os.path.lexists(root / m)]
        packages, md5, files = _owned_under(markers, db)
        # Under /usr every other file is the system manifest's business.
        paths = sorted({p for fs in files.values() for p in fs})
        walk_dirs: list[str] = []
    else:
        packages, md5, files = _owned_under([str(root), os.path.realpath(root)], db)
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
            if p not in md5:
                unowned.setdefault(rel.split("/", 1)[0], []).append(f"{rel}\tlink:{os.readlink(p)}")
            continue
        try:
            if p in md5:
                if _md5(p) != md5[p]:
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


def root_coverage(
    root: Path, *, cache_dir: Path, db: Path = DPKG_ROOT
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Return ``(rocm.coverage fingerprint part, memo guards)`` for ``root`` (stat-cached)."""
    cache = StatCache(cache_dir / layout.CACHE_ROCMROOT)
    key = f"rocmroot|{ROOT_VERSION}|{root}"
    hit = cache.get(key)
    if isinstance(hit, dict) and isinstance(hit.get("memo"), list):
        return dict(hit["part"]), tuple(hit["memo"])
    part, guards, memo = scan_root(root, db)
    all_guards = [str(db / "status"), *guards]
    cache.put(key, {"part": part, "memo": [str(db / "status"), *memo]}, all_guards)
    return part, (str(db / "status"), *memo)
