"""The store's locks: the store-wide gc lock, the per-hash build locks and held-flock files.

``gc.lock`` is the store-wide read/write lock (flock SH for realize, EX for gc);
``locks/<hash>.lock`` are per-hash build locks (filelock, imported only when one is taken); a
build directory's ``tmp/<name>.lock`` and a publish's ``pending/<entry name>`` marker are files
whose held flock says their owner is alive (:func:`hold_new`, :func:`open_locked_nb`). Which
paths these are is :class:`rocmforge.store.store.Store`'s to say.
"""

from __future__ import annotations

import errno
import fcntl
import os
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
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
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
    """Hold the per-hash build lock file ``path`` (filelock); blocks until acquired.

    While another process holds it, ``on_busy`` (if given) is called at once and then every
    ``poll`` seconds.
    """
    import filelock

    lock = filelock.FileLock(str(path))
    try:
        if on_busy is None:
            lock.acquire()
        else:
            try:
                lock.acquire(timeout=0)
            except filelock.Timeout:
                while True:
                    on_busy()  # another process builds this hash: let the caller tell
                    try:
                        lock.acquire(timeout=poll)
                        break
                    except filelock.Timeout:
                        continue
    except OSError as e:
        raise StoreError(f"cannot take build lock {lock.lock_file}: {e}") from e
    try:
        yield
    finally:
        lock.release()
