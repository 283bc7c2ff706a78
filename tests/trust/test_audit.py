"""Provenance statements, wheel stamps and ``rocmforge audit`` against real builds."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import pytest
from conftest import DATA, TINY_RECIPE, commit_all, git, rf

FLAGGED = TINY_RECIPE.replace(
    "[build]\n", '[env]\nTINY_FLAG = "on"\n\n[build]\npassthrough = ["MAX_JOBS"]\n'
)


@pytest.fixture
def built(tmp_path: Path, tiny_src: Path, store: Path) -> dict:
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(FLAGGED.format(src=tiny_src))
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    report["recipe_file"] = recipe
    return report


def _audit(wheel: Path, store: Path) -> tuple[int, dict]:
    proc = rf("audit", wheel, "--store", store, "--json")
    assert proc.returncode in (0, 1, 5, 6, 7), proc.stderr
    (report,) = json.loads(proc.stdout)
    return proc.returncode, report


@pytest.mark.slow
def test_provenance_is_an_in_toto_statement_about_the_wheel(built: dict) -> None:
    entry = Path(built["path"])
    wheel = Path(built["wheels"][0])
    statement = json.loads((entry / "provenance.json").read_text())
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    (subject,) = statement["subject"]
    assert subject["name"] == wheel.name
    assert subject["digest"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    pred = statement["predicate"]
    bd, run = pred["buildDefinition"], pred["runDetails"]
    assert set(pred) == {"buildDefinition", "runDetails"}
    assert isinstance(bd["buildType"], str) and bd["buildType"].startswith("https://")
    assert bd["externalParameters"]["recipe"]["env"] == {"TINY_FLAG": "on"}
    # Paths are relative to the recipe's repository (here: its directory), absolute ones internal.
    assert bd["externalParameters"]["recipeFile"] == built["recipe_file"].name
    local = bd["internalParameters"]["localPaths"]
    assert local["repository"] == str(built["recipe_file"].parent)
    assert local["paths"]["recipeFile"] == str(built["recipe_file"])
    names = [d["name"] for d in bd["resolvedDependencies"]]
    assert names[0] == "source" and "toolchain" in names
    for dep in bd["resolvedDependencies"]:
        assert dep["digest"] and all(isinstance(v, str) for v in dep["digest"].values())
    assert bd["internalParameters"]["inputHash"] == built["hash"]
    assert bd["internalParameters"]["sandbox"] == built["sandbox"]
    assert run["builder"]["id"].startswith("https://")
    started = datetime.fromisoformat(run["metadata"]["startedOn"])
    finished = datetime.fromisoformat(run["metadata"]["finishedOn"])
    assert started <= finished
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["wheels"][0]["sha256"] == subject["digest"]["sha256"]


@pytest.mark.slow
def test_stamp_is_in_record_and_the_wheel_installs_with_pip(built: dict, tmp_path: Path) -> None:
    wheel = Path(built["wheels"][0])
    with zipfile.ZipFile(wheel) as zf:
        stamp_bytes = zf.read("tiny-0.1.dist-info/rocmforge.json")
        record = list(csv.reader(zf.read("tiny-0.1.dist-info/RECORD").decode().splitlines()))
    stamp = json.loads(stamp_bytes)
    assert stamp["input_hash"] == built["hash"]
    assert stamp["derivation"]["env"] == {"TINY_FLAG": "on"}
    digest = base64.urlsafe_b64encode(hashlib.sha256(stamp_bytes).digest()).rstrip(b"=").decode()
    row = ["tiny-0.1.dist-info/rocmforge.json", f"sha256={digest}", str(len(stamp_bytes))]
    assert row in record
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
         "--disable-pip-version-check", "--target", str(target), str(wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (target / "tiny-0.1.dist-info" / "rocmforge.json").read_bytes() == stamp_bytes


@pytest.mark.slow
def test_audit_of_a_copied_and_renamed_wheel_is_verified(
    built: dict, tmp_path: Path, store: Path
) -> None:
    copy = tmp_path / "elsewhere" / "renamed.whl"
    copy.parent.mkdir()
    shutil.copy(built["wheels"][0], copy)
    code, report = _audit(copy, store)
    assert code == 0
    assert report["status"] == "verified" and report["verified"] is True
    assert report["input_hash"] == built["hash"]
    assert report["store_path"] == built["path"]
    facts = report["facts"]
    assert facts["env"] == {"TINY_FLAG": "on"}
    assert facts["passthrough"] == ["MAX_JOBS"]
    assert facts["recipe"]["file"] == str(built["recipe_file"])
    assert facts["run"]["sandbox"] == built["sandbox"] and facts["run"]["host"]

    text = rf("audit", copy, "--store", store)
    assert text.returncode == 0
    assert "VERIFIED" in text.stdout and "TINY_FLAG='on'" in text.stdout
    assert "MAX_JOBS" in text.stdout and built["path"] in text.stdout


@pytest.mark.slow
def test_a_flipped_byte_is_never_verified(built: dict, tmp_path: Path, store: Path) -> None:
    data = bytearray(Path(built["wheels"][0]).read_bytes())
    for offset in (len(data) // 3, len(data) // 2, len(data) - 30):
        bad = tmp_path / f"flipped-{offset}.whl"
        flipped = bytearray(data)
        flipped[offset] ^= 0x01
        bad.write_bytes(bytes(flipped))
        code, report = _audit(bad, store)
        assert report["status"] != "verified" and code != 0, (offset, report)


@pytest.mark.slow
def test_a_changed_file_with_the_stamp_kept_is_tampered(
    built: dict, tmp_path: Path, store: Path
) -> None:
    bad = tmp_path / "tiny-0.1-py3-none-any.whl"
    with zipfile.ZipFile(built["wheels"][0]) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "tiny/__init__.py":
                data = b"VALUE = 666\n"
            dst.writestr(info, data)
    code, report = _audit(bad, store)
    assert (code, report["status"]) == (1, "tampered")
    assert any("tiny/__init__.py" in p for p in report["problems"])
    # The same bytes audited against a store that never built it: still tampered.
    code, report = _audit(bad, tmp_path / "other-store")
    assert (code, report["status"]) == (1, "tampered")


@pytest.mark.slow
def test_claimed_in_another_store_and_unknown_without_stamp(
    built: dict, tmp_path: Path, tiny_src: Path
) -> None:
    code, report = _audit(Path(built["wheels"][0]), tmp_path / "other-store")
    assert (code, report["status"]) == (5, "claimed")
    assert report["input_hash"] == built["hash"] and report["problems"] == []
    text = rf("audit", built["wheels"][0], "--store", tmp_path / "other-store")
    assert text.returncode == 5 and "UNVERIFIED" in text.stdout

    out = tmp_path / "plain"
    out.mkdir()
    shutil.copy(DATA / "mkwheel.py", tiny_src / "mkwheel.py")
    subprocess.run(
        [sys.executable, "mkwheel.py", str(out), "tiny", "0.1"], cwd=tiny_src, check=True
    )
    (plain,) = out.glob("*.whl")
    code, report = _audit(plain, Path(built["path"]).parent.parent)
    assert (code, report["status"]) == (6, "unknown")
    both = rf("audit", plain, built["wheels"][0], "--store", Path(built["path"]).parent.parent)
    assert both.returncode == 6
    assert rf("audit", tmp_path / "missing.whl", "--store", tmp_path / "s").returncode == 2


@pytest.mark.slow
def test_provenance_and_audit_name_every_submodule_commit(tmp_path: Path, store: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "data.txt").write_text("1\n")
    git(sub, "init", "-q")
    sub_commit = commit_all(sub, "sub")
    repo = tmp_path / "repo"
    (repo / "tiny").mkdir(parents=True)
    shutil.copy(DATA / "mkwheel.py", repo / "mkwheel.py")
    (repo / "tiny" / "__init__.py").write_text("")
    git(repo, "init", "-q")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "third/sub")
    commit = commit_all(repo, "with a submodule")
    recipe = tmp_path / "git.toml"
    recipe.write_text(
        TINY_RECIPE.replace('path = "{src}"', f'git = "{repo}"\nrev = "{commit}"\n'
                            "submodules = true\nallow-local-submodules = true")
    )  # fmt: skip
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    (built,) = json.loads(proc.stdout)
    statement = json.loads((Path(built["path"]) / "provenance.json").read_text())
    deps = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["source"]["digest"] == {"gitCommit": commit}
    assert deps["source"]["uri"] == f"git+{repo.as_uri()}@{commit}"
    assert deps["source.submodules/third/sub"]["digest"] == {"gitCommit": sub_commit}
    text = rf("audit", built["wheels"][0], "--store", store)
    assert text.returncode == 0
    assert f"third/sub {sub_commit}" in text.stdout and commit in text.stdout


@pytest.mark.slow
def test_same_hash_other_bytes_is_diverged_not_tampered(tmp_path: Path, tiny_src: Path) -> None:
    # A build that is not reproducible: it writes a fresh random value into the package.
    step = "python -c 'import uuid; open(\\\"tiny/r.py\\\", \\\"w\\\").write(str(uuid.uuid4()))'"
    recipe = tmp_path / "random.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace(
            'steps = ["python mkwheel.py', f'steps = ["{step}", "python mkwheel.py'
        )
    )
    built = {}
    for name in ("a", "b"):
        proc = rf("realize", recipe, "--store", tmp_path / name, "--json")
        assert proc.returncode == 0, proc.stderr
        (built[name],) = json.loads(proc.stdout)
    assert built["a"]["hash"] == built["b"]["hash"]
    wheel_b = Path(built["b"]["wheels"][0])
    assert wheel_b.read_bytes() != Path(built["a"]["wheels"][0]).read_bytes()
    code, report = _audit(wheel_b, tmp_path / "a")
    assert (code, report["status"]) == (7, "diverged")
    assert any("into different bytes" in p for p in report["problems"])
    text = rf("audit", wheel_b, "--store", tmp_path / "a")
    assert text.returncode == 7 and "DIVERGED" in text.stdout and "TAMPERED" not in text.stdout
    # Diverged ranks above claimed and below tampered when several wheels are audited.
    assert rf("audit", wheel_b, built["a"]["wheels"][0], "--store", tmp_path / "a").returncode == 7


def test_a_corrupt_deflate_stream_is_reported_not_an_internal_error(
    tmp_path: Path, store: Path
) -> None:
    import random
    import zlib

    text = "".join(f"line {random.Random(i).random()}\n" for i in range(4000)).encode()
    good = tmp_path / "good.whl"
    with zipfile.ZipFile(good, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x-1.dist-info/rocmforge.json", text)  # the stamp, read first
        z.writestr("x-1.dist-info/RECORD", "")
    data = good.read_bytes()
    for offset in range(200, len(data) // 2, 97):  # find a flip that breaks the deflate stream
        flipped = bytearray(data)
        flipped[offset] ^= 0x40
        bad = tmp_path / "x-1-py3-none-any.whl"
        bad.write_bytes(bytes(flipped))
        try:
            with zipfile.ZipFile(bad) as z:
                z.read("x-1.dist-info/rocmforge.json")
        except zlib.error:
            break
        except zipfile.BadZipFile:
            continue
    else:
        pytest.skip("no flip gave a zlib error")
    code, report = _audit(bad, store)
    assert code != 4 and report["status"] in ("unknown", "tampered")
