"""Substitution: on a store miss, fetch the entry from a binary cache instead of building it.

For each configured cache in order: one manifest lookup by input hash; on a hit, every blob is
streamed into a private build directory with its sha256 checked while it is written; the DSSE
envelope must verify against a trusted key and sign the provenance.json that came with it; the
signed statement must name the same input hash and the very wheels downloaded; derivation.json
must hash to the input hash. The entries that derivation names under ``recipes`` (its
closure) are then made present, substituted first if missing. Only then is the directory
published through :meth:`Store.publish` (the atomic path a build uses) with ``origin``
recording the cache and ``built_against`` the closure. Any refusal is a warning naming the
cache and the reason, and the next cache (or a build) follows. :func:`offers` answers ``plan``:
which cache holds which entry, without downloading.

After the entry is published, its acceptance runs (the manifest's ``accepted``) are fetched into
``accepted/<hash>/`` (:func:`fetch_runs`): each blob must have the manifest's size and sha256
and parse as a run (:func:`rocmforge.store.accepted.parse_run`); a bad one is a warning and is
left out, never a refusal of the entry (a run is not covered by the entry's signature; a signed
run's own signature is checked where it is read, by ``audit``). An entry already in the store is
not looked up again for runs: that would cost every realize's cache hit a request per cache.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.cache.backend import Backend, CacheError, now
from rocmforge.cache.manifest import FileRef, Manifest, ManifestProblem, parse_manifest
from rocmforge.cache.transfer import copy_hashing
from rocmforge.cache.urls import open_backend
from rocmforge.errors import RocmforgeError, StoreError
from rocmforge.store import layout
from rocmforge.store.accepted import run_files, write_run
from rocmforge.store.entry import Entry, input_hash, read_derivation
from rocmforge.store.store import Store
from rocmforge.trust.signing import PublicKey, SignatureCheck, trusted_keys, verify_envelope
from rocmforge.util.fsutil import disk_full_error, loads_untrusted
from rocmforge.util.hashing import file_digests
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


def _download(backend: Backend, files: Sequence[FileRef], dest: str) -> dict[str, str]:
    """Stream every blob into ``dest``, checking size on the way and sha256 of all but wheels.

    Return each wheel's blake3, computed in the same pass (publish then reads nothing again);
    the bytes are read once and hashed from the buffer they are written from
    (:func:`rocmforge.cache.transfer.copy_hashing`). A wheel is checked by that blake3 against
    the signed statement (:func:`_check`), not by sha256: blake3 is ~3x faster, and the signed
    digest is the one that counts.
    """
    got = {}
    for f in files:
        wheel = f.name.endswith(layout.WHEEL_SUFFIX)
        path = os.path.join(dest, f.name)
        with backend.open_blob(f.sha256) as src:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                copied = copy_hashing(src, fd, limit=f.size, blake3=wheel, sha256=not wheel)
            finally:
                os.close(fd)
        if copied.size > f.size:
            raise Refused(f"blob of {f.name} is longer than the manifest says")
        if copied.size != f.size:
            raise Refused(f"blob of {f.name} is truncated ({copied.size} of {f.size} bytes)")
        if copied.sha256 is not None and copied.sha256 != f.sha256:
            raise Refused(f"blob of {f.name} does not match its digest")
        if copied.blake3 is not None:
            got[f.name] = copied.blake3
    return got


#: The largest provenance.json or envelope read before the signature is checked.
MAX_STATEMENT = 64 << 20


def _check_signed(
    manifest: Manifest, dest: str, want: Wanted, trusted: Mapping[str, PublicKey]
) -> tuple[SignatureCheck, dict[str, Any]]:
    """Check the signature and what the signed statement covers, with only provenance.json and
    its envelope downloaded into ``dest``: before any other blob is read.

    The manifest's files must be exactly the set the statement covers
    (:func:`rocmforge.store.coverage.coverage`), each with the signed sha256: a file the
    statement does not name (a ``sitecustomize.py`` appended to the manifest), one it names
    that the manifest leaves out, or a renamed one is refused. Return the (valid) signature
    check and the signed statement.
    """
    from rocmforge.store.coverage import coverage, file_set_problem  # a hit only

    names = {f.name for f in manifest.files}
    if layout.PROVENANCE_DSSE not in names:
        raise Refused("the entry is unsigned")
    for needed in (layout.PROVENANCE, layout.DERIVATION):
        if needed not in names:
            raise Refused(f"the entry has no {needed}")
    with open(os.path.join(dest, layout.PROVENANCE_DSSE), "rb") as f:
        try:
            envelope = loads_untrusted(f.read())
        except ValueError as exc:
            raise Refused(f"the signature envelope is not JSON ({exc})") from None
    with open(os.path.join(dest, layout.PROVENANCE), "rb") as f:
        payload = f.read()
    if not isinstance(envelope, dict):
        raise Refused("the signature envelope is not a JSON object")
    check = verify_envelope(envelope, trusted, payload=payload)
    if check.status != "valid":  # the detail names the signers (and the trusted keys)
        raise Refused(f"signature {check.status}: {check.detail}")
    try:
        statement = loads_untrusted(payload)
        internal = statement["predicate"]["buildDefinition"]["internalParameters"]
        signed_hash = internal["inputHash"]
        cov = coverage(statement)
    except (ValueError, KeyError, TypeError) as exc:
        raise Refused(f"the signed statement is malformed ({exc})") from None
    if signed_hash != want.hash:
        raise Refused(f"the signed statement is for input hash {signed_hash}, not {want.hash}")
    _check_wheels(manifest, statement)
    why = file_set_problem(cov, {f.name: f.sha256 for f in manifest.files})
    if why is not None:
        raise Refused(f"the entry's files differ from its signed statement ({why})")
    return check, statement


def _check_wheels(
    manifest: Manifest, statement: Any
) -> tuple[dict[str, str], dict[str, str | None]]:
    """The manifest's wheels must be the statement's subjects, each with the signed sha256;
    return the subjects' sha256 and blake3 (None: not named) digests by wheel name."""
    try:
        subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
        signed_b3 = {s["name"]: s["digest"].get("blake3") for s in statement["subject"]}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Refused(f"the signed statement is malformed ({exc})") from None
    digests = {f.name: f.sha256 for f in manifest.files}
    wheels = {n for n in digests if n.endswith(layout.WHEEL_SUFFIX)}
    if not wheels or wheels != set(subjects):
        raise Refused("the wheels differ from those the signed statement names")
    for w in sorted(wheels):
        if digests[w] != subjects[w]:
            raise Refused(f"wheel {w} does not match the signed statement (swapped)")
    return subjects, signed_b3


def _check(
    manifest: Manifest, dest: str, want: Wanted, statement: Any, blake3s: Mapping[str, str]
) -> tuple[Wanted, ...]:
    """Check the downloaded wheels and derivation against the signed ``statement``.

    ``blake3s`` are the downloaded wheels' blake3 digests: each must be the one the signed
    statement names (a statement without one is checked by the wheel's sha256 instead).

    Return the entries it was built against (from the verified derivation's ``recipes``).
    """
    subjects, signed_b3 = _check_wheels(manifest, statement)
    for w in sorted(subjects):
        if signed_b3[w] is not None:
            same = blake3s.get(w) == signed_b3[w]
        else:  # a statement naming sha256 only: one more read of the wheel we just wrote
            same = file_digests(os.path.join(dest, w))[1] == subjects[w]
        if not same:
            raise Refused(f"blob of wheel {w} does not match the signed statement")
    try:
        derivation = read_derivation(Path(dest))
    except RocmforgeError as exc:
        raise Refused(f"derivation.json is unreadable ({exc})") from None
    except RecursionError:
        raise Refused("derivation.json is nested too deep to be parsed") from None
    if input_hash(derivation) != want.hash:
        raise Refused("derivation.json does not hash to the input hash")
    deps = []
    for d in derivation.get("recipes") or ():
        try:
            dep = Wanted(str(d["hash"]), str(d["name"]), str(d["version"]))
        except (KeyError, TypeError):
            raise Refused("derivation.json names a malformed dependency") from None
        if layout.entry_problem(dep.hash, dep.name, dep.version):
            raise Refused(f"derivation.json names an invalid dependency {dep.hash!r}")
        deps.append(dep)
    return tuple(deps)


def manifest_size(manifest: Manifest, name: str) -> int:
    """Return the size the manifest gives the file ``name``."""
    return next(f.size for f in manifest.files if f.name == name)


def _closure(
    store: Store,
    caches: Sequence[str],
    deps: Sequence[Wanted],
    reporter: Reporter,
    trusted: Mapping[str, PublicKey],
    protect: Callable[[str], None] | None,
) -> None:
    """Make sure every entry in ``deps`` is in the store, substituting the missing ones (and
    their own closures) from ``caches``; :class:`Refused` names the first that no cache has.

    ``protect`` makes each a temp gc root first: until the dependent is published, nothing
    else keeps a dependency from gc.
    """
    for dep in deps:
        if protect is not None:
            protect(dep.hash)
        if store.lookup(dep.hash, dep.name, dep.version) is not None:
            continue
        with store.build_lock(dep.hash):  # dependent -> dependency: the DAG orders the locks
            if store.lookup(dep.hash, dep.name, dep.version) is not None:
                continue
            reporter.phase(f"substitute its dependency {dep.name} {dep.version}")
            entry, reasons = _ask(store, caches, dep, reporter, trusted, protect, suffix="")
        if entry is None:
            raise Refused(
                f"its dependency {dep.name} {dep.version} ({dep.hash}) is in no cache "
                f"({'; '.join(reasons) or 'no cache configured'})"
            )


def _try(
    store: Store,
    backend: Backend,
    want: Wanted,
    reporter: Reporter,
    caches: Sequence[str],
    trusted: Mapping[str, PublicKey],
    protect: Callable[[str], None] | None = None,
) -> Entry | None:
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
    # A substitution killed earlier (kill -9, a FIFO that hung it) left its build dir and the
    # dir's lock in tmp/: gone before this one makes its own, as a build does.
    store.clean_leftovers()
    with store.new_build_dir(want.hash) as bd:
        dest = str(bd.path / "entry")
        try:
            os.mkdir(dest)
        except OSError as exc:
            raise CacheError(f"cannot create {dest}: {exc}") from None
        import http.client  # ~11 ms (ssl, email): only a hit pays for it, never a miss

        signed = [f for f in manifest.files if f.name in _SIGNED]
        rest = [f for f in manifest.files if f.name not in _SIGNED]
        for f in signed:
            if f.size > MAX_STATEMENT:
                raise Refused(f"its {f.name} is larger than {MAX_STATEMENT} bytes")
        try:  # the signature and the file list first: nothing else is read before them
            _download(backend, signed, dest)
            check, statement = _check_signed(manifest, dest, want, trusted)
            blake3s = _download(backend, rest, dest)
        except (OSError, http.client.HTTPException) as exc:  # cut short, disk full: no entry
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                # The store's disk, not the cache (its reads never fill a disk): gc frees it.
                raise disk_full_error(
                    exc, store=store.root, what=f"substituting {want.name} {want.version} "
                    f"({want.hash}) from {backend.url}",
                ) from None  # fmt: skip
            raise CacheError(f"cannot download {want.hash}: {_reason(exc)}") from None
        deps = _check(manifest, dest, want, statement, blake3s)
        # Its closure first, as Nix substitutes a path's references before the path: an entry
        # never lands in the store without what it was built against.
        _closure(store, caches, deps, reporter, trusted, protect)
        internal = statement["predicate"]["buildDefinition"]["internalParameters"]
        meta: dict[str, Any] = dict(manifest.meta)
        sha = {f.name: f.sha256 for f in manifest.files}
        meta["wheels"] = [
            {"file": n, "sha256": sha[n], "blake3": b, "size": manifest_size(manifest, n)}
            for n, b in sorted(blake3s.items())
        ]
        meta["sandbox"] = internal.get("sandbox")
        meta["sources"] = []  # nothing here depends on local source caches
        # From the verified derivation, not the manifest: gc keeps these while this one stays.
        meta["built_against"] = sorted({d.hash for d in deps})
        meta["origin"] = {
            "cache": backend.url,
            "keyid": check.keyid,
            "fingerprint": check.fingerprint,
            "substituted": round(now(), 3),
            "host": internal.get("host"),
        }
        entry = store.publish(
            bd.path / "entry", hash=want.hash, name=want.name, version=want.version, meta=meta
        )
    fetch_runs(store, backend, manifest, reporter)
    return entry


#: provenance.json and its envelope: downloaded and checked before the entry's other files.
_SIGNED = frozenset({layout.PROVENANCE, layout.PROVENANCE_DSSE})

#: The largest run blob read (a statement is a few KB; a manifest cannot make us read more).
MAX_RUN = 16 << 20


def _read_run(backend: Backend, size: int, sha256: str) -> bytes:
    """The blob of one run, read whole; :class:`Refused` when its size or digest is wrong."""
    import hashlib

    if size > MAX_RUN:
        raise Refused(f"its blob is larger than {MAX_RUN} bytes")
    chunks: list[bytes] = []
    got = 0
    with backend.open_blob(sha256) as src:
        while got <= size:  # a stream may answer a read with less: read to the end, or one over
            chunk = src.read(size + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    raw = b"".join(chunks)
    if len(raw) != size:
        raise Refused(f"its blob has {len(raw)} bytes, not {size}" if len(raw) < size else
                      "its blob is longer than the manifest says")  # fmt: skip
    if hashlib.sha256(raw).hexdigest() != sha256:
        raise Refused("its blob does not match its digest")
    return raw


def fetch_runs(store: Store, backend: Backend, manifest: Manifest, reporter: Reporter) -> int:
    """Keep the acceptance runs ``manifest`` lists that the store lacks in
    ``accepted/<hash>/``; return how many were written. A run whose blob is missing, damaged
    or not a run is skipped with a warning naming the cache, the entry and the run."""
    import http.client

    have = {p.name for p in run_files(store.root, manifest.hash)}
    kept = 0
    for ref in manifest.accepted:
        if ref.name in have:
            continue
        try:
            raw = _read_run(backend, ref.size, ref.sha256)
            write_run(store.root, manifest.hash, ref.name, raw)
        except (Refused, RocmforgeError, OSError, http.client.HTTPException) as exc:
            reporter.warning(
                f"cache {backend.url}: skipped acceptance run {ref.name} of {manifest.name} "
                f"{manifest.version} ({manifest.hash}): {_reason(exc)}"
            )
            continue
        kept += 1
    return kept


def _reason(exc: BaseException) -> str:
    """A one-line reason for a failed download (``No space left on device`` rather than
    ``[Errno 28] No space left on device: '/long/tmp/path'``)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the local disk is full ({exc.strerror})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} (errno {exc.errno})" if exc.errno else exc.strerror
    return str(exc) or type(exc).__name__


def _ask(
    store: Store,
    caches: Sequence[str],
    want: Wanted,
    reporter: Reporter,
    trusted: Mapping[str, PublicKey],
    protect: Callable[[str], None] | None,
    *,
    suffix: str,
) -> tuple[Entry | None, list[str]]:
    """Ask each cache in order; return the published entry (or None) and why each failed."""
    reasons: list[str] = []
    for url in caches:
        try:
            backend = open_backend(url)
            entry = _try(store, backend, want, reporter, caches, trusted, protect)
        except Refused as exc:
            msg = f"cache {url}: refused {want.name} {want.version} ({want.hash}): {exc}"
        except CacheError as exc:
            msg = f"cache {url}: {exc}"
        except StoreError as exc:  # the local store (disk full while publishing)
            msg = f"cache {url}: cannot store {want.name} {want.version} ({want.hash}): {exc}"
        else:
            if entry is not None:
                return entry, reasons
            reasons.append(f"{url}: not there")
            continue
        reporter.warning(msg + suffix)
        reasons.append(msg)
    return None, reasons


def substitute(
    store: Store,
    caches: Sequence[str],
    want: Wanted,
    reporter: Reporter,
    *,
    require: bool = False,
    trusted: Mapping[str, PublicKey] | None = None,
    protect: Callable[[str], None] | None = None,
) -> Entry | None:
    """Ask ``caches`` in order for ``want`` (and its closure); return the published entry, or
    None to build.

    ``trusted`` are the keys a signature must verify with (default: :func:`trusted_keys`);
    ``protect(hash)`` roots each dependency against gc until the caller's roots close.
    Refusals and unreachable caches are warnings; with ``require`` they end in
    :class:`SubstituteError` instead of a build.
    """
    keys = trusted_keys() if trusted is None else trusted
    entry, reasons = _ask(
        store, caches, want, reporter, keys, protect, suffix="" if require else "; building instead"
    )
    if entry is None and require:
        raise SubstituteError(
            f"{want.name} {want.version} ({want.hash}): no cache could provide it "
            f"(--require-substitute): " + ("; ".join(reasons) or "no cache configured")
        )
    return entry


@dataclass(frozen=True, slots=True)
class Offer:
    """What ``plan`` learned of one missing entry: the first cache that has it (or None), and
    why the others did not count (unreachable, unsigned, another hash)."""

    hash: str
    cache: str | None
    notes: tuple[str, ...] = ()


def offers(caches: Sequence[str], wants: Sequence[Wanted]) -> dict[str, Offer]:
    """Ask ``caches`` in order which of ``wants`` they hold: one manifest request per entry and
    cache, nothing downloaded. A manifest must name the same entry and list a signature; the
    signature itself is checked only by a substitution. An unreachable cache is asked no more.
    """
    backends: list[tuple[str, Backend | None]] = []
    notes: list[str] = []
    for url in caches:
        try:
            backends.append((url, open_backend(url)))
        except RocmforgeError as exc:
            notes.append(f"cache {url}: {exc}")
    out: dict[str, Offer] = {}
    dead: dict[str, str] = {}
    for want in wants:
        mine = list(notes)
        found = None
        for url, backend in backends:
            if backend is None or url in dead:
                continue
            try:
                raw = backend.get_manifest(want.hash)
            except CacheError as exc:
                dead[url] = f"cache {url}: {exc}"
                mine.append(dead[url])
                continue
            if raw is None:
                continue
            try:
                m = parse_manifest(raw)
            except ManifestProblem as exc:
                mine.append(f"cache {url}: {exc}")
                continue
            if (m.hash, m.name, m.version) != (want.hash, want.name, want.version):
                mine.append(f"cache {url}: answered with {m.hash} ({m.name} {m.version})")
                continue
            if layout.PROVENANCE_DSSE not in {f.name for f in m.files}:
                mine.append(f"cache {url}: has it unsigned (a substitution refuses it)")
                continue
            found = url
            break
        out[want.hash] = Offer(want.hash, found, tuple(mine))
    return out
