"""``du``: how big the store is, by area, by package and by entry, and what roots each entry.

Entries are measured from their ``meta.json`` (what gc counts), source caches by kind (as gc
lists them), the other areas of the layout by walking them, and the index with its WAL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rocmforge.store.gc import EntryInfo, gather_entries, gather_sources
from rocmforge.store.measure import summarize
from rocmforge.store.roots import collect_roots
from rocmforge.store.store import Store


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
    """Measure the store: entries per package, each area (sources by kind, caches, logs)
    (:func:`rocmforge.store.measure.summarize`)."""
    entries, _ = gather_entries(store)
    areas, packages, biggest = summarize(
        os.fspath(store.root),
        entries,
        ((item.rel, item.size) for item in gather_sources(store)),
        collect_roots(store).by_hash,
    )
    return Usage(areas=areas, packages=packages, entries=biggest)
