"""Every shipped recipe answers plan, doctor and lock --check on a machine without a GPU or ROCm.

CI has no GPU, no ROCm install and no AMD index: ``plan`` must still print the derivation
(provisional where the toolchain is missing), ``doctor`` must report (exit 1 when realize would
stop, never 2 or a traceback) and ``lock --check`` must find every lock current. Recipes that are
only bases for ``extends`` (neither ``[package]`` nor ``extends``) are skipped.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from conftest import REPO, rf

RECIPES = sorted(
    p
    for p in (REPO / "recipes").rglob("*.toml")
    if {"package", "extends"} & tomllib.loads(p.read_text(encoding="utf-8")).keys()
)


def test_there_are_shipped_recipes() -> None:
    assert {p.name for p in RECIPES} >= {"demo.toml", "mi300x.toml", "mi250x.toml"}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_plan_doctor_and_lock_check_work_without_the_gpu_machine(
    recipe: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    plan = rf("plan", recipe, "--store", store, "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)
    doctor = rf("doctor", recipe, "--store", store)
    assert doctor.returncode in (0, 1), doctor.stderr
    assert "Traceback" not in doctor.stderr
    check = rf("lock", "--check", recipe, "--store", store)
    assert check.returncode == 0, check.stdout + check.stderr
