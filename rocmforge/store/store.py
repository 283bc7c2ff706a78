"""The content-addressed store: published entries, in-progress builds, locks and the index.

:class:`Store` is the façade the other wings use; the work is done in the store's modules. The
layout under the store root is described (and every name in it owned) by
:mod:`rocmforge.store.layout`; an entry and its ``meta.json`` by :mod:`rocmforge.store.entry`;
reading entries, checking their wheels and moving damage aside by
:mod:`rocmforge.store.entries`; staging and sealing a publish by :mod:`rocmforge.store.publish`;
the index by :mod:`rocmforge.store.index`. ``tmp/<hash>.<pid>.<rand>/`` are builds in progress
(:mod:`rocmforge.store.builddir`), each guarded by a held flock on ``tmp/<same>.lock``;
``locks/<hash>.lock`` are per-hash build locks (filelock); ``gc.lock`` is the store-wide
read/write lock (flock SH for realize, EX for gc); both in :mod:`rocmforge.store.locks`.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import RocmforgeError, StoreError, UsageError
from rocmforge.store import builddir, layout, locks
from rocmforge.store import publish as publishing
from rocmforge.store.builddir import BuildDir
from rocmforge.store.entries import (
    entry_from_meta,
    load_entry,
    move_to_quarantine,
    wheel_problem,
)
from rocmforge.store.entry import Entry, read_derivation
from rocmforge.util.fsutil import write_atomic

if TYPE_CHECKING:
    from rocmforge.store.index import Index


def _check_hash(hash: str) -> None:
    if not layout.is_hash(hash):
        raise StoreError(
            f"not an input hash ({layout.HASH_LEN} lowercase hex characters): {hash!r}"
        )


def _check_entry(hash: str, name: str, version: str) -> None:
    problem = layout.entry_problem(hash, name, version)
    if problem is not None:
        raise StoreError(problem)


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
            entry = entry_from_meta(path, raw)
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
        dest = move_to_quarantine(self.root, self.entries_dir, path)
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
            fd = locks.open_locked_nb(marker)
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
        from rocmforge.store.index import set_aside

        self.close()
        aside = set_aside(self.index_path, self.root)
        self._notice("corrupt-index", self.index_path, f"{why}; set aside as {aside.name}")
        return self.rebuild_index()

    def load(self, path: Path) -> Entry:
        """Load the entry in directory ``path``, checking its name against its ``meta.json``."""
        return load_entry(path)

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

    def shared_lock(self) -> AbstractContextManager[None]:
        """Hold the store-wide lock shared (realize): gc cannot run meanwhile. Blocks.

        Each call opens its own descriptor, so do not nest it with :meth:`exclusive_lock`
        in one process (that would deadlock).
        """
        return locks.store_flock(self.gc_lock_path, fcntl.LOCK_SH)

    def exclusive_lock(self) -> AbstractContextManager[None]:
        """Hold the store-wide lock exclusively (gc): waits for every realize. Blocks."""
        return locks.store_flock(self.gc_lock_path, fcntl.LOCK_EX)

    def build_lock(
        self, hash: str, *, on_busy: Callable[[], None] | None = None, poll: float = 1.0
    ) -> AbstractContextManager[None]:
        """Hold the per-hash build lock (``locks/<hash>.lock``); blocks until acquired.

        While another process holds it, ``on_busy`` (if given) is called at once and then every
        ``poll`` seconds, so the caller can say what it waits for.
        """
        _check_hash(hash)
        return locks.build_flock(self.locks_dir / f"{hash}{layout.LOCK_SUFFIX}", on_busy, poll)

    # -- building and publishing ------------------------------------------------------------------

    def new_build_dir(self, hash: str) -> BuildDir:
        """Return a :class:`BuildDir` for ``tmp/<hash>.<pid>.<rand>/``; use it with ``with``."""
        _check_hash(hash)
        return builddir.new_build_dir(self.tmp_dir, hash)

    def clean_leftovers(self, *, include_kept: bool = False) -> list[Path]:
        """Remove build dirs of dead processes from ``tmp/``; return what was removed.

        A build dir whose ``.lock`` is not held (its owner died) is removed with its lock file;
        an unheld lock file without a dir is removed too. A dir without any lock file was kept
        on purpose (``BuildDir.keep``) and is removed only with ``include_kept``.
        """
        return builddir.clean_leftovers(self.tmp_dir, include_kept=include_kept)

    def clean_build_locks(self) -> int:
        """Remove the per-hash build locks (``locks/<hash>.lock``) nobody holds; return how
        many. Call under :meth:`exclusive_lock` (gc): one is left per hash ever built."""
        return locks.remove_unheld(self.locks_dir, layout.LOCK_SUFFIX)

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
            publishing.discard(staged)
            return existing
        derivation = publishing.stage(staged, final, hash, name, version, meta)
        marker = publishing.take_marker(self.root / layout.PENDING / final.name)
        try:
            try:
                os.rename(staged, final)
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise StoreError(f"cannot publish {staged} as {final}: {e}") from e
                winner = self.lookup(hash, name, version)
                if winner is None:
                    raise StoreError(f"cannot publish {staged} as {final}: {e}") from e
                publishing.discard(staged)
                return winner
            publishing.seal_published(final, self.entries_dir)
            entry = self.load(final)
            self.index.add(entry, derivation)
            # Indexed: the marker goes. On any failure above it stays, unheld, for heal_pending.
            with suppress(FileNotFoundError):
                os.unlink(self.root / layout.PENDING / final.name)
            return entry
        finally:
            os.close(marker)

    def replace(
        self,
        staged: Path,
        *,
        hash: str,
        name: str,
        version: str,
        meta: Mapping[str, Any],
        created: float | None = None,
    ) -> Entry:
        """Publish ``staged`` in place of the existing entry of the same hash, atomically.

        For a rebuild that must supersede the entry (one built under a weaker sandbox than a
        realize asked for). The new directory is sealed like :meth:`publish` does, then the two
        directories swap names in one step (``renameat2(RENAME_EXCHANGE)``): readers see the old
        entry or the new one, never neither; the path stays the same, so links keep working.
        The old entry, now at ``staged``, is removed. Without an existing entry this is
        :meth:`publish`. Call under :meth:`build_lock` for ``hash``. ``created`` keeps the
        entry's creation time (an entry re-signed is not a new build); None: now.
        """
        final = self.entry_dir(hash, name, version)
        if not os.path.lexists(final):
            return self.publish(staged, hash=hash, name=name, version=version, meta=meta)
        derivation = publishing.stage(staged, final, hash, name, version, meta, created=created)
        publishing.swap_in(staged, final, self.entries_dir)
        entry = self.load(final)
        self.index.add(entry, derivation)
        return entry

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
            from rocmforge.store.index import open_index

            index, rebuild = open_index(
                self.index_path, self.root, writable=self.writable, notice=self._notice
            )
            self._index = index
            if rebuild or (index.created and self._entry_names()):
                self.rebuild_index()
        return self._index

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
