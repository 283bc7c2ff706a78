"""The toolchain Python's own files: headers, libpython and stdlib, content-hashed.

A Python that no system package owns (pyenv, a tarball, a source build under ``/opt``) is
mounted into the sandbox whole, so whatever a build can read there must be in the hash: every
file of its prefix is digested (relative path + content, a symlink by its target) into four
parts — ``headers`` (``include/``), ``libpython`` (``lib/libpython*``), ``stdlib``
(``lib/pythonX.Y`` without ``site-packages``) and ``other`` (``bin/``, ``share/`` ...). The
prefix's ``site-packages`` is masked instead (build venvs never use it; in a pyenv Python it
often holds thousands of files unrelated to the build). ``__pycache__`` directories are skipped:
bytecode derives from the hashed sources and Python rejects a cache whose source changed.

Digests are machine independent (relative paths only) and cached by the stat signature of
every hashed file and directory, so a warm resolve costs one ``stat`` per file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocmforge.store import layout
from rocmforge.util.hashing import blake3_hex, file_blake3
from rocmforge.util.statcache import StatCache

PREFIX_VERSION = 1

PARTS = ("headers", "libpython", "stdlib", "other")


def _part(rel: str, short: str) -> str:
    if rel.startswith("include/"):
        return "headers"
    if rel.startswith("lib/libpython"):
        return "libpython"
    if rel.startswith(f"lib/python{short}/"):
        return "stdlib"
    return "other"


def scan_prefix(prefix: Path, short: str) -> tuple[dict[str, Any], list[str]]:
    """Digest the files of the Python installed at ``prefix`` (version ``short``, e.g. 3.11).

    Returns ``({part: {"files": n, "blake3": digest}}, guards)``; ``guards`` are every hashed
    file and every walked directory (a directory's mtime catches added and removed files).
    """
    skip = str(prefix / "lib" / f"python{short}" / "site-packages")
    lines: dict[str, list[str]] = {p: [] for p in PARTS}
    guards: list[str] = []
    for dirpath, dirnames, filenames in os.walk(prefix):
        dirnames[:] = sorted(
            d for d in dirnames if d != "__pycache__" and os.path.join(dirpath, d) != skip
        )
        guards.append(dirpath)
        # Symlinked directories are not walked into; they are hashed by their target.
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = [d for d in dirnames if d not in links]
        for name in sorted([*filenames, *links]):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, prefix)
            if os.path.islink(path):
                digest = "link:" + os.readlink(path)
            else:
                try:
                    digest = file_blake3(path)
                except OSError:
                    digest = "unreadable"
                guards.append(path)
            lines[_part(rel, short)].append(f"{rel}\t{digest}")
    parts = {
        p: {"files": len(v), "blake3": blake3_hex("\n".join(v).encode())} for p, v in lines.items()
    }
    return parts, guards


#: Results of :func:`prefix_coverage` in this process: a graph resolves one toolchain per node,
#: and checking thousands of stat signatures again for each costs ~60 ms a node.
_SEEN: dict[tuple[str, str, str], tuple[Mapping[str, Any], tuple[str, ...], tuple[str, ...]]] = {}


def _memo_guards(prefix: Path, short: str, guards: list[str]) -> list[str]:
    """Every directory of ``guards`` plus the interpreter's key files (headers, libpython)."""
    key_files = (str(prefix / "include"), str(prefix / "lib"))
    return [
        g
        for g in guards
        if os.path.isdir(g)
        or (
            g.startswith(key_files)
            and _part(os.path.relpath(g, prefix), short) in ("headers", "libpython")
        )
    ]


def prefix_coverage(
    prefix: Path, short: str, *, cache_dir: Path
) -> tuple[Mapping[str, Any], tuple[str, ...], tuple[str, ...]]:
    """Return ``(digests by part, memo guards, masks)`` for the Python at ``prefix``.

    The digests are cached while every hashed file and directory keeps its stat signature (each
    full resolve checks them all). The memo guards returned are fewer — every directory (an
    added, removed or replaced file changes it) plus the interpreter's key files (headers,
    ``libpython``) — so the no-op realize stays within its budget.
    """
    seen = _SEEN.get((str(prefix), short, str(cache_dir)))
    if seen is not None:
        return seen
    cache = StatCache(cache_dir / layout.CACHE_PYPREFIX)
    key = f"pyprefix|{PREFIX_VERSION}|{prefix}|{short}"
    hit = cache.get(key)
    if isinstance(hit, dict) and isinstance(hit.get("memo"), list):
        parts, memo = hit["parts"], hit["memo"]
    else:
        parts, guards = scan_prefix(prefix, short)
        memo = _memo_guards(prefix, short, guards)
        cache.put(key, {"parts": parts, "memo": memo}, guards)
    site = prefix / "lib" / f"python{short}" / "site-packages"
    masks = (str(site),) if site.is_dir() else ()
    result = (parts, tuple(memo), masks)
    _SEEN[(str(prefix), short, str(cache_dir))] = result
    return result
