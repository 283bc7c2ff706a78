"""``query``, ``list`` and ``show``: the store's entries as the SQLite index knows them.

Filters and listings come from the index (fast on 10,000 entries); last use also honours
``used/<hash>`` (touched by every cache hit, including the memo's fast path) and roots come from
:func:`rocmforge.store.roots.collect_roots`. ``show`` reads one entry's own files for everything
else.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rocmforge.errors import RocmforgeError, UsageError
from rocmforge.store import layout
from rocmforge.store.accepted import AcceptedRun, passing, read_runs, sound_runs
from rocmforge.store.entry import Entry, read_derivation
from rocmforge.store.index import IndexRow
from rocmforge.store.store import Store
from rocmforge.util.fsutil import read_json_object

_ENV_FILTER = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)([=~])(.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvFilter:
    """``KEY=VALUE`` (exact) or ``KEY~SUBSTR`` (substring) on a hashed env flag."""

    key: str
    value: str
    substring: bool


def parse_env_filter(text: str) -> EnvFilter:
    """Parse ``KEY=VALUE`` or ``KEY~SUBSTR``; anything else is a :class:`UsageError`."""
    m = _ENV_FILTER.match(text)
    if m is None:
        raise UsageError(f"--env {text!r}: write KEY=VALUE (exact) or KEY~SUBSTR (substring)")
    return EnvFilter(key=m.group(1), value=m.group(3), substring=m.group(2) == "~")


def parse_since(text: str, *, now: float | None = None) -> float:
    """Parse ``--since``: a duration back from now (``7d``, ``12h``) or an ISO date/time."""
    from rocmforge.recipe.model import parse_duration

    now = time.time() if now is None else now
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--since {text!r}: write a duration (7d, 12h, 30m) or a date (2025-01-31)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


@dataclass(frozen=True, slots=True, kw_only=True)
class Listed:
    """One entry as ``list`` and ``query`` show it."""

    row: IndexRow
    last_used: float
    roots: tuple[str, ...] = field(default=())
    #: The hashed env values a ``query --env`` matched on (key -> value), empty for ``list``.
    env: Mapping[str, str] = field(default_factory=dict)
    #: ``query --accepted [--on ARCH]``: the passing runs that matched, oldest first (None when
    #: runs were not asked for)
    accepted: tuple[AcceptedRun, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the entry as JSON-ready data (``accepted``: with ``query --accepted``)."""
        r = self.row
        extra = {} if self.accepted is None else {"accepted": [a.to_json() for a in self.accepted]}
        return {
            **extra,
            "env": dict(self.env),
            "hash": r.hash,
            "name": r.name,
            "version": r.version,
            "path": str(r.path),
            "size": r.size,
            "created": r.created,
            "last_used": self.last_used,
            "sandbox": r.sandbox,
            "roots": list(self.roots),
            "wheels": [
                {"file": w.filename, "sha256": w.sha256, "blake3": w.blake3} for w in r.wheels
            ],
        }


def _roots(store: Store) -> Mapping[str, tuple[str, ...]]:
    try:
        from rocmforge.store.roots import collect_roots
    except ImportError:  # a rocmforge without gc roots
        return {}
    return collect_roots(store).by_hash


def _listed(store: Store, rows: Sequence[IndexRow]) -> list[Listed]:
    used = store.used_times()
    roots = _roots(store)
    return [
        Listed(
            row=r,
            last_used=max(r.last_used, used.get(r.hash, 0.0)),
            roots=roots.get(r.hash, ()),
        )
        for r in rows
    ]


def query_entries(
    store: Store,
    *,
    name: str | None = None,
    version: str | None = None,
    env: Sequence[EnvFilter] = (),
    since: float | None = None,
    built_against: str | None = None,
    accepted: bool = False,
    arch: str | None = None,
) -> list[Listed]:
    """Return the indexed entries matching every filter, oldest first.

    ``built_against`` (a hash, prefix or entry path) keeps the entries built against that entry,
    directly or through another dependency (``meta.json`` ``built_against``). ``accepted``
    keeps the entries with a passing acceptance run of their own (``accepted/<hash>/``; on a
    node with GPU arch ``arch`` when given), each :class:`Listed` carrying those runs.
    """
    rows = store.index.query(
        name=name,
        version=version,
        env_equals=[(f.key, f.value) for f in env if not f.substring],
        env_contains=[(f.key, f.value) for f in env if f.substring],
        since=since,
    )
    if built_against is not None:
        wanted = store.resolve(built_against).hash
        kept = []
        for row in rows:
            try:
                entry = store.load(row.path)
            except (OSError, RocmforgeError):
                continue  # damaged or gone: verify reports it
            if wanted in entry.meta.built_against:
                kept.append(row)
        rows = kept
    runs: dict[str, tuple[AcceptedRun, ...]] = {}
    if accepted:
        for row in rows:
            ok = passing(sound_runs(store.root, row.hash), arch)
            if ok:
                runs[row.hash] = tuple(ok)
        rows = [r for r in rows if r.hash in runs]
    found = _listed(store, rows)
    if accepted:
        found = [dataclasses.replace(e, accepted=runs[e.row.hash]) for e in found]
    if not env:
        return found
    values = store.index.env_values([r.hash for r in rows], [f.key for f in env])
    return [dataclasses.replace(e, env=values.get(e.row.hash, {})) for e in found]


def list_entries(store: Store) -> list[Listed]:
    """Return every indexed entry, oldest first."""
    return _listed(store, store.index.rows())


def list_summary(store: Store) -> Iterator[tuple[str, str, str, int, float, float, int]]:
    """Yield ``(hash, name, version, size, created, last_used, roots)`` of every indexed entry,
    oldest first: what :func:`list_entries` gives, as plain tuples with a count of roots,
    streamed from the index."""
    from rocmforge.store.scan import with_usage

    yield from with_usage(store.index.summary_rows(), store.used_times(), _roots(store))


def find_entry_dir(store: Store, target: str) -> Path:
    """Return the entry directory named by ``target``: a hash (prefix), entry name or path, or a
    wheel file whose digest the index knows (a copy made anywhere)."""
    if target.endswith(".whl") and os.path.isfile(target):
        from rocmforge.util.hashing import file_blake3

        rows = store.index.by_wheel_digest(file_blake3(target))
        if not rows:
            raise UsageError(f"{target}: this wheel is not in the store (try rocmforge audit)")
        return rows[0].path
    return store.resolve(target).path


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryDetails:
    """Everything known about one entry, as ``show`` prints it."""

    entry: Entry
    derivation: Mapping[str, Any]
    provenance: Mapping[str, Any] | None
    indexed: bool
    last_used: float
    roots: tuple[str, ...] = ()
    #: the entry's acceptance runs (``accepted/<hash>/``), oldest first
    accepted: tuple[AcceptedRun, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return the details as JSON-ready data (``meta`` as stored in ``meta.json``)."""
        e = self.entry
        return {
            "hash": e.hash,
            "name": e.name,
            "version": e.version,
            "path": str(e.path),
            "meta": e.meta.to_json(),
            "derivation": dict(self.derivation),
            "provenance": dict(self.provenance) if self.provenance is not None else None,
            "indexed": self.indexed,
            "last_used": self.last_used,
            "roots": list(self.roots),
            "accepted": [r.to_json() for r in self.accepted],
        }


def show_entry(store: Store, target: str) -> EntryDetails:
    """Return everything known about one entry: meta, derivation, provenance, index, roots."""
    entry = store.load(find_entry_dir(store, target))
    row = store.index.get(entry.hash)
    listed = _listed(store, [row]) if row is not None else []
    return EntryDetails(
        entry=entry,
        derivation=read_derivation(entry.path),
        provenance=read_json_object(entry.path / layout.PROVENANCE, what="provenance"),
        indexed=row is not None,
        last_used=listed[0].last_used if listed else entry.meta.created,
        roots=listed[0].roots if listed else _roots(store).get(entry.hash, ()),
        accepted=tuple(read_runs(store.root, entry.hash)),
    )
