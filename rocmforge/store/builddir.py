"""Builds in progress: ``tmp/<hash>.<pid>.<rand>/``, each guarded by a held flock on its lock file.

A build directory lives while its ``tmp/<same>.lock`` is flocked by its owner; a lock file that
nobody holds marks a crashed build, which :func:`clean_leftovers` removes. A directory without any
lock file was kept on purpose (``--keep-failed``).
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path
from types import TracebackType

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.locks import hold_new, open_locked_nb
from rocmforge.util.fsutil import remove_tree


class BuildDir:
    """A private directory under ``tmp/`` for one build, guarded by a held flock.

    ``with store.new_build_dir(h) as bd:`` creates and locks ``tmp/<hash>.<pid>.<rand>.lock``,
    then creates ``bd.path`` (empty). On exit the directory is removed (unless ``bd.keep`` was
    set, e.g. for ``--keep-failed``) and the lock file is removed, releasing the lock. A process
    that dies leaves the lock file unheld, which is how :func:`clean_leftovers` tells a
    crashed build from a running one. Not re-entrant.
    """

    __slots__ = ("_fd", "keep", "lock_path", "path")

    def __init__(self, path: Path, lock_path: Path) -> None:
        self.path = path
        self.lock_path = lock_path
        self.keep = False
        self._fd: int | None = None

    def __enter__(self) -> BuildDir:
        if self._fd is not None:
            raise StoreError(f"build directory already in use: {self.path}")
        try:
            # A concurrent clean_leftovers may take it for an orphan and unlink it: then again.
            fd = hold_new(self.lock_path, exclusive_create=True)
            self._fd = fd
            os.write(fd, f"{os.getpid()}\n".encode())
            os.mkdir(self.path, 0o755)
        except OSError as e:
            self._release(unlink=True)
            raise StoreError(f"cannot create build directory {self.path}: {e}") from e
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.keep:
            self._release(unlink=True)
            return
        try:
            remove_tree(self.path)
        except OSError as e:
            # Keep the lock file: once released it marks the directory as a leftover to clean.
            self._release(unlink=False)
            if exc_type is None:
                raise StoreError(f"cannot remove build directory {self.path}: {e}") from e
            return
        self._release(unlink=True)

    def _release(self, *, unlink: bool) -> None:
        if unlink:
            with suppress(FileNotFoundError):
                os.unlink(self.lock_path)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def new_build_dir(tmp_dir: Path, hash: str) -> BuildDir:
    """Return a :class:`BuildDir` for ``<tmp_dir>/<hash>.<pid>.<rand>/`` (``hash`` checked by
    the caller); use it with ``with``."""
    base = layout.build_dir_name(hash, os.getpid(), os.urandom(6).hex())
    return BuildDir(tmp_dir / base, tmp_dir / f"{base}{layout.LOCK_SUFFIX}")


def clean_leftovers(tmp_dir: Path, *, include_kept: bool = False) -> list[Path]:
    """Remove build dirs of dead processes from ``tmp_dir``; return what was removed.

    A build dir whose ``.lock`` is not held (its owner died) is removed with its lock file;
    an unheld lock file without a dir is removed too. A dir without any lock file was kept
    on purpose (``BuildDir.keep``) and is removed only with ``include_kept``.
    """
    try:
        names = os.listdir(tmp_dir)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise StoreError(f"cannot list {tmp_dir}: {e}") from e
    removed: list[Path] = []
    present = set(names)
    lock = layout.LOCK_SUFFIX
    try:
        for n in sorted(names):
            if n.endswith(lock) and layout.parse_build_dir_name(n.removesuffix(lock)):
                lock_path = tmp_dir / n
                fd = open_locked_nb(lock_path)
                if fd is None:
                    continue
                try:
                    d = tmp_dir / n.removesuffix(lock)
                    if os.path.lexists(d):
                        remove_tree(d)
                        removed.append(d)
                    os.unlink(lock_path)
                finally:
                    os.close(fd)
            elif include_kept and layout.parse_build_dir_name(n) and f"{n}{lock}" not in present:
                d = tmp_dir / n
                if not os.path.lexists(f"{d}{lock}"):
                    remove_tree(d)
                    removed.append(d)
    except OSError as e:
        raise StoreError(f"cannot clean leftovers in {tmp_dir}: {e}") from e
    return removed
