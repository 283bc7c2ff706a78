"""Published entries on disk: reading one, checking its wheels, and moving a damaged one aside.

What an entry and its ``meta.json`` are is :mod:`rocmforge.store.entry`'s; this module reads
them from ``entries/`` (:func:`load_entry`), checks that the wheels are the ones published
(:func:`wheel_problem`), and moves damage into ``quarantine/`` (:func:`move_to_quarantine`).
Forgetting a quarantined entry in the index and reporting it is the store's
(:meth:`rocmforge.store.store.Store.quarantine`).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.entry import Entry, EntryMeta
from rocmforge.util.fsutil import fsync_path


def wheel_problem(entry: Entry, *, rehash: bool = False) -> str | None:
    """Return what is wrong with the wheels of ``entry``, or None.

    Each wheel must be a regular file with the size and mtime recorded at publish; one whose
    mtime moved (a copy that did not keep times) is re-hashed and passes if its digest still
    matches. ``rehash`` re-hashes every wheel. Entries published before mtimes were recorded
    get the size check only.
    """
    for record, wheel in zip(entry.meta.wheels, entry.wheels, strict=True):
        try:
            st = os.lstat(wheel)
        except FileNotFoundError:
            return f"wheel missing: {wheel.name}"
        except OSError as e:
            return f"cannot stat wheel {wheel.name}: {e}"
        if not stat.S_ISREG(st.st_mode):
            return f"wheel is not a regular file: {wheel.name}"
        if record.size is not None and st.st_size != record.size:
            return f"wheel {wheel.name} has size {st.st_size}, not {record.size} as published"
        if rehash or (record.mtime_ns is not None and st.st_mtime_ns != record.mtime_ns):
            from rocmforge.util.hashing import file_blake3

            try:
                digest = file_blake3(wheel)
            except OSError as e:
                return f"cannot read wheel {wheel.name}: {e}"
            if digest != record.blake3:
                return f"wheel {wheel.name} was modified after publishing (blake3 differs)"
    return None


def entry_from_meta(path: Path, raw: bytes) -> Entry:
    """Parse ``meta.json`` bytes of the entry directory ``path``; its name must match."""
    meta = EntryMeta.from_bytes(raw, file=path / layout.META)
    if path.name != meta.dirname:
        raise StoreError(f"{path / layout.META}: records {meta.dirname}, not {path.name}")
    return Entry.from_meta(path, meta)


def load_entry(path: Path) -> Entry:
    """Load the entry in directory ``path``, checking its name against its ``meta.json``."""
    try:
        raw = (path / layout.META).read_bytes()
    except OSError as e:
        raise StoreError(f"damaged store entry (cannot read {layout.META}): {path}: {e}") from e
    return entry_from_meta(path, raw)


def move_to_quarantine(root: Path, entries_dir: Path, path: Path) -> Path:
    """Move ``path`` (an entry, a stray directory or file below ``entries_dir``) into the
    store's ``quarantine/`` under a fresh name; return where it went.

    Raises OSError when it cannot be moved (read-only store).
    """
    qdir = root / layout.QUARANTINE
    os.makedirs(qdir, exist_ok=True)
    dest = qdir / f"{path.name}.{int(time.time())}.{os.urandom(3).hex()}"
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        # Renaming a directory needs write access to it (its "..").
        os.chmod(path, stat.S_IMODE(st.st_mode) | 0o700)
    parent_mode = None
    if path.parent != entries_dir:  # a stray file inside a (read-only) entry
        parent_mode = stat.S_IMODE(os.stat(path.parent).st_mode)
        os.chmod(path.parent, parent_mode | 0o700)
    try:
        os.rename(path, dest)
    finally:
        if parent_mode is not None:
            os.chmod(path.parent, parent_mode)
    fsync_path(path.parent, directory=True)
    return dest
