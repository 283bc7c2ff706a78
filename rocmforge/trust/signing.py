"""Signing provenance: ed25519 keys, DSSE envelopes, and the trusted-keys list.

Keys are text, one line each, in the form Nix uses for binary caches: ``NAME:BASE64``, where the
secret key file holds the 32-byte ed25519 seed and a public key the 32-byte verify key. ``NAME``
is the key's id (``keyid`` in the envelope): it says which trusted key to check a signature with.

- The **signing key** (``rocmforge key generate``) lives outside every store, mode 0600:
  ``$ROCMFORGE_SIGNING_KEY`` if set (an empty value turns signing off), else
  ``$XDG_CONFIG_HOME/rocmforge/signing.key`` (``~/.config/...``). When it exists, every build
  writes ``provenance.dsse.json`` beside ``provenance.json``.
- The **trusted keys** are public keys, ``$ROCMFORGE_TRUSTED_KEYS`` (whitespace-separated) if set,
  else ``$XDG_CONFIG_HOME/rocmforge/trusted-keys`` (one per line, ``#`` comments) together with
  the ``trusted-keys`` of the configuration files (:mod:`rocmforge.config`). ``audit``
  checks a signature made by a trusted key; a shared binary cache checks downloads the same way
  (:func:`trusted_keys`, :func:`verify_envelope`).

The envelope is DSSE v1: ``payloadType`` ``application/vnd.in-toto+json``, ``payload`` the
base64 of the exact bytes of ``provenance.json``, and one signature over the DSSE
pre-authentication encoding (PAE). PyNaCl is imported only to sign or verify (it costs ~13 ms),
never on a cache hit.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.config import KeyText
from rocmforge.errors import RocmforgeError, UsageError
from rocmforge.store import layout
from rocmforge.util.configpaths import TRUSTED_KEYS_ENV as TRUSTED_KEYS_ENV
from rocmforge.util.fsutil import json_bytes, write_atomic

PAYLOAD_TYPE = "application/vnd.in-toto+json"
SIGNING_KEY_ENV = "ROCMFORGE_SIGNING_KEY"
_SEED_BYTES = 32


class SigningKeyError(RocmforgeError):
    """A key file or trusted key is unreadable or malformed (exit 2: fix the configuration)."""

    about_recipe = False

    exit_code = UsageError.exit_code


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A named ed25519 verify key."""

    name: str
    key: bytes

    def text(self) -> str:
        """Return the key as ``NAME:BASE64``."""
        return f"{self.name}:{base64.b64encode(self.key).decode('ascii')}"


@dataclass(frozen=True, slots=True)
class SecretKey:
    """A named ed25519 seed and the public key it derives."""

    name: str
    seed: bytes
    public: PublicKey


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    """What checking an entry's envelope found.

    ``status``: ``valid`` (signed by a trusted key, payload is the entry's statement), ``invalid``
    (signed by a trusted key but the signature or payload does not match: tampered),
    ``untrusted`` (signed, but by no trusted key), ``unsigned`` (no envelope).
    """

    status: str
    keyid: str | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return the check as JSON-ready data."""
        return {"status": self.status, "keyid": self.keyid, "detail": self.detail}


def config_dir() -> Path:
    """Return rocmforge's per-user configuration directory (``$XDG_CONFIG_HOME/rocmforge``)."""
    from rocmforge.config import config_home

    return config_home()


def signing_key_path() -> Path | None:
    """Return where the signing key is looked for (None: signing turned off)."""
    env = os.environ.get(SIGNING_KEY_ENV)
    if env is not None:
        return Path(env) if env else None
    return config_dir() / "signing.key"


def trusted_keys_path() -> Path:
    """Return the trusted-keys file (used unless ``$ROCMFORGE_TRUSTED_KEYS`` is set)."""
    from rocmforge.util.configpaths import TRUSTED_KEYS_FILE

    return config_dir() / TRUSTED_KEYS_FILE


def _split(text: str, *, where: str, size: int) -> tuple[str, bytes]:
    name, sep, b64 = text.strip().partition(":")
    if not sep or not name or any(c.isspace() for c in name):
        raise SigningKeyError(f"{where}: expected NAME:BASE64, got {text.strip()[:40]!r}")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise SigningKeyError(f"{where}: key {name!r} is not valid base64") from None
    if len(raw) != size:
        raise SigningKeyError(f"{where}: key {name!r} has {len(raw)} bytes, not {size} (ed25519)")
    return name, raw


def parse_public_key(text: str, *, where: str) -> PublicKey:
    """Parse ``NAME:BASE64`` (a 32-byte ed25519 verify key); ``where`` names the source."""
    name, raw = _split(text, where=where, size=_SEED_BYTES)
    return PublicKey(name, raw)


def _public_of(name: str, seed: bytes) -> PublicKey:
    from nacl.signing import SigningKey

    return PublicKey(name, bytes(SigningKey(seed).verify_key))


def read_secret_key(path: Path) -> SecretKey:
    """Read the signing key file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SigningKeyError(f"signing key {path}: cannot read: {exc}") from None
    name, seed = _split(text, where=f"signing key {path}", size=_SEED_BYTES)
    return SecretKey(name, seed, _public_of(name, seed))


def _is_store(d: Path) -> bool:
    return (d / layout.ENTRIES).is_dir() and (d / layout.INDEX).exists()


def inside_store(path: Path) -> Path | None:
    """Return the store directory that contains ``path``, if any (a key must live outside)."""
    p = Path(os.path.abspath(path)).parent
    for d in (p, *p.parents):
        if _is_store(d):
            return d
    return None


def generate_key(path: Path, name: str) -> SecretKey:
    """Create a new ed25519 key named ``name`` in ``path`` (mode 0600, never overwritten)."""
    if not name or ":" in name or any(c.isspace() for c in name):
        raise UsageError(f"key name {name!r}: use letters, digits, '.', '-', '_' (no ':')")
    if os.path.lexists(path):
        raise UsageError(f"{path}: a key file already exists; it is never overwritten")
    store = inside_store(path)
    if store is not None:
        raise UsageError(f"{path}: inside the store {store}; keep the signing key outside it")
    from nacl.signing import SigningKey

    seed = bytes(SigningKey.generate())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = f"{name}:{base64.b64encode(seed).decode('ascii')}\n"
    try:
        write_atomic(path, text.encode("ascii"), mode=0o600)
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot write the key: {exc}") from exc
    return SecretKey(name, seed, _public_of(name, seed))


def trust_key(key: PublicKey, path: Path | None = None) -> Path:
    """Append ``key`` to the trusted-keys file (once); return the file."""
    path = path or trusted_keys_path()
    have = path.read_text(encoding="utf-8") if path.exists() else ""
    if key.text() not in have.split():
        line = ("" if not have or have.endswith("\n") else "\n") + key.text() + "\n"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, (have + line).encode("utf-8"))
    return path


def trusted_keys(extra: Sequence[KeyText] = ()) -> dict[str, PublicKey]:
    """Return the trusted public keys by name.

    ``$ROCMFORGE_TRUSTED_KEYS``, when set (even empty), is the whole list. Otherwise the
    trusted-keys file and ``extra``, the keys of the configuration files
    (:class:`rocmforge.config.Settings`), count together.
    """
    env = os.environ.get(TRUSTED_KEYS_ENV)
    if env is not None:
        found = [(w, f"${TRUSTED_KEYS_ENV}") for w in env.split()]
    else:
        path = trusted_keys_path()
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise SigningKeyError(f"trusted keys {path}: cannot read: {exc}") from None
        found = [
            (w, str(path)) for line in text.splitlines() for w in line.split("#", 1)[0].split()
        ]
        found += [(k.text, k.where) for k in extra]
    keys = [parse_public_key(w, where=where) for w, where in found]
    return {k.name: k for k in keys}


def pae(payload_type: str, payload: bytes) -> bytes:
    """Return the DSSE v1 pre-authentication encoding of ``payload``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def sign_payload(payload: bytes, key: SecretKey) -> dict[str, Any]:
    """Return a DSSE envelope over ``payload`` (an in-toto statement) signed with ``key``."""
    from nacl.signing import SigningKey

    sig = SigningKey(key.seed).sign(pae(PAYLOAD_TYPE, payload)).signature
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": key.name, "sig": base64.b64encode(sig).decode("ascii")}],
    }


def verify_envelope(
    envelope: Mapping[str, Any], trusted: Mapping[str, PublicKey], *, payload: bytes | None = None
) -> SignatureCheck:
    """Check ``envelope`` against ``trusted`` keys (and, if given, that it signs ``payload``)."""
    try:
        body = base64.b64decode(str(envelope["payload"]), validate=True)
        ptype = str(envelope["payloadType"])
        sigs = [(str(s.get("keyid") or ""), str(s["sig"])) for s in envelope["signatures"]]
    except (KeyError, TypeError, AttributeError, binascii.Error, ValueError) as exc:
        return SignatureCheck("invalid", detail=f"malformed DSSE envelope ({exc})")
    known = [(k, s) for k, s in sigs if k in trusted]
    if not known:
        return SignatureCheck(
            "untrusted",
            keyid=", ".join(k for k, _ in sigs) or None,
            detail="signed by no trusted key",
        )
    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    keyid, sig = known[0]
    try:
        VerifyKey(trusted[keyid].key).verify(pae(ptype, body), base64.b64decode(sig))
    except (BadSignatureError, binascii.Error, ValueError):
        return SignatureCheck("invalid", keyid=keyid, detail="the signature does not verify")
    if ptype != PAYLOAD_TYPE:
        return SignatureCheck("invalid", keyid=keyid, detail=f"payload type {ptype!r}")
    if payload is not None and body != payload:
        return SignatureCheck(
            "invalid", keyid=keyid, detail="the signed statement differs from provenance.json"
        )
    return SignatureCheck("valid", keyid=keyid)


def store_signing_key(store_root: Path) -> SecretKey | None:
    """The provenance key, if one is set and exists (None: signing is off); a key kept inside
    the store ``store_root`` is refused (:class:`SigningKeyError`)."""
    path = signing_key_path()
    if path is None or not path.exists():
        return None
    store = inside_store(path)
    if store is not None and os.path.samefile(store, store_root):
        raise SigningKeyError(f"signing key {path}: inside the store {store}; move it outside")
    return read_secret_key(path)


def sign_entry(entry_dir: Path, *, store_root: Path) -> str | None:
    """Write the envelope over ``entry_dir``'s provenance.json if a signing key exists.

    Return the key's name, or None when signing is off or no key was generated.
    """
    key = store_signing_key(store_root)
    if key is None:
        return None
    payload = (entry_dir / layout.PROVENANCE).read_bytes()
    write_atomic(entry_dir / layout.PROVENANCE_DSSE, json_bytes(sign_payload(payload, key)))
    return key.name


def check_entry(entry_dir: Path, trusted: Mapping[str, PublicKey] | None = None) -> SignatureCheck:
    """Check the envelope of the published entry at ``entry_dir`` against ``trusted`` keys
    (default: :func:`trusted_keys`)."""
    try:
        raw = (entry_dir / layout.PROVENANCE_DSSE).read_bytes()
    except FileNotFoundError:
        return SignatureCheck("unsigned")
    except OSError as exc:
        return SignatureCheck("invalid", detail=f"cannot read the envelope: {exc}")
    try:
        envelope = json.loads(raw)
        payload = (entry_dir / layout.PROVENANCE).read_bytes()
    except (ValueError, OSError) as exc:
        return SignatureCheck("invalid", detail=f"unreadable envelope or statement: {exc}")
    if not isinstance(envelope, dict):
        return SignatureCheck("invalid", detail="the envelope is not a JSON object")
    keys = trusted_keys() if trusted is None else trusted
    return verify_envelope(envelope, keys, payload=payload)
