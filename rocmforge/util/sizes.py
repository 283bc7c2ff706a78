"""Sizes and ages as ``du`` and ``gc`` print them, and the size of a directory tree.

Imports only ``os``: ``du``'s import-light reader (:mod:`rocmforge.store.readers`) prints from the
same code as the full command.
"""

from __future__ import annotations

import os

_UNITS = "KMGTP"


def format_size(n: int) -> str:
    """Return ``n`` bytes in binary units: ``"512 B"``, ``"1.5 KiB"``, ``"20.0 GiB"``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in _UNITS:
        value /= 1024
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}iB"
    raise AssertionError("unreachable")


def format_age(seconds: float) -> str:
    """Return a duration as its largest whole unit: ``"41d"``, ``"3h"``, ``"12m"``, ``"5s"``."""
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def tree_size(path: str | os.PathLike[str]) -> int:
    """Return the bytes of every non-directory below ``path`` (lstat sizes; links below not
    followed), or of ``path`` itself when it is not a directory (a failed build's log, a tree
    stat cache's ``.head``).

    A missing ``path`` is 0 bytes; files that vanish meanwhile are skipped.
    """
    if not os.path.isdir(path):
        try:
            return os.lstat(path).st_size
        except FileNotFoundError:
            return 0
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for f in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except FileNotFoundError:
                continue
    return total


def memory_size(n: float) -> str:
    """``3.7 GB``, ``180 MB``, ``12 kB``: a memory size as the telemetry lines print it."""
    for unit, size in (("GB", 1024**3), ("MB", 1024**2), ("kB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n < 10 * size else f"{n / size:.0f} {unit}"
    return f"{int(n)} B"


def usage_line(summary: object) -> str:
    """A build's telemetry summary (``meta.json`` ``telemetry``) in one line: ``peak RSS 1.2 GB,
    CPU 41.0 s, compile jobs peaked at 180 MB (2 at once)``."""
    get = summary.get if isinstance(summary, dict) else (lambda key: None)
    parts = [f"peak RSS {memory_size(get('peak_rss') or 0)}"]
    cpu = get("cpu_seconds")
    if isinstance(cpu, (int, float)):
        parts.append(f"CPU {cpu:.1f} s")
    job = get("job_peak_rss")
    if isinstance(job, int) and job:
        parts.append(
            f"compile jobs peaked at {memory_size(job)} "
            f"({get('jobs_peak') or 0} at once)"
        )
    return ", ".join(parts)
