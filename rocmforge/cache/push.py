"""``push``: upload store entries to a binary cache, only what the cache lacks, signing them.

With a signing key (the pusher's, :func:`rocmforge.trust.signing.store_signing_key`), what goes
up carries the pusher's signature beside those the entry has (the store entry itself is left as
it is: ``rocmforge sign`` signs it there), as a Nix binary cache store signs on upload with
``secret-key``. An entry the cache already has costs one lookup, unless the push brings what
its copy lacks:

- **signatures**: the cache's copy is unsigned, or signed by others over the same statement
  (``provenance.json`` of the same digest): its manifest is replaced by one whose envelope is
  the union of both (no signature is ever dropped). An unsigned copy of another build of the
  entry is replaced by the pusher's signed one; a signed copy of another build is left as it is
  (its signatures cannot be merged with ours) and said so;
- **acceptance runs** (``accepted/<hash>/<run>.json`` beside the entry in the store): those
  blobs go up and the manifest lists the union of both lists of runs.

Either way the manifest keeps the cache's files and meta (the first manifest's, never the
pusher's) but for the envelope (and but for an unsigned copy replaced whole).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.cache.backend import Backend, CacheError
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
from rocmforge.trust.signing import (
    EnvelopeMismatch,
    SecretKey,
    Signer,
    add_signature,
    envelope_payload,
    envelope_signers,
    merge_envelopes,
)
from rocmforge.util.fsutil import json_bytes, loads_untrusted
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
    #: whether the cache's copy is signed after this push
    signed: bool
    #: acceptance runs this push added to the cache's manifest (their blobs count in ``blobs``)
    runs: int = 0
    #: who signed the cache's copy after this push (the claims of its envelope's keyids)
    signers: tuple[Signer, ...] = ()
    #: the pusher's key signed what went up (a new copy, or one merged into the cache's)
    signature_added: bool = False
    #: the cache's manifest was replaced (signatures merged, runs added, unsigned copy replaced)
    replaced: bool = False
    #: what the push could not do for this entry, in one line (empty: nothing)
    note: str = ""

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
            "signers": [s.to_json() for s in self.signers],
            "signature_added": self.signature_added,
            "replaced": self.replaced,
            "note": self.note,
        }


#: The largest envelope blob read from a cache (a few KB each signature).
MAX_ENVELOPE = 1 << 20


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


def _read_blob(backend: Backend, ref: FileRef, limit: int) -> bytes | None:
    """The blob of ``ref`` read whole when it has the manifest's size (at most ``limit``) and
    sha256; None otherwise (missing, damaged, too large)."""
    if ref.size > limit:
        return None
    try:
        with backend.open_blob(ref.sha256) as src:
            raw = src.read(ref.size + 1)
    except (CacheError, OSError):
        return None
    if len(raw) != ref.size or hashlib.sha256(raw).hexdigest() != ref.sha256:
        return None
    return raw


@dataclass(frozen=True, slots=True)
class _Signed:
    """The envelope a push uploads for one entry: its bytes' reference and path, the envelope,
    and whether the pusher's key was added to what the store has."""

    ref: FileRef
    path: Path
    envelope: dict[str, Any]
    added: bool


def _has_signature_of(envelope: dict[str, Any] | None, key: SecretKey) -> bool:
    """Whether ``envelope`` lists a signature under ``key``'s keyid (the store's own envelope:
    its signature is taken as made, not verified again)."""
    sigs = envelope.get("signatures") if envelope is not None else None
    if not isinstance(sigs, list):
        return False
    return any(isinstance(s, dict) and s.get("keyid") == key.public.keyid for s in sigs)


def _local_envelope(
    entry: Entry, key: SecretKey | None, tmp: _Scratch
) -> tuple[_Signed | None, str]:
    """The envelope to upload for ``entry``: the store's, with ``key``'s signature added (None:
    unsigned and no key, or an envelope that cannot be read; that one goes up as the file),
    and why ``key`` did not sign (empty: it did, or there is no key)."""
    from rocmforge.trust.resign import describes_entry

    dsse = entry.path / layout.PROVENANCE_DSSE
    envelope: dict[str, Any] | None = None
    raw = b""
    if dsse.is_file():
        try:
            raw = dsse.read_bytes()
            loaded = json.loads(raw)
        except (OSError, ValueError):
            return None, "its envelope is unreadable: not signed"
        if not isinstance(loaded, dict):
            return None, "its envelope is not a JSON object: not signed"
        envelope = loaded
    merged, why = envelope, ""
    if key is not None and not _has_signature_of(envelope, key):  # else no signing, no nacl
        try:
            payload = (entry.path / layout.PROVENANCE).read_bytes()
            why = describes_entry(json.loads(payload), entry) or ""
            if not why:
                merged = add_signature(envelope, payload, key)
        except FileNotFoundError:
            why = "it has no provenance.json"
        except (OSError, ValueError, EnvelopeMismatch) as exc:
            why = f"its provenance cannot be signed ({exc})"
        if why:
            why = f"not signed by {key.public.describe()}: {why}"
    if merged is None:
        return None, why
    added = envelope is None or merged["signatures"] != envelope.get("signatures")
    if added:
        ref, path = _write_envelope(merged, tmp)
        return _Signed(ref, path, merged, True), why
    ref = FileRef(layout.PROVENANCE_DSSE, hashlib.sha256(raw).hexdigest(), len(raw))
    return _Signed(ref, dsse, merged, False), why


def _with_envelope(files: tuple[FileRef, ...], ref: FileRef) -> tuple[FileRef, ...]:
    """``files`` with the envelope's reference ``ref`` in place of (or beside) the one there,
    sorted by name as :func:`entry_manifest` lists them."""
    return tuple(sorted([*(f for f in files if f.name != ref.name), ref], key=lambda f: f.name))


def _same(a: tuple[FileRef, ...], b: tuple[FileRef, ...]) -> bool:
    """Whether two lists of files name the same files (in any order)."""
    return set(a) == set(b)


def _write_envelope(envelope: dict[str, Any], tmp: _Scratch) -> tuple[FileRef, Path]:
    data = json_bytes(envelope)
    sha = hashlib.sha256(data).hexdigest()
    path = tmp.path() / sha
    path.write_bytes(data)
    return FileRef(layout.PROVENANCE_DSSE, sha, len(data)), path


@dataclass(frozen=True, slots=True)
class _Decision:
    """What a push does to a manifest the cache has: its files afterwards, the envelope to
    upload (None: the cache's stays), who signed the cache's copy afterwards (None: not read),
    and a note for what it could not do."""

    files: tuple[FileRef, ...]
    upload: _Signed | None = None
    signers: tuple[Signer, ...] | None = None
    note: str = ""


def _merge_remote(
    backend: Backend,
    remote: Manifest,
    mine: Callable[[], Manifest],
    signed: _Signed | None,
    tmp: _Scratch,
) -> _Decision:
    """Decide the files of the cache's manifest ``remote`` after pushing ``mine()`` (whose
    envelope is ``signed``): the cache's files with the merged envelope, or ours in place of an
    unsigned copy of another build. ``mine`` is called only when the cache's copy may change
    (it hashes the entry's small files)."""
    names = {f.name: f for f in remote.files}

    def same_build() -> bool:
        ours = {f.name: f for f in mine().files}
        return (
            layout.PROVENANCE in names
            and layout.PROVENANCE in ours
            and names[layout.PROVENANCE].sha256 == ours[layout.PROVENANCE].sha256
        )

    remote_ref = names.get(layout.PROVENANCE_DSSE)
    if remote_ref is None:  # an unsigned copy: ours replaces it (signed, else nothing to do)
        if signed is None:
            return _Decision(remote.files, signers=())
        base = remote.files if same_build() else mine().files
        signers = envelope_signers(signed.envelope)
        return _Decision(_with_envelope(base, signed.ref), signed, signers)
    if signed is None:
        return _Decision(remote.files)
    if remote_ref.sha256 == signed.ref.sha256:  # the very envelope: one lookup, nothing read
        return _Decision(remote.files, signers=envelope_signers(signed.envelope))
    raw = _read_blob(backend, remote_ref, MAX_ENVELOPE)
    remote_env: Any = None
    if raw is not None:
        try:
            remote_env = loads_untrusted(raw)
        except ValueError:
            remote_env = None
    if not isinstance(remote_env, dict):
        return _Decision(remote.files, note="the cache's envelope is unreadable: left as it is")
    try:
        theirs = envelope_signers(remote_env)
    except EnvelopeMismatch:
        return _Decision(remote.files, note="the cache's envelope is malformed: left as it is")
    try:
        merged = merge_envelopes(remote_env, signed.envelope)
    except EnvelopeMismatch:
        merged = None
    statement = names.get(layout.PROVENANCE)  # the same payload: it must be the cache's file
    if merged is None or statement is None or statement.sha256 != hashlib.sha256(
        envelope_payload(signed.envelope)
    ).hexdigest():
        who = ", ".join(s.describe() for s in theirs) or "nobody"
        note = f"the cache holds another build of this entry (signed by {who}): left as it is"
        return _Decision(remote.files, signers=theirs, note=note)
    if merged["signatures"] == remote_env.get("signatures"):
        return _Decision(remote.files, signers=theirs)  # it has every signature ours has
    ref, path = _write_envelope(merged, tmp)
    upload = _Signed(ref, path, merged, True)
    return _Decision(_with_envelope(remote.files, ref), upload, envelope_signers(merged))


def _push_one(
    backend: Backend, entry: Entry, key: SecretKey | None, reporter: Reporter, tmp: _Scratch
) -> PushedEntry:
    """Push one entry (see :func:`push_entries`)."""
    signed, why = _local_envelope(entry, key, tmp)
    runs = local_runs(entry)
    made: list[Manifest] = []

    def mine() -> Manifest:
        """The manifest of our copy (made once, when needed: it hashes the small files)."""
        if not made:
            m = entry_manifest(entry, runs)
            files = m.files if signed is None else _with_envelope(m.files, signed.ref)
            made.append(Manifest(m.hash, m.name, m.version, files, m.meta, m.accepted))
        return made[0]

    def path(ref: FileRef, envelope: _Signed | None) -> Path:
        if ref.name == layout.PROVENANCE_DSSE and envelope is not None:
            return envelope.path
        return entry.path / ref.name

    def result(**kw: Any) -> PushedEntry:
        return PushedEntry(hash=entry.hash, name=entry.name, version=entry.version, **kw)

    raw = backend.get_manifest(entry.hash)
    present = raw is not None
    blobs = sent = 0
    if raw is None:
        reporter.phase(f"push {entry.name} {entry.version}")
        ours = mine()
        refs = [(f, path(f, signed)) for f in ours.files]
        blobs, sent = _send(backend, refs + [runs[f.name] for f in ours.accepted])
        if backend.put_manifest(entry.hash, ours.to_bytes()):
            signers = envelope_signers(signed.envelope) if signed is not None else ()
            return result(
                present=False, blobs=blobs, bytes=sent, signed=bool(signers),
                runs=len(ours.accepted), signers=signers,
                signature_added=signed is not None and signed.added and key is not None,
                note=why,
            )  # fmt: skip
        raw = backend.get_manifest(entry.hash)  # another pusher's manifest won: merge into it
        if raw is None:
            raise CacheError(f"{backend.url}: the manifest of {entry.hash} vanished while pushing")
    try:
        remote = parse_manifest(raw)
    except ManifestProblem as exc:
        reporter.warning(
            f"{backend.url}: the manifest of {entry.name} {entry.version} ({entry.hash}) is "
            f"bad ({exc}): it is left as it is"
        )
        return result(
            present=present, blobs=blobs, bytes=sent, signed=False,
            note=f"the cache's manifest is bad ({exc}): left as it is",
        )  # fmt: skip
    decision = _merge_remote(backend, remote, mine, signed, tmp)
    have = {f.name for f in remote.accepted}
    missing = [runs[n] for n in sorted(runs) if n not in have]
    new_files = not _same(decision.files, remote.files)
    if new_files or missing:
        there = set(remote.files)
        send = [(f, path(f, decision.upload)) for f in decision.files if f not in there]
        what = "signature" if new_files else f"{len(missing)} acceptance run(s)"
        reporter.phase(f"push the {what} of {entry.name} {entry.version}")
        b, n = _send(backend, send + missing)
        blobs, sent = blobs + b, sent + n
        # The cache's meta stays unless our copy replaces an unsigned other build whole.
        others = {f for f in decision.files if f.name != layout.PROVENANCE_DSSE}
        union = Manifest(
            remote.hash, remote.name, remote.version, decision.files,
            remote.meta if others <= there else mine().meta,
            remote.accepted + tuple(ref for ref, _ in missing),
        )  # fmt: skip
        backend.replace_manifest(entry.hash, union.to_bytes())
    signers = decision.signers or ()  # None: not read (the cache's copy lists an envelope)
    signed_there = bool(signers) or any(f.name == layout.PROVENANCE_DSSE for f in decision.files)
    return result(
        present=present, blobs=blobs, bytes=sent, signed=signed_there,
        runs=len(missing), signers=signers,
        signature_added=new_files and key is not None and decision.upload is not None,
        replaced=new_files or bool(missing), note="; ".join(n for n in (why, decision.note) if n),
    )  # fmt: skip


def push_entries(
    backend: Backend,
    entries: Iterable[Entry],
    *,
    reporter: Reporter | None = None,
    key: SecretKey | None = None,
) -> list[PushedEntry]:
    """Push ``entries``: blobs first (missing ones only), the manifest last, atomically.

    ``key`` (the pusher's signing key; None: sign nothing) signs what goes up beside the
    entry's own signatures. A manifest already in the cache means the entry is there: none of
    its files is read or uploaded, only what its copy lacks: the signatures of ours over the
    same statement (merged, never dropping one), our signed copy in place of an unsigned one,
    and the acceptance runs (``accepted/<hash>/``) that manifest lacks; the manifest is then
    replaced once. Two pushers of the same hash race safely for a new entry: blobs are
    content-addressed and a new manifest is written with a no-replace rename, so the first
    manifest wins and the second merges into it. (Two pushers replacing one manifest at once
    can leave one pusher's signature or runs out; its next push adds them.)
    """
    reporter = reporter or NullReporter()
    # What a push killed earlier left (kill -9 between a temp file and its link): one listing
    # of the cache's two directories; nothing else would ever remove those files.
    if backend.clean_interrupted():
        reporter.phase(f"removed what interrupted pushes left in {backend.url}")
    scratch = _Scratch()
    try:
        return [_push_one(backend, e, key, reporter, scratch) for e in entries]
    finally:
        scratch.close()


class _Scratch:
    """A private temporary directory for the envelopes a push writes, made on first use (most
    pushes write none: a present entry costs one lookup) and removed by :meth:`close`."""

    def __init__(self) -> None:
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def path(self) -> Path:
        """The directory (created now if need be)."""
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="rocmforge-push-")
        return Path(self._dir.name)

    def close(self) -> None:
        """Remove the directory, if one was made."""
        if self._dir is not None:
            self._dir.cleanup()


def unsigned_warning(pushed: Iterable[PushedEntry], *, has_key: bool) -> str | None:
    """The warning for entries whose copy in the cache is unsigned after a push (None: none
    is): what a cache that requires signatures does with them, and the way out."""
    unsigned = [p for p in pushed if not p.signed]
    if not unsigned:
        return None
    names = ", ".join(f"{p.name} {p.version}" for p in unsigned[:3])
    names += f" and {len(unsigned) - 3} more" if len(unsigned) > 3 else ""
    why = (
        "they could not be signed (see above)"
        if has_key
        else "there is no signing key (rocmforge key generate)"
    )
    return (
        f"{len(unsigned)} pushed entr{'y is' if len(unsigned) == 1 else 'ies are'} unsigned "
        f"({names}): {why}. A store substituting from a cache requires a signature by a key it "
        "trusts, so it refuses them and builds them instead (--require-substitute: exit 1); "
        "sign them (rocmforge sign) and push again: the cache's unsigned copies are replaced"
    )


def sign_cached(
    backend: Backend, hash: str, provenance_sha256: str, key: SecretKey
) -> tuple[Signer, ...]:
    """Sign the cache's copy of ``hash`` with ``key`` when its provenance.json has the sha256
    ``provenance_sha256`` (what a Slurm job on a node without a key recorded in the job
    directory, :func:`rocmforge.executor.nodejob.settle_trust`): the signed statement lists
    every file of the entry with its digest, so the manifest must name exactly those files
    (:func:`rocmforge.store.coverage.file_set_problem`) and the statement this input hash.

    The envelope the cache has (if it signs that statement) keeps its signatures. Return who
    signs the cache's copy afterwards; :class:`CacheError` names what does not match.
    """
    from rocmforge.cache.substitute import MAX_STATEMENT
    from rocmforge.store.coverage import coverage, file_set_problem

    def refuse(why: str) -> CacheError:
        return CacheError(f"{backend.url}: {hash}: not signed by {key.public.describe()}: {why}")

    raw = backend.get_manifest(hash)
    if raw is None:
        raise refuse("the cache has no manifest for it")
    try:
        remote = parse_manifest(raw)
    except ManifestProblem as exc:
        raise refuse(f"its manifest is bad ({exc})") from None
    names = {f.name: f for f in remote.files}
    ref = names.get(layout.PROVENANCE)
    if ref is None or ref.sha256 != provenance_sha256:
        raise refuse("its provenance.json is not the one the job recorded")
    payload = _read_blob(backend, ref, MAX_STATEMENT)
    if payload is None:
        raise refuse("its provenance.json blob is missing or damaged")
    try:
        statement = loads_untrusted(payload)
        signed_hash = statement["predicate"]["buildDefinition"]["internalParameters"]["inputHash"]
        cov = coverage(statement)
    except (ValueError, KeyError, TypeError) as exc:
        raise refuse(f"its statement is malformed ({exc})") from None
    if signed_hash != hash:
        raise refuse(f"its statement is for input hash {signed_hash}")
    why = file_set_problem(cov, {f.name: f.sha256 for f in remote.files})
    if why is not None or not cov.complete:
        raise refuse(f"its files differ from its statement ({why or 'an older statement'})")
    envelope: dict[str, Any] | None = None
    there = names.get(layout.PROVENANCE_DSSE)
    if there is not None:
        old = _read_blob(backend, there, MAX_ENVELOPE)
        try:
            loaded = loads_untrusted(old) if old is not None else None
        except ValueError:
            loaded = None
        if isinstance(loaded, dict) and _signs(loaded, payload):
            envelope = loaded
    merged = add_signature(envelope, payload, key)
    scratch = _Scratch()
    try:
        new_ref, path = _write_envelope(merged, scratch)
        _send(backend, [(new_ref, path)])
        files = _with_envelope(remote.files, new_ref)
        backend.replace_manifest(hash, Manifest(remote.hash, remote.name, remote.version, files,
                                                remote.meta, remote.accepted).to_bytes())
    finally:
        scratch.close()
    return envelope_signers(merged)


def _signs(envelope: dict[str, Any], payload: bytes) -> bool:
    """Whether ``envelope`` signs exactly ``payload`` (a malformed one does not)."""
    try:
        return envelope_payload(envelope) == payload
    except (EnvelopeMismatch, ValueError, KeyError, TypeError):
        return False
