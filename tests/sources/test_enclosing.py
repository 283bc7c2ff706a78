"""Sources kept whole: a path source inside a git repository whose ``.gitignore`` ignores
``lib/`` (the common Python one does): ``plan`` names what the enclosing rules leave out, and
``[source] enclosing-ignores = false`` lists the source by its own rules only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA, commit_all, git, rf, rf_in

RECIPE = """\
schema = 1

[package]
name = "vendored"
version = "1.0"

[source]
path = "vendor/vendored"
{extra}

[build]
steps = ["cp -r lib/vendored . && python mkwheel.py $OUT vendored 1.0"]

[check]
import = "vendored"
"""


def make_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    src = repo / "vendor" / "vendored"
    (src / "lib" / "vendored").mkdir(parents=True)
    (src / "lib" / "vendored" / "__init__.py").write_text("VALUE = 7\n")
    (src / "build").mkdir()
    (src / "build" / "junk.o").write_text("stale\n")
    (src / ".gitignore").write_text("build/\n")  # the source's own rule still applies
    shutil.copy(DATA / "mkwheel.py", src / "mkwheel.py")
    (repo / ".gitignore").write_text("lib/\n__pycache__/\n")
    git(repo, "init", "-q")
    commit_all(repo, "vendor a project")
    return repo


@pytest.mark.slow
def test_plan_names_what_the_enclosing_rules_leave_out(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    recipe = repo / "vendored.toml"
    recipe.write_text(RECIPE.format(extra=""))
    proc = rf("plan", recipe, "--store", tmp_path / "store", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["left_out"] == ["lib/"]
    assert "1 path(s)" in proc.stderr and "lib/" in proc.stderr
    assert "enclosing-ignores = false" in proc.stderr
    built = rf("realize", recipe, "--store", tmp_path / "store")
    assert built.returncode == 1  # lib/ never reached the build


@pytest.mark.slow
def test_own_rules_only_keeps_lib_and_drops_own_ignores(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    recipe = repo / "vendored.toml"
    recipe.write_text(RECIPE.format(extra="enclosing-ignores = false"))
    store = tmp_path / "store"
    proc = rf("plan", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["left_out"] == []
    assert "left out" not in proc.stderr
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    # the source's own .gitignore still applied: build/ was not copied (the log lists nothing)
    src_hash = json.loads(rf("plan", recipe, "--store", store, "--json").stdout)["hash"]
    assert src_hash == report["hash"]
    (repo / "vendor" / "vendored" / "build" / "junk.o").write_text("changed\n")
    assert json.loads(rf("plan", recipe, "--store", store, "--json").stdout)["hash"] == src_hash
    (repo / "vendor" / "vendored" / "lib" / "vendored" / "__init__.py").write_text("VALUE = 8\n")
    assert json.loads(rf("plan", recipe, "--store", store, "--json").stdout)["hash"] != src_hash


def test_source_at_the_top_of_its_own_repository_is_not_enclosed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    recipe = repo / "vendor" / "top.toml"
    recipe.write_text(RECIPE.format(extra="").replace("vendor/vendored", "vendored"))
    git(repo / "vendor" / "vendored", "init", "-q")
    proc = rf_in("plan", recipe, "--store", tmp_path / "store", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["left_out"] == []
