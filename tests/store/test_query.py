"""``query``, ``list`` and ``show`` over real builds in a real store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf

WITH_ENV = TINY_RECIPE.replace(
    "[build]\n", '[env]\nTINY_FLAG = "{flag}"\nARCHS = "{archs}"\n\n[build]\n'
)


@pytest.fixture
def three(tmp_path: Path, tiny_src: Path, store: Path) -> dict[str, dict]:
    """Three builds of tiny with different env flags; the first is realized with -o LINK."""
    out = {}
    for label, flag, archs in (("a", "on", "gfx90a;gfx942"), ("b", "off", "gfx942"),
                               ("c", "on", "gfx90a")):  # fmt: skip
        recipe = tmp_path / f"{label}.toml"
        recipe.write_text(WITH_ENV.format(src=tiny_src, flag=flag, archs=archs))
        extra = ["-o", str(tmp_path / "result-a")] if label == "a" else []
        proc = rf("realize", recipe, "--store", store, "--json", *extra)
        assert proc.returncode == 0, proc.stderr
        out[label] = json.loads(proc.stdout)[0]
    return out


def _query(store: Path, *args: str) -> list[str]:
    proc = rf("query", "--store", store, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return sorted(e["hash"] for e in json.loads(proc.stdout))


@pytest.mark.slow
def test_query_by_env_flag_finds_exactly_the_matching_entries(
    three: dict[str, dict], store: Path
) -> None:
    h = {k: v["hash"] for k, v in three.items()}
    assert _query(store, "--env", "TINY_FLAG=on") == sorted([h["a"], h["c"]])
    assert _query(store, "--env", "TINY_FLAG=off") == [h["b"]]
    assert _query(store, "--env", "ARCHS~gfx942") == sorted([h["a"], h["b"]])
    assert _query(store, "--env", "ARCHS=gfx942") == [h["b"]]
    assert _query(store, "--env", "TINY_FLAG=on", "--env", "ARCHS~gfx942") == [h["a"]]
    assert _query(store, "--env", "TINY_FLAG=maybe") == []
    assert _query(store, "--name", "TINY", "--version", "0.1") == sorted(h.values())
    assert _query(store, "--name", "other") == []
    assert _query(store, "--since", "1d") == sorted(h.values())
    assert _query(store, "--since", "2999-01-01") == []
    text = rf("query", "--store", store, "--env", "TINY_FLAG=off")
    assert h["b"][:12] in text.stdout and h["a"][:12] not in text.stdout
    bad = rf("query", "--store", store, "--env", "TINY_FLAG")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


@pytest.mark.slow
def test_list_shows_size_times_and_roots(three: dict[str, dict], store: Path) -> None:
    proc = rf("list", "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    listed = {e["hash"]: e for e in json.loads(proc.stdout)}
    assert set(listed) == {v["hash"] for v in three.values()}
    a = listed[three["a"]["hash"]]
    assert a["size"] > 0 and a["created"] <= a["last_used"]
    assert any("link" in r for r in a["roots"])
    assert listed[three["b"]["hash"]]["roots"] == []
    text = rf("list", "--store", store).stdout.splitlines()
    assert text[0].split()[:3] == ["HASH", "NAME", "VERSION"]
    assert len(text) == 4


@pytest.mark.slow
def test_show_by_prefix_path_and_wheel(three: dict[str, dict], store: Path, tmp_path: Path) -> None:
    a = three["a"]
    copy = tmp_path / "copy.whl"
    shutil.copy(a["wheels"][0], copy)
    for target in (a["hash"][:6], a["path"], str(copy)):
        proc = rf("show", target, "--store", store, "--json")
        assert proc.returncode == 0, (target, proc.stderr)
        info = json.loads(proc.stdout)
        assert info["hash"] == a["hash"] and info["indexed"] is True
        assert info["derivation"]["env"] == {"TINY_FLAG": "on", "ARCHS": "gfx90a;gfx942"}
        assert info["provenance"]["subject"][0]["name"] == Path(a["wheels"][0]).name
    text = rf("show", a["hash"][:6], "--store", store).stdout
    assert 'env.ARCHS = "gfx90a;gfx942"' in text and a["path"] in text
    missing = rf("show", "ffffff", "--store", store)
    assert missing.returncode == 2


@pytest.mark.slow
def test_query_shows_the_env_values_it_matched_on(three: dict[str, dict], store: Path) -> None:
    proc = rf("query", "--store", store, "--json", "--env", "ARCHS~gfx90a", "--env", "TINY_FLAG=on")
    assert proc.returncode == 0, proc.stderr
    found = {e["hash"]: e["env"] for e in json.loads(proc.stdout)}
    assert found == {
        three["a"]["hash"]: {"ARCHS": "gfx90a;gfx942", "TINY_FLAG": "on"},
        three["c"]["hash"]: {"ARCHS": "gfx90a", "TINY_FLAG": "on"},
    }
    text = rf("query", "--store", store, "--env", "ARCHS~gfx90a").stdout.splitlines()
    assert text[0].split()[-1] == "ARCHS"
    row = next(ln for ln in text if ln.startswith(three["a"]["hash"][:12]))
    assert row.split()[-1] == "gfx90a;gfx942"
