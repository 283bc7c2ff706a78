"""Signing entries already in the store: ``rocmforge sign`` adds the signing key's signature.

An entry built before a key existed, or substituted from a cache under another builder's key,
gets the key's signature added to its DSSE envelope beside those there (none is dropped). The
entry is re-published in place, atomically, as a rebuild that supersedes it would be
(:meth:`rocmforge.store.store.Store.replace`): its files are hard links of the entry's own (no
wheel is copied or rebuilt), the new ``provenance.dsse.json`` is written beside them, and
``meta.json`` keeps every field (its creation time included) but the envelope's digest.

Before signing, the statement must describe the entry: its ``inputHash`` is the entry's and its
subjects are the entry's wheels by sha256 (``meta.json``), and an envelope already there must
sign exactly ``provenance.json``. Anything else is skipped with the reason, never signed.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rocmforge.store import layout
from rocmforge.store.entry import Entry
from rocmforge.store.store import Store
from rocmforge.trust.signing import (
    EnvelopeMismatch,
    SecretKey,
    Signer,
    add_signature,
    envelope_payload,
    envelope_signers,
)
from rocmforge.util.fsutil import json_bytes, write_atomic


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedEntry:
    """What signing one entry did: ``signed`` (the key's signature added), ``already`` (it was
    there) or ``skipped`` (``detail`` says why); ``signers`` are the envelope's afterwards."""

    hash: str
    name: str
    version: str
    status: str
    signers: tuple[Signer, ...] = ()
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return the result as JSON-ready data."""
        return {
            "hash": self.hash,
            "name": self.name,
            "version": self.version,
            "status": self.status,
            "signers": [s.to_json() for s in self.signers],
            "detail": self.detail,
        }


class _Skip(Exception):
    """The entry is not signed; the message says why."""


def describes_entry(statement: Any, entry: Entry) -> str | None:
    """Return why ``statement`` does not describe ``entry`` (None: it does): its input hash and
    its subjects' sha256 must be the entry's and its wheels' (``meta.json``)."""
    try:
        internal = statement["predicate"]["buildDefinition"]["internalParameters"]
        signed_hash = internal["inputHash"]
        subjects = {str(s["name"]): str(s["digest"]["sha256"]) for s in statement["subject"]}
    except (KeyError, TypeError) as exc:
        return f"provenance.json is malformed ({exc})"
    if signed_hash != entry.hash:
        return f"provenance.json is for input hash {signed_hash}, not {entry.hash}"
    wheels = {w.file: w.sha256 for w in entry.meta.wheels}
    if subjects != wheels:
        return "provenance.json names other wheels than meta.json"
    return None


def _envelope_to_sign(entry: Entry, key: SecretKey) -> tuple[dict[str, Any], bool]:
    """Return the entry's envelope with ``key``'s signature, and whether it was added."""
    try:
        payload = (entry.path / layout.PROVENANCE).read_bytes()
    except FileNotFoundError:
        raise _Skip("it has no provenance.json (built before provenance was recorded)") from None
    except OSError as exc:
        raise _Skip(f"cannot read provenance.json: {exc.strerror or exc}") from None
    try:
        why = describes_entry(json.loads(payload), entry)
    except ValueError:
        why = "provenance.json is not JSON"
    if why is not None:
        raise _Skip(why)
    envelope: dict[str, Any] | None = None
    try:
        raw = (entry.path / layout.PROVENANCE_DSSE).read_bytes()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _Skip(f"cannot read its envelope: {exc.strerror or exc}") from None
    else:
        try:
            loaded = json.loads(raw)
        except ValueError:
            raise _Skip("its envelope is not JSON") from None
        if not isinstance(loaded, dict):
            raise _Skip("its envelope is not a JSON object")
        envelope = loaded
        try:
            if envelope_payload(envelope) != payload:
                raise _Skip("its envelope signs another statement than provenance.json")
        except EnvelopeMismatch as exc:
            raise _Skip(str(exc)) from None
    try:
        merged = add_signature(envelope, payload, key)
    except EnvelopeMismatch as exc:
        raise _Skip(str(exc)) from None
    return merged, envelope is None or merged["signatures"] != envelope.get("signatures")


def _republish(store: Store, entry: Entry, envelope: dict[str, Any]) -> Entry:
    """Replace ``entry`` by hard links of its files and the new envelope (call under its build
    lock)."""
    from rocmforge.util.hashing import file_blake3

    with store.new_build_dir(entry.hash) as bd:
        staged = bd.path / "entry"
        os.mkdir(staged)
        for name in sorted(os.listdir(entry.path)):
            if name in (layout.META, layout.PROVENANCE_DSSE):
                continue
            src = entry.path / name
            if src.is_dir() and not src.is_symlink():
                shutil.copytree(src, staged / name, symlinks=True, copy_function=os.link)
            else:
                os.link(src, staged / name, follow_symlinks=False)
        dsse = staged / layout.PROVENANCE_DSSE
        write_atomic(dsse, json_bytes(envelope), durable=False)  # the seal fsyncs it
        meta = entry.meta.to_json()
        meta.pop("seal", None)
        if meta.get("files") is not None:
            meta["files"] = {**meta["files"], layout.PROVENANCE_DSSE: file_blake3(dsse)}
        return store.replace(
            staged,
            hash=entry.hash,
            name=entry.name,
            version=entry.version,
            meta=meta,
            created=entry.meta.created,
        )


def sign_entries(store: Store, entries: Iterable[Entry], key: SecretKey) -> list[SignedEntry]:
    """Add ``key``'s signature to each of ``entries`` that lacks it (see the module)."""
    out = []
    for entry in entries:
        signers: tuple[Signer, ...] = ()
        with store.build_lock(entry.hash):
            current = store.lookup(entry.hash, entry.name, entry.version) or entry
            try:
                envelope, added = _envelope_to_sign(current, key)
            except _Skip as exc:
                status, detail = "skipped", str(exc)
            else:
                if added:
                    _republish(store, current, envelope)
                status, detail = "signed" if added else "already", ""
                signers = envelope_signers(envelope)
        out.append(
            SignedEntry(
                hash=entry.hash,
                name=entry.name,
                version=entry.version,
                status=status,
                signers=signers,
                detail=detail,
            )
        )
    return out
