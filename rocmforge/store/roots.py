"""GC roots: result links, named pins, running realizes and builds in progress.

Layout under the store root::

    roots/auto/<blake3(link)[:32]>   symlink -> the user's result link (absolute path), made by
                                     ``realize -o LINK``; the link roots whatever entry it points
                                     into *now*, so a deleted or re-pointed link stops rooting
    roots/pins/<name>                symlink -> ../../entries/<hash>-<name>-<version>
    roots/live/<pid>-<rand>          temp roots of a running realize: ``root <hash>`` lines and a
                                     ``busy`` line while it resolves or builds; flock held for the
                                     process's lifetime, so an unheld file is stale
    tmp/<hash>.<pid>.<rand>.lock     (builddir.py) a held lock is a build in progress

The names are owned by :mod:`rocmforge.store.layout`. Every write here happens under
:meth:`Store.shared_lock` and gc reads under :meth:`Store.exclusive_lock`, so gc never sees half
of a change.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from rocmforge.errors import StoreError, UsageError
from rocmforge.store import layout, scan
from rocmforge.store.entry import Entry
from rocmforge.store.store import Store
from rocmforge.util.fsutil import symlink_atomic
from rocmforge.util.hashing import blake3_hex

_PIN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def roots_dir(store: Store) -> Path:
    """Return ``roots/`` of ``store``."""
    return store.root / layout.ROOTS


def _auto_dir(store: Store) -> Path:
    return store.root / layout.ROOTS / layout.ROOTS_AUTO


def _pins_dir(store: Store) -> Path:
    return store.root / layout.ROOTS / layout.ROOTS_PINS


def _live_dir(store: Store) -> Path:
    return store.root / layout.ROOTS / layout.ROOTS_LIVE


def _absolute_link(link: Path) -> Path:
    """Return ``link`` made absolute with its parent's symlinks resolved (not the link's own)."""
    link = Path(os.path.abspath(link))
    return Path(os.path.realpath(link.parent)) / link.name


def register_link(store: Store, link: Path) -> Path:
    """Register the result link ``link`` as a root; return the ``roots/auto`` file.

    Call with :meth:`Store.shared_lock` held, right after making the link.
    """
    absolute = _absolute_link(link)
    name = blake3_hex(os.fsencode(absolute))[: layout.HASH_LEN]
    auto = _auto_dir(store) / name
    try:
        symlink_atomic(os.fspath(absolute), auto, make_parents=True)
    except OSError as e:
        raise StoreError(f"cannot register result link {absolute} as a gc root: {e}") from e
    return auto


def entry_of_path(store: Store, path: Path | str) -> str | None:
    """Return the entry directory name that ``path`` (followed) lies in, or None."""
    return scan.entry_of_path(os.fspath(store.root), os.fspath(path))


# -- pins ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RootPin:
    """A named root: ``roots/pins/<name>`` pointing at one entry directory."""

    name: str
    entry: str | None  # the entry directory name; None if the pin no longer points at one
    path: Path


def check_pin_name(name: str) -> None:
    """Raise :class:`UsageError` unless ``name`` is a valid pin name."""
    if not _PIN_RE.fullmatch(name):
        raise UsageError(
            f"invalid pin name {name!r}: use letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, at most 100 characters)"
        )


def pin(store: Store, name: str, entry: Entry) -> RootPin:
    """Create or replace the pin ``name`` pointing at ``entry``; call under the shared lock."""
    check_pin_name(name)
    path = _pins_dir(store) / name
    target = os.path.join("..", "..", layout.ENTRIES, entry.path.name)
    try:
        symlink_atomic(target, path, make_parents=True)
    except OSError as e:
        raise StoreError(f"cannot write pin {path}: {e}") from e
    return RootPin(name=name, entry=entry.path.name, path=path)


def unpin(store: Store, name: str) -> RootPin:
    """Remove the pin ``name``; an unknown name raises :class:`UsageError`."""
    check_pin_name(name)
    for p in pins(store):
        if p.name == name:
            try:
                os.unlink(p.path)
            except OSError as e:
                raise StoreError(f"cannot remove pin {p.path}: {e}") from e
            return p
    known = ", ".join(p.name for p in pins(store)) or "none"
    raise UsageError(f"no pin named {name!r} in {store.root} (pins: {known})")


def pins(store: Store) -> list[RootPin]:
    """Return every pin, sorted by name."""
    try:
        found = scan.pin_entries(os.fspath(store.root))
    except OSError as e:
        raise StoreError(f"cannot list the pins of {store.root}: {e}") from e
    return [RootPin(name=n, entry=entry, path=Path(p)) for n, entry, p in found]


# -- temp roots of a running realize -------------------------------------------------------------


class TempRoots:
    """The temp roots of this process: entries it returned or is building, and a busy flag.

    The file is created on first use (under the shared lock) and flock-held until :meth:`close`
    (or process exit), so gc honours it exactly while its owner runs. While ``busy`` is set
    (resolving or building) gc leaves every source cache alone: the owner may be using any of
    them. Not thread-safe; one per process is enough.
    """

    __slots__ = ("_busy", "_fd", "_hashes", "path", "read_only", "store")

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = _live_dir(store) / f"{os.getpid()}-{os.urandom(6).hex()}"
        self._fd: int | None = None
        self._hashes: dict[str, None] = {}
        self._busy = False
        #: Set when the store is read-only: nothing can be recorded (nor collected by us).
        self.read_only = False

    def __enter__(self) -> TempRoots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self) -> None:
        if self.read_only:
            return
        try:
            if self._fd is None:
                os.makedirs(self.path.parent, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self._fd = fd
            lines = [f"root {h}\n" for h in self._hashes]
            if self._busy:
                lines.append("busy\n")
            data = "".join(lines).encode()
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        except OSError as e:
            if self._fd is None and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                # A read-only store: no gc can run through this mount or user; its owner's gc
                # cannot see this reader (docs/store.md, "Read-only stores").
                self.read_only = True
                return
            raise StoreError(f"cannot write temp gc roots {self.path}: {e}") from e

    def add(self, hash: str) -> None:
        """Protect entry ``hash`` until this object is closed; call under the shared lock."""
        if hash not in self._hashes:
            self._hashes[hash] = None
            self._write()

    def set_busy(self, busy: bool) -> None:
        """Mark that source caches are in use (resolve, build); call under the shared lock."""
        if busy != self._busy:
            self._busy = busy
            self._write()

    def close(self) -> None:
        """Drop every temp root (idempotent)."""
        if self._fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            os.close(self._fd)
            self._fd = None


# -- reading the roots (gc) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RootSet:
    """Everything that roots entries right now, as gc sees it under the exclusive lock.

    ``by_hash`` maps an input hash to why it is rooted (``pin NAME``, ``link PATH``, ``realize
    pid N``, ``build in progress``); ``busy`` says why source caches are in use (empty when
    none); ``stale`` lists root files that root nothing any more (removed by a real gc).
    """

    by_hash: dict[str, tuple[str, ...]] = field(default_factory=dict)
    busy: tuple[str, ...] = ()
    stale: tuple[Path, ...] = ()


def collect_roots(store: Store) -> RootSet:
    """Read every root of ``store``; call under :meth:`Store.exclusive_lock`."""
    try:
        by_hash, busy, stale = scan.scan_roots(os.fspath(store.root))
    except OSError as e:
        raise StoreError(f"cannot read the roots of {store.root}: {e}") from e
    return RootSet(
        by_hash={h: tuple(w) for h, w in by_hash.items()},
        busy=tuple(busy),
        stale=tuple(map(Path, stale)),
    )
