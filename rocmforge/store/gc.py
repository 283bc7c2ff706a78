"""Garbage collection: a pure plan of what goes and why, then a separate deletion step.

:func:`plan_gc` is a pure function of (entries, roots, policies, now) and says for every entry
whether it goes and which policy decided; :func:`plan_sources` does the same for the source caches
(git mirrors, requirement wheels, tree stat caches) given what the kept entries reference.
:func:`delete` then removes, under :meth:`Store.exclusive_lock`, each doomed entry's index row
first and its directory second (moved into ``trash/`` with one rename, so a crash leaves either
a whole entry or none), never following a symlink. :func:`collect_garbage` ties it together.

Policies combine like restic's ``forget``: ``--keep-last`` and ``--older-than`` are keep rules
(an unrooted entry goes only if no given rule keeps it); ``--max-size`` then removes the least
recently used unrooted entries until the entries fit. With no policy every unrooted entry goes.
A root (result link, pin, running realize, build in progress) always stays.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.entry import DerivationDoc, EntryMeta, read_derivation, read_meta
from rocmforge.store.measure import scan_sources, source_kind
from rocmforge.store.roots import RootSet, collect_roots
from rocmforge.store.store import Store
from rocmforge.util.fsutil import remove_tree
from rocmforge.util.sizes import format_age, format_size

_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*", re.IGNORECASE)
_UNITS = "KMGTP"  # parse_size; format_size is rocmforge.util.sizes


# -- sizes and ages --------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """Parse ``"500M"``, ``"20G"``, ``"1.5T"``, ``"4096"`` (bytes; units are powers of 1024).

    Raises :class:`ValueError` with a readable message.
    """
    m = _SIZE_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid size {text!r}; write e.g. '500M', '20G', '1.5T' or bytes")
    unit = m.group(2).upper()
    return int(float(m.group(1)) * (1024 ** (_UNITS.index(unit) + 1) if unit else 1))


# -- the pure plan ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryInfo:
    """What gc needs to know of one entry: identity, size and times (seconds since the epoch)."""

    hash: str
    name: str
    version: str
    dirname: str
    size: int
    created: float
    last_used: float
    #: input hashes of the entries this one was built against (kept while it stays)
    built_against: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return JSON-ready data."""
        return {
            "hash": self.hash,
            "name": self.name,
            "version": self.version,
            "entry": self.dirname,
            "bytes": self.size,
            "created": self.created,
            "last_used": self.last_used,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Policies:
    """The gc policies; all None means: delete every unrooted entry."""

    keep_last: int | None = None
    older_than: float | None = None
    max_size: int | None = None

    def describe(self) -> str:
        """Return the policies as command-line flags (``"everything unrooted"`` if none)."""
        parts = []
        if self.keep_last is not None:
            parts.append(f"--keep-last {self.keep_last}")
        if self.older_than is not None:
            parts.append(f"--older-than {format_age(self.older_than)}")
        if self.max_size is not None:
            parts.append(f"--max-size {format_size(self.max_size)}")
        return " ".join(parts) or "everything unrooted"


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """One entry and why it goes (in :attr:`GcPlan.delete`) or stays (in :attr:`GcPlan.keep`)."""

    entry: EntryInfo
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """Return JSON-ready data."""
        return {**self.entry.to_json(), "reasons": list(self.reasons)}


@dataclass(frozen=True, slots=True, kw_only=True)
class GcPlan:
    """The outcome of :func:`plan_gc`: every entry exactly once, in ``delete`` or ``keep``."""

    delete: tuple[Decision, ...]
    keep: tuple[Decision, ...]
    size_before: int
    size_after: int
    over_by: int = 0  # bytes the kept entries still exceed --max-size by (roots win)

    @property
    def freed(self) -> int:
        """Bytes the deletion frees."""
        return self.size_before - self.size_after


def _rank_newest(entries: Iterable[EntryInfo]) -> dict[str, int]:
    """Return each entry's position among its package's entries, newest created first (0)."""
    by_name: dict[str, list[EntryInfo]] = defaultdict(list)
    for e in entries:
        by_name[e.name].append(e)
    rank: dict[str, int] = {}
    for group in by_name.values():
        for i, e in enumerate(sorted(group, key=lambda e: (-e.created, e.hash))):
            rank[e.hash] = i
    return rank


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _keep_closures(
    entries: Sequence[EntryInfo],
    kept: dict[str, tuple[str, ...]],
    doomed: dict[str, tuple[str, ...]],
) -> None:
    """Keep every entry a kept entry was built against (transitively), like Nix's references."""
    by_hash = {e.hash: e for e in entries}
    todo = [h for h in kept]
    while todo:
        e = by_hash[todo.pop()]
        for h in e.built_against:
            if h not in by_hash:
                continue
            why = f"kept: dependency of {e.name} {e.version}"
            if h in doomed:
                del doomed[h]
                kept[h] = (why,)
                todo.append(h)
            elif why not in kept.get(h, ()):
                first = h not in kept
                kept[h] = (*kept.get(h, ()), why)
                if first:
                    todo.append(h)


def plan_gc(
    entries: Sequence[EntryInfo],
    roots: Mapping[str, Sequence[str]],
    policies: Policies,
    now: float,
) -> GcPlan:
    """Decide, purely, which entries go and why.

    ``roots`` maps an input hash to why it is rooted. Rooted entries always stay. With
    ``keep_last`` and/or ``older_than``, an unrooted entry goes when no given rule keeps it
    (keep-last keeps the newest N by creation per package name; older-than keeps what was used
    within the duration). With ``max_size``, the least recently used unrooted entries that are
    left then go until the entries' total is at most ``max_size``. Without any policy, every
    unrooted entry goes.
    """
    rank = _rank_newest(entries)
    selective = policies.keep_last is not None or policies.older_than is not None
    doomed: dict[str, tuple[str, ...]] = {}
    kept: dict[str, tuple[str, ...]] = {}
    for e in entries:
        rooted = roots.get(e.hash)
        if rooted:
            kept[e.hash] = tuple(f"rooted: {r}" for r in rooted)
            continue
        if not selective:
            if policies.max_size is None:
                doomed[e.hash] = ("unrooted",)
            else:
                kept[e.hash] = ("within --max-size",)
            continue
        go: list[str] = []
        stay: list[str] = []
        if policies.keep_last is not None:
            pos = f"{_ordinal(rank[e.hash] + 1)} newest of {e.name}"
            (go if rank[e.hash] >= policies.keep_last else stay).append(
                f"keep-last {policies.keep_last}: {pos}"
            )
        if policies.older_than is not None:
            age = now - e.last_used
            (go if age > policies.older_than else stay).append(
                f"older-than {format_age(policies.older_than)}: last used {format_age(age)} ago"
            )
        if stay:
            kept[e.hash] = tuple(stay)
        else:
            doomed[e.hash] = tuple(go)
    _keep_closures(entries, kept, doomed)
    total = sum(e.size for e in entries)
    remaining = total - sum(e.size for e in entries if e.hash in doomed)
    over_by = 0
    if policies.max_size is not None and remaining > policies.max_size:
        lru = sorted(
            (e for e in entries if e.hash not in doomed and not roots.get(e.hash)),
            key=lambda e: (e.last_used, e.created, e.hash),
        )
        limit = format_size(policies.max_size)
        dependents: dict[str, list[str]] = defaultdict(list)
        for e in entries:
            for h in e.built_against:
                dependents[h].append(e.hash)
        for e in lru:
            if remaining <= policies.max_size:
                break
            if any(d not in doomed for d in dependents.get(e.hash, ())):
                continue  # a kept entry was built against it
            doomed[e.hash] = (
                f"max-size {limit}: least recently used (last used {format_age(now - e.last_used)}"
                f" ago) while the entries hold {format_size(remaining)}",
            )
            del kept[e.hash]
            remaining -= e.size
        over_by = max(0, remaining - policies.max_size)
    order = sorted(entries, key=lambda e: (e.name, e.created, e.hash))
    return GcPlan(
        delete=tuple(Decision(entry=e, reasons=doomed[e.hash]) for e in order if e.hash in doomed),
        keep=tuple(Decision(entry=e, reasons=kept[e.hash]) for e in order if e.hash in kept),
        size_before=total,
        size_after=remaining,
        over_by=over_by,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceItem:
    """One source cache under ``sources/``: ``git/<id>.git``, ``wheels/<file>``, ``trees/<id>``
    (the ``.head`` and ``.files`` pair), ``git-resolved/<key>.json`` (with its commit) or
    ``wheels-unpacked/<wheel file>.<key>`` (kept while its wheel is referenced)."""

    rel: str
    size: int
    commit: str | None = None

    @property
    def kind(self) -> str:
        """``git mirror``, ``requirement wheel``, ``tree stat cache`` or ``git resolve cache``."""
        return source_kind(self.rel)

    def to_json(self) -> dict[str, Any]:
        """Return JSON-ready data."""
        return {"source": self.rel, "kind": self.kind, "bytes": self.size}


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceRefs:
    """What the kept entries reference: source cache paths, commits, and whether that is all.

    ``complete`` is False when a kept entry predates the ``sources`` field of ``meta.json``;
    then its git mirrors and tree caches are unknown and none of those may go.
    """

    refs: frozenset[str] = frozenset()
    commits: frozenset[str] = frozenset()
    complete: bool = True
    #: the kept entries' own wheel file names: their installed trees (``rocmforge test``
    #: links them into test venvs) stay with them
    entry_wheels: frozenset[str] = frozenset()


def _unpacked_wheel(rel: str) -> str:
    """The wheel file name of ``wheels-unpacked/<wheel file name>.<key>``."""
    return rel.split("/", 1)[1].rpartition(".")[0]


def plan_sources(items: Iterable[SourceItem], refs: SourceRefs) -> tuple[SourceItem, ...]:
    """Return the source caches no kept entry references (pure)."""
    out = []
    for item in items:
        top = item.rel.split("/", 1)[0]
        if top == layout.SOURCES_GIT_RESOLVED:
            unused = item.commit is not None and item.commit not in refs.commits
        elif top == layout.SOURCES_WHEELS:
            unused = item.rel not in refs.refs
        elif top == layout.SOURCES_WHEELS_UNPACKED:  # goes with the wheel it was unpacked from
            wheel = _unpacked_wheel(item.rel)
            unused = (f"{layout.SOURCES_WHEELS}/{wheel}" not in refs.refs
                      and wheel not in refs.entry_wheels)  # fmt: skip
        else:
            unused = refs.complete and item.rel not in refs.refs
        if unused:
            out.append(item)
    return tuple(sorted(out, key=lambda i: i.rel))


# -- reading the store -----------------------------------------------------------------------------


def gather_entries(store: Store) -> tuple[list[EntryInfo], list[str]]:
    """Return every entry of ``entries/`` with its last use, and warnings about damaged ones.

    Last use is the latest of: creation, the index's ``last_used`` and the mtime of
    ``used/<hash>`` (touched by every cache hit, including the memo's fast path).
    """
    try:
        names = sorted(n for n in os.listdir(store.entries_dir) if layout.is_entry_name(n))
    except OSError as e:
        raise StoreError(f"cannot list {store.entries_dir}: {e}") from e
    used = store.used_times()
    indexed = {row.hash: row.last_used for row in store.index.rows()}
    entries: list[EntryInfo] = []
    warnings: list[str] = []
    base = os.fspath(store.entries_dir)
    for n in names:
        path = os.path.join(base, n)
        meta_path = os.path.join(path, layout.META)
        try:
            with open(meta_path, "rb") as f:
                raw = f.read()
            meta = EntryMeta.from_bytes(raw, file=meta_path)
            if meta.dirname != n:
                raise StoreError(f"{meta_path}: records {meta.dirname}")
        except (OSError, StoreError) as e:
            if os.path.islink(path) or not os.path.isdir(path):
                continue
            warnings.append(f"damaged entry left alone: {path}: {e}")
            continue
        h = meta.hash
        last = max(meta.created, indexed.get(h, 0.0), used.get(h, 0.0))
        entries.append(
            EntryInfo(
                hash=h,
                name=meta.name,
                version=meta.version,
                dirname=n,
                size=meta.size + len(raw),
                created=meta.created,
                last_used=last,
                built_against=meta.built_against,
            )
        )
    return entries, warnings


def gather_sources(store: Store) -> list[SourceItem]:
    """Return the collectable source caches under ``sources/`` with their sizes
    (:func:`rocmforge.store.measure.scan_sources`)."""
    try:
        found = scan_sources(os.fspath(store.root))
    except OSError as e:
        raise StoreError(f"cannot list {e.filename or store.sources_dir}: {e}") from e
    return [SourceItem(rel=rel, size=size, commit=commit) for rel, size, commit in found]


#: What one entry references, from its ``meta.json`` and ``derivation.json`` data. The caller
#: supplies it: which source caches a build used is known above the store, not in it.
EntryRefs = Callable[[EntryMeta, DerivationDoc], SourceRefs]


def referenced_sources(
    store: Store, kept: Iterable[EntryInfo], entry_refs: EntryRefs
) -> SourceRefs:
    """Return what the kept entries reference together: ``entry_refs`` of each, united."""
    refs: set[str] = set()
    commits: set[str] = set()
    wheels: set[str] = set()
    complete = True
    for e in kept:
        path = store.entries_dir / e.dirname
        meta = read_meta(path)
        if meta is None:
            raise StoreError(f"cannot read what {path} references: it has no {layout.META}")
        one = entry_refs(meta, DerivationDoc(read_derivation(path)))
        refs.update(one.refs)
        commits.update(one.commits)
        wheels.update(w.file for w in meta.wheels)
        complete = complete and one.complete
    return SourceRefs(refs=frozenset(refs), commits=frozenset(commits), complete=complete,
                      entry_wheels=frozenset(wheels))  # fmt: skip


# -- deleting --------------------------------------------------------------------------------------


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def delete(
    store: Store,
    plan: GcPlan,
    sources: Sequence[SourceItem] = (),
    stale_roots: Sequence[Path] = (),
) -> None:
    """Carry out ``plan``; the caller holds :meth:`Store.exclusive_lock`.

    Index rows go first (one transaction), then each entry directory is made writable and
    renamed into ``trash/`` (one atomic step per entry) and the trash is removed. Symlinks are
    unlinked, never followed, so nothing outside the store is touched.
    """
    hashes = [d.entry.hash for d in plan.delete]
    if hashes:
        store.index.remove_many(hashes)
    trash_root = store.root / layout.TRASH
    try:
        for n in os.listdir(trash_root) if trash_root.is_dir() else ():
            remove_tree(trash_root / n)  # left by a gc that crashed
        trash = trash_root / f"gc-{os.getpid()}-{os.urandom(4).hex()}"
        if plan.delete:
            os.makedirs(trash)
        entries_fd = os.open(store.entries_dir, _DIR_FLAGS)
        trash_fd = os.open(trash, _DIR_FLAGS) if plan.delete else -1
        try:
            for d in plan.delete:
                name = d.entry.dirname
                try:
                    st = os.lstat(name, dir_fd=entries_fd)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    fd = os.open(name, _DIR_FLAGS, dir_fd=entries_fd)
                    try:
                        os.fchmod(fd, 0o700)  # renaming a directory needs write access to it
                    finally:
                        os.close(fd)
                    os.rename(name, name, src_dir_fd=entries_fd, dst_dir_fd=trash_fd)
                else:
                    os.unlink(name, dir_fd=entries_fd)
        finally:
            os.close(entries_fd)
            if trash_fd >= 0:
                os.close(trash_fd)
        if plan.delete:
            remove_tree(trash)
        used = store.root / layout.USED
        for h in hashes:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(used / h)
            remove_tree(store.root / layout.ACCEPTED / h)  # its acceptance runs go with it
        for item in sources:
            path = store.sources_dir / item.rel
            if item.rel.startswith(f"{layout.SOURCES_TREES}/"):
                for ext in (layout.TREE_HEAD_SUFFIX, layout.TREE_FILES_SUFFIX):
                    remove_tree(path.with_name(path.name + ext))
            else:
                remove_tree(path)
                if item.rel.startswith(f"{layout.SOURCES_GIT}/"):
                    remove_tree(path.with_suffix(layout.LOCK_SUFFIX))
        for p in stale_roots:
            remove_tree(p)
    except OSError as e:
        raise StoreError(f"gc: cannot delete from {store.root}: {e}") from e


def clear_quarantine(store: Store) -> list[Path]:
    """Remove everything under ``quarantine/`` (damaged entries and strays moved aside by
    lookups and ``verify --repair``); return what was removed. Call under the exclusive lock."""
    qdir = store.root / layout.QUARANTINE
    try:
        names = sorted(os.listdir(qdir))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise StoreError(f"gc: cannot list {qdir}: {e}") from e
    removed = []
    for n in names:
        try:
            remove_tree(qdir / n)
        except OSError as e:
            raise StoreError(f"gc: cannot remove {qdir / n}: {e}") from e
        removed.append(qdir / n)
    return removed


# -- the whole collection --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GcReport:
    """What one gc did (or, with ``dry_run``, would do)."""

    dry_run: bool
    policies: Policies
    plan: GcPlan
    sources: tuple[SourceItem, ...] = ()
    sources_kept_because: str | None = None
    stale_roots: tuple[Path, ...] = ()
    leftovers: tuple[Path, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def freed(self) -> int:
        """Bytes freed (or that would be): entries plus source caches."""
        return self.plan.freed + sum(s.size for s in self.sources)

    def to_json(self) -> dict[str, Any]:
        """Return JSON-ready data."""
        return {
            "dry_run": self.dry_run,
            "policies": self.policies.describe(),
            "deleted": [d.to_json() for d in self.plan.delete],
            "kept": [d.to_json() for d in self.plan.keep],
            "sources": [s.to_json() for s in self.sources],
            "sources_kept_because": self.sources_kept_because,
            "stale_roots": [str(p) for p in self.stale_roots],
            "leftover_build_dirs": [str(p) for p in self.leftovers],
            "entries_bytes_before": self.plan.size_before,
            "entries_bytes_after": self.plan.size_after,
            "over_max_size_by": self.plan.over_by,
            "freed_bytes": self.freed,
            "warnings": list(self.warnings),
        }


def collect_garbage(
    store: Store,
    policies: Policies,
    *,
    entry_refs: EntryRefs,
    now: float | None = None,
    dry_run: bool = False,
    keep_sources: bool = False,
    extra_roots: Mapping[str, Sequence[str]] | None = None,
) -> GcReport:
    """Plan and (unless ``dry_run``) delete, all under the store's exclusive lock.

    ``extra_roots`` (input hash -> why) root entries for this run only (``gc --keep STACK``).

    ``entry_refs`` says which source caches one kept entry uses (see :data:`EntryRefs`).

    The lock waits only for realizes that are looking up or returning an entry (they hold it
    shared for milliseconds), never for a build: builds and running realizes are roots.
    """
    with store.exclusive_lock():
        now = time.time() if now is None else now
        entries, warnings = gather_entries(store)
        roots: RootSet = collect_roots(store)
        by_hash = dict(roots.by_hash)
        for h, why in (extra_roots or {}).items():
            by_hash[h] = (*by_hash.get(h, ()), *why)
        plan = plan_gc(entries, by_hash, policies, now)
        sources: tuple[SourceItem, ...] = ()
        because: str | None = None
        if keep_sources:
            because = "--keep-sources"
        elif roots.busy:
            because = "; ".join(roots.busy)
        else:
            refs = referenced_sources(store, (d.entry for d in plan.keep), entry_refs)
            if not refs.complete:
                warnings.append(
                    "some kept entries predate source tracking: their git mirrors and tree "
                    "caches are unknown, so none of those were collected"
                )
            sources = plan_sources(gather_sources(store), refs)
        leftovers: tuple[Path, ...] = ()
        if not dry_run:
            delete(store, plan, sources, roots.stale)
            leftovers = tuple(store.clean_leftovers())
            store.clean_build_locks()  # one was left per hash ever built
            warnings.extend(f"removed quarantined {p}" for p in clear_quarantine(store))
        return GcReport(
            dry_run=dry_run,
            policies=policies,
            plan=plan,
            sources=sources,
            sources_kept_because=because,
            stale_roots=roots.stale,
            leftovers=leftovers,
            warnings=tuple(warnings),
        )
