"""The store's locks: the store-wide gc lock, the per-hash build locks and held-flock files.

``gc.lock`` is the store-wide read/write lock (flock SH for realize, EX for gc);
``locks/<hash>.lock`` are per-hash build locks (flock; gc removes the ones nobody holds); a
build directory's ``tmp/<name>.lock`` and a publish's ``pending/<entry name>`` marker are files
whose held flock says their owner is alive (:func:`hold_new`, :func:`open_locked_nb`). Which
paths these are is :class:`rocmforge.store.store.Store`'s to say.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rocmforge.errors import StoreError


def open_locked_nb(lock_path: Path) -> int | None:
    """Return an fd holding LOCK_EX on ``lock_path``, or None if it is held or gone.

    Verifies the locked inode is still the one at ``lock_path`` (it may have been unlinked and
    replaced between open and flock).
    """
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    try:
        same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        same = False
    if not same:
        os.close(fd)
        return None
    return fd


def hold_new(path: Path, *, exclusive_create: bool) -> int:
    """Create (or, unless ``exclusive_create``, open) ``path`` and flock it; return the held fd.

    Blocks until the lock is had. When the locked inode is no longer the one at ``path`` (a
    concurrent cleaner or healer removed it meanwhile), it tries again. Raises OSError.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive_create else 0)
    while True:
        fd = os.open(path, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            same = _still_linked(path, fd)
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd
        os.close(fd)


@contextmanager
def store_flock(path: Path, op: int) -> Iterator[None]:
    """Hold the store-wide lock file ``path`` with flock ``op`` (``LOCK_SH`` or ``LOCK_EX``);
    a shared hold works in a read-only store too."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if op != fcntl.LOCK_SH or e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise StoreError(f"cannot open {path}: {e}") from e
        # A read-only store: a shared flock works on a read-only descriptor; without the
        # file nobody can gc this store through us either, so reading goes on unlocked.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            yield
            return
    try:
        try:
            fcntl.flock(fd, op)
        except OSError as e:
            raise StoreError(f"cannot lock {path}: {e}") from e
        yield
    finally:
        os.close(fd)


@contextmanager
def build_flock(path: Path, on_busy: Callable[[], None] | None, poll: float) -> Iterator[None]:
    """Hold the per-hash build lock file ``path`` (flock); blocks until acquired.

    While another process holds it, ``on_busy`` (if given) is called at once and then every
    ``poll`` seconds. The locked inode must still be the one at ``path``: ``gc`` removes lock
    files nobody holds (:func:`remove_unheld`), so one opened just before is tried again.
    """
    try:
        fd = _take(path, on_busy, poll)
    except OSError as e:
        raise StoreError(f"cannot take build lock {path}: {e}") from e
    try:
        yield
    finally:
        os.close(fd)


def _take(path: Path, on_busy: Callable[[], None] | None, poll: float) -> int:
    """Return an fd holding LOCK_EX on the file at ``path`` (created if need be)."""
    told: float | None = None
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if on_busy else 0))
                    break
                except BlockingIOError:
                    assert on_busy is not None
                    now = time.monotonic()
                    if told is None or now - told >= poll:
                        on_busy()  # another process builds this hash: let the caller tell
                        told = now
                    time.sleep(min(_POLL, poll))
            same = _still_linked(path, fd)
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd
        os.close(fd)


def _still_linked(path: Path | str, fd: int) -> bool:
    """Whether the locked ``fd`` is still the file at ``path`` (not removed or replaced since
    it was opened: a lock on an unlinked file is nobody's)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


#: How often a busy build lock is tried again (seconds).
_POLL = 0.05


def remove_unheld(directory: Path, suffix: str) -> int:
    """Remove the lock files ``*<suffix>`` in ``directory`` that nobody holds; return how many.

    Each is flocked first (never one in use); a process that opened it meanwhile finds its
    inode gone and takes a new file (:func:`build_flock`). Call under the store's exclusive
    lock (gc), so no realize is between looking an entry up and taking its lock.
    """
    try:
        names = [n for n in os.listdir(directory) if n.endswith(suffix)]
    except FileNotFoundError:
        return 0
    except OSError as e:
        raise StoreError(f"cannot list {directory}: {e}") from e
    removed = 0
    for n in names:
        fd = open_locked_nb(directory / n)
        if fd is None:
            continue
        try:
            os.unlink(directory / n)
            removed += 1
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StoreError(f"cannot remove {directory / n}: {e}") from e
        finally:
            os.close(fd)
    return removed
