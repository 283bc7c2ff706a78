"""``cache ls`` and ``cache gc``: what a binary cache holds, and pruning it.

``ls`` also reads each signed entry's envelope for its signers (their claimed names and
fingerprints). ``gc`` follows the store's gc policies: ``--keep-last N`` keeps the newest N
entries of each package, ``--older-than D`` keeps entries pushed within D; given both, an entry
goes only when neither keeps it; an entry a kept one was built against stays too (closures are
never broken). Manifests go first, then blobs no remaining manifest references (blobs younger
than :data:`BLOB_GRACE` stay: a push in flight writes its blobs before its manifest).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocmforge.cache.backend import Backend, CacheError
from rocmforge.cache.manifest import FileRef, ManifestProblem, parse_manifest
from rocmforge.store import layout
from rocmforge.util.fsutil import loads_untrusted

if TYPE_CHECKING:
    from rocmforge.trust.signing import Signer

#: Seconds an unreferenced blob is kept (a concurrent push uploads blobs before its manifest).
BLOB_GRACE = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedEntry:
    """One entry a cache holds."""

    hash: str
    name: str
    version: str
    size: int
    pushed: float
    blobs: tuple[str, ...]
    #: Input hashes of the entries this one was built against (its manifest's meta).
    built_against: tuple[str, ...] = ()
    #: Whether the manifest lists a signature envelope.
    signed: bool = False
    #: Who signed it (its envelope's keyids; claims, checked only by a substitution), when
    #: :func:`list_cache` read the envelopes; None when not read.
    signers: tuple[Signer, ...] | None = None

    def to_json(self) -> dict[str, object]:
        """Return the entry as JSON-ready data."""
        out: dict[str, object] = {
            "hash": self.hash,
            "name": self.name,
            "version": self.version,
            "size": self.size,
            "pushed": self.pushed,
            "signed": self.signed,
        }
        if self.signers is not None:
            out["signers"] = [s.to_json() for s in self.signers]
        return out


def _against(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(h) for h in value)


def _signers(backend: Backend, files: tuple[FileRef, ...]) -> tuple[Signer, ...]:
    """The claimed signers of the envelope among ``files`` (none: unsigned or unreadable)."""
    import hashlib

    from rocmforge.trust.signing import EnvelopeMismatch, envelope_signers

    ref = next((f for f in files if f.name == layout.PROVENANCE_DSSE), None)
    if ref is None or ref.size > MAX_ENVELOPE:
        return ()
    try:
        with backend.open_blob(ref.sha256) as src:
            raw = src.read(ref.size + 1)
        if hashlib.sha256(raw).hexdigest() != ref.sha256:
            return ()
        envelope = loads_untrusted(raw)
        return envelope_signers(envelope) if isinstance(envelope, dict) else ()
    except (CacheError, OSError, ValueError, EnvelopeMismatch):
        return ()


#: The largest envelope blob ``cache ls`` reads.
MAX_ENVELOPE = 1 << 20


def list_cache(backend: Backend, *, signers: bool = False) -> list[CachedEntry]:
    """Return every well-formed entry in the cache, newest first; with ``signers``, each
    entry's envelope is read for who signed it (one blob read per signed entry)."""
    out = []
    for info in backend.manifests():
        raw = backend.get_manifest(info.hash)
        if raw is None:
            continue
        try:
            m = parse_manifest(raw)
        except ManifestProblem:
            continue
        out.append(
            CachedEntry(
                hash=m.hash,
                name=m.name,
                version=m.version,
                size=sum(f.size for f in m.files),
                pushed=info.mtime,
                blobs=tuple(f.sha256 for f in m.files + m.accepted),  # its runs' blobs too
                built_against=_against(m.meta.get("built_against")),
                signed=any(f.name == layout.PROVENANCE_DSSE for f in m.files),
                signers=_signers(backend, m.files) if signers else None,
            )
        )
    out.sort(key=lambda e: (-e.pushed, e.name, e.hash))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneReport:
    """What ``cache gc`` deleted (or would delete with ``dry_run``)."""

    deleted: tuple[CachedEntry, ...]
    kept: int
    blobs: int
    blob_bytes: int
    dry_run: bool

    def to_json(self) -> dict[str, object]:
        """Return the report as JSON-ready data."""
        return {
            "deleted": [e.to_json() for e in self.deleted],
            "kept": self.kept,
            "blobs": self.blobs,
            "blob_bytes": self.blob_bytes,
            "dry_run": self.dry_run,
        }


def prune_cache(
    backend: Backend,
    *,
    keep_last: int | None,
    older_than: float | None,
    dry_run: bool = False,
    now: float | None = None,
    grace: float = BLOB_GRACE,
) -> PruneReport:
    """Delete the entries neither policy keeps, then the blobs nothing references."""
    now = time.time() if now is None else now
    entries = list_cache(backend)
    per_package: dict[str, int] = defaultdict(int)
    keep: list[CachedEntry] = []
    gone: list[CachedEntry] = []
    for e in entries:  # newest first
        per_package[e.name] += 1
        kept_by_count = keep_last is not None and per_package[e.name] <= keep_last
        kept_by_age = older_than is not None and now - e.pushed < older_than
        (keep if kept_by_count or kept_by_age else gone).append(e)
    # A kept entry keeps what it was built against (transitively), like the store's gc: a
    # store substituting it substitutes its closure from the same cache.
    by_hash = {e.hash: e for e in entries}
    kept = {e.hash for e in keep}
    todo = list(keep)
    while todo:
        for h in todo.pop().built_against:
            if h in by_hash and h not in kept:
                kept.add(h)
                todo.append(by_hash[h])
    keep = [e for e in entries if e.hash in kept]
    gone = [e for e in entries if e.hash not in kept]
    for e in gone:
        if not dry_run:
            backend.delete_manifest(e.hash)
    referenced = {b for e in keep for b in e.blobs}
    count, size = backend.prune_blobs(referenced, grace=grace, dry_run=dry_run)
    if not dry_run:  # interrupted pushes' temp files (which prune_blobs never counts)
        backend.clean_interrupted()
    return PruneReport(
        deleted=tuple(gone), kept=len(keep), blobs=count, blob_bytes=size, dry_run=dry_run
    )
