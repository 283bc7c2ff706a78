"""Signed provenance: ``rocmforge key``, DSSE envelopes written by realize, checked by audit."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import rf, rf_in

from rocmforge.trust.signing import pae


@pytest.fixture
def keyenv(tmp_path: Path) -> dict[str, str]:
    """A private configuration directory: its own signing key path and trusted-keys file."""
    cfg = tmp_path / "config"
    return {"XDG_CONFIG_HOME": str(cfg)}


def _generate(env: dict[str, str], *args: str) -> dict:
    proc = rf("key", "generate", "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_key_generate_prints_the_public_key_and_never_overwrites(keyenv: dict, tmp_path: Path):
    proc = rf_in("key", "generate", "--name", "ci-1", env=keyenv)
    assert proc.returncode == 0, proc.stderr
    public = proc.stdout.strip()
    name, _, b64 = public.partition(":")
    assert name == "ci-1" and len(base64.b64decode(b64)) == 32
    key_file = tmp_path / "config" / "rocmforge" / "signing.key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert rf_in("key", "public", env=keyenv).stdout.strip() == public
    again = rf_in("key", "generate", env=keyenv)
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert rf_in("key", "public", env=keyenv).stdout.strip() == public


def test_key_generate_force_keeps_the_old_key_and_names_the_new_one_apart(keyenv: dict):
    import socket

    host = socket.gethostname()
    key_file = Path(keyenv["XDG_CONFIG_HOME"]) / "rocmforge" / "signing.key"
    first = rf_in("key", "generate", env=keyenv)
    assert first.returncode == 0, first.stderr
    old_public = first.stdout.strip()
    assert old_public.startswith(f"{host}-rocmforge-1:")
    old_fp = hashlib.sha256(base64.b64decode(old_public.split(":", 1)[1])).hexdigest()
    # It says where the key went, naming it by name and fingerprint.
    assert f"wrote the signing key {host}-rocmforge-1 (ed25519 {old_fp[:8]}..) to {key_file}" in (
        first.stderr
    )
    refused = rf_in("key", "generate", env=keyenv)
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert "Traceback" not in refused.stderr
    old_text = key_file.read_text()
    # --force: a new key, named apart from the one it replaces; the old one is kept beside it.
    forced = rf_in("key", "generate", "--force", "--trust", env=keyenv)
    assert forced.returncode == 0, forced.stderr
    new_public = forced.stdout.strip()
    assert new_public.startswith(f"{host}-rocmforge-2:") and new_public != old_public
    kept = key_file.with_name(f"signing.key.{old_fp[:8]}.old")
    assert kept.read_text() == old_text and key_file.read_text() != old_text
    assert f"replacing {host}-rocmforge-1 (ed25519 {old_fp[:8]}..) (kept as {kept})" in (
        forced.stderr
    )
    assert rf_in("key", "public", env=keyenv).stdout.strip() == new_public
    # The next default name is above both the replaced key's and the trusted keys' names.
    third = rf_in("key", "generate", "--force", "--json", env=keyenv)
    assert json.loads(third.stdout)["name"] == f"{host}-rocmforge-3"
    assert json.loads(third.stdout)["replaced"] == new_public


@pytest.mark.slow
def test_key_file_inside_a_store_is_refused(tiny_recipe: Path, store: Path, keyenv: dict):
    assert rf("realize", tiny_recipe, "--store", store, env=keyenv).returncode == 0
    proc = rf("key", "generate", "--out", store / "keys" / "k", env=keyenv)
    assert proc.returncode == 2 and "inside the store" in proc.stderr
    assert not (store / "keys").exists()


def _realize(recipe: Path, store: Path, env: dict) -> tuple[Path, Path]:
    proc = rf("realize", recipe, "--store", store, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    return Path(report["path"]), Path(report["wheels"][0])


def _audit(wheel: Path, store: Path, env: dict) -> tuple[int, dict]:
    proc = rf("audit", wheel, "--store", store, "--json", env=env)
    (report,) = json.loads(proc.stdout)
    return proc.returncode, report


@pytest.mark.slow
def test_realize_signs_and_audit_checks_with_trusted_keys(
    tiny_recipe: Path, store: Path, keyenv: dict
) -> None:
    key = _generate(keyenv, "--name", "ci-1")
    entry, wheel = _realize(tiny_recipe, store, keyenv)
    envelope = json.loads((entry / "provenance.dsse.json").read_text())
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(envelope["payload"]) == (entry / "provenance.json").read_bytes()
    (sig,) = envelope["signatures"]
    raw = base64.b64decode(key["public_key"].split(":", 1)[1])
    # The keyid names the key by name and fingerprint (the sha256 of the verify key).
    assert sig["keyid"] == f"ci-1:ed25519:{hashlib.sha256(raw).hexdigest()}"
    assert key["fingerprint"] == hashlib.sha256(raw).hexdigest()
    # An independent check with the other ed25519 library over DSSE's PAE.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    Ed25519PublicKey.from_public_bytes(raw).verify(
        base64.b64decode(sig["sig"]),
        pae(envelope["payloadType"], base64.b64decode(envelope["payload"])),
    )
    # Not trusted yet: verified by digest, the signature is reported as untrusted.
    code, report = _audit(wheel, store, keyenv)
    assert code == 0 and report["signature"]["status"] == "untrusted"
    trusted = {**keyenv, "ROCMFORGE_TRUSTED_KEYS": key["public_key"]}
    code, report = _audit(wheel, store, trusted)
    assert code == 0 and report["signature"]["status"] == "valid"
    assert report["signature"]["keyid"] == "ci-1" and report["signature"]["detail"] == ""
    assert report["signature"]["fingerprint"] == key["fingerprint"]
    text = rf("audit", wheel, "--store", store, env=trusted).stdout
    assert "signature    valid (key ci-1)" in text
    # The trusted-keys file works the same as the variable.
    (Path(keyenv["XDG_CONFIG_HOME"]) / "rocmforge" / "trusted-keys").write_text(
        "# CI\n" + key["public_key"] + "\n"
    )
    assert _audit(wheel, store, keyenv)[1]["signature"]["status"] == "valid"
    # A key of the same name but other bytes is another key: the signature is not by a trusted
    # key (untrusted, named with both fingerprints), never "invalid" or tampered.
    other = _generate({"XDG_CONFIG_HOME": str(store.parent / "other")}, "--name", "ci-1")
    code, report = _audit(wheel, store, {**keyenv, "ROCMFORGE_TRUSTED_KEYS": other["public_key"]})
    assert code == 0 and report["status"] == "verified", report
    assert report["signature"]["status"] == "untrusted"
    assert report["signature"]["detail"] == (
        f"signed by ci-1 (ed25519 {key['fingerprint'][:8]}..), which is not trusted; "
        f"trusted: ci-1 (ed25519 {other['fingerprint'][:8]}..)"
    )
    # A signature that claims the trusted key's fingerprint but does not verify under it:
    # invalid -> tampered.
    forged = dict(envelope, signatures=[{**sig, "keyid": f"ci-1:ed25519:{other['fingerprint']}"}])
    dsse = entry / "provenance.dsse.json"
    os.chmod(entry, 0o755)
    os.chmod(dsse, 0o644)
    dsse.write_text(json.dumps(forged))
    code, report = _audit(wheel, store, {**keyenv, "ROCMFORGE_TRUSTED_KEYS": other["public_key"]})
    assert code == 1 and report["status"] == "tampered"
    assert "does not verify" in report["problems"][0]
    # Both keys of one name trusted at once: both count (the genuine signature verifies).
    both = f"{other['public_key']} {key['public_key']}"
    dsse.write_text(json.dumps(dict(envelope, signatures=[forged["signatures"][0], sig])))
    code, report = _audit(wheel, store, {**keyenv, "ROCMFORGE_TRUSTED_KEYS": both})
    assert code == 0 and report["signature"]["status"] == "valid", report
    assert report["signature"]["fingerprint"] == key["fingerprint"]
    dsse.write_text(json.dumps(envelope))
    # The statement is edited after signing: the signed payload no longer matches -> tampered.
    prov = entry / "provenance.json"
    os.chmod(entry, 0o755)
    os.chmod(prov, 0o644)
    prov.write_text(prov.read_text().replace('"sandbox"', '"sandbox" ', 1))
    code, report = _audit(wheel, store, trusted)
    assert code == 1 and "differs from provenance.json" in report["problems"][0]


@pytest.mark.slow
def test_unsigned_when_no_key_and_the_cache_hit_never_imports_nacl(
    tiny_recipe: Path, store: Path, keyenv: dict
) -> None:
    entry, wheel = _realize(tiny_recipe, store, keyenv)
    assert not (entry / "provenance.dsse.json").exists()
    code, report = _audit(wheel, store, keyenv)
    assert code == 0 and report["signature"]["status"] == "unsigned"
    _generate(keyenv)
    env = {**os.environ, **keyenv, "ROCMFORGE_PIP_ARGS": "--no-index"}
    env.pop("ROCMFORGE_STORE", None)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rocmforge", "realize", str(tiny_recipe),
         "--store", str(store)],
        env=env, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "nacl" not in proc.stderr and "rocmforge.trust.signing" not in proc.stderr
