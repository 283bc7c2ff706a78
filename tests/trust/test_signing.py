"""Signed provenance: ``rocmforge key``, DSSE envelopes written by realize, checked by audit."""

from __future__ import annotations

import base64
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
    assert sig["keyid"] == "ci-1"
    # An independent check with the other ed25519 library over DSSE's PAE.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    raw = base64.b64decode(key["public_key"].split(":", 1)[1])
    Ed25519PublicKey.from_public_bytes(raw).verify(
        base64.b64decode(sig["sig"]),
        pae(envelope["payloadType"], base64.b64decode(envelope["payload"])),
    )
    # Not trusted yet: verified by digest, the signature is reported as untrusted.
    code, report = _audit(wheel, store, keyenv)
    assert code == 0 and report["signature"]["status"] == "untrusted"
    trusted = {**keyenv, "ROCMFORGE_TRUSTED_KEYS": key["public_key"]}
    code, report = _audit(wheel, store, trusted)
    assert code == 0 and report["signature"] == {"status": "valid", "keyid": "ci-1", "detail": ""}
    text = rf("audit", wheel, "--store", store, env=trusted).stdout
    assert "signature    valid (key ci-1)" in text
    # The trusted-keys file works the same as the variable.
    (Path(keyenv["XDG_CONFIG_HOME"]) / "rocmforge" / "trusted-keys").write_text(
        "# CI\n" + key["public_key"] + "\n"
    )
    assert _audit(wheel, store, keyenv)[1]["signature"]["status"] == "valid"
    # A key of the same name but other bytes: the signature does not verify -> tampered.
    other = _generate({"XDG_CONFIG_HOME": str(store.parent / "other")}, "--name", "ci-1")
    code, report = _audit(wheel, store, {**keyenv, "ROCMFORGE_TRUSTED_KEYS": other["public_key"]})
    assert code == 1 and report["status"] == "tampered"
    assert "does not verify" in report["problems"][0]
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
