"""Operator experience: where the store is, global options, readable output, what builds see."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import rf


def test_plan_text_is_the_summary_then_the_derivation_indented(
    tiny_recipe: Path, store: Path
) -> None:
    r = rf("plan", tiny_recipe, "--store", store)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("name:    tiny 0.1") and lines[1].startswith("hash:    ")
    start = lines.index("derivation:")
    assert all(ln.startswith("  ") for ln in lines[start + 1 :])
    assert "  env: {}" in lines or any(ln.startswith("  env:") for ln in lines)
    assert not any(ln.strip() in ("{", "}") for ln in lines), "no JSON braces without --json"
    data = json.loads(rf("plan", tiny_recipe, "--store", store, "--json").stdout)
    assert data["hash"] in lines[1]
