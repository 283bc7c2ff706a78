"""The MI355X / MI350X (gfx950) recipes: recipes/mi300x.toml and its stack for gfx950, key by
key, with the gfx950 SDK device wheel and AOTriton image pack; lint-clean (RF162 knows that
AOTriton has gfx950 kernels, also for a torch whose own AOTriton release was not read) and
planned on any machine. The gfx950 code itself: tests/toolchain/test_gfx950.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, rf_in

from rocmforge.recipe.lints import lint_recipe
from rocmforge.recipe.load import load_recipe
from rocmforge.recipe.stack import load_stack
from rocmforge.toolchain.rocmsdk import wheel_names

RECIPES = REPO / "recipes"
PAIRS = [("mi300x.toml", "mi355x.toml"), ("torchvision-mi300x.toml", "torchvision-mi355x.toml"),
         ("torchaudio-mi300x.toml", "torchaudio-mi355x.toml")]  # fmt: skip


def _for_gfx950(data: Any) -> Any:
    """``data`` with every gfx942 (and the MI300X torch recipe) named for gfx950 instead."""
    text = json.dumps(data).replace("gfx942", "gfx950").replace("GFX942", "GFX950")
    return json.loads(text.replace("/mi300x.toml", "/mi355x.toml"))


@pytest.mark.parametrize(("mi300x", "mi355x"), PAIRS)
def test_mi355x_is_mi300x_for_gfx950(mi300x: str, mi355x: str) -> None:
    """Only the arch-dependent keys differ, so the two stacks cannot drift apart."""
    a, b = load_recipe(RECIPES / mi300x), load_recipe(RECIPES / mi355x)
    want, have = _for_gfx950(dict(a.resolved)), dict(b.resolved)
    want.pop("extends", None), have.pop("extends", None)
    assert have == want
    assert b.env["PYTORCH_ROCM_ARCH"] == "gfx950" and b.check.archs == ("gfx950",)
    assert b.toolchain.families == ("gfx950",)
    assert "rocm-sdk-device-gfx950" in wheel_names(b.toolchain.families)


def test_mi355x_torch_asks_for_gfx950_kernels_and_lints_clean() -> None:
    r = load_recipe(RECIPES / "mi355x.toml")
    assert {i.env for i in r.inputs.values()} == {"AOTRITON_RUNTIME", "AOTRITON_IMAGES_GFX950"}
    assert (r.inputs["aotriton-gfx950"].url or "").endswith("-images-amd-gfx950.tar.gz")
    assert "device-gfx950" in r.env["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"]
    assert any("$AOTRITON_IMAGES_GFX950/." in s for s in r.build.steps)
    found = [(f.id, bool(f.allowed)) for f in lint_recipe(r)]
    assert found == [("RF135", True), ("RF135", True)], found  # the unlocked AOTriton only
    stack = load_stack(RECIPES / "mi355x-stack.toml")
    assert stack is not None and stack.name == "mi355x"
    assert [p.name for p in stack.recipes] == [b for _, b in PAIRS]


def test_rf162_judges_a_newer_torch_by_the_newest_aotriton_read(tmp_path: Path) -> None:
    """torch 2.15's AOTriton was not read: its archs are judged by 0.13b's images (torch 2.14's),
    which have gfx950, not by the 2.5-era gfx90a + gfx942 list; an arch 0.13b lacks still warns."""
    text = (RECIPES / "mi355x.toml").read_text()
    for arch, warns in (("gfx950", False), ("gfx942;gfx950", False), ("gfx908", True)):
        recipe = tmp_path / "mi355x.toml"
        recipe.write_text(
            text.replace('extends = "rocm-10.toml"', f'extends = "{RECIPES / "rocm-10.toml"}"')
            .replace('PYTORCH_ROCM_ARCH = "gfx950"', f'PYTORCH_ROCM_ARCH = "{arch}"')
            .replace('archs = ["gfx950"]', f"archs = {arch.split(';')}")
        )
        found = [f for f in lint_recipe(load_recipe(recipe)) if f.id == "RF162"]
        assert bool(found) is warns, (arch, [f.message for f in found])
        if warns:
            assert "AOTriton 0.13b (torch 2.14's, the newest read here)" in found[0].message
            assert "gfx950" in found[0].message and "not gfx908" in found[0].message


def test_mi355x_stack_plans_here(tmp_path: Path) -> None:
    proc = rf_in("plan", RECIPES / "mi355x-stack.toml", "--store", tmp_path / "store", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["stacks"][0]["name"] == "mi355x"
    assert not list((tmp_path / "store").rglob("*.git"))
