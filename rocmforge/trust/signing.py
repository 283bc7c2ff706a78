"""Signing provenance: ed25519 keys, DSSE envelopes, and the trusted-keys list.

Keys are text, one line each, in the form Nix uses for binary caches: ``NAME:BASE64``, where the
secret key file holds the 32-byte ed25519 seed and a public key the 32-byte verify key. A key's
identity is its name together with its **fingerprint**, the hex sha256 of the 32-byte verify key
(:attr:`PublicKey.fingerprint`, shown as ``NAME (ed25519 9f3c1a2b..)``): two keys of one name
(two hosts both called ``vm-rocmforge-1``, a key and its replacement) are never confused. A
signature's ``keyid`` is ``NAME:ed25519:FINGERPRINT`` (:attr:`PublicKey.keyid`); a signature made
before fingerprints were recorded has ``NAME`` alone and is checked with every trusted key of
that name.

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
base64 of the exact bytes of ``provenance.json``, and one or more signatures over the DSSE
pre-authentication encoding (PAE): each signer adds its own (:func:`add_signature`,
:func:`merge_envelopes`), and an envelope is ``valid`` when any signature by a trusted key
verifies. PyNaCl is imported only to sign or verify (it costs ~13 ms),
never on a cache hit.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
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


class EnvelopeMismatch(RocmforgeError):
    """Two envelopes sign different statements: their signatures cannot be merged (exit 1)."""

    exit_code = 1


def short_fingerprint(fingerprint: str) -> str:
    """Return a fingerprint as shown in messages: ``ed25519 9f3c1a2b..``."""
    return f"ed25519 {fingerprint[:8]}.."


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A named ed25519 verify key."""

    name: str
    key: bytes

    def text(self) -> str:
        """Return the key as ``NAME:BASE64``."""
        return f"{self.name}:{base64.b64encode(self.key).decode('ascii')}"

    @property
    def fingerprint(self) -> str:
        """The hex sha256 of the 32-byte verify key: what tells two keys of one name apart."""
        return hashlib.sha256(self.key).hexdigest()

    @property
    def keyid(self) -> str:
        """The ``keyid`` of this key's signatures: ``NAME:ed25519:FINGERPRINT``."""
        return f"{self.name}:ed25519:{self.fingerprint}"

    def describe(self) -> str:
        """Return the key as messages name it: ``NAME (ed25519 9f3c1a2b..)``."""
        return f"{self.name} ({short_fingerprint(self.fingerprint)})"


@dataclass(frozen=True, slots=True)
class Signer:
    """Who a signature says made it (its ``keyid``): a name and, unless the signature is older
    than fingerprints, the key's fingerprint. Unauthenticated: a claim, checked by verifying."""

    name: str
    fingerprint: str | None

    @staticmethod
    def of(keyid: str) -> Signer:
        """Parse a signature's ``keyid`` (``NAME:ed25519:HEX`` or a bare ``NAME``)."""
        name, sep, rest = keyid.partition(":ed25519:")
        if sep and len(rest) == 64 and all(c in "0123456789abcdef" for c in rest):
            return Signer(name, rest)
        return Signer(keyid, None)

    def describe(self) -> str:
        """Return the signer as messages name it: ``NAME (ed25519 9f3c1a2b..)``."""
        if self.fingerprint is None:
            return f"{self.name or '?'} (no fingerprint recorded)"
        return f"{self.name} ({short_fingerprint(self.fingerprint)})"

    def to_json(self) -> dict[str, str | None]:
        """Return the signer as JSON-ready data."""
        return {"name": self.name, "fingerprint": self.fingerprint}


@dataclass(frozen=True, slots=True)
class SecretKey:
    """A named ed25519 seed and the public key it derives."""

    name: str
    seed: bytes
    public: PublicKey


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    """What checking an entry's envelope found.

    ``status``: ``valid`` (a signature by a trusted key verifies, and the payload is the entry's
    statement), ``invalid`` (a signature made by a trusted key, named by its fingerprint, does
    not verify under it, or the signed payload is not the statement: tampered), ``untrusted``
    (signed, but by no trusted key: ``detail`` names the signers and the trusted keys),
    ``unsigned`` (no envelope). ``keyid`` and ``fingerprint`` name the key the status is about
    (the one that verified, or failed); ``signers`` are every signature's claimed signer.
    """

    status: str
    keyid: str | None = None
    detail: str = ""
    fingerprint: str | None = None
    signers: tuple[Signer, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return the check as JSON-ready data."""
        return {
            "status": self.status,
            "keyid": self.keyid,
            "fingerprint": self.fingerprint,
            "detail": self.detail,
            "signers": [s.to_json() for s in self.signers],
        }


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


@dataclass(frozen=True, slots=True)
class GeneratedKey:
    """What :func:`make_key` did: the new key, its file, and (``--force``) the key it
    replaced and where that old key was kept."""

    key: SecretKey
    path: Path
    replaced: PublicKey | None = None
    kept_old: Path | None = None


def default_key_name(host: str, taken: Sequence[str]) -> str:
    """Return ``HOST-rocmforge-N`` with N one above the highest of ``taken`` (the names of the
    key being replaced and of the trusted keys), so a new key is named apart from the old."""
    prefix = f"{host}-rocmforge-"
    tails = [t.removeprefix(prefix) for t in taken if t.startswith(prefix)]
    numbers = [int(t) for t in tails if t.isdigit()]
    return f"{prefix}{max(numbers, default=0) + 1}"


def generate_key(path: Path, name: str) -> SecretKey:
    """Create a new ed25519 key named ``name`` in ``path`` (mode 0600, never overwritten)."""
    return make_key(path, name).key


def make_key(path: Path, name: str, *, force: bool = False) -> GeneratedKey:
    """Create a new ed25519 key named ``name`` in ``path`` (mode 0600).

    A key file already there is refused unless ``force``; then the old key is kept beside it as
    ``FILE.<fingerprint[:8]>.old`` (``FILE.old`` when it does not parse) before the new one
    replaces it atomically.
    """
    if not name or ":" in name or any(c.isspace() for c in name):
        raise UsageError(f"key name {name!r}: use letters, digits, '.', '-', '_' (no ':')")
    exists = os.path.lexists(path)
    if exists and not force:
        raise UsageError(
            f"{path}: a key file already exists; it is never overwritten (--force replaces it, "
            "keeping the old key beside it)"
        )
    store = inside_store(path)
    if store is not None:
        raise UsageError(f"{path}: inside the store {store}; keep the signing key outside it")
    from nacl.signing import SigningKey

    replaced = kept = None
    if exists:
        try:
            replaced = read_secret_key(path).public
            kept = path.with_name(f"{path.name}.{replaced.fingerprint[:8]}.old")
        except SigningKeyError:
            kept = path.with_name(f"{path.name}.old")
        try:
            if os.path.lexists(kept):
                os.unlink(kept)
            os.link(path, kept)
        except OSError as exc:
            raise SigningKeyError(f"{path}: cannot keep the old key as {kept}: {exc}") from exc
    seed = bytes(SigningKey.generate())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = f"{name}:{base64.b64encode(seed).decode('ascii')}\n"
    try:
        write_atomic(path, text.encode("ascii"), mode=0o600)
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot write the key: {exc}") from exc
    return GeneratedKey(SecretKey(name, seed, _public_of(name, seed)), path, replaced, kept)


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
    """Return the trusted public keys by :attr:`PublicKey.keyid` (name and fingerprint: two
    trusted keys of one name are both kept).

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
    return {k.keyid: k for k in keys}


def describe_trusted(trusted: Mapping[str, PublicKey]) -> str:
    """Return the trusted keys as messages list them (``none`` when there are none)."""
    names = sorted({k.describe() for k in trusted.values()})
    return ", ".join(names) if names else "none"


def pae(payload_type: str, payload: bytes) -> bytes:
    """Return the DSSE v1 pre-authentication encoding of ``payload``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def _signature(payload: bytes, key: SecretKey) -> dict[str, str]:
    from nacl.signing import SigningKey

    sig = SigningKey(key.seed).sign(pae(PAYLOAD_TYPE, payload)).signature
    return {"keyid": key.public.keyid, "sig": base64.b64encode(sig).decode("ascii")}


def sign_payload(payload: bytes, key: SecretKey) -> dict[str, Any]:
    """Return a DSSE envelope over ``payload`` (an in-toto statement) signed with ``key``."""
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [_signature(payload, key)],
    }


def envelope_payload(envelope: Mapping[str, Any]) -> bytes:
    """Return the bytes an envelope signs; :class:`EnvelopeMismatch` when it is malformed."""
    try:
        return base64.b64decode(str(envelope["payload"]), validate=True)
    except (KeyError, TypeError, binascii.Error, ValueError) as exc:
        raise EnvelopeMismatch(f"malformed DSSE envelope ({exc})") from None


def _sig_list(envelope: Mapping[str, Any]) -> list[dict[str, str]]:
    try:
        return [
            {"keyid": str(s.get("keyid") or ""), "sig": str(s["sig"])}
            for s in envelope["signatures"]
        ]
    except (KeyError, TypeError, AttributeError) as exc:
        raise EnvelopeMismatch(f"malformed DSSE envelope ({exc})") from None


def envelope_signers(envelope: Mapping[str, Any]) -> tuple[Signer, ...]:
    """Return who each signature of ``envelope`` says made it (claims, not checked)."""
    return tuple(Signer.of(s["keyid"]) for s in _sig_list(envelope))


def merge_envelopes(base: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` with the signatures of ``other`` it lacks appended (none dropped).

    Both must sign the same payload of the same type, else :class:`EnvelopeMismatch`.
    """
    if envelope_payload(base) != envelope_payload(other) or base.get("payloadType") != other.get(
        "payloadType"
    ):
        raise EnvelopeMismatch("the two envelopes sign different statements")
    sigs = _sig_list(base)
    for s in _sig_list(other):
        if s not in sigs:
            sigs.append(s)
    return {"payloadType": base["payloadType"], "payload": base["payload"], "signatures": sigs}


def add_signature(
    envelope: Mapping[str, Any] | None, payload: bytes, key: SecretKey
) -> dict[str, Any]:
    """Return ``envelope`` (None: a new one) over ``payload`` with ``key``'s signature added
    once (ed25519 signs deterministically: the same key's signature is the same bytes, kept
    once); no signature is dropped. :class:`EnvelopeMismatch` when ``envelope`` signs another
    payload."""
    mine = sign_payload(payload, key)
    return mine if envelope is None else merge_envelopes(envelope, mine)


def _candidates(signer: Signer, trusted: Mapping[str, PublicKey]) -> list[PublicKey]:
    """The trusted keys a signature is checked with: the one of its fingerprint, or (an older
    signature naming no fingerprint) every trusted key of its name."""
    if signer.fingerprint is not None:
        return [k for k in trusted.values() if k.fingerprint == signer.fingerprint][:1]
    return [k for k in trusted.values() if k.name == signer.name]


def verify_envelope(
    envelope: Mapping[str, Any], trusted: Mapping[str, PublicKey], *, payload: bytes | None = None
) -> SignatureCheck:
    """Check ``envelope`` against ``trusted`` keys (and, if given, that it signs ``payload``).

    ``valid`` when any signature by a trusted key verifies; ``invalid`` when none does and a
    signature whose fingerprint is a trusted key's fails under that key (or the payload is not
    ``payload``); otherwise ``untrusted``, naming every signer and the trusted keys.
    """
    try:
        body = base64.b64decode(str(envelope["payload"]), validate=True)
        ptype = str(envelope["payloadType"])
        sigs = [(str(s.get("keyid") or ""), str(s["sig"])) for s in envelope["signatures"]]
    except (KeyError, TypeError, AttributeError, binascii.Error, ValueError) as exc:
        return SignatureCheck("invalid", detail=f"malformed DSSE envelope ({exc})")
    signers = tuple(Signer.of(k) for k, _ in sigs)
    if not sigs:
        return SignatureCheck("unsigned", detail="the envelope carries no signature")
    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    failed: list[tuple[Signer, PublicKey]] = []
    for (_, sig), signer in zip(sigs, signers, strict=True):
        keys = _candidates(signer, trusted)
        for key in keys:
            try:
                VerifyKey(key.key).verify(pae(ptype, body), base64.b64decode(sig))
            except (BadSignatureError, binascii.Error, ValueError):
                continue
            facts: dict[str, Any] = {
                "keyid": key.name, "fingerprint": key.fingerprint, "signers": signers,
            }  # fmt: skip
            if ptype != PAYLOAD_TYPE:
                return SignatureCheck("invalid", detail=f"payload type {ptype!r}", **facts)
            if payload is not None and body != payload:
                return SignatureCheck(
                    "invalid", detail="the signed statement differs from provenance.json", **facts
                )
            return SignatureCheck("valid", **facts)
        if keys and signer.fingerprint is not None:
            failed.append((signer, keys[0]))
    if failed:
        signer, key = failed[0]
        return SignatureCheck(
            "invalid",
            keyid=key.name,
            fingerprint=key.fingerprint,
            detail=f"the signature by {key.describe()} does not verify",
            signers=signers,
        )
    who = ", ".join(s.describe() for s in signers)
    first = signers[0]
    return SignatureCheck(
        "untrusted",
        keyid=", ".join(s.name for s in signers) or None,
        fingerprint=first.fingerprint if len(signers) == 1 else None,
        detail=f"signed by {who}, which {'is' if len(signers) == 1 else 'are'} not trusted; "
        f"trusted: {describe_trusted(trusted)}",
        signers=signers,
    )


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
