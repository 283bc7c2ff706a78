"""The manifest a cache keeps per input hash: which blobs make up one store entry.

``{"schema": 1, "hash", "name", "version", "files": [{"name", "sha256", "size"}], "meta": {...},
"accepted": [{"name", "sha256", "size"}]}``; ``accepted`` (optional, absent when empty) lists the
entry's GPU acceptance runs (``accepted/<hash>/<run>.json`` in a store, see
:mod:`rocmforge.store.accepted`): they are not files of the entry, which stays sealed as the first
manifest named it, and a later push may add runs (the union of the cache's and the store's). A
reader that does not know ``accepted`` ignores it, so the schema stays 1.
The manifest itself is not signed: what makes it trustworthy is the DSSE envelope among its files
(over provenance.json, whose subjects carry every wheel's digest). ``meta`` only carries build
facts that are informational (timings, archs, links).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rocmforge.store import layout
from rocmforge.util.fsutil import loads_untrusted

SCHEMA = 1
#: meta.json fields a manifest carries across (informational; everything trusted is signed).
#: ``built_against`` lets ``cache gc`` keep closures without reading derivations; a substitute
#: takes it from the verified derivation instead.
CARRIED_META = ("build_seconds", "archs", "links", "steps", "built_against", "telemetry")


@dataclass(frozen=True, slots=True)
class FileRef:
    """One file of an entry: its plain name, sha256 and size."""

    name: str
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """One cached entry."""

    hash: str
    name: str
    version: str
    files: tuple[FileRef, ...]
    meta: dict[str, Any]
    #: the entry's acceptance runs (file name = the run's name in ``accepted/<hash>/``)
    accepted: tuple[FileRef, ...] = ()

    def to_bytes(self) -> bytes:
        """Return the manifest as canonical JSON bytes."""
        data = {
            "schema": SCHEMA,
            "hash": self.hash,
            "name": self.name,
            "version": self.version,
            "files": [{"name": f.name, "sha256": f.sha256, "size": f.size} for f in self.files],
            "meta": self.meta,
        }
        if self.accepted:
            data["accepted"] = [
                {"name": f.name, "sha256": f.sha256, "size": f.size} for f in self.accepted
            ]
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


class ManifestProblem(Exception):
    """Why a manifest is refused (a one-line reason; never leaves the cache package)."""


def bad_name(name: str) -> bool:
    """Return whether ``name`` is not a plain file name (``../``, absolute, hidden, nested)."""
    return (
        not name
        or name in (".", "..")
        or name.startswith(".")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or name == layout.META
    )


def parse_manifest(raw: bytes) -> Manifest:
    """Parse and check a manifest's shape; raise :class:`ManifestProblem` with the reason."""
    try:
        data = loads_untrusted(raw)
    except ValueError as exc:
        raise ManifestProblem(f"the manifest is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ManifestProblem("the manifest has an unknown schema")
    try:
        hash_, name, version = (str(data[k]) for k in ("hash", "name", "version"))
        files = _refs(data["files"], "file")
        runs = data.get("accepted") or []
        if not isinstance(runs, list):
            raise ManifestProblem("the manifest's accepted is not a list")
        accepted = _refs(runs, "acceptance run")
        meta = data.get("meta") or {}
        if not isinstance(meta, dict):
            raise ManifestProblem("the manifest's meta is not a table")
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestProblem(f"the manifest is malformed ({exc})") from None
    if layout.entry_problem(hash_, name, version):
        raise ManifestProblem("the manifest's hash, name or version is invalid")
    for refs, what in ((files, "a file"), (accepted, "an acceptance run")):
        names = [f.name for f in refs]
        if len(set(names)) != len(names):
            raise ManifestProblem(f"the manifest lists {what} twice")
    return Manifest(
        hash_,
        name,
        version,
        tuple(files),
        {k: meta[k] for k in CARRIED_META if k in meta},
        tuple(accepted),
    )


def _refs(items: Any, what: str) -> list[FileRef]:
    """The checked file references of a manifest list (``files`` or ``accepted``)."""
    out = []
    for f in items:
        ref = FileRef(str(f["name"]), str(f["sha256"]), int(f["size"]))
        if bad_name(ref.name):
            raise ManifestProblem(f"the manifest names an unsafe {what} {ref.name!r}")
        if len(ref.sha256) != 64 or any(c not in "0123456789abcdef" for c in ref.sha256):
            raise ManifestProblem(f"the manifest has a bad digest for {ref.name!r}")
        if ref.size < 0:
            raise ManifestProblem(f"the manifest has a bad size for {ref.name!r}")
        out.append(ref)
    return out
