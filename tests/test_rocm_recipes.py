"""The shipped ROCm recipes: they load, ``plan`` works on any machine (provisional, never cloning
PyTorch), and ``realize`` stops before any fetch where ROCm 6.2 is not installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, rf

from rocmforge.recipe.load import load_recipe

RECIPES = REPO / "recipes"


@pytest.mark.parametrize(("name", "arch"), [("mi300x", "gfx942"), ("mi250x", "gfx90a")])
def test_torch_recipes(tmp_path: Path, name: str, arch: str) -> None:
    r = load_recipe(RECIPES / f"{name}.toml")
    assert r.toolchain.kind == "rocm" and r.toolchain.rocm == "6.2.4"
    assert r.toolchain.root == Path("/opt/rocm-6.2.4")
    assert r.source.rev == "a8d6afb511a69687bbb2b7e88a3cf67917e1697e" and r.source.submodules
    assert r.env["PYTORCH_ROCM_ARCH"] == arch and r.check.archs == (arch,)
    assert r.env["USE_ROCM"] == "1" and r.env["USE_CUDA"] == "0" and "CPATH" not in r.env
    assert r.build.steps[0] == "python tools/amd_build/build_amd.py"
    store = tmp_path / "store"
    proc = rf("plan", RECIPES / f"{name}.toml", "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    if not Path("/opt/rocm-6.2.4").is_dir():
        assert any("/opt/rocm-6.2.4 does not exist" in n for n in data["provisional"])
        assert data["derivation"]["env"]["PYTORCH_ROCM_ARCH"] == arch
        done = rf("realize", RECIPES / f"{name}.toml", "--store", store)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and "rocmforge doctor" in done.stderr
    assert not list(store.rglob("*.git"))  # neither plan nor a stopped realize cloned PyTorch


def test_base_is_not_a_buildable_recipe() -> None:
    text = (RECIPES / "rocm-6.2.toml").read_text()
    assert "\n[package]" not in text and 'kind = "rocm"' in text
