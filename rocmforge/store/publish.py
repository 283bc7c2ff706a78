"""Staging and sealing an entry for publishing: ``meta.json`` written, files fsynced, read-only.

A build's output is staged in a directory on the store's filesystem (normally a
:class:`~rocmforge.store.builddir.BuildDir`): :func:`stage` completes and writes its
``meta.json`` and seals it (every file fsynced and made 0o444); after the rename into
``entries/`` (:meth:`rocmforge.store.store.Store.publish`, which also holds the ``pending/``
marker of :func:`take_marker` until the index has the entry) :func:`seal_published` makes the
directory 0o555 and durable. :func:`swap_in` is the same for a rebuild that supersedes an entry.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.entry import (
    EntryMeta,
    WheelRecord,
    complete_fields,
    listed_wheel_files,
    read_derivation,
)
from rocmforge.store.locks import hold_new
from rocmforge.util.fsutil import fsync_path, json_bytes, remove_tree, write_atomic

FILE_MODE = 0o444
DIR_MODE = 0o555


def stage(
    staged: Path,
    final: Path,
    hash: str,
    name: str,
    version: str,
    meta: Mapping[str, Any],
    *,
    created: float | None = None,
) -> dict[str, Any]:
    """Write ``meta.json`` into ``staged`` and seal it; return its derivation document.

    ``created`` keeps an entry's creation time (re-signing it); None: now."""
    try:
        derivation, full_meta = prepare(staged, hash, name, version, meta, created=created)
        write_atomic(staged / layout.META, json_bytes(full_meta.to_json()), durable=False)
        seal(staged)
    except OSError as e:
        raise StoreError(f"cannot stage {staged} for publishing as {final.name}: {e}") from e
    return derivation


def discard(staged: Path) -> None:
    """Remove a staged directory that is not published (another publisher won)."""
    try:
        remove_tree(staged)
    except OSError as e:
        raise StoreError(f"cannot discard staged directory {staged}: {e}") from e


def prepare(
    staged: Path,
    hash: str,
    name: str,
    version: str,
    meta: Mapping[str, Any],
    *,
    created: float | None = None,
) -> tuple[dict[str, Any], EntryMeta]:
    """Read the derivation, check the wheels, and return (derivation, full meta).

    ``meta`` holds the fields of :class:`EntryMeta` the caller knows (by their JSON keys);
    ``hash``, ``name``, ``version``, ``created``, ``size`` and (when absent) ``wheels`` are
    added here, and the result is checked field by field.
    """
    if not staged.is_dir():
        raise StoreError(f"staged build output is not a directory: {staged}")
    if not os.path.isfile(staged / layout.DERIVATION):
        raise StoreError(f"staged build output has no {layout.DERIVATION}: {staged}")
    derivation = read_derivation(staged)
    wheel_files = sorted(n for n in os.listdir(staged) if n.endswith(layout.WHEEL_SUFFIX))
    if not wheel_files:
        raise StoreError(f"staged build output has no wheel: {staged}")
    listed = listed_wheel_files(meta, what=f"meta for {hash}")
    records: list[WheelRecord] | None = None
    if listed is not None:
        missing = sorted(set(listed) ^ set(wheel_files))
        if missing:
            raise StoreError(
                f"meta for {hash}: 'wheels' does not match the wheels in {staged}: "
                + ", ".join(missing)
            )
    else:
        from rocmforge.util.hashing import file_digests

        records = []
        for w in wheel_files:
            b3, sha = file_digests(staged / w)
            size = os.stat(staged / w).st_size
            records.append(WheelRecord(file=w, sha256=sha, blake3=b3, size=size))
    size = 0
    for dirpath, _, filenames in os.walk(staged):
        for f in filenames:
            p = os.path.join(dirpath, f)
            if p != os.path.join(staged, layout.META):
                size += os.lstat(p).st_size
    full = complete_fields(
        meta,
        hash=hash,
        name=name,
        version=version,
        created=time.time() if created is None else created,
        size=size,
        wheels=records,
    )
    parsed = EntryMeta.from_json(full, file=staged / layout.META)
    stamped: list[WheelRecord] = []
    for record in parsed.wheels:
        st = os.stat(staged / record.file)
        stamped.append(replace(record, size=st.st_size, mtime_ns=st.st_mtime_ns))
    return derivation, replace(parsed, wheels=tuple(stamped)).sealed()


def seal(staged: Path) -> None:
    """Fsync every file and directory below ``staged`` and make them read-only.

    ``staged`` itself is fsynced but made read-only only after it has been renamed.
    """
    for dirpath, dirnames, filenames in os.walk(staged, topdown=False):
        for f in filenames:
            p = os.path.join(dirpath, f)
            if stat.S_ISLNK(os.lstat(p).st_mode):
                continue
            fsync_path(p)
            os.chmod(p, FILE_MODE)
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if stat.S_ISLNK(os.lstat(p).st_mode):
                continue
            fsync_path(p, directory=True)
            os.chmod(p, DIR_MODE)
    fsync_path(staged, directory=True)


def take_marker(path: Path) -> int:
    """Create and flock the publish marker ``path`` (``pending/<dirname>``) durably; return the
    held descriptor."""
    try:
        os.makedirs(path.parent, exist_ok=True)
        # a concurrent publisher or healer may remove it meanwhile: then again
        fd = hold_new(path, exclusive_create=False)
        fsync_path(path.parent, directory=True)
    except OSError as e:
        raise StoreError(f"cannot create publish marker {path}: {e}") from e
    return fd


def seal_published(final: Path, entries_dir: Path) -> None:
    """Make the entry renamed to ``final`` read-only and its rename durable."""
    try:
        # After the rename: moving a directory needs write access to it (its "..").
        os.chmod(final, DIR_MODE)
        fsync_path(final, directory=True)
        fsync_path(entries_dir, directory=True)
    except OSError as e:
        raise StoreError(f"cannot seal published entry {final}: {e}") from e


def swap_in(staged: Path, final: Path, entries_dir: Path) -> None:
    """Swap the sealed ``staged`` with the entry at ``final`` in one step and remove the old one.

    ``renameat2(RENAME_EXCHANGE)``: readers see the old entry or the new one, never neither.
    """
    from rocmforge.util.fsutil import exchange

    try:
        # Moving a directory needs write access to it (its ".."): both are swapped.
        os.chmod(final, 0o755)
        os.chmod(staged, 0o755)
        exchange(staged, final)
        os.chmod(final, DIR_MODE)
        fsync_path(final, directory=True)
        fsync_path(entries_dir, directory=True)
        remove_tree(staged)
    except OSError as e:
        raise StoreError(f"cannot replace {final} with the rebuilt {staged}: {e}") from e
