"""File-system helpers: atomic writes and symlinks, fsync, safe tree removal, JSON objects, and
opening a file only when it is a regular file itself (never through a link).

Atomic means a temp file in the same directory, fsync, rename: never a half file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from rocmforge.errors import DiskFullError, StoreError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Threads :func:`remove_tree` uses for a directory with many children: unlinking is
#: syscall-bound, so threads overlap the file system's journal waits.
REMOVE_THREADS = 8

_FULL = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; the parent directory is created if missing.

    Raises :class:`OSError`; callers convert it into their own error with context. On any
    failure the temp file is removed and ``path`` is untouched. ``durable=False`` skips the
    fsync: for files in a scratch directory, or in a staged entry that is sealed (fsynced as a
    whole) before it is published.
    """
    import tempfile  # here, not at the top: the CLI imports this module on every run

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` atomically unless it already holds exactly that (its mtime
    then stays, as tools that read the file by its stat expect); True if it was written."""
    try:
        if path.read_text() == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    write_atomic(path, text.encode())
    return True


def json_bytes(value: Any) -> bytes:
    """Return ``value`` as readable, stable JSON: sorted keys, indented, trailing newline."""
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def read_json_object(path: Path, *, what: str = "JSON object") -> dict[str, Any] | None:
    """Return the JSON object stored at ``path``, or None if the file does not exist.

    A file that cannot be read, is not JSON or holds something other than an object raises
    :class:`StoreError` naming ``path`` and ``what`` it should have held.
    """
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: cannot read {what}: {exc}") from exc
    if not isinstance(value, dict):
        raise StoreError(f"{path}: {what} is not a JSON object")
    return value


def fsync_path(path: Path | str, *, directory: bool = False) -> None:
    """Open ``path`` read-only and fsync it (a file, or with ``directory`` a directory)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def symlink_atomic(target: str, path: Path, *, make_parents: bool = False) -> None:
    """Point the symlink ``path`` at ``target`` atomically, replacing whatever link was there.

    The link is made under a unique temp name beside ``path`` and renamed over it, so a reader
    sees the old link or the new one, never none. ``make_parents`` creates missing parent
    directories first. Raises :class:`OSError`.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    if make_parents:
        os.makedirs(path.parent, exist_ok=True)
    os.symlink(target, tmp)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def make_tree_once(
    final: Path, tmp_root: Path, prefix: str, fill: Callable[[Path], None], done: Callable[[], bool]
) -> bool:
    """Build the directory ``final`` once and atomically; return True if this call built it.

    ``fill(tree)`` makes it in a private staging directory under ``tmp_root`` and one rename puts
    it in place, so nobody sees half of it. Nothing is built when ``done()`` holds already; a
    concurrent maker whose rename won (``done()`` then holds) makes this call return False.
    Raises OSError (what ``fill`` raises passes through); the staging directory always goes.
    """
    if done():
        return False
    import tempfile

    tmp_root.mkdir(parents=True, exist_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_root))
    try:
        tree = staging / "t"
        tree.mkdir()
        fill(tree)
        try:
            os.rename(tree, final)
        except OSError:
            if not done():  # not a concurrent maker's identical tree: a real failure
                raise
            return False
        return True
    finally:
        with contextlib.suppress(OSError):
            remove_tree(staging)


def _purge_dir(name: str, parent_fd: int) -> None:
    """Remove directory ``name`` (relative to ``parent_fd``) and everything below it.

    Works on descriptors opened with ``O_NOFOLLOW``: a symlink anywhere below is unlinked, never
    followed, and a directory swapped for a symlink fails instead of leading outside. Only the
    directories are made writable, just before they are emptied.
    """
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        os.fchmod(fd, 0o700)
        with os.scandir(fd) as it:
            children = [(de.name, de.is_dir(follow_symlinks=False)) for de in it]
        for child, is_dir in children:
            if is_dir:
                _purge_dir(child, fd)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def remove_tree(path: Path | str) -> None:
    """Remove ``path`` recursively even if it was sealed read-only; a missing path is fine.

    A symlink or file is unlinked, never followed. Below a directory, symlinks are unlinked and
    never followed either (every directory is opened with ``O_NOFOLLOW``). Only directories are
    made writable (that is what unlinking needs); file modes are left alone, so a file
    hard-linked elsewhere (e.g. into a published entry) keeps its read-only mode. The children of
    a directory with many of them are removed by :data:`REMOVE_THREADS` threads. Raises
    :class:`OSError`.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fchmod(fd, 0o700)
        with os.scandir(fd) as it:
            names = [(de.name, de.is_dir(follow_symlinks=False)) for de in it]

        def one(item: tuple[str, bool]) -> None:
            if item[1]:
                _purge_dir(item[0], fd)
            else:
                os.unlink(item[0], dir_fd=fd)

        if len(names) > 16:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(REMOVE_THREADS) as pool:
                list(pool.map(one, names))
        else:
            for item in names:
                one(item)
    finally:
        os.close(fd)
    os.rmdir(path)


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


class UntrustedJSONError(ValueError):
    """A document from outside (a cache, a registry) that is not JSON, or nested too deep to
    parse (a :class:`ValueError`, so every ``except ValueError`` that handles bad JSON keeps
    handling it; never the parser's :class:`RecursionError`)."""


def loads_untrusted(raw: bytes | str) -> Any:
    """Parse ``raw`` as JSON; a document nested deeper than the parser's recursion limit (a
    manifest nested 100,000 levels) raises :class:`UntrustedJSONError` instead of
    :class:`RecursionError`, as does malformed JSON."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise UntrustedJSONError("nested too deep to be parsed") from None
    except ValueError as exc:
        raise UntrustedJSONError(str(exc)) from None
