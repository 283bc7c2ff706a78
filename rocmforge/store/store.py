"""The content-addressed store: published entries, in-progress builds, locks and the index.

The layout under the store root is described (and every name in it owned) by
:mod:`rocmforge.store.layout`; an entry and its ``meta.json`` by :mod:`rocmforge.store.entry`.
``tmp/<hash>.<pid>.<rand>/`` are builds in progress, each guarded by a held flock on
``tmp/<same>.lock``; ``locks/<hash>.lock`` are per-hash build locks (filelock); ``gc.lock`` is
the store-wide read/write lock (flock SH for realize, EX for gc).

``entries/`` is the source of truth; the index may lag behind it. :meth:`Store.lookup` is the
cache-hit hot path: it only stats and reads ``meta.json`` and never imports ``sqlite3`` or
``filelock`` (both are imported lazily, where they are needed).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
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


class Store:
    """A store rooted at ``root``; create one with :func:`open_store`."""

    __slots__ = (
        "_index",
        "cache_dir",
        "entries_dir",
        "failed_dir",
        "gc_lock_path",
        "index_path",
        "locks_dir",
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

    def lookup(self, hash: str, name: str, version: str) -> Entry | None:
        """Return the published entry for ``hash`` or None; reads only the filesystem.

        A directory without a readable ``meta.json`` or with missing wheels raises
        :class:`StoreError` (publishing never leaves one, so it is damage, not a miss).
        """
        path = self.entry_dir(hash, name, version)
        meta_path = path / layout.META
        try:
            with open(meta_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            if not os.path.lexists(path):
                return None
            raise StoreError(f"damaged store entry (no {layout.META}): {path}") from None
        except OSError as e:
            raise StoreError(f"cannot read {meta_path}: {e}") from e
        entry = self._entry_from_meta(path, raw)
        for wheel in entry.wheels:
            if not os.path.isfile(wheel):
                raise StoreError(f"damaged store entry (wheel missing): {wheel}")
        return entry

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

    def _entry_names(self) -> list[str]:
        try:
            names = os.listdir(self.entries_dir)
        except OSError as e:
            raise StoreError(f"cannot list {self.entries_dir}: {e}") from e
        return sorted(
            n
            for n in names
            if layout.is_entry_name(n) and os.path.isdir(self.entries_dir / n)
        )

    def entries(self) -> Iterator[Entry]:
        """Yield every published entry, sorted by directory name (``entries/`` is the truth)."""
        for n in self._entry_names():
            yield self.load(self.entries_dir / n)

    def resolve(self, target: str) -> Entry:
        """Find one entry from a hash or unique hash prefix (>= 4 chars), a dir name, or a path.

        A path may name the entry directory or any file inside it (symlinks such as result
        links are followed). Unknown or ambiguous targets raise :class:`UsageError`.
        """
        if target and "/" not in target and target not in (".", ".."):
            candidate = self.entries_dir / target
            if os.path.isdir(candidate):
                return self.load(candidate)
        names = self._entry_names()
        if layout.is_hex(target) and len(target) <= layout.HASH_LEN:
            if len(target) < layout.MIN_PREFIX and not os.path.exists(target):
                raise UsageError(
                    f"hash prefix {target!r} is too short (at least {layout.MIN_PREFIX} characters)"
                )
            matches = [n for n in names if n.startswith(target)]
            if len(matches) == 1:
                return self.load(self.entries_dir / matches[0])
            if len(matches) > 1:
                raise UsageError(
                    f"hash prefix {target!r} is ambiguous; candidates:\n"
                    + "\n".join(f"  {n}" for n in matches)
                )
        if os.path.exists(target):
            entries_real = os.path.realpath(self.entries_dir)
            real = os.path.realpath(target)
            rel = os.path.relpath(real, entries_real)
            if rel != "." and not rel.startswith(".."):
                top = rel.split(os.sep, 1)[0]
                if top in names:
                    return self.load(self.entries_dir / top)
            raise UsageError(f"{target} is not inside a store entry of {self.entries_dir}")
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
            raise StoreError(f"cannot open {self.gc_lock_path}: {e}") from e
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
    def _build_lock(self, hash: str) -> Iterator[None]:
        import filelock

        lock = filelock.FileLock(str(self.locks_dir / f"{hash}{layout.LOCK_SUFFIX}"))
        try:
            lock.acquire()
        except OSError as e:
            raise StoreError(f"cannot take build lock {lock.lock_file}: {e}") from e
        try:
            yield
        finally:
            lock.release()

    def build_lock(self, hash: str) -> AbstractContextManager[None]:
        """Hold the per-hash build lock (``locks/<hash>.lock``); blocks until acquired."""
        _check_hash(hash)
        return self._build_lock(hash)

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
        try:
            derivation, full_meta = self._prepare(staged, hash, name, version, meta)
            write_atomic(staged / layout.META, json_bytes(full_meta.to_json()))
            self._seal(staged)
        except OSError as e:
            raise StoreError(f"cannot stage {staged} for publishing as {final.name}: {e}") from e
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
        return entry

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
        try:
            derivation, full_meta = self._prepare(staged, hash, name, version, meta)
            write_atomic(staged / layout.META, json_bytes(full_meta.to_json()))
            self._seal(staged)
        except OSError as e:
            raise StoreError(f"cannot stage {staged} for publishing as {final.name}: {e}") from e
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
        return derivation, EntryMeta.from_json(full, file=staged / layout.META)

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
        the memo's included, touches ``used/<hash>``; see :func:`rocmforge.memo.touch_used`)."""
        d = self.root / layout.USED
        out: dict[str, float] = {}
        try:
            with os.scandir(d) as it:
                for de in it:
                    with suppress(FileNotFoundError):
                        out[de.name] = de.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"cannot list {d}: {exc}") from exc
        return out

    # -- index ------------------------------------------------------------------------------------

    @property
    def index(self) -> Index:
        """The SQLite index at ``index.sqlite``, opened on first use."""
        if self._index is None:
            from rocmforge.store.index import Index

            self._index = Index(self.index_path)
        return self._index

    def rebuild_index(self) -> int:
        """Refill the index from ``entries/`` (the source of truth); return the entry count."""

        def pairs() -> Iterator[tuple[Entry, Mapping[str, Any]]]:
            for entry in self.entries():
                yield entry, read_derivation(entry.path)

        return self.index.rebuild(pairs())

    def close(self) -> None:
        """Close the index if it was opened."""
        if self._index is not None:
            self._index.close()
            self._index = None


def open_store(root: Path) -> Store:
    """Open the store at ``root``, creating its layout if needed (idempotent)."""
    root = Path(os.path.abspath(root))
    store = Store(root)
    if os.path.lexists(root) and not os.path.isdir(root):
        raise StoreError(f"store root exists and is not a directory: {root}")
    try:
        for d in layout.CREATED_DIRS:
            os.makedirs(root / d, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create store layout under {root}: {e}") from e
    return store
