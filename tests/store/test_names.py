"""Package names match the way pip matches them (PEP 503): case, ``-``, ``_`` and ``.`` alike,
in ``query --name``, ``show``, ``pin`` and ``explain``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf

from rocmforge.store.layout import normal_name


def test_normal_name_is_pep503() -> None:
    assert normal_name("Foo_Bar.baz") == "foo-bar-baz"
    assert normal_name("a-_.b") == "a-b"
    assert normal_name("PyYAML") == "pyyaml"


def _realize(tiny_src: Path, tmp_path: Path, store: Path, name: str) -> dict:
    (tiny_src / "tiny").rename(tiny_src / "tiny_pkg") if (tiny_src / "tiny").exists() else None
    recipe = tmp_path / f"{name}.toml"
    text = TINY_RECIPE.format(src=tiny_src).replace('name = "tiny"', f'name = "{name}"')
    recipe.write_text(text.replace("tiny 0.1", "tiny_pkg 0.1").replace('"tiny"', '"tiny_pkg"'))
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    return report


@pytest.mark.slow
def test_query_show_pin_explain_match_names_as_pip_does(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    report = _realize(tiny_src, tmp_path, store, "Tiny_Pkg")
    for spelling in ("tiny-pkg", "TINY.PKG", "tiny__pkg", "Tiny_Pkg"):
        found = json.loads(rf("query", "--name", spelling, "--store", store, "--json").stdout)
        assert [e["hash"] for e in found] == [report["hash"]], spelling
    shown = rf("show", "tiny.pkg", "--store", store)
    assert shown.returncode == 0, shown.stderr
    assert report["hash"] in shown.stdout
    pinned = rf("pin", "keep", "TINY-pkg", "--store", store, "--json")
    assert pinned.returncode == 0, pinned.stderr
    assert report["hash"] in json.loads(pinned.stdout)["entry"]
    explained = rf("explain", "tiny-pkg", report["hash"], "--store", store)
    assert explained.returncode == 0, explained.stderr
    assert rf("show", "tiny", "--store", store).returncode == 2  # a prefix is not a name


@pytest.mark.slow
def test_a_name_with_several_entries_is_ambiguous(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    first = _realize(tiny_src, tmp_path, store, "Tiny_Pkg")
    (tiny_src / "tiny_pkg" / "__init__.py").write_text("VALUE = 43\n")
    second = _realize(tiny_src, tmp_path, store, "tiny-pkg")
    proc = rf("show", "tiny.pkg", "--store", store)
    assert proc.returncode == 2
    assert "matches 2 entries" in proc.stderr
    assert first["hash"] in proc.stderr and second["hash"] in proc.stderr
