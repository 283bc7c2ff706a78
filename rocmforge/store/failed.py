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
from typing import Any, Literal

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.store import Store
from rocmforge.util.fsutil import remove_tree, tree_size

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


def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def gather_failed(store: Store) -> list[FailedItem]:
    """Return the kept build directories and the failed logs of ``store``, biggest first."""
    items: list[FailedItem] = []
    try:
        tmp_names = set(os.listdir(store.tmp_dir)) if store.tmp_dir.is_dir() else set()
        failed_names = sorted(os.listdir(store.failed_dir)) if store.failed_dir.is_dir() else []
    except OSError as e:
        raise StoreError(f"cannot list failed builds in {store.root}: {e}") from e
    for n in sorted(tmp_names):
        if layout.parse_build_dir_name(n) and f"{n}{layout.LOCK_SUFFIX}" not in tmp_names:
            d = store.tmp_dir / n
            size, mtime = tree_size(d), _mtime(d)
            items.append(FailedItem(kind="kept build", name=n, paths=(d,), size=size, mtime=mtime))
    logs: dict[str, list[Path]] = {}
    for n in failed_names:
        stem = n.removesuffix(layout.FAILED_LOG_SUFFIX).removesuffix(".json")
        if stem != n:
            logs.setdefault(stem, []).append(store.failed_dir / n)
    for stem, paths in sorted(logs.items()):
        items.append(
            FailedItem(
                kind="failed log",
                name=stem,
                paths=tuple(paths),
                size=sum(tree_size(p) for p in paths),
                mtime=max(_mtime(p) for p in paths),
            )
        )
    return sorted(items, key=lambda i: (-i.size, i.name))


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
