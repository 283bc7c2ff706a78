"""The entry table of ``list`` and ``query``: sizes, UTC minutes and aligned columns.

Imports only ``time``: the import-light reader of ``list`` and ``query``
(:mod:`rocmforge.store.readers`) prints the same table as their full branches, from the same code.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

HEADER = ("HASH", "NAME", "VERSION", "SIZE", "CREATED (UTC)", "LAST USED (UTC)", "ROOTS")

#: One row of the table: ``(hash, name, version, size, created, last_used, roots)``.
SummaryRow = tuple[str, str, str, int, float, float, int]


def human_size(n: float) -> str:
    """Return ``n`` bytes as ``1.5M``-style text."""
    for unit in ("B", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}T"


def human_time(ts: float) -> str:
    """Return a timestamp as ``2025-01-31 12:00`` (UTC); ``-`` for 0."""
    if not ts:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def format_summary(rows: Iterable[tuple[Any, ...]], env_keys: Iterable[str] = ()) -> str:
    """Return the table of ``rows`` (hash prefix, name, version, size, created, last used,
    number of roots), one line each under :data:`HEADER`.

    One pass builds the cells of each row, formatting each distinct minute and size once;
    the widths are taken per column and the lines joined at the end (10,000 rows in ~20 ms).
    Rows may carry extra cells after the seven (the ``env_keys`` columns of ``query --env``).
    """
    minutes: dict[float, str] = {-1.0: human_time(0)}
    sizes: dict[int, str] = {}
    table: list[tuple[str, ...]] = [(*HEADER, *env_keys)]
    add = table.append
    for h, name, version, size, created, last, n, *extra in rows:  # a SummaryRow (+ extra)
        # the table shows minutes: a timestamp in minute m prints as m * 60 (0 prints as "-")
        mc = created // 60 if created else -1.0
        c = minutes.get(mc)
        if c is None:
            c = minutes[mc] = human_time(mc * 60)
        ml = last // 60 if last else -1.0
        u = minutes.get(ml)
        if u is None:
            u = minutes[ml] = human_time(ml * 60)
        z = sizes.get(size)
        if z is None:
            z = sizes[size] = human_size(size)
        add((h[:12], name, version, z, c, u, str(n) if n else "-", *extra))
    widths = [max(map(len, col)) for col in zip(*table, strict=True)]
    # the last column unpadded: no cell ends in a space unless a value does
    fmt = "  ".join(f"%-{w}s" for w in widths[:-1]) + "  %s"
    return "".join([(fmt % r).rstrip() + "\n" for r in table])
