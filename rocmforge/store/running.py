"""Builds in progress: who builds an input hash, since when, and how far its log has got.

A build runs in ``tmp/<hash>.<pid>.<rand>/`` while holding ``tmp/<same>.lock`` (see
:meth:`~rocmforge.store.store.Store.new_build_dir`) and writes ``build.log`` there. A realize that
waits for the per-hash build lock uses :func:`running_build` to say what it waits for ("the build
of X by pid N, started T ago") and to show that build's progress (its log's size and last line).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rocmforge.store import layout
from rocmforge.store.store import Store

#: How many bytes at the end of a running build's log are read to find its last line.
TAIL_BYTES = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningBuild:
    """A build of one input hash by another process: its pid, start, log size and last line."""

    hash: str
    pid: int
    started: float
    log_bytes: int
    last_line: str


def _last_line(path: Path) -> tuple[int, str]:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return 0, ""
    lines = [ln.strip() for ln in tail.replace("\r", "\n").splitlines() if ln.strip()]
    return size, lines[-1] if lines else ""


def running_build(store: Store, hash: str) -> RunningBuild | None:
    """Return the newest build of ``hash`` in progress in ``store`` (its lock file is present),
    or None when there is none to be seen (the lock holder may still be resolving)."""
    try:
        names = os.listdir(store.tmp_dir)
    except OSError:
        return None
    found: list[tuple[float, str, int]] = []
    for n in names:
        parsed = layout.parse_build_dir_name(n)
        if parsed is None or parsed[0] != hash or f"{n}{layout.LOCK_SUFFIX}" not in names:
            continue
        try:
            started = os.lstat(store.tmp_dir / f"{n}{layout.LOCK_SUFFIX}").st_mtime  # made first
        except OSError:
            continue
        found.append((started, n, int(parsed[1])))
    if not found:
        return None
    started, name, pid = max(found)
    size, last = _last_line(store.tmp_dir / name / layout.BUILD_DIR_LOG)
    return RunningBuild(hash=hash, pid=pid, started=started, log_bytes=size, last_line=last)
