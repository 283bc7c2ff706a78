"""A tiny JSON cache whose entries are valid only while a set of files keeps its stat signature.

Used to skip expensive probes (toolchain, requirement wheels) on the cache-hit path: a hit costs a
few ``os.stat`` calls and no subprocess. Each value is stored with a seal (blake3 of its canonical
JSON): a value edited or damaged in place reads as a miss and is probed and written again, so a
corrupt cache never reaches the code that trusts its shape.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rocmforge.util.fsutil import json_bytes, write_atomic
from rocmforge.util.hashing import blake3_hex, canonical_json


def stat_signature(path: str | Path) -> list[int] | None:
    """Return ``[size, mtime_ns, ino]`` of ``path`` (following symlinks), or None if missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def signatures(paths: Iterable[str | Path]) -> dict[str, list[int] | None]:
    """Return the stat signature of every path."""
    return {str(p): stat_signature(p) for p in paths}


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object from ``path``; a missing or corrupt file reads as empty."""
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temp file in the same dir, rename).

    Not fsynced: a cache file torn by a crash reads as empty (:func:`read_json`) and each value
    carries its own seal, so the worst case is recomputing it.
    """
    write_atomic(path, json_bytes(data), durable=False)


#: Why a cache file may not be writable without anything being wrong: a read-only store (a
#: shared mount), or a full disk (the command fails later where it must write, not here).
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def _seal(value: Any) -> str | None:
    try:
        return blake3_hex(canonical_json(value))[:32]
    except (TypeError, ValueError):
        return None


class StatCache:
    """A JSON file mapping keys to values, each guarded by the stat signatures of some files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        if self._data is None:
            self._data = read_json(self.path)
        return self._data

    def get(self, key: str) -> Any | None:
        """Return the value stored under ``key`` if every guarding file is unchanged."""
        item = self._load().get(key)
        if not isinstance(item, dict):
            return None
        guards = item.get("guards")
        if not isinstance(guards, dict):
            return None
        for p, sig in guards.items():
            if stat_signature(p) != sig:
                return None
        value = item.get("value")
        if item.get("seal") != _seal(value):
            return None
        return value

    def put(self, key: str, value: Any, guards: Iterable[str | Path]) -> None:
        """Store ``value`` under ``key``, valid while ``guards`` keep their stat signatures."""
        data = dict(read_json(self.path))  # re-read: another process may have added keys
        data[key] = {"guards": signatures(guards), "value": value, "seal": _seal(value)}
        try:
            write_json_atomic(self.path, data)
        except OSError as exc:
            if exc.errno not in _UNWRITABLE:
                raise
        self._data = data
