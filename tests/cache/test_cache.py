"""Binary caches: push entries to a ``file://`` cache and substitute them into another store."""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import rf, rf_in


def _generate(env: dict[str, str], name: str) -> str:
    proc = rf("key", "generate", "--json", "--name", name, env=env)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["public_key"])


def _realize(recipe: Path, store: Path, env: dict[str, str], *args: str | Path):
    proc = rf("realize", recipe, "--store", store, "--json", *args, env=env)
    return proc


@pytest.fixture
def pushed(tmp_path: Path, tiny_recipe: Path) -> dict:
    """Store A (machine A, with its signing key) built the tiny recipe and pushed it."""
    env_a = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    public = _generate(env_a, "builder-a")
    store_a = tmp_path / "store-a"
    proc = _realize(tiny_recipe, store_a, env_a)
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    cache = tmp_path / "cache"
    proc = rf("push", f"file://{cache}", "--store", store_a, "--json", env=env_a)
    assert proc.returncode == 0, proc.stderr
    (entry,) = json.loads(proc.stdout)["entries"]
    assert entry["hash"] == report["hash"] and not entry["present"] and entry["signed"]
    # Machine B trusts A's key and has no signing key of its own.
    env_b = {
        "XDG_CONFIG_HOME": str(tmp_path / "config-b"),
        "ROCMFORGE_TRUSTED_KEYS": public,
    }
    return {"env_a": env_a, "env_b": env_b, "cache": cache, "report": report, "public": public}


def _manifest(cache: Path, hash: str) -> Path:
    return cache / "entries" / f"{hash}.json"


def _rewrite(path: Path, data: bytes) -> None:
    os.chmod(path, 0o644)
    path.write_bytes(data)


@pytest.mark.slow
def test_store_b_substitutes_what_store_a_pushed(pushed: dict, tiny_recipe: Path, tmp_path: Path):
    cache, report, env_b = pushed["cache"], pushed["report"], pushed["env_b"]
    store_a = tmp_path / "store-a"
    # Pushing again uploads nothing: the manifest is there.
    again = rf("push", f"file://{cache}", report["hash"], "--store", store_a, "--json")
    assert json.loads(again.stdout)["entries"][0]["present"] is True
    blobs = sorted(p.name for p in (cache / "blobs" / "sha256").iterdir())
    assert len(blobs) >= 4 and not [p for p in cache.rglob(".tmp-*")]

    store_b = tmp_path / "store-b"
    proc = _realize(tiny_recipe, store_b, env_b, "--cache", f"file://{cache}")
    assert proc.returncode == 0, proc.stderr
    (got,) = json.loads(proc.stdout)
    assert got["hash"] == report["hash"] and got["substituted"] == f"file://{cache}"
    assert got["sandbox"] is None and not got["cached"]  # nothing was built here
    assert ": publish (" not in proc.stderr and ": build" not in proc.stderr
    assert "substitute from" in proc.stderr
    wheel_a, wheel_b = Path(report["wheels"][0]), Path(got["wheels"][0])
    assert wheel_b.read_bytes() == wheel_a.read_bytes()
    meta = json.loads((Path(got["path"]) / "meta.json").read_text())
    assert meta["origin"]["cache"] == f"file://{cache}"
    assert meta["origin"]["keyid"] == "builder-a"
    # audit in B: verified, signed with A's key, built on A's host.
    proc = rf("audit", wheel_b, "--store", store_b, "--json", env=env_b)
    (audit,) = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert audit["status"] == "verified"
    assert audit["signature"]["status"] == "valid" and audit["signature"]["keyid"] == "builder-a"
    assert audit["signature"]["fingerprint"] == meta["origin"]["fingerprint"]
    assert audit["origin"]["cache"] == f"file://{cache}" and audit["origin"]["host"]
    text = rf("audit", wheel_b, "--store", store_b, env=env_b).stdout
    assert f"substituted  from file://{cache}" in text
    # A second realize in B is a plain cache hit.
    proc = _realize(tiny_recipe, store_b, env_b, "--cache", f"file://{cache}")
    assert json.loads(proc.stdout)[0]["cached"] is True


def _refused(tiny_recipe: Path, tmp_path: Path, pushed: dict, env: dict, why: str) -> None:
    """B refuses the cache's entry with ``why``, warns naming the cache, and builds instead."""
    cache = pushed["cache"]
    # A fresh store each time: a deleted store's memo must not answer for its successor.
    store_b = Path(tempfile.mkdtemp(dir=tmp_path, prefix="store-b-")) / "store"
    strict = _realize(
        tiny_recipe, store_b, env, "--cache", f"file://{cache}", "--require-substitute"
    )
    assert strict.returncode == 1, strict.stderr
    assert f"cache file://{cache}: refused" in strict.stderr and why in strict.stderr
    assert not list((store_b / "entries").iterdir())  # no partial entry
    proc = _realize(tiny_recipe, store_b, env, "--cache", f"file://{cache}")
    assert proc.returncode == 0, proc.stderr
    assert f"cache file://{cache}: refused" in proc.stderr and "building instead" in proc.stderr
    (got,) = json.loads(proc.stdout)
    assert got["substituted"] is None and got["sandbox"] is not None  # built


@pytest.mark.slow
def test_refusals_fall_back_to_building(pushed: dict, tiny_recipe: Path, tmp_path: Path):
    cache, report, env_b = pushed["cache"], pushed["report"], pushed["env_b"]
    manifest_path = _manifest(cache, report["hash"])
    original = manifest_path.read_bytes()
    manifest = json.loads(original)
    # An untrusted key: B trusts nobody.
    nobody = {**env_b, "ROCMFORGE_TRUSTED_KEYS": ""}
    _refused(tiny_recipe, tmp_path, pushed, nobody, "which is not trusted; trusted: none")
    # A swapped wheel under a valid signature: a new blob, the manifest points at it.
    wheel = next(f for f in manifest["files"] if f["name"].endswith(".whl"))
    evil = cache / "evil.whl"
    evil.write_bytes(Path(report["wheels"][0]).read_bytes() + b"\0")
    import hashlib

    digest = hashlib.sha256(evil.read_bytes()).hexdigest()
    shutil.copy(evil, cache / "blobs" / "sha256" / digest)
    swapped = json.loads(original)
    for f in swapped["files"]:
        if f["name"] == wheel["name"]:
            f.update(sha256=digest, size=evil.stat().st_size)
    _rewrite(manifest_path, json.dumps(swapped).encode())
    _refused(tiny_recipe, tmp_path, pushed, env_b, "does not match the signed statement")
    # A file name escaping the entry.
    escaping = json.loads(original)
    escaping["files"][0]["name"] = "../../escape"
    _rewrite(manifest_path, json.dumps(escaping).encode())
    _refused(tiny_recipe, tmp_path, pushed, env_b, "unsafe file '../../escape'")
    escaping["files"][0]["name"] = "/etc/passwd"
    _rewrite(manifest_path, json.dumps(escaping).encode())
    _refused(tiny_recipe, tmp_path, pushed, env_b, "unsafe file '/etc/passwd'")
    # The cache answers with another hash.
    other = json.loads(original)
    other["hash"] = "0" * 32
    _rewrite(manifest_path, json.dumps(other).encode())
    _refused(tiny_recipe, tmp_path, pushed, env_b, f"the cache answered with {'0' * 32}")
    # A truncated blob.
    _rewrite(manifest_path, original)
    blob = cache / "blobs" / "sha256" / wheel["sha256"]
    whole = blob.read_bytes()
    _rewrite(blob, whole[: len(whole) // 2])
    _refused(tiny_recipe, tmp_path, pushed, env_b, "truncated")
    # The wheel's blob replaced in place (same address and size, other bytes): the wheel is
    # checked by its blake3 against the signed statement, not by the manifest's sha256.
    _rewrite(blob, whole[:-1] + bytes([whole[-1] ^ 1]))
    _refused(tiny_recipe, tmp_path, pushed, env_b, "does not match the signed statement")
    _rewrite(blob, whole)
    # Unsigned: the envelope is left out of the manifest.
    unsigned = json.loads(original)
    unsigned["files"] = [f for f in unsigned["files"] if f["name"] != "provenance.dsse.json"]
    _rewrite(manifest_path, json.dumps(unsigned).encode())
    _refused(tiny_recipe, tmp_path, pushed, env_b, "unsigned")


@pytest.mark.slow
def test_no_substitute_and_environment_variable(pushed: dict, tiny_recipe: Path, tmp_path: Path):
    cache, env_b = pushed["cache"], pushed["env_b"]
    store_b = tmp_path / "store-b"
    env = {**env_b, "ROCMFORGE_CACHES": f"file://{cache}"}
    proc = _realize(tiny_recipe, store_b, env, "--offline")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["substituted"] is None  # built: no cache was asked
    store_c = tmp_path / "store-c"  # a fresh store (not store-b deleted: its memo could answer)
    proc = _realize(tiny_recipe, store_c, env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["substituted"] == f"file://{cache}", proc.stderr
    bad = _realize(tiny_recipe, store_c, env, "--offline", "--require-substitute")
    assert bad.returncode == 2 and "contradict" in bad.stderr


def test_cache_miss_without_cache_entry_and_bad_url(tmp_path: Path) -> None:
    from rocmforge.cache.urls import open_backend

    backend = open_backend(f"file://{tmp_path / 'empty'}")
    assert backend.get_manifest("ab" * 16) is None
    proc = rf_in("push", "s3://bucket", "--store", tmp_path / "s")
    assert proc.returncode == 2 and "unsupported scheme 's3'" in proc.stderr


def _fake_entry(backend, tmp_path: Path, name: str, version: str, content: bytes) -> str:
    """Put a manifest of one blob into ``backend`` (gc and ls read manifests, not wheels)."""
    import hashlib

    from rocmforge.cache.manifest import FileRef, Manifest

    blob = tmp_path / f"{name}-{version}.whl"
    blob.write_bytes(content)
    digest = hashlib.sha256(content).hexdigest()
    backend.put_blob(digest, blob)
    h = hashlib.sha256(f"{name}{version}".encode()).hexdigest()[:32]
    files = (FileRef(f"{name}-{version}-py3-none-any.whl", digest, len(content)),)
    backend.put_manifest(h, Manifest(h, name, version, files, {}).to_bytes())
    return h


def test_cache_ls_and_gc_keep_last_and_older_than(tmp_path: Path) -> None:
    from rocmforge.cache.urls import open_backend

    root = tmp_path / "cache"
    url = f"file://{root}"
    backend = open_backend(url)
    hashes = {}
    for i, (name, version) in enumerate([("a", "1"), ("a", "2"), ("a", "3"), ("b", "1")]):
        hashes[name, version] = _fake_entry(
            backend, tmp_path, name, version, f"{name}{version}".encode() * 100
        )
        day = 86400.0
        age = time_now() - (10 - i) * day  # a-1 oldest ... b-1 newest, 7 days old
        os.utime(root / "entries" / f"{hashes[name, version]}.json", (age, age))
    for blob in (root / "blobs" / "sha256").iterdir():
        os.utime(blob, (0, 0))  # past the grace a push in flight gets
    proc = rf_in("cache", "ls", url, "--json")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)["entries"]
    assert [(e["name"], e["version"]) for e in listed] == [
        ("b", "1"),
        ("a", "3"),
        ("a", "2"),
        ("a", "1"),
    ]
    assert "4 entries in" in rf_in("cache", "ls", url).stdout
    assert rf_in("cache", "gc", url).returncode == 2  # no policy: refuse to empty the cache
    dry = json.loads(rf_in("cache", "gc", url, "--keep-last", "1", "--dry-run", "--json").stdout)
    assert {e["version"] for e in dry["deleted"]} == {"1", "2"} and dry["blobs"] == 2
    assert len(list((root / "entries").iterdir())) == 4
    # keep-last 1 keeps a-3 and b-1; older-than 9d12h also keeps a-2 (pushed 9 days ago).
    proc = rf_in("cache", "gc", url, "--keep-last", "1", "--older-than", "9d12h", "--json")
    report = json.loads(proc.stdout)
    assert [(e["name"], e["version"]) for e in report["deleted"]] == [("a", "1")]
    assert report["kept"] == 3 and report["blobs"] == 1
    left = {e["version"] for e in json.loads(rf_in("cache", "ls", url, "--json").stdout)["entries"]}
    assert left == {"1", "2", "3"} and len(list((root / "blobs" / "sha256").iterdir())) == 3
    assert backend.get_manifest(hashes["a", "1"]) is None


def time_now() -> float:
    """The wall clock (the cache records push times by it)."""
    import time

    return time.time()


def _signed_synthetic_entry(cache_url: str, tmp_path: Path, size: int):
    """Push a synthetic signed entry (no build) to ``cache_url``; return (Wanted, public key)."""
    import hashlib

    from nacl.signing import SigningKey

    from rocmforge.cache.manifest import FileRef, Manifest
    from rocmforge.cache.substitute import Wanted
    from rocmforge.cache.urls import open_backend
    from rocmforge.store.entry import input_hash
    from rocmforge.trust.signing import PublicKey, SecretKey, sign_payload

    d = tmp_path / "synthetic"
    d.mkdir()
    wheel = d / "syn-1.0-py3-none-any.whl"
    wheel.write_bytes(os.urandom(size))
    derivation = {"package": {"name": "syn", "version": "1.0"}, "env": {}, "toolchain": {}}
    (d / "derivation.json").write_text(json.dumps(derivation))
    h = input_hash(derivation)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": wheel.name, "digest": {"sha256": sha}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {
                "buildType": "https://rocmforge.dev/build/v1",
                "externalParameters": {},
                "internalParameters": {
                    "inputHash": h,
                    "host": "x",
                    "localPaths": {"repository": str(d)},
                },
                "resolvedDependencies": [],
            },
            "runDetails": {"builder": {"id": "https://rocmforge.dev/builder/v1"}},
        },
    }
    payload = json.dumps(statement).encode()
    (d / "provenance.json").write_bytes(payload)
    seed = os.urandom(32)
    pub = bytes(SigningKey(seed).verify_key)
    key = SecretKey("syn", seed, PublicKey("syn", pub))
    (d / "provenance.dsse.json").write_text(json.dumps(sign_payload(payload, key)))
    backend = open_backend(cache_url)
    refs = []
    for p in sorted(d.iterdir()):
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        backend.put_blob(digest, p)
        refs.append(FileRef(p.name, digest, p.stat().st_size))
    backend.put_manifest(h, Manifest(h, "syn", "1.0", tuple(refs), {}).to_bytes())
    return Wanted(h, "syn", "1.0"), "syn:" + base64.b64encode(pub).decode()


def _substitute_in(store_dir: str, url: str, want, out) -> None:  # run in a child process
    from rocmforge.cache.substitute import substitute
    from rocmforge.store.store import open_store
    from rocmforge.util.progress import NullReporter

    store = open_store(Path(store_dir))
    entry = substitute(store, [url], want, NullReporter(), require=True)
    out.put(str(entry.path) if entry else None)


def test_concurrent_substitutions_publish_one_entry(tmp_path: Path, monkeypatch) -> None:
    import multiprocessing

    url = f"file://{tmp_path / 'cache'}"
    want, public = _signed_synthetic_entry(url, tmp_path, 8 << 20)
    monkeypatch.setenv("ROCMFORGE_TRUSTED_KEYS", public)
    from rocmforge.store.store import open_store

    for s in ("shared", "other"):
        open_store(tmp_path / s).close()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    targets = [tmp_path / "shared", tmp_path / "shared", tmp_path / "shared", tmp_path / "other"]
    procs = [ctx.Process(target=_substitute_in, args=(str(t), url, want, out)) for t in targets]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    paths = sorted(out.get(timeout=5) for _ in procs)
    shared = [p for p in paths if "/shared/" in p]
    assert len(set(shared)) == 1 and len(shared) == 3
    for s in ("shared", "other"):
        entries = list((tmp_path / s / "entries").iterdir())
        assert [e.name for e in entries] == [f"{want.hash}-syn-1.0"]
        assert not [n for n in os.listdir(tmp_path / s / "tmp") if not n.endswith(".lock")]
        meta = json.loads((entries[0] / "meta.json").read_text())
        assert meta["origin"]["keyid"] == "syn" and meta["sources"] == []


@pytest.mark.slow
def test_concurrent_pushes_of_one_entry_leave_one_sound_copy(
    pushed: dict, tiny_recipe: Path, tmp_path: Path
) -> None:
    """Four pushers of the same hash into one fresh file:// cache at once (two machines pushing
    the same build): all succeed, the cache holds one manifest and no temp files, and another
    store substitutes from it."""
    import subprocess
    import sys

    from conftest import pip_args

    cache = tmp_path / "shared-cache"
    env = {**os.environ, **pushed["env_a"], "ROCMFORGE_PIP_ARGS": pip_args()}
    env.pop("ROCMFORGE_STORE", None)
    argv = [sys.executable, "-m", "rocmforge", "push", f"file://{cache}",
            pushed["report"]["hash"], "--store", str(tmp_path / "store-a"), "--json"]  # fmt: skip
    procs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    presents = [json.loads(out)["entries"][0]["present"] for out, _ in outs]
    assert presents.count(False) >= 1  # at least one uploaded; the others found it or raced
    assert [p.name for p in (cache / "entries").iterdir()] == [f"{pushed['report']['hash']}.json"]
    assert not [p for p in cache.rglob(".tmp-*")]
    store_b = tmp_path / "store-b"
    proc = _realize(tiny_recipe, store_b, pushed["env_b"], "--cache", f"file://{cache}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["substituted"] == f"file://{cache}"


@pytest.mark.slow
def test_log_of_an_entry_read_from_the_cache_without_substituting(
    pushed: dict, tiny_recipe: Path, tmp_path: Path
) -> None:
    cache, report, env_b = pushed["cache"], pushed["report"], pushed["env_b"]
    store_b = tmp_path / "store-b"
    for target in (str(tiny_recipe), report["hash"]):
        proc = rf("log", target, "--store", store_b, "--cache", f"file://{cache}", env=env_b)
        assert proc.returncode == 0, proc.stderr
        assert "mkwheel" in proc.stdout and f"from file://{cache}" in proc.stderr
    alone = rf("log", tiny_recipe, "--store", store_b, env=env_b)  # no cache: never built here
    assert alone.returncode == 2 and "never built" in alone.stderr
    assert not list((store_b / "entries").iterdir())  # nothing substituted
    assert not [p for p in (store_b / "tmp").iterdir() if p.name.startswith("log-")]
    manifest = json.loads(_manifest(cache, report["hash"]).read_bytes())
    (log,) = [f for f in manifest["files"] if f["name"] == "build.log.zst"]
    blob = cache / "blobs" / "sha256" / log["sha256"]
    data = blob.read_bytes()
    _rewrite(blob, data[:-1] + bytes([data[-1] ^ 1]))
    bad = rf("log", report["hash"], "--store", store_b, "--cache", f"file://{cache}", env=env_b)
    assert bad.returncode != 0 and "does not match its digest" in bad.stderr
    assert f"file://{cache}" in bad.stderr and "Traceback" not in bad.stderr
