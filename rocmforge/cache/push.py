"""``push``: upload store entries to a binary cache, only what the cache lacks.

An entry's acceptance runs (``accepted/<hash>/<run>.json`` beside it in the store) go up with
it, as blobs the manifest lists under ``accepted``. An entry the cache already has costs one
lookup, unless the store holds runs that manifest lacks: those blobs go up and the manifest is
replaced by one naming the cache's files (the first manifest's, never the pusher's) and the union
of both lists of runs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rocmforge.cache.backend import Backend
from rocmforge.cache.manifest import (
    CARRIED_META,
    FileRef,
    Manifest,
    ManifestProblem,
    parse_manifest,
)
from rocmforge.errors import UsageError
from rocmforge.store import layout
from rocmforge.store.accepted import run_files
from rocmforge.store.entry import Entry
from rocmforge.store.store import Store
from rocmforge.util.progress import NullReporter, Reporter

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class PushedEntry:
    """One entry's push: how many blobs and bytes went up, or that the cache had it."""

    hash: str
    name: str
    version: str
    present: bool
    blobs: int
    bytes: int
    signed: bool
    #: acceptance runs this push added to the cache's manifest (their blobs count in ``blobs``)
    runs: int = 0

    def to_json(self) -> dict[str, object]:
        """Return the result as JSON-ready data."""
        return {
            "hash": self.hash,
            "name": self.name,
            "version": self.version,
            "present": self.present,
            "blobs": self.blobs,
            "bytes": self.bytes,
            "signed": self.signed,
            "runs": self.runs,
        }


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def store_root(entry: Entry) -> Path:
    """The root of the store holding the published ``entry`` (``<root>/entries/<name>/``)."""
    return entry.path.parent.parent


def local_runs(entry: Entry) -> dict[str, tuple[FileRef, Path]]:
    """The entry's acceptance runs kept in its store, by file name: reference and path."""
    out = {}
    for p in run_files(store_root(entry), entry.hash):
        try:
            out[p.name] = (FileRef(p.name, _sha256(str(p)), os.stat(p).st_size), p)
        except FileNotFoundError:  # gc took it meanwhile
            continue
    return out


def entry_manifest(entry: Entry, runs: dict[str, tuple[FileRef, Path]] | None = None) -> Manifest:
    """Return the manifest of a published entry (every file but meta.json, with digests; its
    acceptance runs under ``accepted``: ``runs`` as :func:`local_runs` found them, else read)."""
    files = []
    for n in sorted(os.listdir(entry.path)):
        p = os.path.join(entry.path, n)
        if n == layout.META or not os.path.isfile(p):
            continue
        record = entry.meta.wheel(n)
        digest = record.sha256 if record is not None and record.sha256 else _sha256(p)
        files.append(FileRef(n, digest, os.stat(p).st_size))
    meta = entry.meta.to_json()
    return Manifest(
        entry.hash,
        entry.name,
        entry.version,
        tuple(files),
        {k: meta[k] for k in CARRIED_META if k in meta},
        tuple(ref for ref, _ in (local_runs(entry) if runs is None else runs).values()),
    )


def with_closure(store: Store, entries: Iterable[Entry]) -> list[Entry]:
    """Return ``entries`` with everything they were built against (``meta.json``
    ``built_against``, transitively), each once, dependencies before their dependents: a cache
    then never holds an entry whose closure it lacks, even halfway through a push."""
    out: dict[str, Entry] = {}
    visiting: set[str] = set()

    def visit(entry: Entry) -> None:
        if entry.hash in out or entry.hash in visiting:
            return
        visiting.add(entry.hash)
        for h in entry.meta.built_against:
            try:
                dep = store.resolve(h)
            except UsageError:
                raise UsageError(
                    f"{entry.name} {entry.version} ({entry.hash}) was built against {h}, which "
                    f"is not in the store {store.root}: its closure cannot be pushed "
                    "(--no-closure pushes the entry alone)"
                ) from None
            visit(dep)
        out[entry.hash] = entry

    for e in entries:
        visit(e)
    return list(out.values())


def _send(backend: Backend, refs: Iterable[tuple[FileRef, Path]]) -> tuple[int, int]:
    """Upload the blobs of ``refs`` the cache lacks; return (blobs, bytes) sent."""
    blobs = sent = 0
    for f, path in refs:
        if not backend.has_blob(f.sha256) and backend.put_blob(f.sha256, path):
            blobs += 1
            sent += f.size
    return blobs, sent


def _add_runs(
    backend: Backend,
    entry: Entry,
    raw: bytes,
    runs: dict[str, tuple[FileRef, Path]],
    reporter: Reporter,
) -> tuple[int, int, int]:
    """Add the local ``runs`` the cache's manifest ``raw`` lacks: their blobs, then the
    manifest replaced by the union (the cache's files and meta as they are). Return (runs,
    blobs, bytes) added. A run of a name the cache has is the cache's (runs are never
    rewritten). A manifest that does not parse is left alone, with a warning."""
    try:
        remote = parse_manifest(raw)
    except ManifestProblem as exc:
        reporter.warning(
            f"{backend.url}: the manifest of {entry.name} {entry.version} ({entry.hash}) is "
            f"bad ({exc}): its acceptance runs are not added"
        )
        return 0, 0, 0
    have = {f.name for f in remote.accepted}
    missing = [runs[n] for n in sorted(runs) if n not in have]
    if not missing:
        return 0, 0, 0
    reporter.phase(f"push {len(missing)} acceptance run(s) of {entry.name} {entry.version}")
    blobs, sent = _send(backend, missing)
    union = Manifest(
        remote.hash,
        remote.name,
        remote.version,
        remote.files,
        remote.meta,
        remote.accepted + tuple(ref for ref, _ in missing),
    )
    backend.replace_manifest(entry.hash, union.to_bytes())
    return len(missing), blobs, sent


def push_entries(
    backend: Backend, entries: Iterable[Entry], *, reporter: Reporter | None = None
) -> list[PushedEntry]:
    """Push ``entries``: blobs first (missing ones only), the manifest last, atomically.

    A manifest already in the cache means the entry is there: none of its files is read or
    uploaded, only the acceptance runs (``accepted/<hash>/``) that manifest lacks (see
    :func:`_add_runs`). Two pushers of the same hash race safely: blobs are content-addressed
    and a new manifest is written with a no-replace rename, so the first manifest wins and both
    are identical in what they name; a replace to add runs keeps the cache's files. (Two pushers
    adding different runs at once can leave one pusher's runs out; its next push adds them.)
    """
    reporter = reporter or NullReporter()
    out = []
    for entry in entries:
        signed = (entry.path / layout.PROVENANCE_DSSE).is_file()
        raw = backend.get_manifest(entry.hash)
        present = raw is not None
        runs = local_runs(entry)
        blobs = sent = added = 0
        if raw is None:
            reporter.phase(f"push {entry.name} {entry.version}")
            manifest = entry_manifest(entry, runs)
            refs = [(f, entry.path / f.name) for f in manifest.files]
            blobs, sent = _send(backend, refs + [runs[f.name] for f in manifest.accepted])
            if backend.put_manifest(entry.hash, manifest.to_bytes()):
                added = len(manifest.accepted)
            else:  # another pusher's manifest won: ours adds the runs it lacks
                raw = backend.get_manifest(entry.hash)
        if raw is not None and runs:
            added, b, n = _add_runs(backend, entry, raw, runs, reporter)
            blobs, sent = blobs + b, sent + n
        out.append(
            PushedEntry(
                hash=entry.hash,
                name=entry.name,
                version=entry.version,
                present=present,
                blobs=blobs,
                bytes=sent,
                signed=signed,
                runs=added,
            )
        )
    return out
