"""The content-addressed store: published entries, in-progress builds, locks and the index.

The layout under the store root is described (and every name in it owned) by
:mod:`rocmforge.store.layout`; an entry and its ``meta.json`` by :mod:`rocmforge.store.entry`.
``tmp/<hash>.<pid>.<rand>/`` are builds in progress, each guarded by a held flock on
``tmp/<same>.lock``; ``locks/<hash>.lock`` are per-hash build locks (filelock); ``gc.lock`` is
the store-wide read/write lock (flock SH for realize, EX for gc).

``entries/`` is the source of truth; the index may lag behind it. :meth:`Store.lookup` is the
cache-hit hot path: it only stats and reads ``meta.json`` and never imports ``sqlite3`` or
``filelock`` (both are imported lazily, where they are needed).

Self-healing (docs/store.md, "Integrity"): a publish holds a flocked marker
``pending/<entry name>`` from before the rename into ``entries/`` until the index has the entry,
so an entry whose publisher died before indexing it is found and indexed by the next
:meth:`Store.lookup` of it or :meth:`Store.heal_pending`. A damaged entry (no or broken
``meta.json``, a wheel whose size, mtime or digest moved) is moved to ``quarantine/`` and treated
as a miss. A corrupt ``index.sqlite`` is set aside and rebuilt from ``entries/``. Each such repair
is reported through ``on_warning`` and kept in :attr:`Store.healed`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rocmforge.errors import RocmforgeError, StoreError, UsageError
from rocmforge.store import layout
from rocmforge.store.entry import (
    Entry,
    EntryMeta,
    WheelRecord,
    complete_fields,
    listed_wheel_files,
    read_derivation,
)
from rocmforge.util.fsutil import fsync_path, json_bytes, remove_tree, write_atomic

if TYPE_CHECKING:
    from rocmforge.store.index import Index

FILE_MODE = 0o444
DIR_MODE = 0o555


def _check_hash(hash: str) -> None:
    if not layout.is_hash(hash):
        raise StoreError(
            f"not an input hash ({layout.HASH_LEN} lowercase hex characters): {hash!r}"
        )


def _check_entry(hash: str, name: str, version: str) -> None:
    problem = layout.entry_problem(hash, name, version)
    if problem is not None:
        raise StoreError(problem)


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


def _open_locked_nb(lock_path: Path) -> int | None:
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


class BuildDir:
    """A private directory under ``tmp/`` for one build, guarded by a held flock.

    ``with store.new_build_dir(h) as bd:`` creates and locks ``tmp/<hash>.<pid>.<rand>.lock``,
    then creates ``bd.path`` (empty). On exit the directory is removed (unless ``bd.keep`` was
    set, e.g. for ``--keep-failed``) and the lock file is removed, releasing the lock. A process
    that dies leaves the lock file unheld, which is how :meth:`Store.clean_leftovers` tells a
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
            while True:
                fd = os.open(
                    self.lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644
                )
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    try:
                        same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
                    except FileNotFoundError:
                        same = False
                except BaseException:
                    os.close(fd)
                    raise
                if same:
                    break
                # A concurrent clean_leftovers took it for an orphan and unlinked it; retry.
                os.close(fd)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Healed:
    """One repair the store made on its own: what was wrong (a verify problem kind), where,
    and what was done."""

    kind: str
    path: Path
    detail: str


class Store:
    """A store rooted at ``root``; create one with :func:`open_store`.

    ``on_warning`` (settable) receives a sentence for every repair the store makes on its own;
    :attr:`healed` keeps them.
    """

    __slots__ = (
        "_index",
        "cache_dir",
        "entries_dir",
        "failed_dir",
        "gc_lock_path",
        "healed",
        "index_path",
        "locks_dir",
        "on_warning",
        "root",
        "sources_dir",
        "tmp_dir",
    )

    def __init__(self, root: Path) -> None:
        self.root = root
        self.entries_dir = root / layout.ENTRIES
        self.tmp_dir = root / layout.TMP
        self.locks_dir = root / layout.LOCKS
        self.failed_dir = root / layout.FAILED
        self.sources_dir = root / layout.SOURCES
        self.cache_dir = root / layout.CACHE
        self.index_path = root / layout.INDEX
        self.gc_lock_path = root / layout.GC_LOCK
        self._index: Index | None = None
        self.on_warning: Callable[[str], None] | None = None
        self.healed: list[Healed] = []

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # -- naming ---------------------------------------------------------------------------------

    def entry_dir(self, hash: str, name: str, version: str) -> Path:
        """Return ``entries/<hash>-<name>-<version>`` (validating all three parts)."""
        _check_entry(hash, name, version)
        return self.entries_dir / layout.entry_name(hash, name, version)

    def failed_log_path(self, hash: str, name: str, version: str) -> Path:
        """Return where the log of a failed build of ``hash`` is kept."""
        _check_entry(hash, name, version)
        return self.failed_dir / layout.failed_log_name(hash, name, version)

    # -- reading ----------------------------------------------------------------------------------

    def lookup(
        self, hash: str, name: str, version: str, *, verify: bool = False
    ) -> Entry | None:
        """Return the published entry for ``hash`` or None; reads only the filesystem.

        The guarantee of a hit: ``meta.json`` parses, matches the directory and its seal, and
        every wheel is a regular file with the size and mtime recorded at publish (a wheel whose
        mtime moved is re-hashed; ``verify`` re-hashes every wheel). Publishing never leaves an
        entry that fails this, so one that does is damage: it is quarantined
        (:meth:`quarantine`) and the lookup is a miss; :class:`StoreError` only when it cannot
        be moved aside (a read-only store). An entry whose publish died before indexing it is
        indexed here.
        """
        path = self.entry_dir(hash, name, version)
        meta_path = path / layout.META
        try:
            with open(meta_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            if not os.path.lexists(path):
                return None
            return self._damaged(path, f"no {layout.META}")
        except OSError as e:
            if e.errno in (errno.EISDIR, errno.ENOTDIR, errno.ELOOP):
                return self._damaged(path, f"{layout.META} is not a file")
            raise StoreError(f"cannot read {meta_path}: {e}") from e
        try:
            entry = self._entry_from_meta(path, raw)
        except StoreError as e:
            return self._damaged(path, str(e))
        if entry.meta.seal_broken:
            return self._damaged(path, f"{layout.META} does not match its seal")
        problem = wheel_problem(entry, rehash=verify)
        if problem is not None:
            return self._damaged(path, problem)
        if os.path.lexists(self.root / layout.PENDING / path.name):
            self._heal_one(path.name)
        return entry

    # -- self-healing ---------------------------------------------------------------------------

    def _notice(self, kind: str, path: Path, detail: str) -> None:
        self.healed.append(Healed(kind=kind, path=path, detail=detail))
        if self.on_warning is not None:
            self.on_warning(f"{path}: {detail}")

    def _damaged(self, path: Path, why: str) -> Entry | None:
        """Quarantine the damaged entry at ``path`` and return None (a miss), or raise."""
        try:
            self.quarantine(path, why)
        except FileNotFoundError:
            return None  # another process moved it aside first
        except OSError as e:
            raise StoreError(
                f"damaged store entry {path}: {why}; cannot move it aside ({e}): run "
                "`rocmforge verify --repair` with write access to the store"
            ) from e
        return None

    def quarantine(self, path: Path, why: str) -> Path:
        """Move ``path`` (an entry, a stray directory or file below ``entries/``) into
        ``quarantine/``, forget it in the index, report it, and return where it went.

        gc removes the quarantine. Raises OSError when it cannot be moved (read-only store).
        """
        qdir = self.root / layout.QUARANTINE
        os.makedirs(qdir, exist_ok=True)
        dest = qdir / f"{path.name}.{int(time.time())}.{os.urandom(3).hex()}"
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            # Renaming a directory needs write access to it (its "..").
            os.chmod(path, stat.S_IMODE(st.st_mode) | 0o700)
        parent_mode = None
        if path.parent != self.entries_dir:  # a stray file inside a (read-only) entry
            parent_mode = stat.S_IMODE(os.stat(path.parent).st_mode)
            os.chmod(path.parent, parent_mode | 0o700)
        try:
            os.rename(path, dest)
        finally:
            if parent_mode is not None:
                os.chmod(path.parent, parent_mode)
        fsync_path(path.parent, directory=True)
        if path.parent == self.entries_dir and layout.is_entry_name(path.name):
            with suppress(StoreError):
                row = self.index.get(path.name[: layout.HASH_LEN])
                if row is not None and row.path.name == path.name:  # not a namesake's row
                    self.index.remove(row.hash)
            with suppress(OSError):
                os.unlink(self.root / layout.PENDING / path.name)
        self._notice("quarantined", path, f"{why}; moved to {dest}")
        return dest

    def _heal_one(self, dirname: str) -> bool:
        """Index the entry of the unheld marker ``pending/<dirname>`` and drop the marker.

        Returns False when the marker is held (its publish is running) or cannot be taken (a
        read-only store: the index then lacks the entry until a writer comes by).
        """
        marker = self.root / layout.PENDING / dirname
        try:
            fd = _open_locked_nb(marker)
        except OSError:
            return False
        if fd is None:
            return False
        try:
            final = self.entries_dir / dirname
            known = self.index.get(dirname[: layout.HASH_LEN]) is not None
            if not known and os.path.isdir(final) and not os.path.islink(final):
                try:
                    entry = self.load(final)
                    if entry.meta.seal_broken:
                        raise StoreError(f"{layout.META} does not match its seal")
                    self.index.add(entry, read_derivation(final))
                except StoreError as e:
                    self._damaged(final, str(e))
                else:
                    self._notice(
                        "unindexed", final, "published but never indexed (interrupted); indexed"
                    )
            with suppress(FileNotFoundError):
                os.unlink(marker)
        finally:
            os.close(fd)
        return True

    def heal_pending(self) -> int:
        """Index every entry whose publish died before indexing it; return how many markers
        were settled. Cheap when nothing is pending (one ``listdir``)."""
        try:
            found = os.listdir(self.root / layout.PENDING)
        except OSError:
            return 0
        names = sorted(n for n in found if layout.is_entry_name(n))
        if not names:
            return 0
        with self.shared_lock():  # gc must not remove an entry while we index it
            return sum(1 for n in names if self._heal_one(n))

    def reset_index(self, why: str) -> int:
        """Set the index file aside (it is damaged: ``why``) and rebuild it from ``entries/``;
        return the entry count."""
        self.close()
        aside = self._set_index_aside()
        self._notice("corrupt-index", self.index_path, f"{why}; set aside as {aside.name}")
        return self.rebuild_index()

    @staticmethod
    def _entry_from_meta(path: Path, raw: bytes) -> Entry:
        """Parse ``meta.json`` bytes of the entry directory ``path``; its name must match."""
        meta = EntryMeta.from_bytes(raw, file=path / layout.META)
        if path.name != meta.dirname:
            raise StoreError(f"{path / layout.META}: records {meta.dirname}, not {path.name}")
        return Entry.from_meta(path, meta)

    def load(self, path: Path) -> Entry:
        """Load the entry in directory ``path``, checking its name against its ``meta.json``."""
        try:
            raw = (path / layout.META).read_bytes()
        except OSError as e:
            raise StoreError(
                f"damaged store entry (cannot read {layout.META}): {path}: {e}"
            ) from e
        return self._entry_from_meta(path, raw)

    def entry_names(self) -> list[str]:
        """Return the directory names of the entries in ``entries/``, sorted (no parsing)."""
        return self._entry_names()

    def _entry_names(self) -> list[str]:
        from rocmforge.store.scan import entry_names

        try:
            return entry_names(os.fspath(self.root))
        except OSError as e:
            raise StoreError(f"cannot list {self.entries_dir}: {e}") from e

    def entries(self) -> Iterator[Entry]:
        """Yield every published entry, sorted by directory name (``entries/`` is the truth)."""
        for n in self._entry_names():
            yield self.load(self.entries_dir / n)

    def sound_entries(self) -> Iterator[Entry]:
        """Yield every published entry like :meth:`entries`, quarantining the damaged ones
        (unreadable or broken ``meta.json``) instead of failing on them."""
        for n in self._entry_names():
            path = self.entries_dir / n
            try:
                entry = self.load(path)
                if entry.meta.seal_broken:
                    raise StoreError(f"{layout.META} does not match its seal")
            except StoreError as e:
                self._damaged(path, str(e))
                continue
            yield entry

    def resolve(self, target: str) -> Entry:
        """Find one entry from a hash or unique hash prefix (>= 4 chars), a dir name, or a path.

        A path may name the entry directory or any file inside it (symlinks such as result
        links are followed). Unknown or ambiguous targets raise :class:`UsageError`.
        """
        from rocmforge.store import scan

        try:
            how, found = scan.resolve_target(os.fspath(self.root), target)
        except OSError as e:
            raise StoreError(f"cannot list {self.entries_dir}: {e}") from e
        if how == scan.FOUND:
            return self.load(self.entries_dir / found[0])
        if how == scan.TOO_SHORT:
            raise UsageError(
                f"hash prefix {target!r} is too short (at least {layout.MIN_PREFIX} characters)"
            )
        if how == scan.AMBIGUOUS:
            raise UsageError(
                f"hash prefix {target!r} is ambiguous; candidates:\n"
                + "\n".join(f"  {n}" for n in found)
            )
        if how == scan.OUTSIDE:
            raise UsageError(f"{target} is not inside a store entry of {self.entries_dir}")
        names = found
        by_name = self._by_package_name(target, names)
        if len(by_name) == 1:
            return by_name[0]
        if by_name:
            raise UsageError(
                f"package name {target!r} matches {len(by_name)} entries; name one by hash:\n"
                + "\n".join(f"  {e.path.name}" for e in by_name)
            )
        hint = ""
        if names:
            shown = names[:10]
            more = f"\n  ... and {len(names) - 10} more" if len(names) > 10 else ""
            hint = "; entries:\n" + "\n".join(f"  {n}" for n in shown) + more
        else:
            hint = f"; the store at {self.root} is empty"
        raise UsageError(f"no store entry matches {target!r}{hint}")

    def _by_package_name(self, target: str, names: Sequence[str]) -> list[Entry]:
        """Return the entries of package ``target``, compared as pip does (PEP 503)."""
        if not layout.is_name(target):
            return []
        want = layout.normal_name(target)
        found = []
        for n in names:
            rest = n[layout.HASH_LEN + 1 :].split("-")
            # Names and versions may both hold "-": any split may be the name; meta decides.
            if any(layout.normal_name("-".join(rest[:i])) == want for i in range(1, len(rest))):
                with suppress(RocmforgeError, OSError):
                    entry = self.load(self.entries_dir / n)
                    if layout.normal_name(entry.name) == want:
                        found.append(entry)
        return found

    # -- locks ------------------------------------------------------------------------------------

    @contextmanager
    def _gc_flock(self, op: int) -> Iterator[None]:
        try:
            fd = os.open(self.gc_lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if op != fcntl.LOCK_SH or e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise StoreError(f"cannot open {self.gc_lock_path}: {e}") from e
            # A read-only store: a shared flock works on a read-only descriptor; without the
            # file nobody can gc this store through us either, so reading goes on unlocked.
            try:
                fd = os.open(self.gc_lock_path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                yield
                return
        try:
            try:
                fcntl.flock(fd, op)
            except OSError as e:
                raise StoreError(f"cannot lock {self.gc_lock_path}: {e}") from e
            yield
        finally:
            os.close(fd)

    def shared_lock(self) -> AbstractContextManager[None]:
        """Hold the store-wide lock shared (realize): gc cannot run meanwhile. Blocks.

        Each call opens its own descriptor, so do not nest it with :meth:`exclusive_lock`
        in one process (that would deadlock).
        """
        return self._gc_flock(fcntl.LOCK_SH)

    def exclusive_lock(self) -> AbstractContextManager[None]:
        """Hold the store-wide lock exclusively (gc): waits for every realize. Blocks."""
        return self._gc_flock(fcntl.LOCK_EX)

    @contextmanager
    def _build_lock(
        self, hash: str, on_busy: Callable[[], None] | None, poll: float
    ) -> Iterator[None]:
        import filelock

        lock = filelock.FileLock(str(self.locks_dir / f"{hash}{layout.LOCK_SUFFIX}"))
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

    def build_lock(
        self, hash: str, *, on_busy: Callable[[], None] | None = None, poll: float = 1.0
    ) -> AbstractContextManager[None]:
        """Hold the per-hash build lock (``locks/<hash>.lock``); blocks until acquired.

        While another process holds it, ``on_busy`` (if given) is called at once and then every
        ``poll`` seconds, so the caller can say what it waits for.
        """
        _check_hash(hash)
        return self._build_lock(hash, on_busy, poll)

    # -- building and publishing ------------------------------------------------------------------

    def new_build_dir(self, hash: str) -> BuildDir:
        """Return a :class:`BuildDir` for ``tmp/<hash>.<pid>.<rand>/``; use it with ``with``."""
        _check_hash(hash)
        base = layout.build_dir_name(hash, os.getpid(), os.urandom(6).hex())
        return BuildDir(self.tmp_dir / base, self.tmp_dir / f"{base}{layout.LOCK_SUFFIX}")

    def clean_leftovers(self, *, include_kept: bool = False) -> list[Path]:
        """Remove build dirs of dead processes from ``tmp/``; return what was removed.

        A build dir whose ``.lock`` is not held (its owner died) is removed with its lock file;
        an unheld lock file without a dir is removed too. A dir without any lock file was kept
        on purpose (``BuildDir.keep``) and is removed only with ``include_kept``.
        """
        try:
            names = os.listdir(self.tmp_dir)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StoreError(f"cannot list {self.tmp_dir}: {e}") from e
        removed: list[Path] = []
        present = set(names)
        lock = layout.LOCK_SUFFIX
        try:
            for n in sorted(names):
                if n.endswith(lock) and layout.parse_build_dir_name(n.removesuffix(lock)):
                    lock_path = self.tmp_dir / n
                    fd = _open_locked_nb(lock_path)
                    if fd is None:
                        continue
                    try:
                        d = self.tmp_dir / n.removesuffix(lock)
                        if os.path.lexists(d):
                            remove_tree(d)
                            removed.append(d)
                        os.unlink(lock_path)
                    finally:
                        os.close(fd)
                elif (
                    include_kept
                    and layout.parse_build_dir_name(n)
                    and f"{n}{lock}" not in present
                ):
                    d = self.tmp_dir / n
                    if not os.path.lexists(f"{d}{lock}"):
                        remove_tree(d)
                        removed.append(d)
        except OSError as e:
            raise StoreError(f"cannot clean leftovers in {self.tmp_dir}: {e}") from e
        return removed

    def publish(
        self,
        staged: Path,
        *,
        hash: str,
        name: str,
        version: str,
        meta: Mapping[str, Any],
    ) -> Entry:
        """Publish the staged directory as ``entries/<hash>-<name>-<version>`` atomically.

        ``staged`` (on the store's filesystem, normally inside a :class:`BuildDir`) holds the
        wheel(s), ``derivation.json`` and ``build.log.zst``. ``meta.json`` is written into it
        (``meta`` plus hash, name, version, created and size = bytes of the other files; when
        ``meta`` has no ``wheels`` list it is computed), every file is fsynced and made 0o444,
        the directory is renamed into ``entries/`` and made 0o555, ``entries/`` is fsynced and
        the index is updated. If another publisher won the race, ``staged`` is discarded and
        the existing entry is returned.
        """
        final = self.entry_dir(hash, name, version)
        existing = self.lookup(hash, name, version)
        if existing is not None:
            self._discard(staged)
            return existing
        derivation = self._stage(staged, final, hash, name, version, meta)
        marker = self._take_marker(final.name)
        try:
            try:
                os.rename(staged, final)
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise StoreError(f"cannot publish {staged} as {final}: {e}") from e
                winner = self.lookup(hash, name, version)
                if winner is None:
                    raise StoreError(f"cannot publish {staged} as {final}: {e}") from e
                self._discard(staged)
                return winner
            try:
                # After the rename: moving a directory needs write access to it (its "..").
                os.chmod(final, DIR_MODE)
                fsync_path(final, directory=True)
                fsync_path(self.entries_dir, directory=True)
            except OSError as e:
                raise StoreError(f"cannot seal published entry {final}: {e}") from e
            entry = self.load(final)
            self.index.add(entry, derivation)
            # Indexed: the marker goes. On any failure above it stays, unheld, for heal_pending.
            with suppress(FileNotFoundError):
                os.unlink(self.root / layout.PENDING / final.name)
            return entry
        finally:
            os.close(marker)

    def _take_marker(self, dirname: str) -> int:
        """Create and flock ``pending/<dirname>`` durably; return the held descriptor."""
        path = self.root / layout.PENDING / dirname
        try:
            os.makedirs(path.parent, exist_ok=True)
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
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
                    break
                os.close(fd)  # a concurrent publisher or healer removed it meanwhile: retry
            fsync_path(path.parent, directory=True)
        except OSError as e:
            raise StoreError(f"cannot create publish marker {path}: {e}") from e
        return fd

    def replace(
        self,
        staged: Path,
        *,
        hash: str,
        name: str,
        version: str,
        meta: Mapping[str, Any],
    ) -> Entry:
        """Publish ``staged`` in place of the existing entry of the same hash, atomically.

        For a rebuild that must supersede the entry (one built under a weaker sandbox than a
        realize asked for). The new directory is sealed like :meth:`publish` does, then the two
        directories swap names in one step (``renameat2(RENAME_EXCHANGE)``): readers see the old
        entry or the new one, never neither; the path stays the same, so links keep working.
        The old entry, now at ``staged``, is removed. Without an existing entry this is
        :meth:`publish`. Call under :meth:`build_lock` for ``hash``.
        """
        from rocmforge.util.fsutil import exchange

        final = self.entry_dir(hash, name, version)
        if not os.path.lexists(final):
            return self.publish(staged, hash=hash, name=name, version=version, meta=meta)
        derivation = self._stage(staged, final, hash, name, version, meta)
        try:
            # Moving a directory needs write access to it (its ".."): both are swapped.
            os.chmod(final, 0o755)
            os.chmod(staged, 0o755)
            exchange(staged, final)
            os.chmod(final, DIR_MODE)
            fsync_path(final, directory=True)
            fsync_path(self.entries_dir, directory=True)
            remove_tree(staged)
        except OSError as e:
            raise StoreError(f"cannot replace {final} with the rebuilt {staged}: {e}") from e
        entry = self.load(final)
        self.index.add(entry, derivation)
        return entry

    def _stage(
        self,
        staged: Path,
        final: Path,
        hash: str,
        name: str,
        version: str,
        meta: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Write ``meta.json`` into ``staged`` and seal it; return its derivation document."""
        try:
            derivation, full_meta = self._prepare(staged, hash, name, version, meta)
            write_atomic(staged / layout.META, json_bytes(full_meta.to_json()), durable=False)
            self._seal(staged)
        except OSError as e:
            raise StoreError(f"cannot stage {staged} for publishing as {final.name}: {e}") from e
        return derivation

    def _discard(self, staged: Path) -> None:
        try:
            remove_tree(staged)
        except OSError as e:
            raise StoreError(f"cannot discard staged directory {staged}: {e}") from e

    def _prepare(
        self, staged: Path, hash: str, name: str, version: str, meta: Mapping[str, Any]
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
            created=time.time(),
            size=size,
            wheels=records,
        )
        parsed = EntryMeta.from_json(full, file=staged / layout.META)
        stamped: list[WheelRecord] = []
        for record in parsed.wheels:
            st = os.stat(staged / record.file)
            stamped.append(replace(record, size=st.st_size, mtime_ns=st.st_mtime_ns))
        return derivation, replace(parsed, wheels=tuple(stamped)).sealed()

    @staticmethod
    def _seal(staged: Path) -> None:
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

    def used_times(self) -> dict[str, float]:
        """Return the last-use time of each entry hash marked under ``used/`` (every cache hit,
        the memo's included, touches ``used/<hash>``; see
        :func:`rocmforge.pipeline.memo.touch_used`)."""
        from rocmforge.store.scan import used_times

        try:
            return used_times(os.fspath(self.root))
        except OSError as exc:
            raise StoreError(f"cannot list {self.root / layout.USED}: {exc}") from exc

    # -- index ------------------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        """False for a read-only store (a read-only mount, or another user's store)."""
        return os.access(self.root, os.W_OK) and os.access(self.entries_dir, os.W_OK)

    @property
    def index(self) -> Index:
        """The SQLite index at ``index.sqlite``, opened on first use.

        A corrupt index (not a database, malformed, a directory) is set aside as
        ``index.sqlite.corrupt-<time>`` and rebuilt from ``entries/``, as is a new one while
        entries exist. A read-only store opens it read-only; when that is impossible (corrupt,
        missing) the index is rebuilt in memory for this process.
        """
        if self._index is None:
            from rocmforge.store.index import Index, IndexCorruptError

            writable = self.writable
            rebuild = False
            try:
                index = Index(self.index_path, read_only=not writable, root=self.root)
            except IndexCorruptError as e:
                if writable:
                    aside = self._set_index_aside()
                    self._notice(
                        "corrupt-index",
                        self.index_path,
                        f"{e}; set aside as {aside.name} and rebuilt from {layout.ENTRIES}/",
                    )
                    index = Index(self.index_path, root=self.root)
                else:
                    self._notice(
                        "corrupt-index",
                        self.index_path,
                        f"{e}; read-only store: using an index rebuilt in memory",
                    )
                    index = Index(None, root=self.root)
                rebuild = True
            except StoreError:
                if writable:
                    raise
                index = Index(None, root=self.root)  # a read-only store without an index
                rebuild = True
            self._index = index
            if rebuild or (index.created and self._entry_names()):
                self.rebuild_index()
        return self._index

    def _set_index_aside(self) -> Path:
        """Rename a corrupt ``index.sqlite`` (and its -wal, -shm) out of the way."""
        aside = self.root / f"{layout.INDEX}.corrupt-{int(time.time())}-{os.urandom(3).hex()}"
        try:
            os.rename(self.index_path, aside)
            for suffix in ("-wal", "-shm"):
                with suppress(FileNotFoundError):
                    os.rename(f"{self.index_path}{suffix}", f"{aside}{suffix}")
        except OSError as e:
            raise StoreError(f"cannot set the corrupt index {self.index_path} aside: {e}") from e
        return aside

    def rebuild_index(self) -> int:
        """Refill the index from ``entries/`` (the source of truth); return the entry count.

        Damaged entries are quarantined on the way (:meth:`sound_entries`), never a blocker.
        """

        def pairs() -> Iterator[tuple[Entry, Mapping[str, Any]]]:
            for entry in self.sound_entries():
                try:
                    derivation = read_derivation(entry.path)
                except StoreError as e:
                    self._damaged(entry.path, str(e))
                    continue
                yield entry, derivation

        return self.index.rebuild(pairs())

    def close(self) -> None:
        """Close the index if it was opened."""
        if self._index is not None:
            self._index.close()
            self._index = None


def open_store(root: Path, *, on_warning: Callable[[str], None] | None = None) -> Store:
    """Open the store at ``root``, creating its layout if needed (idempotent).

    A read-only store (``entries/`` exists, nothing can be created) opens for reading: cache
    hits, ``verify``, ``list`` and the other read paths work; building, gc, pins, result links
    and self-repairs need write access. ``on_warning`` receives the repairs the store makes on
    its own (see :class:`Store`).
    """
    root = Path(os.path.abspath(root))
    store = Store(root)
    store.on_warning = on_warning
    if os.path.lexists(root) and not os.path.isdir(root):
        raise StoreError(f"store root exists and is not a directory: {root}")
    try:
        for d in layout.CREATED_DIRS:
            os.makedirs(root / d, exist_ok=True)
        if not (root / layout.MARKER).exists():  # what rocmforge.store.locate looks for
            write_atomic(root / layout.MARKER, b"This directory is a rocmforge store.\n")
    except OSError as e:
        if not os.path.isdir(root / layout.ENTRIES):
            raise StoreError(f"cannot create store layout under {root}: {e}") from e
    return store
