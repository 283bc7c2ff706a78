"""Acceptance runs (``accepted/<hash>/<run>.json``) through push, substitution, export and query.

Real parts throughout: the tiny project built once by the real CLI into a signed store, real
``file://`` caches and the real docker-registry (``oci://``, as in test_oci.py), real in-toto
statements (:func:`rocmforge.accept.attest.statement`), a real ed25519 key for the signed runs,
and fresh stores that substitute through ``realize --cache``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_tiny_project, rf, rf_in
from test_oci import Registry, registry  # noqa: F401 (the registry fixture)

from rocmforge.accept.attest import statement, subjects_of
from rocmforge.accept.report import AcceptanceReport, Check
from rocmforge.cache.manifest import parse_manifest
from rocmforge.cache.urls import open_backend
from rocmforge.store import layout
from rocmforge.store.accepted import run_files, runs_dir, write_run
from rocmforge.trust.signing import generate_key, sign_payload
from rocmforge.util.fsutil import json_bytes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Store A: the tiny project built and signed by builder A (once for the module)."""
    base = tmp_path_factory.mktemp("accepted-a")
    env_a = {"XDG_CONFIG_HOME": str(base / "config-a")}
    proc = rf("key", "generate", "--json", "--name", "builder-a", env=env_a)
    assert proc.returncode == 0, proc.stderr
    public = str(json.loads(proc.stdout)["public_key"])
    recipe = make_tiny_project(base)
    store = base / "store-a"
    proc = rf("realize", recipe, "--store", store, "--json", env=env_a)
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    env_b = {"XDG_CONFIG_HOME": str(base / "config-b"), "ROCMFORGE_TRUSTED_KEYS": public}
    return {
        "env_a": env_a,
        "env_b": env_b,
        "recipe": recipe,
        "store": store,
        "hash": report["hash"],
        "wheel": Path(report["wheels"][0]),
        "key": generate_key(base / "run-key", "tester"),
    }


@pytest.fixture(autouse=True)
def _no_runs(built: dict[str, Any]) -> Iterator[None]:
    """Each test starts with store A holding no runs."""
    shutil.rmtree(built["store"] / layout.ACCEPTED, ignore_errors=True)
    yield
    shutil.rmtree(built["store"] / layout.ACCEPTED, ignore_errors=True)


def _run(
    built: dict[str, Any],
    started: str,
    *,
    status: str = "passed",
    archs: tuple[str, ...] = ("gfx942",),
    signed: bool = False,
) -> Path:
    """Keep one smoke run of the tiny entry in store A (a real statement about its wheel)."""
    report = AcceptanceReport(
        tier="smoke",
        python="/x/bin/python",
        checks=(Check("import", "passed", 0.1), Check("matmul", status, 0.2)),
        node={"gpu_model": "AMD Instinct MI300X", "gpu_count": 1, "archs": list(archs)},
        started=started,
        seconds=1.0,
        sandbox="bwrap",
    )
    wheel = built["wheel"]
    raw = json_bytes(statement(report, subjects_of([(wheel.name, wheel)])))
    if signed:
        raw = json_bytes(sign_payload(raw, built["key"]))
    stamp = "".join(c for c in started if c.isalnum())
    name = f"{stamp}-smoke-{hashlib.sha256(raw).hexdigest()[:8]}.json"
    return write_run(built["store"], built["hash"], name, raw)


def _url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "file":
        return f"file://{tmp_path / 'cache'}"
    reg: Registry = request.getfixturevalue("registry")
    return reg.url()


def _push(built: dict[str, Any], url: str, *args: str) -> Any:
    return rf_in("push", url, "--store", built["store"], "--json", *args, env=built["env_a"])


def _substitute(built: dict[str, Any], store_b: Path, url: str) -> Any:
    proc = rf(
        "realize", built["recipe"], "--store", store_b, "--cache", url, "--require-substitute",
        "--json", env=built["env_b"],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (got,) = json.loads(proc.stdout)
    assert got["substituted"] == url
    return proc


def _remote_runs(url: str, hash: str) -> dict[str, str]:
    raw = open_backend(url).get_manifest(hash)
    assert raw is not None
    return {f.name: f.sha256 for f in parse_manifest(raw).accepted}


@pytest.mark.parametrize("kind", ["file", "oci"])
def test_push_then_substitute_carries_the_runs_byte_identical(
    built: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    url = _url(kind, tmp_path, request)
    runs = [
        _run(built, "2026-12-01T10:00:00Z", signed=True),
        _run(built, "2026-12-02T10:00:00Z", status="failed"),
    ]
    proc = _push(built, url)
    assert proc.returncode == 0, proc.stderr
    (pushed,) = json.loads(proc.stdout)["entries"]
    assert pushed["present"] is False and pushed["runs"] == 2
    assert set(_remote_runs(url, built["hash"])) == {r.name for r in runs}
    store_b = tmp_path / "store-b"
    _substitute(built, store_b, url)
    got = run_files(store_b, built["hash"])
    assert [p.name for p in got] == [r.name for r in runs]
    for mine, theirs in zip(runs, got, strict=True):
        assert theirs.read_bytes() == mine.read_bytes()
    (entry_dir,) = (store_b / "entries").iterdir()
    assert not [n for n in (p.name for p in entry_dir.iterdir()) if n in {r.name for r in runs}]
    show = rf_in("show", built["hash"], "--store", store_b, "--json", env=built["env_b"])
    assert [r["result"] for r in json.loads(show.stdout)["accepted"]] == ["PASSED", "FAILED"]


def _oci_digest(reg: Registry, tag: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(
        f"http://127.0.0.1:{reg.port}/v2/team/wheels/manifests/{tag}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
        method="HEAD",
    )
    with opener.open(req) as resp:
        return str(resp.headers["Docker-Content-Digest"])


@pytest.mark.parametrize("kind", ["file", "oci"])
def test_a_run_added_after_the_push_reaches_the_cache_and_nothing_is_lost(
    built: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    url = _url(kind, tmp_path, request)
    first = _run(built, "2026-12-01T10:00:00Z")
    assert _push(built, url).returncode == 0
    entry_before = open_backend(url).get_manifest(built["hash"])
    assert entry_before is not None
    files_before = parse_manifest(entry_before).files
    if kind == "oci":
        digest = _oci_digest(request.getfixturevalue("registry"), built["hash"])
    # A second run, and the first gone from the store (another node's run in the cache).
    second = _run(built, "2026-12-02T10:00:00Z", archs=("gfx90a",))
    first_bytes = first.read_bytes()
    first.unlink()
    proc = _push(built, url)
    assert proc.returncode == 0, proc.stderr
    (pushed,) = json.loads(proc.stdout)["entries"]
    assert pushed["present"] is True and pushed["runs"] == 1 and pushed["blobs"] == 1
    assert set(_remote_runs(url, built["hash"])) == {first.name, second.name}
    after = open_backend(url).get_manifest(built["hash"])
    assert after is not None and parse_manifest(after).files == files_before  # first wins
    if kind == "oci":
        assert _oci_digest(request.getfixturevalue("registry"), built["hash"]) == digest
    # Nothing new: nothing sent, the manifest as it was.
    again = json.loads(_push(built, url).stdout)["entries"][0]
    assert again["runs"] == 0 and again["blobs"] == 0
    assert open_backend(url).get_manifest(built["hash"]) == after
    text = rf_in("push", url, "--store", built["store"], env=built["env_a"]).stdout
    assert "already there" in text and "acceptance run" not in text
    store_b = tmp_path / "store-b"
    _substitute(built, store_b, url)
    got = {p.name: p.read_bytes() for p in run_files(store_b, built["hash"])}
    assert got == {first.name: first_bytes, second.name: second.read_bytes()}


def test_a_tampered_run_blob_is_skipped_and_the_entry_still_substitutes(
    built: dict[str, Any], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    url = f"file://{cache}"
    good = _run(built, "2026-12-01T10:00:00Z", signed=True)
    bad = _run(built, "2026-12-02T10:00:00Z")
    worse = _run(built, "2026-12-03T10:00:00Z")
    assert _push(built, url).returncode == 0
    refs = {f.name: f for f in parse_manifest(open_backend(url).get_manifest(built["hash"]) or b"")
            .accepted}  # fmt: skip
    # One blob flipped in place (same address and size), one swapped for a blob that is not a
    # run (the manifest names its true digest).
    blob = cache / "blobs" / "sha256" / refs[bad.name].sha256
    raw = bytearray(blob.read_bytes())
    raw[10] ^= 1
    blob.chmod(0o644)
    blob.write_bytes(bytes(raw))
    junk = b'{"not": "a run"}\n'
    junk_digest = hashlib.sha256(junk).hexdigest()
    (cache / "blobs" / "sha256" / junk_digest).write_bytes(junk)
    manifest_path = cache / "entries" / f"{built['hash']}.json"
    doc = json.loads(manifest_path.read_bytes())
    for ref in doc["accepted"]:
        if ref["name"] == worse.name:
            ref.update(sha256=junk_digest, size=len(junk))
    manifest_path.chmod(0o644)
    manifest_path.write_text(json.dumps(doc))
    store_b = tmp_path / "store-b"
    proc = _substitute(built, store_b, url)
    assert f"skipped acceptance run {bad.name}" in proc.stderr
    assert "does not match its digest" in proc.stderr
    assert f"skipped acceptance run {worse.name}" in proc.stderr
    assert "test-result predicate" in proc.stderr
    got = run_files(store_b, built["hash"])
    assert [p.name for p in got] == [good.name]
    assert got[0].read_bytes() == good.read_bytes()


def test_push_require_accepted_gates(built: dict[str, Any], tmp_path: Path) -> None:
    h = built["hash"]
    cache = tmp_path / "cache"
    url = f"file://{cache}"

    def refused(*args: str) -> str:
        proc = _push(built, url, "--require-accepted", *args)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert not cache.exists()  # nothing went up
        (line,) = proc.stderr.strip().splitlines()
        assert f"tiny 0.1 ({h})" in line
        return line

    assert "no passing acceptance run for tiny" in refused()  # no run at all
    _run(built, "2026-12-01T10:00:00Z", status="failed")
    refused()
    _run(built, "2026-12-02T10:00:00Z", archs=("gfx942",))
    assert "no passing acceptance run on gfx90a" in refused("--on", "gfx90a")
    bad = _push(built, url, "--on", "gfx942")
    assert bad.returncode == 2 and "--require-accepted" in bad.stderr
    proc = _push(built, url, "--require-accepted", "--on", "gfx942")
    assert proc.returncode == 0, proc.stderr
    (pushed,) = json.loads(proc.stdout)["entries"]
    assert pushed["hash"] == h and pushed["runs"] == 2


def test_export_require_accepted_gates_and_writes_the_runs(
    built: dict[str, Any], tmp_path: Path
) -> None:
    h = built["hash"]
    dest = tmp_path / "export"

    def export(*args: str) -> Any:
        return rf_in("export", built["recipe"], "--to", dest, "--store", built["store"],
                     "--json", *args)  # fmt: skip

    proc = export("--require-accepted")
    assert proc.returncode == 1 and f"tiny 0.1 ({h})" in proc.stderr and not dest.exists()
    run = _run(built, "2026-12-01T10:00:00Z", archs=("gfx942",), signed=True)
    proc = export("--require-accepted", "--on", "sm_90")
    assert proc.returncode == 1 and "on sm_90" in proc.stderr and not dest.exists()
    proc = export("--require-accepted", "--on", "gfx942")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    rel = f"accepted/{h}/{run.name}"
    assert report["accepted"] == [{"hash": h, "name": "tiny", "version": "0.1", "file": rel}]
    assert (dest / rel).read_bytes() == run.read_bytes()
    assert (dest / built["wheel"].name).is_file()
    text = rf_in("export", built["recipe"], "--to", dest, "--store", built["store"]).stdout
    assert "1 acceptance runs in accepted/" in text


def test_query_accepted_and_on(built: dict[str, Any]) -> None:
    store, h = built["store"], built["hash"]

    def query(*args: str) -> Any:
        proc = rf_in("query", "--store", store, *args)
        assert proc.returncode == 0, proc.stderr
        return proc

    assert json.loads(query("--accepted", "--json").stdout) == []
    _run(built, "2026-12-01T10:00:00Z", status="failed")
    assert json.loads(query("--accepted", "--json").stdout) == []
    assert h[:12] not in query("--accepted").stdout
    _run(built, "2026-12-02T10:00:00Z", archs=("gfx942",))
    text = query("--accepted").stdout
    assert "ACCEPTED" in text.splitlines()[0]
    assert h[:12] in text
    assert "1x AMD Instinct MI300X (gfx942), 2026-12-02, smoke tier PASSED" in text
    (found,) = json.loads(query("--accepted", "--on", "gfx942", "--json").stdout)
    assert found["hash"] == h
    (run,) = found["accepted"]
    assert run["result"] == "PASSED" and run["node"]["archs"] == ["gfx942"]
    assert run["headline"].endswith("smoke tier PASSED") and run["file"].startswith(str(store))
    assert json.loads(query("--accepted", "--on", "gfx90a", "--json").stdout) == []
    assert "accepted" not in json.loads(query("--json").stdout)[0]
    bad = rf_in("query", "--store", store, "--on", "gfx942")
    assert bad.returncode == 2 and "--accepted" in bad.stderr


def test_a_dependency_counts_when_its_dependents_run_tested_its_wheels(tmp_path: Path) -> None:
    """The gate's closure rule, on real runs kept in a store: torch's passing run names
    triton's wheel among its subjects, so triton (no run of its own) is accepted with it."""
    from rocmforge.store.accepted import unaccepted
    from rocmforge.store.entry import Entry, EntryMeta

    root = tmp_path / "store"

    def entry(h: str, name: str, sha: str) -> Entry:
        meta = {"hash": h, "name": name, "version": "1", "created": 1.7e9, "size": 1,
                "sandbox": "bwrap",
                "wheels": [{"file": f"{name}-1-py3-none-any.whl", "sha256": sha,
                            "blake3": "0" * 64}]}  # fmt: skip
        path = root / layout.ENTRIES / f"{h}-{name}-1"
        return Entry.from_meta(path, EntryMeta.from_json(meta, file=path / layout.META))

    torch, triton, other = (entry("a" * 32, "torch", "1" * 64), entry("b" * 32, "triton", "2" * 64),
                            entry("c" * 32, "other", "3" * 64))  # fmt: skip
    report = AcceptanceReport(tier="smoke", python="/p", checks=(Check("import", "passed"),),
                              node={"archs": ["gfx942"]}, started="2026-12-01T00:00:00Z",
                              seconds=1.0, sandbox="bwrap")  # fmt: skip
    subjects = [{"name": "torch-1-py3-none-any.whl", "digest": {"sha256": "1" * 64}},
                {"name": "triton-1-py3-none-any.whl", "digest": {"sha256": "2" * 64}}]  # fmt: skip
    write_run(root, torch.hash, "20261201T000000Z-smoke-00000000.json",
              json_bytes(statement(report, subjects)))  # fmt: skip
    assert runs_dir(root, torch.hash).is_dir()
    assert unaccepted(root, [torch, triton, other]) == [other]
    assert unaccepted(root, [torch, triton], "gfx90a") == [torch, triton]
    assert unaccepted(root, [triton]) == [triton]  # only a run pushed with it counts
