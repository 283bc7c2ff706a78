"""The shipped ROCm recipes: they load, ``plan`` works on any machine (provisional, never cloning
PyTorch), and ``realize`` stops before any fetch: the 2.5.1 ones (recipes/legacy/) where ROCm 6.2
is not installed, the SDK-wheel ones (the torch 2.15.0 flagship on ROCm 10.0, the pinned 2.14.1 set
on ROCm 7.14 in recipes/torch-2.14/) while the SDK is not locked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, rf_in

from rocmforge.recipe.load import load_recipe

RECIPES = REPO / "recipes" / "legacy"
CURRENT = REPO / "recipes"
TORCH_214 = REPO / "recipes" / "torch-2.14"


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
    proc = rf_in("plan", RECIPES / f"{name}.toml", "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    if not Path("/opt/rocm-6.2.4").is_dir():
        assert any("/opt/rocm-6.2.4 does not exist" in n for n in data["provisional"])
        assert data["derivation"]["env"]["PYTORCH_ROCM_ARCH"] == arch
        done = rf_in("realize", RECIPES / f"{name}.toml", "--store", store)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and "rocmforge doctor" in done.stderr
    assert not list(store.rglob("*.git"))  # neither plan nor a stopped realize cloned PyTorch


def test_base_is_not_a_buildable_recipe() -> None:
    text = (RECIPES / "rocm-6.2.toml").read_text()
    assert "\n[package]" not in text and 'kind = "rocm"' in text


@pytest.mark.parametrize(("name", "arch"), [("mi300x", "gfx942"), ("mi250x", "gfx90a")])
def test_torch_214_recipes(tmp_path: Path, name: str, arch: str) -> None:
    r = load_recipe(TORCH_214 / f"{name}.toml")
    tc = r.toolchain
    assert (tc.kind, tc.sdk_version, tc.families) == ("rocm-sdk", "7.14.0", (arch,))
    assert r.source.rev == "5c4886908584029761b579af026dcfb627c84070" and r.source.submodules
    assert r.package.version == r.env["PYTORCH_BUILD_VERSION"] == "2.14.1+rocm7.14"
    assert r.env["PYTORCH_ROCM_ARCH"] == arch and r.check.archs == (arch,)
    assert r.env["USE_FLASH_ATTENTION"] == r.env["USE_MEM_EFF_ATTENTION"] == "1"
    # the device wheel named (RF198): the multi-arch index's rocm sdist otherwise probes the GPU
    extra = f"rocm[libraries,device-{arch}]==7.14.0" + (
        "|triton==3.8.0" if name == "mi300x" else ""
    )
    assert r.env["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"] == extra
    assert {i.env for i in r.inputs.values()} == {
        "AOTRITON_RUNTIME",
        f"AOTRITON_IMAGES_{arch.upper()}",
    }
    assert all(i.url and i.sha256 and "/0.13b/" in i.url for i in r.inputs.values())
    assert not any("setup.py" in s for s in r.build.steps)
    assert "python -m build --wheel --no-isolation" in r.build.steps[-1]
    # upstream's `pip install build -r requirements-build.txt`: the file is read by lock from
    # the pinned tree; the shipped lock's source-requires carry the scikit-build-core switch
    assert r.requirements.specifiers == ("build",)
    assert r.requirements.build_file == "requirements-build.txt"
    assert r.requirements.lock is not None
    from rocmforge.recipe.lockfile import read_lock

    assert "scikit-build-core>=1.0" in read_lock(r.requirements.lock).inputs.source_requires
    assert any(p.startswith("scikit-build-core==") for p in r.requirements.build)
    store = tmp_path / "store"
    proc = rf_in("plan", TORCH_214 / f"{name}.toml", "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert any("ROCm SDK 7.14.0 is not locked" in n for n in data["provisional"])
    done = rf_in("realize", TORCH_214 / f"{name}.toml", "--store", store)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "not locked" in done.stderr and "rocmforge lock" in done.stderr
    assert not list(store.rglob("*.git"))  # neither plan nor a stopped realize cloned PyTorch


def test_flagship_is_torch_215_on_rocm_10(tmp_path: Path) -> None:
    """recipes/mi300x.toml: torch v2.15.0 (the PyPI wheel's git_version) on the ROCm 10.0 SDK,
    requiring the triton 3.9.0 PyPI's torch 2.15.0 requires; the AOTriton inputs are URLs
    without sha256 (torch 2.15's aotriton.cmake was not read where the recipe was written), so
    plan is provisional and realize stops before any fetch; the stack builds torchvision 0.29.2
    and torchaudio 2.11.1 against it."""
    from rocmforge.recipe.stack import load_stack

    r = load_recipe(CURRENT / "mi300x.toml")
    tc = r.toolchain
    assert (tc.kind, tc.sdk_version, tc.families) == ("rocm-sdk", "10.0.0", ("gfx942",))
    assert r.source.rev == "d0f2af8b66b20da4baa50644c0cd3f887a2eae2e" and r.source.submodules
    assert r.package.version == r.env["PYTORCH_BUILD_VERSION"] == "2.15.0+rocm10.0"
    extra = "rocm[libraries,device-gfx942]==10.0.0|triton==3.9.0"
    assert r.env["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"] == extra
    assert "triton==3.9.0" in r.check.requirements and not r.requirements.recipes
    assert r.env["USE_FLASH_ATTENTION"] == r.env["USE_MEM_EFF_ATTENTION"] == "1"
    assert {i.env for i in r.inputs.values()} == {"AOTRITON_RUNTIME", "AOTRITON_IMAGES_GFX942"}
    assert all(i.url and i.sha256 is None for i in r.inputs.values())  # lock derives them
    assert r.requirements.build_file == "requirements-build.txt"
    assert r.requirements.lock is not None and r.requirements.lock.name == "rocm-10.lock"
    stack = load_stack(CURRENT / "mi300x-stack.toml")
    versions = {load_recipe(p).package.name: load_recipe(p).package.version for p in stack.recipes}
    assert versions == {"torch": "2.15.0+rocm10.0", "torchvision": "0.29.2+rocm10.0",
                        "torchaudio": "2.11.1+rocm10.0"}  # fmt: skip
    store = tmp_path / "store"
    proc = rf_in("plan", CURRENT / "mi300x.toml", "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    notes = json.loads(proc.stdout)["provisional"]
    assert any("ROCm SDK 10.0.0 is not locked" in n for n in notes), notes
    done = rf_in("realize", CURRENT / "mi300x.toml", "--store", store)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert not list(store.rglob("*.git"))


def test_triton_recipe_downloads_nothing(tmp_path: Path) -> None:
    """Triton 3.8.0 of the 2.14.1 MI300X stack (recipes/torch-2.14/): pinned to a full commit,
    everything its build would download (LLVM, nlohmann json) declared as url + sha256 inputs
    under the variables Triton's build_helpers.py reads, offline mode on, lint-clean; torch is
    built against it; plan works here without cloning or downloading anything."""
    from rocmforge.recipe.lints import lint_recipe

    r = load_recipe(TORCH_214 / "triton-mi300x.toml")
    assert (r.package.name, r.package.version) == ("triton", "3.8.0+rocm7.14")
    assert r.source.git == "https://github.com/ROCm/triton.git"
    assert r.source.rev == "669b31acc1dd1b3fd93286afd5db67f65d9f7557"
    assert r.env["TRITON_OFFLINE_BUILD"] == "1"
    # LLVM's sha256 is lock's to write from the tree's llvm-info.json (not readable here)
    assert {i.env: bool(i.url and i.sha256) for i in r.inputs.values()} == {
        "LLVM_SYSPATH": False,
        "JSON_SYSPATH": True,
    }
    # release/3.8.x's LLVM (5f07f818, build 1), not upstream torch v2.14's 4611156032 (issue 29)
    assert (r.inputs["llvm"].url or "").endswith("/llvm-5f07f818-ubuntu-x64-1.tar.gz")
    assert r.inputs["llvm"].subdir == "llvm-5f07f818-ubuntu-x64-1"
    assert set(r.requirements.digests) == set(r.requirements.build)
    found = lint_recipe(r)  # only the unlocked LLVM, acknowledged in the recipe's [lint]
    assert [(f.id, f.key, bool(f.allowed)) for f in found] == [("RF135", "inputs.llvm", True)]
    torch = load_recipe(TORCH_214 / "mi300x.toml")
    assert [p.name for p in torch.requirements.recipes] == ["triton-mi300x.toml"]
    store = tmp_path / "store"
    proc = rf_in("plan", TORCH_214 / "triton-mi300x.toml", "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    notes = json.loads(proc.stdout)["provisional"]
    assert any("669b31acc1dd" in n and "not fetched" in n for n in notes), notes
    assert not list(store.rglob("*.git")) and not list(store.rglob("*.tar.gz"))
