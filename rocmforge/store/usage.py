"""``du``: how big the store is, by area, by package and by entry, and what roots each entry.

Entries are measured from their ``meta.json`` (what gc counts), source caches by kind (as gc
lists them), the other areas of the layout by walking them, and the index with its WAL.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.store import layout
from rocmforge.store.gc import EntryInfo, gather_entries, gather_sources
from rocmforge.store.roots import collect_roots
from rocmforge.store.store import Store
from rocmforge.util.fsutil import tree_size

#: The areas of the store measured by walking them (entries and sources are measured by gc).
AREAS = (
    layout.CACHE,
    layout.FAILED,
    layout.TMP,
    layout.TRASH,
    layout.USED,
    layout.ROOTS,
    layout.LOCKS,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """How big the store is and what dominates it."""

    areas: tuple[tuple[str, int], ...]  # (area, bytes), biggest first
    packages: tuple[tuple[str, int, int], ...]  # (name, entries, bytes), biggest first
    entries: tuple[tuple[EntryInfo, tuple[str, ...]], ...]  # biggest first, with root reasons

    @property
    def total(self) -> int:
        """Bytes of the whole store."""
        return sum(size for _, size in self.areas)

    def to_json(self) -> dict[str, Any]:
        """Return JSON-ready data."""
        return {
            "total_bytes": self.total,
            "areas": [{"area": a, "bytes": s} for a, s in self.areas],
            "packages": [{"name": n, "entries": c, "bytes": s} for n, c, s in self.packages],
            "entries": [{**e.to_json(), "roots": list(r)} for e, r in self.entries],
        }


def disk_usage(store: Store) -> Usage:
    """Measure the store: entries per package, each area (sources by kind, caches, logs)."""
    entries, _ = gather_entries(store)
    roots = collect_roots(store).by_hash
    areas: dict[str, int] = {layout.ENTRIES: sum(e.size for e in entries)}
    for item in gather_sources(store):
        key = f"sources: {item.kind}s"
        areas[key] = areas.get(key, 0) + item.size
    for name in AREAS:
        areas[name] = tree_size(store.root / name)
    areas["index"] = sum(
        os.lstat(p).st_size
        for p in (store.index_path, Path(f"{store.index_path}-wal"))
        if os.path.lexists(p)
    )
    pkgs: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in entries:
        pkgs[e.name][0] += 1
        pkgs[e.name][1] += e.size
    return Usage(
        areas=tuple(sorted(((a, s) for a, s in areas.items() if s), key=lambda x: -x[1])),
        packages=tuple(
            sorted(((n, c, s) for n, (c, s) in pkgs.items()), key=lambda x: (-x[2], x[0]))
        ),
        entries=tuple(
            (e, roots.get(e.hash, ())) for e in sorted(entries, key=lambda e: (-e.size, e.dirname))
        ),
    )
