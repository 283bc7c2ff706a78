"""Atomic file writes (a temp file in the same directory, fsync, rename — never a half file),
and opening a file only when it is a regular file itself (never through a link)."""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically; the parent directory is created if missing.

    Raises :class:`OSError`; callers convert it into their own error with context. On any
    failure the temp file is removed and ``path`` is untouched.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_bytes(value: Any) -> bytes:
    """Return ``value`` as readable, stable JSON: sorted keys, indented, trailing newline."""
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def file_kind(mode: int) -> str:
    """Return a word for the file type in ``mode`` (``symlink``, ``FIFO``, ``directory``...)."""
    for test, word in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISREG, "regular file"),
    ):
        if test(mode):
            return word
    return "special file"


def open_regular(path: Path) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file itself (never through a link).

    ``O_NOFOLLOW`` refuses a symlink as the last component and ``O_NONBLOCK`` keeps a FIFO from
    blocking the open; anything but a regular file raises :class:`OSError` naming its kind.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symlink, not a regular file", str(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"is a {file_kind(mode)}, not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> None:
    """Swap the names ``a`` and ``b`` (same filesystem) in one atomic step.

    Uses ``renameat2(RENAME_EXCHANGE)``; where the kernel, C library or filesystem lacks it,
    falls back to three renames (``b`` is briefly absent). Raises :class:`OSError`.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    func = getattr(libc, "renameat2", None)
    if func is not None:
        rc = func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), str(a), None, str(b))
    aside = b.with_name(f".{b.name}.{os.getpid()}.swap")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)
