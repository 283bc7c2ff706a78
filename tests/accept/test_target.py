"""``rocmforge test TARGET`` and ``realize --test`` on real store entries, without a GPU.

The entries are real builds (the tiny project, with the real CLI and bubblewrap); the test venv
is a real venv the closure is installed into; the recipe's ``[test]`` script runs in the real
sandbox, and what it says and how it exits decide the run. The statements kept beside the
entries are read back, validated with the in-toto attestation library, signed with a real key
and collected by a real gc.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import make_tiny_project, rf, rf_in

from rocmforge.accept.report import AcceptanceReport, Check
from rocmforge.accept.target import judge_last_known_good
from rocmforge.accept.thresholds import Thresholds
from rocmforge.store import layout
from rocmforge.store.accepted import read_runs, write_run

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SCRIPT_OK = """\
import json, sys, tiny
print("ROCMFORGE-START " + json.dumps({"check": "value", "timeout": 30}))
assert tiny.VALUE == 42, tiny.VALUE
print("ROCMFORGE-CHECK " + json.dumps({"check": "value", "status": "passed", "seconds": 0.01,
      "figures": {"value": tiny.VALUE, "argv": sys.argv[1:], "prefix": sys.prefix},
      "detail": "tiny.VALUE is 42"}))
"""


def _project(tmp_path: Path, script: str, test_table: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "gpu_check.py").write_text(script)
    return make_tiny_project(tmp_path, "\n[test]\n" + test_table)


def _realize(recipe: Path, store: Path, *extra: str) -> dict[str, Any]:
    proc = rf("realize", recipe, "--store", store, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout)[0])


def _validate(statement: dict[str, Any]) -> None:
    from google.protobuf import json_format
    from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement

    pb = json_format.ParseDict(statement, statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()
    json_format.ParseDict(statement["predicate"], test_result_pb2.TestResult())


@pytest.mark.slow  # a real run of seconds: the quick tier stays under a minute
def test_a_recipes_test_script_runs_in_the_sandbox_and_the_proof_is_kept(tmp_path: Path) -> None:
    recipe = _project(tmp_path, SCRIPT_OK, 'script = "gpu_check.py"\nargs = ["--fast"]\n')
    store = tmp_path / "store"
    built = _realize(recipe, store)
    proc = rf("test", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    (run,) = out["runs"]
    assert run["tier"] == "project" and run["result"] == "PASSED"
    (check,) = run["checks"]
    # the script ran from the test venv (tiny installed there), with its arguments
    assert check["figures"]["value"] == 42 and check["figures"]["argv"] == ["--fast"]
    assert check["figures"]["prefix"] == "/test/venv"  # the venv as the sandbox sees it
    assert out["wheels"] == built["wheels"]
    (kept,) = run["kept"]
    assert Path(kept).parent == store / layout.ACCEPTED / built["hash"]
    (stored,) = read_runs(store, built["hash"])
    assert stored.passed and stored.tier == "project" and stored.envelope is None
    _validate(json.loads(Path(kept).read_bytes()))
    import hashlib

    digest = hashlib.sha256(Path(built["wheels"][0]).read_bytes()).hexdigest()
    assert stored.digests == {digest}
    # show and audit say so, the read path and the full command alike
    import socket

    line = f"accepted: {socket.gethostname()} (no GPU), {stored.started[:10]}, project tier PASSED"
    for show in (rf("show", built["hash"], "--store", store), rf_in("show", built["hash"],
                                                                    "--store", store)):
        assert show.returncode == 0, show.stderr
        assert f"test run     {line} (signature unsigned)" in show.stdout, show.stdout
        assert f"file       {kept}" in show.stdout
    shown = json.loads(rf_in("show", built["hash"], "--store", store, "--json").stdout)
    assert [a["result"] for a in shown["accepted"]] == ["PASSED"]
    audit = rf("audit", built["wheels"][0], "--store", store)
    assert audit.returncode == 0, audit.stderr
    assert f"test run     {line} (signature unsigned)" in audit.stdout, audit.stdout
    # a hash target tests the same entry (no recipe: no [test] script, no torch: nothing to do)
    proc = rf_in("test", built["hash"][:8], "--store", store)
    assert proc.returncode == 2 and "nothing to test" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_failing_script_fails_the_run_and_the_failure_is_kept(tmp_path: Path) -> None:
    script = ("import sys, tiny\nprint('tiny is', tiny.VALUE)\n"
              "print('Error: wrong value')\nsys.exit(4)\n")
    recipe = _project(tmp_path, script, 'script = "gpu_check.py"\n')
    store = tmp_path / "store"
    built = _realize(recipe, store)
    proc = rf("test", recipe, "--store", store)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failed" in proc.stdout and "exited with status 4: Error: wrong value" in proc.stdout
    (stored,) = read_runs(store, built["hash"])
    assert stored.result == "FAILED" and not stored.passed


@pytest.mark.slow  # a real run of seconds: the quick tier stays under a minute
def test_a_hanging_script_is_killed_at_its_timeout(tmp_path: Path) -> None:
    script = "import time\nprint('working', flush=True)\ntime.sleep(600)\n"
    recipe = _project(tmp_path, script, 'script = "gpu_check.py"\ntimeout = 3\n')
    store = tmp_path / "store"
    _realize(recipe, store)
    t = time.monotonic()
    proc = rf("test", recipe, "--store", store, "--json")
    took = time.monotonic() - t
    assert proc.returncode == 1, proc.stderr
    (run,) = json.loads(proc.stdout)["runs"]
    (check,) = run["checks"]
    assert check["status"] == "failed" and "timed out after 3 s" in check["detail"]
    assert took < 30, took


def test_realize_test_builds_then_tests_and_skips_gpu_tiers_without_a_gpu(tmp_path: Path) -> None:
    if os.path.exists("/dev/kfd") or os.path.exists("/dev/nvidia0"):
        pytest.skip("this host has a GPU: the no-GPU path is not taken")
    recipe = _project(tmp_path, SCRIPT_OK, 'tiers = ["smoke"]\nscript = "gpu_check.py"\n')
    store = tmp_path / "store"
    proc = rf("realize", recipe, "--store", store, "--test")
    assert proc.returncode == 0, proc.stderr
    assert "no GPU here: the smoke tier skipped" in proc.stderr
    assert "PASSED: project tier" in proc.stderr
    wheel = Path(proc.stdout.strip().splitlines()[-1])
    assert wheel.name.startswith("tiny-0.1-") and wheel.is_file()  # stdout: the wheels only
    (entry,) = (store / layout.ACCEPTED).iterdir()
    assert len(read_runs(store, entry.name)) == 1
    # `test` itself asks for the GPU tier the recipe names: no GPU is exit 3, naming what it
    # looked for, and nothing is installed or kept
    proc = rf_in("test", recipe, "--store", store)
    assert proc.returncode == 3 and "/dev/kfd" in proc.stderr, proc.stderr
    assert len(read_runs(store, entry.name)) == 1


def test_test_never_builds(tmp_path: Path) -> None:
    recipe = _project(tmp_path, SCRIPT_OK, 'script = "gpu_check.py"\n')
    proc = rf("test", recipe, "--store", tmp_path / "store", "--offline")
    assert proc.returncode == 2, proc.stderr
    assert "not in the store" in proc.stderr and "realize --test" in proc.stderr
    assert not list((tmp_path / "store" / layout.ENTRIES).iterdir())


@pytest.mark.slow
def test_signed_runs_verify_and_gc_collects_them_with_the_entry(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "signing.key"
    env = {"ROCMFORGE_SIGNING_KEY": str(key), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    assert rf("key", "generate", "--name", "ci-test", env=env).returncode == 0
    recipe = _project(tmp_path, SCRIPT_OK, 'script = "gpu_check.py"\n')
    store = tmp_path / "store"
    built = _realize(recipe, store)
    proc = rf("test", recipe, "--store", store, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "signed by ci-test" in proc.stdout
    (stored,) = read_runs(store, built["hash"])
    assert stored.envelope is not None
    from rocmforge.trust.signing import parse_public_key, verify_envelope

    pub = rf("key", "public", env=env)
    assert pub.returncode == 0, pub.stderr
    trusted = parse_public_key(pub.stdout.strip().splitlines()[-1], where="key show")
    assert verify_envelope(stored.envelope, {trusted.name: trusted}).status == "valid"
    audit = rf("audit", built["wheels"][0], "--store", store,
               env={**env, "ROCMFORGE_TRUSTED_KEYS": pub.stdout.strip().splitlines()[-1]})
    assert "project tier PASSED (signature valid (key ci-test))" in audit.stdout, audit.stdout
    audit = rf("audit", built["wheels"][0], "--store", store, env=env)  # nobody trusts the key
    assert "(signature untrusted (key ci-test))" in audit.stdout, audit.stdout
    # the installed tree of the entry's wheel stays while the entry does ...
    trees = store / layout.SOURCES / layout.SOURCES_WHEELS_UNPACKED
    assert any(t.name.startswith(Path(built["wheels"][0]).name) for t in trees.iterdir())
    assert rf("gc", "--store", store, "--keep", built["hash"]).returncode == 0
    assert any(t.name.startswith(Path(built["wheels"][0]).name) for t in trees.iterdir())
    assert read_runs(store, built["hash"])
    # ... and the runs and the tree go with it
    proc = rf("gc", "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert not (store / layout.ACCEPTED / built["hash"]).exists()
    assert not any(t.name.startswith(Path(built["wheels"][0]).name) for t in trees.iterdir())


def test_bad_test_tables_name_the_key(tmp_path: Path) -> None:
    cases = {
        'tiers = ["smoke", "fast"]\n': "test.tiers[1]",
        'script = "missing.py"\n': "test.script",
        'args = ["-x"]\n': "test.args",
        "timeout = -1\n": "test.timeout",
        "gpus = 0\n": "test.gpus",
        'colour = "red"\n': "test.colour",
    }
    for table, key in cases.items():
        recipe = _project(tmp_path / key.replace(".", "_").replace("[", "").replace("]", ""),
                          SCRIPT_OK, table)  # fmt: skip
        proc = rf_in("plan", recipe, "--store", tmp_path / "store")
        assert proc.returncode == 2, (table, proc.stderr)
        assert key in proc.stderr, (table, proc.stderr)


def test_the_test_table_is_not_hashed(tmp_path: Path) -> None:
    a = _project(tmp_path / "a", SCRIPT_OK, 'script = "gpu_check.py"\ntiers = ["smoke"]\n')
    b = _project(tmp_path / "b", SCRIPT_OK, "")
    b.write_text(b.read_text().replace(str(tmp_path / "b"), str(tmp_path / "a")))
    hashes = []
    for recipe in (a, b):
        proc = rf_in("plan", recipe, "--store", tmp_path / "store", "--json")
        assert proc.returncode == 0, proc.stderr
        hashes.append(json.loads(proc.stdout)["hash"])
    assert hashes[0] == hashes[1]


def _comm(started: str, busbw: float, model: str = "AMD Instinct MI300X") -> AcceptanceReport:
    rows = [{"bytes": 1 << 33, "algbw": busbw * 8 / 14, "busbw": busbw, "us": 1.0}]
    checks = (Check("init", "passed", 0.1, {"device": model, "world_size": 8}),
              Check("sweep", "passed", 5.0, {"rows": rows, "world_size": 8}))  # fmt: skip
    return AcceptanceReport(tier="comm", python="/x/bin/python", checks=checks,
                            node={"gpu_model": model, "gpu_count": 8, "archs": ["gfx942"]},
                            started=started, seconds=6.0, sandbox="bwrap")  # fmt: skip


def test_last_known_good_fails_a_run_far_below_the_last_accepted_one(tmp_path: Path) -> None:
    from rocmforge.accept.attest import statement
    from rocmforge.util.fsutil import json_bytes

    root = tmp_path / "store"
    h = "a" * 32
    table = Thresholds(tolerance=0.1)
    first = judge_last_known_good(_comm("2026-12-01T10:00:00Z", 312.0), root, table)
    assert first.checks[-1].status == "skipped"  # nothing to compare with yet
    write_run(root, h, "20261201T100000Z-comm-00000000.json",
              json_bytes(statement(first, [{"name": "w.whl", "digest": {"sha256": "0" * 64}}])))
    ok = judge_last_known_good(_comm("2026-12-02T10:00:00Z", 290.0), root, table)
    assert ok.checks[-1].status == "passed" and ok.checks[-1].figures["last"] == 312.0
    slow = judge_last_known_good(_comm("2026-12-02T10:00:00Z", 270.0), root, table)
    assert slow.checks[-1].status == "failed" and "less 10%" in slow.checks[-1].detail
    other = judge_last_known_good(_comm("2026-12-02T10:00:00Z", 100.0, "AMD Instinct MI355X"),
                                  root, table)  # fmt: skip
    assert other.checks[-1].status == "skipped"  # another node kind


@pytest.mark.slow
def test_over_layers_the_test_venv_on_an_existing_environment(tmp_path: Path) -> None:
    import subprocess
    import sys

    over = tmp_path / "over-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", over], check=True)
    site = next((over / "lib").glob("python3*/site-packages"))
    (site / "nodetorch.py").write_text("WHERE = __file__\n")
    script = ("import json, nodetorch, tiny\n"
              "print('ROCMFORGE-CHECK ' + json.dumps({'check': 'over', 'status': 'passed', "
              "'figures': {'where': nodetorch.WHERE, 'tiny': tiny.__file__}}))\n")
    recipe = _project(tmp_path, script, 'script = "gpu_check.py"\n')
    store = tmp_path / "store"
    _realize(recipe, store)
    proc = rf("test", recipe, "--store", store, "--json", "--over", over / "bin" / "python")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = json.loads(proc.stdout)["runs"]
    figures = run["checks"][0]["figures"]
    assert figures["where"] == str(site / "nodetorch.py")  # the node's environment, mounted
    assert figures["tiny"].startswith("/test/venv/")  # the built wheel, from the test venv
    # without --over the module is not there: the run fails naming it
    proc = rf("test", recipe, "--store", store)
    assert proc.returncode == 1 and "No module named 'nodetorch'" in proc.stdout, proc.stdout


def test_realize_test_push_carries_the_new_run(tmp_path: Path) -> None:
    recipe = _project(tmp_path, SCRIPT_OK, 'script = "gpu_check.py"\n')
    store, cache = tmp_path / "store", tmp_path / "cache"
    proc = rf("realize", recipe, "--store", store, "--test", "--push", f"file://{cache}")
    assert proc.returncode == 0, proc.stderr
    (entry,) = (store / layout.ACCEPTED).iterdir()
    (run,) = read_runs(store, entry.name)
    manifests = [p for p in cache.rglob("*") if p.is_file() and run.file.name.encode() in
                 p.read_bytes()]  # fmt: skip
    assert manifests, "the run pushed with the entry is named by its manifest"


def test_the_smoke_tier_holds_devices_against_the_archs_the_torch_entry_recorded() -> None:
    from rocmforge.accept.target import Closure
    from rocmforge.store.entry import Entry, EntryMeta

    def entry(name: str, archs: dict[str, Any] | None) -> Entry:
        meta = EntryMeta.from_json({"hash": "b" * 32, "name": name, "version": "1", "created": 0,
                                    "size": 0, "wheels": [], **({"archs": archs} if archs else {})},
                                   file="meta.json")  # fmt: skip
        return Entry.from_meta(Path("/nowhere"), meta)

    lib = {"bundles": 2, "union": ["gfx90a", "gfx942:sramecc+:xnack-"]}
    torch = entry("torch", {"torch-2.w.whl": {"lib/libtorch_hip.so": {**lib, "common": [
        "gfx90a", "gfx942:sramecc+:xnack-"]}, "lib/libc10_hip.so": {**lib, "common": ["gfx942"]}}})
    vision = entry("torchvision", {"tv.whl": {"lib/x.so": {**lib, "common": ["gfx1100"]}}})
    # every torch library holds gfx942; gfx90a is missing from one; torchvision is not torch
    assert Closure((torch,), (torch, vision), ()).archs() == ["gfx942"]
    assert Closure((vision,), (vision,), ()).archs() is None  # no torch: torch's own list
