"""``verify``: re-hash published files against their recorded digests; check index vs entries.

Problem kinds:

- ``missing``: a file recorded in ``meta.json`` is gone, or the index lists an entry whose
  directory is gone;
- ``modified``: a file's digest or size differs from ``meta.json``, or ``derivation.json`` no longer
  hashes to the entry's input hash;
- ``orphaned``: something in ``entries/`` that no entry accounts for (a stray file or directory, a
  file inside an entry that its ``meta.json`` does not record);
- ``unindexed`` / ``stale-index``: an entry the index does not know, or knows with other digests;
- ``damaged``: an entry whose ``meta.json`` cannot be read;
- ``corrupt-index``: ``index.sqlite`` fails SQLite's ``quick_check`` (or could not be opened: the
  store then set it aside and rebuilt it on its own, reported under ``repaired``);
- ``quarantined``: a damaged entry the store moved aside on its own (reported under
  ``repaired``).

``entries/`` is the truth: ``--repair-index`` rebuilds the index from it
(:meth:`Store.rebuild_index`) and verifies again. ``--repair`` also moves every damaged or
modified entry, and every stray file or directory, to ``quarantine/`` (the next realize rebuilds
what it needs; gc removes the quarantine), then rebuilds the index and verifies again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.entry import DerivationDoc, Entry, WheelRecord, input_hash, read_derivation
from rocmforge.store.store import Store
from rocmforge.util.hashing import file_blake3, file_digests
from rocmforge.util.statcache import read_json

INDEX_KINDS = frozenset({"unindexed", "stale-index"})


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyProblem:
    """One problem found: its kind, the path concerned and what is wrong."""

    kind: str
    path: Path
    detail: str

    def to_json(self) -> dict[str, str]:
        """Return the problem as JSON-ready data."""
        return {"kind": self.kind, "path": str(self.path), "detail": self.detail}

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}: {self.detail}"


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyReport:
    """What ``verify`` checked and found (after a repair, what is left and what it fixed)."""

    entries: int
    files: int
    problems: tuple[VerifyProblem, ...]
    repaired: tuple[VerifyProblem, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {
            "ok": self.ok,
            "entries": self.entries,
            "files": self.files,
            "problems": [p.to_json() for p in self.problems],
            "repaired": [p.to_json() for p in self.repaired],
        }


class _Checker:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.problems: list[VerifyProblem] = []
        self.files = 0

    def add(self, kind: str, path: Path, detail: str) -> None:
        self.problems.append(VerifyProblem(kind=kind, path=path, detail=detail))

    def entry(self, entry: Entry) -> None:
        meta = entry.meta
        known = {layout.META}
        for w in meta.wheels:
            path = entry.path / w.file
            known.add(path.name)
            self._wheel(path, w)
        files = meta.files
        if files is not None:
            for name, digest in sorted(files.items()):
                known.add(name)
                self._file(entry.path / name, digest)
        self._derivation(entry)
        if meta.seal_broken:
            self.add("modified", entry.path / layout.META, "does not match its seal")
        if files is not None:
            try:
                present = sorted(os.listdir(entry.path))
            except OSError as exc:
                self.add("damaged", entry.path, f"cannot list: {exc}")
                return
            for name in present:
                if name not in known:
                    self.add("orphaned", entry.path / name, "not recorded in meta.json")
        self._covered(entry)
        self._index(entry)

    def _covered(self, entry: Entry) -> None:
        """Report the entry's files its provenance.json does not cover (``uncovered``: one a
        cache added, recorded in meta.json all the same) and those it names that are gone
        (see :func:`rocmforge.store.coverage.coverage`); an entry without one is skipped."""
        from rocmforge.store.coverage import UNLISTED, coverage
        from rocmforge.util.fsutil import loads_untrusted

        path = entry.path / layout.PROVENANCE
        try:
            raw = path.read_bytes()
            present = set(os.listdir(entry.path)) - UNLISTED
        except FileNotFoundError:
            return
        except OSError as exc:
            self.add("damaged", path, f"cannot read: {exc}")
            return
        try:
            cov = coverage(loads_untrusted(raw))
        except ValueError as exc:
            self.add("modified", path, f"not a readable statement: {exc}")
            return
        seen = {p.path for p in self.problems}  # one problem a file (orphaned stays orphaned)
        for name in sorted(present - set(cov.files)):
            if entry.path / name not in seen:
                self.add("uncovered", entry.path / name, "no provenance statement covers it")
        for name in sorted(set(cov.files) - present):
            if entry.path / name not in seen:
                self.add("missing", entry.path / name, "named by provenance.json but gone")

    def _wheel(self, path: Path, record: WheelRecord) -> None:
        try:
            size = os.stat(path).st_size
            b3, sha = file_digests(path)
        except FileNotFoundError:
            self.add("missing", path, "wheel recorded in meta.json is gone")
            return
        except OSError as exc:
            self.add("damaged", path, f"cannot read: {exc}")
            return
        self.files += 1
        if (b3, sha) != (record.blake3, record.sha256):
            self.add("modified", path, f"digest differs from meta.json (blake3 now {b3[:16]}..)")
        elif record.size is not None and size != record.size:
            self.add("modified", path, f"size {size} differs from meta.json ({record.size})")

    def _file(self, path: Path, digest: str) -> None:
        try:
            b3 = file_blake3(path)
        except FileNotFoundError:
            self.add("missing", path, "file recorded in meta.json is gone")
            return
        except OSError as exc:
            self.add("damaged", path, f"cannot read: {exc}")
            return
        self.files += 1
        if b3 != digest:
            self.add("modified", path, f"blake3 differs from meta.json (now {b3[:16]}..)")

    def _derivation(self, entry: Entry) -> None:
        path = entry.path / layout.DERIVATION
        if any(p.path == path for p in self.problems):
            return
        if not os.path.lexists(path):
            self.add("missing", path, "the entry has no derivation")
            return
        try:
            data = read_derivation(entry.path)
        except StoreError as exc:
            self.add("modified", path, f"not a readable derivation: {exc}")
            return
        if input_hash(data) != entry.hash:
            self.add("modified", path, f"no longer hashes to the input hash {entry.hash}")

    def _index(self, entry: Entry) -> None:
        row = self.store.index.get(entry.hash)
        if row is None:
            self.add("unindexed", entry.path, "the index does not know this entry")
            return
        indexed = {(w.filename, w.blake3) for w in row.wheels}
        recorded = {(w.file, w.blake3) for w in entry.meta.wheels}
        if indexed != recorded or Path(row.path) != entry.path:
            self.add("stale-index", entry.path, "the index records other wheels or another path")


def _check(store: Store, targets: Sequence[str]) -> tuple[int, _Checker]:
    c = _Checker(store)
    count = 0
    if targets:
        for target in targets:
            c.entry(store.resolve(target))
            count += 1
        return count, c
    try:
        names = sorted(os.listdir(store.entries_dir))
    except OSError as exc:
        raise StoreError(f"cannot list {store.entries_dir}: {exc}") from exc
    seen: set[str] = set()
    for name in names:
        path = store.entries_dir / name
        if not layout.is_entry_name(name) or not path.is_dir() or path.is_symlink():
            c.add("orphaned", path, "not a store entry")
            continue
        try:
            entry = store.resolve(name)
        except StoreError as exc:
            c.add("damaged", path, str(exc))
            continue
        seen.add(entry.hash)
        c.entry(entry)
        count += 1
    for row in store.index.rows():
        if row.hash not in seen:
            c.add("missing", Path(row.path), "indexed entry is gone from entries/")
    _source_wheels(store, c)
    _git_mirrors(store, c)
    trouble = store.index.integrity_problem()
    if trouble is not None:
        c.add("corrupt-index", store.index_path, trouble)
    return count, c


def _source_wheels(store: Store, c: _Checker) -> None:
    """Check the requirement wheels under ``sources/wheels/`` against every digest recorded for
    them: in the requirement cache (``cache/wheels.json``) and in the entries' derivations."""
    wheel_dir = store.sources_dir / layout.SOURCES_WHEELS
    recorded: dict[str, set[str]] = {}
    for item in read_json(store.cache_dir / "wheels.json").values():
        value = item.get("value") if isinstance(item, dict) else None
        if (
            isinstance(value, dict)
            and isinstance(value.get("wheel"), str)
            and isinstance(value.get("blake3"), str)
            and Path(value["wheel"]).parent == wheel_dir
        ):
            recorded.setdefault(Path(value["wheel"]).name, set()).add(value["blake3"])
    for name in store.entry_names():
        try:
            doc = DerivationDoc(read_derivation(store.entries_dir / name))
        except StoreError:
            continue  # reported with its entry
        for req in doc.requirements or ():
            if (
                isinstance(req, dict)
                and isinstance(req.get("wheel"), str)
                and isinstance(req.get("blake3"), str)
            ):
                recorded.setdefault(req["wheel"], set()).add(req["blake3"])
    for name, digests in sorted(recorded.items()):
        path = wheel_dir / name
        try:
            digest = file_blake3(path)
        except FileNotFoundError:
            continue  # fetched again when needed
        except OSError as exc:
            c.add("damaged", path, f"cannot read: {exc}")
            continue
        c.files += 1
        if digest not in digests:
            c.add("modified", path, "requirement wheel no longer has its recorded blake3")


def _git_mirrors(store: Store, c: _Checker) -> None:
    """Run ``git fsck`` on every git mirror under ``sources/git/``: git names each object by its
    digest, and fsck re-hashes every object against its name (a mirror is a source cache whose
    digests are recorded inside it)."""
    import subprocess

    mirrors = store.sources_dir / layout.SOURCES_GIT
    try:
        names = sorted(n for n in os.listdir(mirrors) if n.endswith(".git"))
    except OSError:
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    for name in names:
        path = mirrors / name
        if not path.is_dir() or path.is_symlink():
            continue
        try:
            proc = subprocess.run(
                ["git", "-c", "safe.directory=*", "--git-dir", os.fspath(path), "fsck",
                 "--full", "--strict", "--no-dangling", "--no-progress"],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )  # fmt: skip
        except OSError as exc:
            c.add("damaged", path, f"cannot run git fsck: {exc}")
            return
        c.files += 1
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            c.add("modified", path, "git fsck: " + (lines[0] if lines else "failed"))


def _quarantine_targets(store: Store, problems: Sequence[VerifyProblem]) -> list[Path]:
    """Return what ``--repair`` moves aside: whole entries with a missing, modified or damaged
    file, stray files inside an entry, stray things in ``entries/``."""
    out: dict[Path, str] = {}
    for p in problems:
        if p.kind in INDEX_KINDS or p.kind in ("corrupt-index", "quarantined"):
            continue
        if p.kind == "missing" and "indexed" in p.detail:
            continue
        if p.path.parent in (
            store.entries_dir,
            store.sources_dir / layout.SOURCES_WHEELS,
            store.sources_dir / layout.SOURCES_GIT,
        ):
            out.setdefault(p.path, str(p))
        elif p.path.parent.parent == store.entries_dir:
            target = p.path if p.kind in ("orphaned", "uncovered") else p.path.parent
            out.setdefault(target, str(p))
    # An entry that goes takes its stray files with it.
    return [t for t in out if t.parent not in out]


def _healed(store: Store, start: int) -> tuple[VerifyProblem, ...]:
    return tuple(
        VerifyProblem(kind=h.kind, path=h.path, detail=h.detail) for h in store.healed[start:]
    )


def verify_store(
    store: Store,
    targets: Sequence[str] = (),
    *,
    repair_index: bool = False,
    repair: bool = False,
) -> VerifyReport:
    """Verify the whole store, or only the entries named by ``targets``.

    With ``repair_index`` the index is rebuilt from ``entries/`` when it disagrees with them,
    and the store is verified again; ``repaired`` lists what the rebuild fixed. ``repair`` also
    quarantines damaged entries and stray files first. Repairs the store made on its own before
    or during the check (a corrupt index set aside, an interrupted publish indexed, a damaged
    entry quarantined) are listed under ``repaired`` too.
    """
    before = tuple(
        VerifyProblem(kind=h.kind, path=h.path, detail=h.detail) for h in store.healed
    )
    start = len(store.healed)
    count, c = _check(store, targets)
    first = tuple(c.problems)
    index_trouble = any(
        p.kind in INDEX_KINDS
        or p.kind == "corrupt-index"
        or (p.kind == "missing" and "indexed" in p.detail)
        for p in first
    )
    moved = _quarantine_targets(store, first) if repair else []
    if not (moved or ((repair or repair_index) and index_trouble)):
        return VerifyReport(
            entries=count,
            files=c.files,
            problems=first,
            repaired=before + _healed(store, start),
        )
    for target in moved:
        try:
            store.quarantine(target, "found by verify")
        except OSError as exc:
            raise StoreError(f"cannot move {target} to quarantine: {exc}") from exc
    if any(p.kind == "corrupt-index" for p in first):
        store.reset_index("failed SQLite's quick_check")
    else:
        store.rebuild_index()
    healed = _healed(store, start)
    count, c = _check(store, targets)
    after = tuple(c.problems)
    fixed = tuple(p for p in first if p not in after)
    return VerifyReport(
        entries=count,
        files=c.files,
        problems=after,
        repaired=before + fixed + tuple(h for h in healed if h.kind != "quarantined"),
    )
