"""What failed builds leave behind: kept build directories and ``failed/`` logs (show, collect).

``realize --keep-failed`` keeps the build directory ``tmp/<hash>.<pid>.<rand>/`` (many GB for
torch) and every failed build leaves ``failed/<hash>-<name>-<version>.log.zst`` (with its
``.json`` diagnosis). :func:`gather_failed` lists them (``du`` shows them); :func:`collect_failed`
deletes them, all or those older than an age (``gc --failed [--older-than AGE]``). A build
directory that still has its ``.lock`` belongs to a build in progress (or to a dead process,
which ``gc`` already cleans) and is never listed here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from rocmforge.errors import StoreError
from rocmforge.store.measure import scan_failed
from rocmforge.store.store import Store
from rocmforge.util.fsutil import remove_tree

Kind = Literal["kept build", "failed log"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedItem:
    """One leftover of a failed build: its kind, paths (a log and its diagnosis go together),
    bytes and modification time."""

    kind: Kind
    name: str
    paths: tuple[Path, ...]
    size: int
    mtime: float

    def to_json(self) -> dict[str, Any]:
        """Return JSON-ready data."""
        return {
            "kind": self.kind,
            "name": self.name,
            "paths": [str(p) for p in self.paths],
            "bytes": self.size,
            "mtime": self.mtime,
        }


def gather_failed(store: Store) -> list[FailedItem]:
    """Return the kept build directories and the failed logs of ``store``, biggest first
    (:func:`rocmforge.store.measure.scan_failed`)."""
    try:
        found = scan_failed(os.fspath(store.root))
    except OSError as e:
        raise StoreError(f"cannot list failed builds in {store.root}: {e}") from e
    return [
        FailedItem(
            kind=cast(Kind, kind), name=name, paths=tuple(map(Path, paths)), size=size, mtime=mtime
        )
        for kind, name, paths, size, mtime in found
    ]


def collect_failed(
    store: Store,
    *,
    older_than: float | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> list[FailedItem]:
    """Delete (unless ``dry_run``) the failed-build leftovers not modified for ``older_than``
    seconds (all of them when None); return what went, under the store's exclusive lock."""
    with store.exclusive_lock():
        now = time.time() if now is None else now
        chosen = [
            i for i in gather_failed(store) if older_than is None or now - i.mtime > older_than
        ]
        if not dry_run:
            for item in chosen:
                for p in item.paths:
                    try:
                        remove_tree(p)  # a file or link is unlinked, never followed
                    except OSError as e:
                        raise StoreError(f"cannot delete {p}: {e}") from e
    return chosen
