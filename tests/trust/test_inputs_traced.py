"""Every ``[inputs.NAME]`` is traced: in the provenance's resolvedDependencies (blake3 and
sha256) and in the text of ``audit`` and ``show``."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf


@pytest.mark.slow
def test_inputs_appear_in_provenance_audit_and_show(tmp_path: Path, tiny_src: Path) -> None:
    store = tmp_path / "store"
    tree = tmp_path / "data"
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "kernels.txt").write_text("v1\n")
    archive = tmp_path / "more.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tree, "top")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src)
        + f'\n[inputs.data]\npath = "{tree}"\nenv = "DATA"\n'
        + f'\n[inputs.more]\npath = "{archive}"\nenv = "MORE"\nsubdir = "top"\n'
    )
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    entry = Path(report["path"])
    drv = json.loads((entry / "derivation.json").read_text())
    statement = json.loads((entry / "provenance.json").read_text())
    deps = {
        d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    }
    more, data = deps["inputs/more"], deps["inputs/data"]
    assert more["digest"]["sha256"] == sha
    assert "blake3:" + more["digest"]["blake3"] == drv["inputs"]["more"]["digest"]
    assert "blake3:" + data["digest"]["blake3"] == drv["inputs"]["data"]["digest"]
    assert len(data["digest"]["sha256"]) == 64
    assert data["annotations"] == {"kind": "tree", "env": "DATA", "subdir": None}

    audit = rf("audit", report["wheels"][0], "--store", store)
    assert audit.returncode == 0, audit.stderr
    assert "data (tree, $DATA)" in audit.stdout and "more (archive, $MORE)" in audit.stdout
    assert sha in audit.stdout and more["digest"]["blake3"] in audit.stdout
    facts = json.loads(rf("audit", report["wheels"][0], "--store", store, "--json").stdout)
    (first,) = facts if isinstance(facts, list) else [facts]
    assert [i["name"] for i in first["facts"]["inputs"]] == ["data", "more"]

    show = rf("show", report["hash"], "--store", store)
    assert show.returncode == 0, show.stderr
    assert "input        more (archive, $MORE)" in show.stdout
    assert sha in show.stdout and data["digest"]["sha256"] in show.stdout
