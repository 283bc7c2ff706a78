"""The sandbox's process tree, read from ``/proc`` on the host: who runs, for how long, how big.

A snapshot walks down from the supervisor's pid through ``/proc/PID/task/TID/children``
(only the build's processes are read, not the whole of ``/proc``; a kernel without that file
falls back to one scan of ``/proc``). A process's RSS comes from ``/proc/PID/stat`` (pages),
its run time from its start time against ``/proc/uptime``. The RSS of a tree is the sum of its
processes' RSS, so shared pages count once per process: an upper bound, as ``top`` shows it.

A *compile job* is what ninja runs for one edge: each child of a ``ninja`` process, with
everything below it (the shell, ``ccache``, the compiler driver, ``cc1plus``, the assembler).
A build without ninja (setuptools' parallel compile, make) has as jobs the topmost processes
that are compilers or linkers (:data:`COMPILERS`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Process names (``comm``) counted as compile jobs in a build without ninja.
COMPILERS = frozenset({
    "cc", "c++", "gcc", "g++", "cc1", "cc1plus", "clang", "clang++", "hipcc", "nvcc", "ld",
    "ld.lld", "lld", "ld.gold", "ld.bfd", "rustc", "ccache", "hipcc.pl", "clang-19", "clang-15",
    "clang-17", "clang-18", "amdclang++", "amdclang", "cicc", "ptxas", "as", "lto1",
})  # fmt: skip

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class Proc:
    """One process of the tree at one instant."""

    pid: int
    ppid: int
    comm: str
    rss: int
    #: user + system CPU seconds so far
    cpu: float
    #: seconds since it started
    age: float


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def uptime() -> float:
    """Seconds since boot (``/proc/uptime``), 0.0 if unreadable."""
    raw = _read("/proc/uptime")
    try:
        return float(raw.split()[0]) if raw else 0.0
    except (ValueError, IndexError):
        return 0.0


def read_proc(pid: int, now: float) -> Proc | None:
    """Return ``pid`` as :class:`Proc` (``now``: :func:`uptime`), None if it is gone."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    close = raw.rfind(b")")
    comm = raw[raw.find(b"(") + 1 : close].decode("utf-8", "replace")
    f = raw[close + 2 :].split()
    try:
        return Proc(
            pid=pid,
            ppid=int(f[1]),
            comm=comm,
            rss=int(f[21]) * _PAGE,
            cpu=(int(f[11]) + int(f[12])) / _HZ,
            age=max(0.0, now - int(f[19]) / _HZ),
        )
    except (IndexError, ValueError):
        return None


def children(pid: int) -> list[int] | None:
    """The children of ``pid`` (every thread's), or None when the kernel has no such file."""
    tasks = f"/proc/{pid}/task"
    try:
        tids = os.listdir(tasks)
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        raw = _read(f"{tasks}/{tid}/children")
        if raw is None:
            if not os.path.exists(f"{tasks}/{tid}"):
                continue  # the thread ended meanwhile
            return None
        out.extend(int(x) for x in raw.split())
    return out


def _scan_children() -> dict[int, list[int]]:
    """``{ppid: [pid...]}`` of every process (one pass over ``/proc``)."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            raw = _read(f"/proc/{name}/stat")
            if raw:
                fields = raw[raw.rfind(b")") + 2 :].split()
                if len(fields) > 1:
                    out.setdefault(int(fields[1]), []).append(int(name))
    return out


def snapshot(root: int) -> list[Proc]:
    """Every live process at and below ``root``, parents first."""
    now = uptime()
    found: list[Proc] = []
    scanned: dict[int, list[int]] | None = None
    stack = [root]
    while stack:
        pid = stack.pop()
        proc = read_proc(pid, now)
        if proc is None:
            continue
        found.append(proc)
        kids = children(pid) if scanned is None else scanned.get(pid, [])
        if kids is None:
            scanned = _scan_children()
            kids = scanned.get(pid, [])
        stack.extend(kids)
    return found


@dataclass(frozen=True, slots=True)
class Job:
    """One compile job: the top process of its subtree, the subtree's RSS and its leaf."""

    top: Proc
    rss: int
    #: the deepest process of the subtree (the compiler proper: ``cc1plus``, ``clang``)
    leaf: Proc


def _subtrees(procs: Sequence[Proc]) -> dict[int, list[Proc]]:
    kids: dict[int, list[Proc]] = {}
    for p in procs:
        kids.setdefault(p.ppid, []).append(p)
    return kids


def _collect(top: Proc, kids: dict[int, list[Proc]]) -> tuple[int, Proc]:
    rss, leaf, depth = 0, top, -1
    stack = [(top, 0)]
    while stack:
        p, d = stack.pop()
        rss += p.rss
        if d > depth:
            leaf, depth = p, d
        stack.extend((c, d + 1) for c in kids.get(p.pid, ()))
    return rss, leaf


def jobs(procs: Sequence[Proc]) -> list[Job]:
    """The compile jobs of a snapshot (see the module's description)."""
    kids = _subtrees(procs)
    ninjas = [p for p in procs if p.comm == "ninja"]
    tops: Iterable[Proc]
    if ninjas:
        tops = [c for n in ninjas for c in kids.get(n.pid, ()) if c.comm != "ninja"]
    else:
        by_pid = {p.pid: p for p in procs}

        def under_compiler(p: Proc) -> bool:
            parent = by_pid.get(p.ppid)
            while parent is not None:
                if parent.comm in COMPILERS:
                    return True
                parent = by_pid.get(parent.ppid)
            return False

        tops = [p for p in procs if p.comm in COMPILERS and not under_compiler(p)]
    out = []
    for top in tops:
        rss, leaf = _collect(top, kids)
        out.append(Job(top=top, rss=rss, leaf=leaf))
    return out


def cmdline(pid: int, limit: int = 160) -> str:
    """The command line of ``pid``, shortened to ``limit`` characters ('' when gone)."""
    raw = _read(f"/proc/{pid}/cmdline")
    if not raw:
        return ""
    text = " ".join(part.decode("utf-8", "replace") for part in raw.rstrip(b"\0").split(b"\0"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cwd(pid: int) -> str | None:
    """Where ``pid`` runs, as its own mount namespace names it (None when unreadable)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
