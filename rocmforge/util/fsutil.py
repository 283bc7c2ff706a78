"""Atomic file writes: a temp file in the same directory, fsync, rename — never a half file."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from rocmforge.errors import DiskFullError

_FULL = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically; the parent directory is created if missing.

    Raises :class:`OSError`; callers convert it into their own error with context. On any
    failure the temp file is removed and ``path`` is untouched.
    """
    import tempfile  # here, not at the top: the CLI imports this module on every run

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


def is_disk_full(exc: BaseException) -> bool:
    """Return True if ``exc`` (or the error it was raised from) is a full disk or quota."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in _FULL:
            return True
        if getattr(seen, "sqlite_errorcode", None) == _SQLITE_FULL:  # no sqlite3 import here
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _free_bytes(path: Path) -> int | None:
    """Free bytes (for an unprivileged user) on the filesystem holding ``path`` or a parent."""
    here = Path(os.path.abspath(path))
    for candidate in (here, *here.parents):
        try:
            st = os.statvfs(candidate)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def disk_full_error(
    exc: BaseException, *, store: Path | None, what: str = "", path: Path | None = None
) -> DiskFullError:
    """Return the :class:`DiskFullError` for ``exc``: the path, the free space, what to free.

    ``store`` is the store the command used (named when the failed write had no file name);
    ``what`` is the error the full disk interrupted, if any, so it is not lost; ``path`` is the
    file being written when the error itself does not say. Never writes.
    """
    name: str | None = os.fspath(path) if path is not None else None
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno in _FULL and seen.filename is not None:
            name = os.fsdecode(seen.filename)
            break
        seen = seen.__cause__ or seen.__context__
    where = Path(name) if name else store
    free = _free_bytes(where) if where is not None else None
    shown = f" {free / 2**20:.1f} MiB free there" if free is not None else ""
    about = f"writing {name}" if name else f"writing under the store {store}" if store else ""
    head = f"no space left on device{': ' + about if about else ''}"
    lines = [f"{head};{shown}" if shown else head]
    if what:
        lines.append(f"(this interrupted: {what})")
    hint = f" in {store}" if store else ""
    lines.append(
        f"free space on that filesystem: `rocmforge gc --dry-run` then `rocmforge gc` removes "
        f"unrooted entries{hint}; failed logs (failed/) and kept build dirs (tmp/) can go too"
    )
    return DiskFullError("\n".join(lines))


def read_bounded(path: Path, limit: int, *, what: str) -> bytes:
    """Return the bytes of the regular file ``path`` if it has at most ``limit`` of them.

    Opens without blocking (a FIFO never waits for a writer) and refuses anything but a regular
    file. Raises :class:`OSError` if it cannot be opened, :class:`ValueError` (with a short
    message naming ``what``) if it is not a regular file or is too large.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"not a regular file (only a regular file can be {what})")
        if st.st_size > limit:
            raise ValueError(f"too large: {st.st_size} bytes, {what} is at most {limit}")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ValueError(f"too large: over {limit} bytes, {what} is at most {limit}")
        return b"".join(chunks)
    finally:
        os.close(fd)
