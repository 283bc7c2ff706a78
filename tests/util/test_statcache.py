"""Stat caches are derived data: a value damaged in place reads as a miss and is written again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import rf

from rocmforge.util.statcache import StatCache


def test_a_value_edited_in_place_is_a_miss(tmp_path: Path) -> None:
    guard = tmp_path / "tool"
    guard.write_text("v1")
    cache = StatCache(tmp_path / "c.json")
    cache.put("k", {"fingerprint": {"cc": "12"}}, [guard])
    assert StatCache(tmp_path / "c.json").get("k") == {"fingerprint": {"cc": "12"}}
    data = json.loads((tmp_path / "c.json").read_text())
    data["k"]["value"] = 7  # valid JSON, wrong shape: what a careless edit or a bad disk leaves
    (tmp_path / "c.json").write_text(json.dumps(data))
    assert StatCache(tmp_path / "c.json").get("k") is None
    guard.write_text("v2")  # and the guards still work as before
    cache.put("k", [1], [guard])
    assert StatCache(tmp_path / "c.json").get("k") == [1]


@pytest.mark.slow
def test_a_damaged_toolchain_cache_is_probed_again(tiny_recipe: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {"ROCMFORGE_HOST_CACHE": str(tmp_path / "host")}  # the toolchain probe is a host fact
    first = rf("plan", tiny_recipe, "--store", store, "--json", env=env)
    assert first.returncode == 0, first.stderr
    cache = tmp_path / "host" / "toolchain.json"
    data = json.loads(cache.read_text())
    for item in data.values():
        item["value"] = 1
    cache.write_text(json.dumps(data))
    again = rf("plan", tiny_recipe, "--store", store, "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["hash"] == json.loads(first.stdout)["hash"]
    assert all(isinstance(i["value"], dict) for i in json.loads(cache.read_text()).values())
