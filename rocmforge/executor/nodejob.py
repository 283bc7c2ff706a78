"""The node side of a Slurm job: push only what the submitter will accept.

A job realizes into a scratch store kept on its node between jobs
(:func:`rocmforge.executor.submit.job_script`), so it may find its entry there already, built
or substituted by an earlier job under a key the submitter no longer trusts (a rotation, another
person using the farm). Pushing that copy would be refused by the submitter's substitution
(issue 34: ``refused bar_a 0.1 (...): signature invalid``). :func:`settle_trust` checks the
entry against the keys the submitter trusts (the job script exports them as
``$ROCMFORGE_TRUSTED_KEYS``) before the push:

- signed by a trusted key: pushed as it is;
- otherwise, when this node's signing key is one the submitter trusts: signed with it in place
  (:func:`rocmforge.trust.resign.sign_entries`, nothing rebuilt), then pushed;
- when signing it is not possible (its statement does not describe it): removed from the scratch
  store so that the job builds it again (signed by the node's key at build time);
- when this node has no key: a copy an earlier job left is removed and built again (unsigned);
  what this job built is pushed unsigned and, given ``record``, the sha256 of its provenance.json
  is written there (the job directory, which the submitter reads): the submitter checks the
  pushed copy against that digest and signs it with its own key
  (:func:`rocmforge.cache.push.sign_cached`), so what it then substitutes is signed by a key it
  trusts; without ``record``, no push;
- when this node's key is not trusted: no push at all, and the error says which key to trust
  (a rebuild there could only produce what would be refused).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmforge.errors import RocmforgeError
from rocmforge.store.entry import Entry
from rocmforge.store.store import Store
from rocmforge.trust.signing import PublicKey, SecretKey, check_entry, describe_trusted

#: The exit code of ``rocmforge farm-trust`` when it removed the entry: the job rebuilds it.
REBUILD_EXIT = 10


class UntrustedEntry(RocmforgeError):
    """The scratch entry is signed by no key the submitter trusts and cannot be (exit 1)."""

    exit_code = 1
    about_recipe = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TrustFix:
    """What :func:`settle_trust` did: ``trusted`` (already signed by a trusted key),
    ``signed`` (signed now with the node's key), ``rebuild`` (removed: build it again) or
    ``recorded`` (built here unsigned, its provenance digest recorded for the submitter);
    ``message`` is the line the job's log gets."""

    status: str
    message: str


def _trusts(trusted: Mapping[str, PublicKey], key: SecretKey) -> bool:
    return any(k.fingerprint == key.public.fingerprint for k in trusted.values())


def _remove(store: Store, entry: Entry) -> None:
    """Delete ``entry`` from ``store`` the way gc does (index row, then the directory)."""
    from rocmforge.store.gc import Decision, GcPlan, delete, gather_entries

    with store.exclusive_lock():
        infos, _ = gather_entries(store)
        doomed = [Decision(entry=e, reasons=("untrusted",)) for e in infos if e.hash == entry.hash]
        size = sum(e.size for e in infos)
        freed = sum(d.entry.size for d in doomed)
        delete(store, GcPlan(delete=tuple(doomed), keep=(), size_before=size,
                             size_after=size - freed))  # fmt: skip


def _write_record(record: Path, entry: Entry) -> None:
    """Write the sha256 of ``entry``'s provenance.json (which lists every file's digest) to
    ``record`` for the submitter (:func:`rocmforge.executor.submit.unsigned_record_path`)."""
    import hashlib

    from rocmforge.store import layout
    from rocmforge.util.fsutil import json_bytes, write_atomic

    payload = (entry.path / layout.PROVENANCE).read_bytes()
    doc = {"hash": entry.hash, "name": entry.name, "version": entry.version,
           "provenance_sha256": hashlib.sha256(payload).hexdigest()}  # fmt: skip
    write_atomic(record, json_bytes(doc))


def settle_trust(
    store: Store,
    entry: Entry,
    *,
    trusted: Mapping[str, PublicKey],
    key: SecretKey | None,
    rebuilt: bool = False,
    record: Path | None = None,
) -> TrustFix:
    """Make ``entry`` of the scratch ``store`` signed by a key of ``trusted`` (see the module).

    ``key`` is this node's signing key (None: it has none); ``rebuilt`` says the job has built
    the entry again already, or made it in this job (it is then never removed); ``record`` the
    file a keyless node writes the entry's provenance digest to for the submitter. Raises
    :class:`UntrustedEntry` when the entry must not be pushed.
    """
    from rocmforge.trust.resign import sign_entries

    head = f"{entry.name} {entry.version} ({entry.hash})"
    check = check_entry(entry.path, trusted)
    if check.status == "valid":
        return TrustFix(status="trusted", message=f"{head}: signed by {check.keyid}, trusted")
    why = check.detail or check.status
    if check.status == "unsigned":
        why = "unsigned"
    trusted_text = describe_trusted(trusted)
    if key is None:
        if record is None:
            raise UntrustedEntry(
                f"{head} in the scratch store {store.root}: {why}; this node has no signing key, "
                f"so the submitter (trusted: {trusted_text}) would refuse it: not pushed; give the "
                "node a key the submitter trusts ($ROCMFORGE_SIGNING_KEY, rocmforge key generate)"
            )
        if not rebuilt:  # an earlier job's copy: what it is built from is not this job's word
            _remove(store, entry)
            return TrustFix(
                status="rebuild",
                message=f"{head}: {why}, and this node has no signing key: removed from the "
                f"scratch store {store.root}, building it again (the submitter signs it)",
            )
        _write_record(record, entry)
        return TrustFix(
            status="recorded",
            message=f"{head}: built here unsigned (this node has no signing key): its "
            f"provenance digest is in {record}, the submitter signs the pushed copy",
        )
    if not _trusts(trusted, key):
        raise UntrustedEntry(
            f"{head} in the scratch store {store.root}: {why}; this node's key "
            f"{key.public.describe()} is not trusted by the submitter either (trusted: "
            f"{trusted_text}): not pushed; trust {key.public.text()} on the submitting side"
        )
    [result] = sign_entries(store, [entry], key)
    if result.status in ("signed", "already"):
        again = store.lookup(entry.hash, entry.name, entry.version) or entry
        if check_entry(again.path, trusted).status == "valid":
            return TrustFix(
                status="signed",
                message=f"{head}: {why}: signed with {key.public.describe()}, trusted",
            )
    detail = result.detail or "its signature does not verify"
    if rebuilt:
        raise UntrustedEntry(
            f"{head}: rebuilt in the scratch store {store.root}, but it cannot be signed with "
            f"{key.public.describe()} ({detail}): not pushed"
        )
    _remove(store, entry)
    return TrustFix(
        status="rebuild",
        message=f"{head}: {why}, and signing it failed ({detail}): removed from the scratch "
        f"store {store.root}, building it again",
    )
