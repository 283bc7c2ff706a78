"""``rocmforge verify`` on a real store: modified files, missing entries, orphans, index repair."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf

from rocmforge.store.store import open_store
from rocmforge.util.fsutil import remove_tree

WITH_ENV = TINY_RECIPE.replace("[build]\n", '[env]\nTINY_FLAG = "{flag}"\n\n[build]\n')


@pytest.fixture
def two(tmp_path: Path, tiny_src: Path, store: Path) -> list[dict]:
    out = []
    for flag in ("on", "off"):
        recipe = tmp_path / f"{flag}.toml"
        recipe.write_text(WITH_ENV.format(src=tiny_src, flag=flag))
        proc = rf("realize", recipe, "--store", store, "--json")
        assert proc.returncode == 0, proc.stderr
        out.append(json.loads(proc.stdout)[0])
    return out


def _verify(store: Path, *args: str) -> tuple[int, dict]:
    proc = rf("verify", "--store", store, "--json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _kinds(report: dict) -> set[tuple[str, str]]:
    return {(p["kind"], Path(p["path"]).name) for p in report["problems"]}


@pytest.mark.slow
def test_a_clean_store_verifies(two: list[dict], store: Path) -> None:
    code, report = _verify(store)
    assert code == 0 and report["ok"] and report["entries"] == 2
    assert report["files"] == 2 * 5  # wheel, derivation, provenance, build log, telemetry
    text = rf("verify", "--store", store)
    assert text.returncode == 0 and "2 entries" in text.stdout


@pytest.mark.slow
def test_verify_detects_modified_files(two: list[dict], store: Path) -> None:
    wheel = Path(two[0]["wheels"][0])
    with open(wheel, "ab") as f:  # root ignores the read-only mode, as a careless tool would
        f.write(b"\0")
    log = Path(two[1]["path"]) / "build.log.zst"
    log.write_bytes(log.read_bytes()[:-1] + b"x")
    code, report = _verify(store)
    assert code == 1
    assert _kinds(report) == {("modified", wheel.name), ("modified", "build.log.zst")}
    only_first = _verify(store, two[0]["hash"][:8])[1]
    assert _kinds(only_first) == {("modified", wheel.name)}


@pytest.mark.slow
def test_verify_detects_a_changed_derivation_and_a_stray_file(
    two: list[dict], store: Path
) -> None:
    entry = Path(two[0]["path"])
    drv = json.loads((entry / "derivation.json").read_text())
    drv["env"]["TINY_FLAG"] = "forged"
    os.chmod(entry, 0o755)
    (entry / "derivation.json").write_text(json.dumps(drv))
    (entry / "extra.txt").write_text("stray\n")
    (store / "entries" / "junk").mkdir()
    code, report = _verify(store)
    assert code == 1
    assert _kinds(report) == {
        ("modified", "derivation.json"),
        ("orphaned", "extra.txt"),
        ("orphaned", "junk"),
    }


@pytest.mark.slow
def test_verify_detects_a_missing_entry_and_repairs_the_index(
    two: list[dict], store: Path
) -> None:
    gone = Path(two[0]["path"])
    remove_tree(gone)
    s = open_store(store)
    s.index.remove(two[1]["hash"])
    s.close()
    code, report = _verify(store)
    assert code == 1
    assert _kinds(report) == {("missing", gone.name), ("unindexed", Path(two[1]["path"]).name)}

    code, repaired = _verify(store, "--repair-index")
    assert code == 0 and repaired["ok"]
    assert {p["kind"] for p in repaired["repaired"]} == {"missing", "unindexed"}
    assert _verify(store)[0] == 0
    listed = json.loads(rf("list", "--store", store, "--json").stdout)
    assert [e["hash"] for e in listed] == [two[1]["hash"]]
