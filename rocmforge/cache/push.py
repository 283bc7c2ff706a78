"""``push``: upload store entries to a binary cache, only what the cache lacks."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass

from rocmforge.cache.backend import Backend
from rocmforge.cache.manifest import CARRIED_META, FileRef, Manifest
from rocmforge.errors import UsageError
from rocmforge.store import layout
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
        }


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def entry_manifest(entry: Entry) -> Manifest:
    """Return the manifest of a published entry (every file but meta.json, with digests)."""
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


def push_entries(
    backend: Backend, entries: Iterable[Entry], *, reporter: Reporter | None = None
) -> list[PushedEntry]:
    """Push ``entries``: blobs first (missing ones only), the manifest last, atomically.

    A manifest already in the cache means the entry is there: nothing is read or uploaded. Two
    pushers of the same hash race safely: blobs are content-addressed and every write is a
    no-replace rename, so the first manifest wins and both are identical in what they name.
    """
    reporter = reporter or NullReporter()
    out = []
    for entry in entries:
        signed = (entry.path / layout.PROVENANCE_DSSE).is_file()
        if backend.get_manifest(entry.hash) is not None:
            out.append(
                PushedEntry(
                    hash=entry.hash,
                    name=entry.name,
                    version=entry.version,
                    present=True,
                    blobs=0,
                    bytes=0,
                    signed=signed,
                )
            )
            continue
        reporter.phase(f"push {entry.name} {entry.version}")
        manifest = entry_manifest(entry)
        blobs = sent = 0
        for f in manifest.files:
            if not backend.has_blob(f.sha256) and backend.put_blob(f.sha256, entry.path / f.name):
                blobs += 1
                sent += f.size
        backend.put_manifest(entry.hash, manifest.to_bytes())
        out.append(
            PushedEntry(
                hash=entry.hash,
                name=entry.name,
                version=entry.version,
                present=False,
                blobs=blobs,
                bytes=sent,
                signed=signed,
            )
        )
    return out
