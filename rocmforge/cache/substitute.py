"""Substitution: on a store miss, fetch the entry from a binary cache instead of building it.

For each configured cache in order: one manifest lookup by input hash; on a hit, every blob is
streamed into a private build directory with its sha256 checked while it is written; the DSSE
envelope must verify against a trusted key and sign the provenance.json that came with it; the
signed statement must name the same input hash and the very wheels downloaded; derivation.json
must hash to the input hash. Only then is the directory published through
:meth:`Store.publish` (the atomic path a build uses) with ``origin`` recording the cache. Any
refusal is a warning naming the cache and the reason, and the next cache (or a build) follows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.cache.backend import Backend, CacheError, now
from rocmforge.cache.manifest import Manifest, ManifestProblem, parse_manifest
from rocmforge.cache.transfer import copy_hashing
from rocmforge.cache.urls import open_backend
from rocmforge.errors import RocmforgeError
from rocmforge.signing import trusted_keys, verify_envelope
from rocmforge.store import layout
from rocmforge.store.entry import Entry, input_hash, read_derivation
from rocmforge.store.store import Store
from rocmforge.util.progress import Reporter


class SubstituteError(RocmforgeError):
    """``--require-substitute`` and no cache could provide the entry (exit 1)."""

    exit_code = 1


class Refused(Exception):
    """A cache's answer was refused; the message is the reason."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """The entry a realize is missing."""

    hash: str
    name: str
    version: str


def _download(backend: Backend, manifest: Manifest, dest: str) -> dict[str, str]:
    """Stream every blob into ``dest``, checking size and sha256 on the way.

    Return each wheel's blake3, computed in the same pass (publish then reads nothing again);
    the bytes are read once and hashed from the buffer they are written from
    (:func:`rocmforge.cache.transfer.copy_hashing`).
    """
    got = {}
    for f in manifest.files:
        wheel = f.name.endswith(layout.WHEEL_SUFFIX)
        path = os.path.join(dest, f.name)
        with backend.open_blob(f.sha256) as src:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                copied = copy_hashing(src, fd, limit=f.size, blake3=wheel)
            finally:
                os.close(fd)
        if copied.size > f.size:
            raise Refused(f"blob of {f.name} is longer than the manifest says")
        if copied.size != f.size:
            raise Refused(f"blob of {f.name} is truncated ({copied.size} of {f.size} bytes)")
        if copied.sha256 != f.sha256:
            raise Refused(f"blob of {f.name} does not match its digest")
        if copied.blake3 is not None:
            got[f.name] = copied.blake3
    return got


def _check(manifest: Manifest, dest: str, want: Wanted) -> tuple[str, dict[str, Any]]:
    """Check signature, statement and derivation of the downloaded entry; return (keyid, stmt)."""
    names = {f.name for f in manifest.files}
    if layout.PROVENANCE_DSSE not in names:
        raise Refused("the entry is unsigned")
    for needed in (layout.PROVENANCE, layout.DERIVATION):
        if needed not in names:
            raise Refused(f"the entry has no {needed}")
    with open(os.path.join(dest, layout.PROVENANCE_DSSE), "rb") as f:
        try:
            envelope = json.loads(f.read())
        except ValueError:
            raise Refused("the signature envelope is not JSON") from None
    with open(os.path.join(dest, layout.PROVENANCE), "rb") as f:
        payload = f.read()
    if not isinstance(envelope, dict):
        raise Refused("the signature envelope is not a JSON object")
    check = verify_envelope(envelope, trusted_keys(), payload=payload)
    if check.status != "valid":
        who = f" ({check.keyid})" if check.keyid else ""
        raise Refused(f"signature {check.status}{who}: {check.detail}")
    try:
        statement = json.loads(payload)
        internal = statement["predicate"]["buildDefinition"]["internalParameters"]
        signed_hash = internal["inputHash"]
        subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise Refused(f"the signed statement is malformed ({exc})") from None
    if signed_hash != want.hash:
        raise Refused(f"the signed statement is for input hash {signed_hash}, not {want.hash}")
    digests = {f.name: f.sha256 for f in manifest.files}
    wheels = {n for n in names if n.endswith(layout.WHEEL_SUFFIX)}
    if not wheels or wheels != set(subjects):
        raise Refused("the wheels differ from those the signed statement names")
    for w in sorted(wheels):
        if digests[w] != subjects[w]:
            raise Refused(f"wheel {w} does not match the signed statement (swapped)")
    try:
        derivation = read_derivation(Path(dest))
    except RocmforgeError as exc:
        raise Refused(f"derivation.json is unreadable ({exc})") from None
    if input_hash(derivation) != want.hash:
        raise Refused("derivation.json does not hash to the input hash")
    return str(check.keyid), statement


def manifest_size(manifest: Manifest, name: str) -> int:
    """Return the size the manifest gives the file ``name``."""
    return next(f.size for f in manifest.files if f.name == name)


def _try(store: Store, backend: Backend, want: Wanted, reporter: Reporter) -> Entry | None:
    raw = backend.get_manifest(want.hash)
    if raw is None:
        return None
    try:
        manifest = parse_manifest(raw)
    except ManifestProblem as exc:
        raise Refused(str(exc)) from None
    if (manifest.hash, manifest.name, manifest.version) != (want.hash, want.name, want.version):
        raise Refused(
            f"asked for {want.hash}, the cache answered with {manifest.hash} "
            f"({manifest.name} {manifest.version})"
        )
    reporter.phase(f"substitute from {backend.url}")
    with store.new_build_dir(want.hash) as bd:
        dest = str(bd.path / "entry")
        try:
            os.mkdir(dest)
        except OSError as exc:
            raise CacheError(f"cannot create {dest}: {exc}") from None
        import http.client  # ~11 ms (ssl, email): only a hit pays for it, never a miss

        try:
            blake3s = _download(backend, manifest, dest)
        except (OSError, http.client.HTTPException) as exc:  # cut short, disk full: no entry
            raise CacheError(f"cannot download {want.hash}: {exc}") from None
        keyid, statement = _check(manifest, dest, want)
        internal = statement["predicate"]["buildDefinition"]["internalParameters"]
        meta: dict[str, Any] = dict(manifest.meta)
        sha = {f.name: f.sha256 for f in manifest.files}
        meta["wheels"] = [
            {"file": n, "sha256": sha[n], "blake3": b, "size": manifest_size(manifest, n)}
            for n, b in sorted(blake3s.items())
        ]
        meta["sandbox"] = internal.get("sandbox")
        meta["sources"] = []  # nothing here depends on local source caches
        meta["origin"] = {
            "cache": backend.url,
            "keyid": keyid,
            "substituted": round(now(), 3),
            "host": internal.get("host"),
        }
        return store.publish(
            bd.path / "entry", hash=want.hash, name=want.name, version=want.version, meta=meta
        )


def substitute(
    store: Store,
    caches: Sequence[str],
    want: Wanted,
    reporter: Reporter,
    *,
    require: bool = False,
) -> Entry | None:
    """Ask ``caches`` in order for ``want``; return the published entry, or None to build.

    Refusals and unreachable caches are warnings; with ``require`` they end in
    :class:`SubstituteError` instead of a build.
    """
    reasons = []
    for url in caches:
        try:
            backend = open_backend(url)
            entry = _try(store, backend, want, reporter)
        except Refused as exc:
            msg = f"cache {url}: refused {want.name} {want.version} ({want.hash}): {exc}"
        except CacheError as exc:
            msg = f"cache {url}: {exc}"
        else:
            if entry is not None:
                return entry
            reasons.append(f"{url}: not there")
            continue
        reporter.warning(msg + ("" if require else "; building instead"))
        reasons.append(msg)
    if require:
        raise SubstituteError(
            f"{want.name} {want.version} ({want.hash}): no cache could provide it "
            f"(--require-substitute): " + ("; ".join(reasons) or "no cache configured")
        )
    return None
