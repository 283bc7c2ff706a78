"""Signing for a team (issue 34 points 2 and 3): real keys, real stores, a real file:// cache.

An unsigned push followed by a signed one ends with the teammate's store accepting the entry;
an entry signed by an untrusted key of a trusted key's name is refused naming both fingerprints;
a key rotation re-signs the cache (``rocmforge sign`` + ``push``), then a store trusting only the
new key accepts it, with nothing rebuilt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import rf
from test_oci import registry  # noqa: F401 (the registry fixture)


def _key(env: dict[str, str], name: str, *args: str) -> dict:
    proc = rf("key", "generate", "--json", "--name", name, *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def _short(key: dict) -> str:
    return f"{key['name']} (ed25519 {key['fingerprint'][:8]}..)"


def _build(recipe: Path, store: Path, env: dict[str, str]) -> dict:
    proc = rf("realize", recipe, "--store", store, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    return dict(report)


def _push(cache: Path | str, store: Path, env: dict[str, str]) -> tuple[dict, str]:
    url = cache if isinstance(cache, str) else f"file://{cache}"
    proc = rf("push", url, "--store", store, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    (entry,) = json.loads(proc.stdout)["entries"]
    return entry, proc.stderr


def _substitute(recipe: Path, store: Path, env: dict[str, str], cache: Path | str):
    url = cache if isinstance(cache, str) else f"file://{cache}"
    return rf(
        "realize", recipe, "--store", store, "--json", "--cache", url,
        "--require-substitute", env=env,
    )  # fmt: skip


def _signers(entry: dict) -> list[str]:
    return [s["name"] for s in entry["signers"]]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", "oci"])
def test_unsigned_push_then_signed_push_is_accepted(
    tiny_recipe: Path, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    env_a = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    store_a = tmp_path / "store-a"
    cache = (
        f"file://{tmp_path / 'cache'}"
        if kind == "file"
        else request.getfixturevalue("registry").url()
    )
    built = _build(tiny_recipe, store_a, env_a)  # before any key: unsigned
    first, stderr = _push(cache, store_a, env_a)
    assert not first["present"] and not first["signed"] and first["signers"] == []
    # With no key, push says the entries are unsigned and what a substituting store will do.
    assert "1 pushed entry is unsigned (tiny 0.1): there is no signing key" in stderr, stderr
    assert "refuses them and builds them instead" in stderr
    key = _key(env_a, "builder-a")
    env_b = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"), "ROCMFORGE_TRUSTED_KEYS": ""}
    env_b["ROCMFORGE_TRUSTED_KEYS"] = key["public_key"]
    refused = _substitute(tiny_recipe, tmp_path / "store-b0", env_b, cache)
    assert refused.returncode == 1 and "the entry is unsigned" in refused.stderr
    # The signed push of the same hash adds the signature to the cache's unsigned copy.
    second, stderr = _push(cache, store_a, env_a)
    assert second["present"] and second["replaced"] and second["signature_added"], second
    assert second["signed"] and _signers(second) == ["builder-a"]
    assert second["signers"][0]["fingerprint"] == key["fingerprint"]
    assert "unsigned" not in stderr
    text = rf("cache", "ls", cache, env=env_a).stdout
    assert f"signed by {_short(key)}" in text, text
    # The teammate's store now accepts it: substituted, nothing built.
    proc = _substitute(tiny_recipe, tmp_path / "store-b", env_b, cache)
    assert proc.returncode == 0, proc.stderr
    (got,) = json.loads(proc.stdout)
    assert got["hash"] == built["hash"] and got["substituted"] == cache
    # Store A's own entry is still unsigned (push signs what it uploads); `sign` signs it in
    # place, and the next push finds the cache's copy already carries that very signature.
    assert not (Path(built["path"]) / "provenance.dsse.json").exists()
    signed = rf("sign", "--store", store_a, "--json", env=env_a)
    assert signed.returncode == 0, signed.stderr
    (row,) = json.loads(signed.stdout)["entries"]
    assert row["status"] == "signed" and [s["name"] for s in row["signers"]] == ["builder-a"]
    assert rf("verify", "--store", store_a, env=env_a).returncode == 0
    third, _ = _push(cache, store_a, env_a)
    assert third["present"] and not third["replaced"] and _signers(third) == ["builder-a"]


@pytest.mark.slow
def test_untrusted_key_of_the_same_name_is_refused_naming_both(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    env_a = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    signer = _key(env_a, "vm-rocmforge-1")
    other = _key({"XDG_CONFIG_HOME": str(tmp_path / "config-c")}, "vm-rocmforge-1")
    assert signer["fingerprint"] != other["fingerprint"]
    store_a, cache = tmp_path / "store-a", tmp_path / "cache"
    _build(tiny_recipe, store_a, env_a)
    pushed, _ = _push(cache, store_a, env_a)
    assert pushed["signed"] and pushed["signers"][0]["fingerprint"] == signer["fingerprint"]
    env_b = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"),
             "ROCMFORGE_TRUSTED_KEYS": other["public_key"]}  # fmt: skip
    proc = _substitute(tiny_recipe, tmp_path / "store-b", env_b, cache)
    assert proc.returncode == 1, proc.stderr
    want = (
        f"signed by {_short(signer)}, which is not trusted; trusted: {_short(other)}"
    )
    assert want in proc.stderr, proc.stderr
    assert "invalid" not in proc.stderr
    # Trusting both keys of that name: the one that signed counts.
    both = {**env_b, "ROCMFORGE_TRUSTED_KEYS": f"{other['public_key']} {signer['public_key']}"}
    proc = _substitute(tiny_recipe, tmp_path / "store-b2", env_b | both, cache)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_key_rotation_resigns_the_cache_then_the_old_key_is_dropped(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    env_a = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    old = _key(env_a, "builder-1")
    store_a, cache = tmp_path / "store-a", tmp_path / "cache"
    built = _build(tiny_recipe, store_a, env_a)
    _push(cache, store_a, env_a)
    entry = Path(built["path"])
    wheel = Path(built["wheels"][0])
    before = (os.stat(wheel).st_ino, wheel.read_bytes())
    # Rotation: a new key replaces the old (kept beside it); the store is re-signed in place
    # and the cache's copy is merged: old and new signatures, none dropped.
    new = _key(env_a, "builder-2", "--force")
    assert new["replaced"] == old["public_key"] and new["old_key_file"]
    proc = rf("sign", "--store", store_a, env=env_a)
    assert proc.returncode == 0, proc.stderr
    assert f"signed; signers: {_short(old)}, {_short(new)}" in proc.stdout, proc.stdout
    envelope = json.loads((entry / "provenance.dsse.json").read_text())
    assert len(envelope["signatures"]) == 2
    assert (os.stat(wheel).st_ino, wheel.read_bytes()) == before  # nothing rebuilt or copied
    again = rf("sign", "--store", store_a, env=env_a)
    assert "already signed" in again.stdout and "signed 0 of 1" in again.stdout
    pushed, _ = _push(cache, store_a, env_a)
    assert pushed["present"] and pushed["replaced"]
    assert _signers(pushed) == ["builder-1", "builder-2"]
    assert rf("verify", "--store", store_a, env=env_a).returncode == 0
    # A store trusting only the new key accepts the re-signed cache; only the old: too.
    for trusted in (new, old):
        env = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"),
               "ROCMFORGE_TRUSTED_KEYS": trusted["public_key"]}  # fmt: skip
        store_b = tmp_path / f"store-{trusted['name']}"
        proc = _substitute(tiny_recipe, store_b, env, cache)
        assert proc.returncode == 0, proc.stderr
        (got,) = json.loads(proc.stdout)
        assert got["hash"] == built["hash"] and got["substituted"] == f"file://{cache}"
        meta = json.loads((Path(got["path"]) / "meta.json").read_text())
        assert meta["origin"]["fingerprint"] == trusted["fingerprint"]
    # A store that trusts neither refuses it, naming both signers.
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"), "ROCMFORGE_TRUSTED_KEYS": ""}
    proc = _substitute(tiny_recipe, tmp_path / "store-none", env, cache)
    assert proc.returncode == 1
    assert f"signed by {_short(old)}, {_short(new)}, which are not trusted" in proc.stderr


@pytest.mark.slow
def test_a_teammates_push_adds_its_signature_never_dropping_one(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    """B substitutes A's entry, then pushes it with B's own key: the cache's copy carries both
    signatures, and a store trusting only B accepts it."""
    env_a = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    key_a = _key(env_a, "builder-a")
    cache = tmp_path / "cache"
    built = _build(tiny_recipe, tmp_path / "store-a", env_a)
    _push(cache, tmp_path / "store-a", env_a)
    env_b = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"),
             "ROCMFORGE_TRUSTED_KEYS": key_a["public_key"]}  # fmt: skip
    key_b = _key(env_b, "builder-b")
    store_b = tmp_path / "store-b"
    assert _substitute(tiny_recipe, store_b, env_b, cache).returncode == 0
    pushed, _ = _push(cache, store_b, env_b)
    assert pushed["present"] and pushed["replaced"] and pushed["signature_added"]
    assert [s["fingerprint"] for s in pushed["signers"]] == [
        key_a["fingerprint"], key_b["fingerprint"],
    ]  # fmt: skip
    # A pushing again (its store has only its own signature) drops nothing.
    again, _ = _push(cache, tmp_path / "store-a", env_a)
    assert again["present"] and not again["replaced"]
    assert _signers(again) == ["builder-a", "builder-b"]
    env_c = {"XDG_CONFIG_HOME": str(tmp_path / "config-c"),
             "ROCMFORGE_TRUSTED_KEYS": key_b["public_key"]}  # fmt: skip
    proc = _substitute(tiny_recipe, tmp_path / "store-c", env_c, cache)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["hash"] == built["hash"]


@pytest.mark.slow
def test_sign_refuses_what_it_cannot_vouch_for(tiny_recipe: Path, tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    store = tmp_path / "store"
    built = _build(tiny_recipe, store, env)
    nokey = rf("sign", "--store", store, env=env)
    assert nokey.returncode == 2 and "no signing key" in nokey.stderr
    assert "Traceback" not in nokey.stderr and len(nokey.stderr.strip().splitlines()) == 1
    _key(env, "builder-a")
    # A statement edited after the build no longer describes the entry: not signed.
    prov = Path(built["path"]) / "provenance.json"
    os.chmod(prov.parent, 0o755)
    os.chmod(prov, 0o644)
    prov.write_text(prov.read_text().replace(built["hash"], "0" * len(built["hash"])))
    proc = rf("sign", "--store", store, env=env)
    assert proc.returncode == 1, proc.stderr
    assert "not signed: provenance.json is for input hash 000" in proc.stdout, proc.stdout
    assert not (prov.parent / "provenance.dsse.json").exists()


@pytest.mark.slow
def test_realize_push_warns_unsigned_then_signs_the_cache_copy(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    store, url = tmp_path / "store", f"file://{tmp_path / 'cache'}"
    first = rf("realize", tiny_recipe, "--store", store, "--push", url, env=env)
    assert first.returncode == 0, first.stderr
    assert "warning: 1 pushed entry is unsigned (tiny 0.1): there is no signing key" in (
        first.stderr
    )
    key = _key(env, "builder-a")
    again = rf("realize", tiny_recipe, "--store", store, "--push", url, env=env)  # a cache hit
    assert again.returncode == 0 and "unsigned" not in again.stderr, again.stderr
    listed = json.loads(rf("cache", "ls", url, "--json", env=env).stdout)
    (entry,) = listed["entries"]
    assert entry["signed"] and entry["signers"] == [
        {"name": "builder-a", "fingerprint": key["fingerprint"]}
    ]
