"""``show TARGET`` on the console's read path: the same bytes as the full CLI, over a real build.

Same method as ``test_fastread.py``: each form runs through the console entry and through
``rocmforge.cli.main.main`` in fresh interpreters; stdout, stderr and the exit code must agree, and
the
console's loaded modules say whether the read path answered.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import build_tiny_entry, rf
from test_fastread import CONSOLE, _both, _run

from rocmforge.util import leanjson


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real build of the tiny project, with a result link rooting it."""
    base = tmp_path_factory.mktemp("show")
    info = build_tiny_entry(base)
    link = rf("realize", info["recipe"], "--store", info["store"], "-o", base / "result")
    assert link.returncode == 0, link.stderr
    info["base"] = base
    info["hash"] = info["entry"].split("-")[0]
    return info


def _targets(b: dict[str, Any]) -> dict[str, str]:
    entry = b["store"] / "entries" / b["entry"]
    return {
        "hash": b["hash"],
        "prefix": b["hash"][:6],
        "entry name": b["entry"],
        "entry path": str(entry),
        "a file inside, through the result link": str(b["base"] / "result" / "meta.json"),
        "relative path": os.path.relpath(entry, b["base"]),
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind",
    ["hash", "prefix", "entry name", "entry path", "a file inside, through the result link",
     "relative path"],
)  # fmt: skip
def test_show_on_the_read_path_prints_what_the_full_cli_prints(
    built: dict[str, Any], kind: str
) -> None:
    target = _targets(built)[kind]
    fast, (code, out, err) = _both(["show", target, "--store", str(built["store"])], built["base"])
    assert fast and code == 0 and not err
    assert out.startswith(f"tiny 0.1  {built['hash']}\n")
    assert "  indexed      yes\n" in out and f"  roots        link {built['base']}" in out
    assert "  derivation\n" in out and "    toolchain.packages = " in out
    if kind == "hash":  # --store before the command, the store found from the directory
        assert _both(["--store", str(built["store"]), "show", target], Path("/"))[0]
        assert _both(["show", target], built["base"])[0]


@pytest.mark.slow
def test_other_show_forms_fall_through(built: dict[str, Any], tmp_path: Path) -> None:
    store = str(built["store"])
    wheel = tmp_path / built["wheel"]
    shutil.copy(built["store"] / "entries" / built["entry"] / built["wheel"], wheel)
    for argv, want in (
        (["show", built["hash"], "--json"], 0),
        (["show", "ffffffff"], 2),  # unknown hash: the full CLI's message, listing the entries
        (["show", "0b"], 2),  # a prefix too short
        (["show", "tiny"], 0),  # a package name: the full CLI reads the metas
        (["show", str(wheel)], 0),  # a copy of the wheel: found by its digest in the index
        (["show"], 2),
        (["show", built["hash"], "extra"], 2),
        (["show", "-h"], 0),
    ):
        fast, (code, _, err) = _both([*argv, "--store", store], tmp_path)
        assert not fast and code == want, (argv, err)


@pytest.mark.slow
def test_an_ambiguous_prefix_falls_through(built: dict[str, Any], tmp_path: Path) -> None:
    twin = built["store"] / "entries" / (built["hash"][:8] + "0" * 24 + "-tiny-0.2")
    twin.mkdir()
    try:
        fast, (code, _, err) = _both(
            ["show", built["hash"][:8], "--store", str(built["store"])], tmp_path
        )
        assert not fast and code == 2 and "ambiguous" in err
        # the full prefix names one of them again
        assert _both(["show", built["hash"][:9], "--store", str(built["store"])], tmp_path)[0]
    finally:
        twin.rmdir()


@pytest.mark.slow
def test_links_portability_and_an_unindexed_entry_print_alike(
    built: dict[str, Any], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(built["store"], store, symlinks=True)
    meta = store / "entries" / built["entry"] / "meta.json"
    data = json.loads(meta.read_bytes())
    data["links"] = {
        built["wheel"]: [
            {
                "member": "tiny/_x.so",
                "soname": "libz.so.1",
                "provider": "package",
                "package": "zlib1g",
                "version": "1:1.2.13",
            },
            {"member": "tiny/_x.so", "soname": "libfoo.so", "provider": "missing"},
        ]
    }
    data["portability"] = [{"file": "tiny/_x.so", "flag": "-march=native"}]
    data["steps"][0]["seconds"] = 3725.5
    data["compiler_cache"] = {"compiles": 9, "hits": 7, "misses": 1, "uncacheable": 1,
                              "namespace": "n"}  # fmt: skip
    meta.chmod(0o644)
    meta.write_text(json.dumps(data))
    argv = ["show", built["hash"], "--store", str(store)]
    fast, (code, out, _) = _both(argv, tmp_path)
    assert fast and code == 0
    assert "links        tiny-0.1-py3-none-any.whl: tiny/_x.so: links libz.so.1 from zlib1g" in out
    assert "not portable tiny/_x.so: -march=native" in out and "1h02m" in out
    assert "ccache 7/8 hits (88%), 1 miss, 1 uncacheable of 9 calls" in out
    db = sqlite3.connect(store / "index.sqlite")
    with db:
        db.execute("DELETE FROM entries WHERE hash = ?", (built["hash"],))
    db.close()
    fast, (code, out, _) = _both(argv, tmp_path)
    assert fast and code == 0 and "indexed      no (run rocmforge verify)" in out


@pytest.mark.slow
def test_an_entry_the_full_cli_rejects_falls_through(built: dict[str, Any], tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(built["store"], store, symlinks=True)
    meta = store / "entries" / built["entry"] / "meta.json"
    good = meta.read_bytes()
    argv = ["show", built["hash"], "--store", str(store)]
    assert _both(argv, tmp_path)[0]
    meta.chmod(0o644)
    meta.write_bytes(good.replace(b'"size": ', b'"size": -', 1))  # a field of the wrong shape
    fast, (code, _, err) = _both(argv, tmp_path)
    assert not fast and code != 0 and "'size'" in err
    meta.write_bytes(good)
    (meta.parent / "derivation.json").unlink()
    fast, (code, _, err) = _both(argv, tmp_path)
    assert not fast and code != 0 and "derivation" in err


@pytest.mark.slow
def test_the_show_read_path_imports_almost_nothing(built: dict[str, Any]) -> None:
    argv = ["show", built["hash"], "--store", str(built["store"])]
    code, out, err = _run(CONSOLE, argv, built["base"])
    mods = set(err.rpartition("\nMODULES ")[2].split())
    assert code == 0 and out
    heavy = {"argparse", "dataclasses", "typing", "re", "pathlib", "json", "contextlib",
             "rocmforge.cli.main", "rocmforge.errors", "rocmforge.store.store"}  # fmt: skip
    assert not heavy & mods, heavy & mods


@pytest.mark.slow
def test_leanjson_reads_the_store_files_as_json_does(built: dict[str, Any]) -> None:
    entry = built["store"] / "entries" / built["entry"]
    for name in ("meta.json", "derivation.json", "provenance.json"):
        raw = (entry / name).read_bytes()
        assert leanjson.loads(raw) == json.loads(raw), name


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2.5, -0.0, 1e400, true, false, null, "\\u00e9\\ud83d\\ude00"]}', " [] \n",
     '"x"', "NaN", '{"a": 1, "a": 2}', "-Infinity"],
)  # fmt: skip
def test_leanjson_parses_as_json_does(text: str) -> None:
    assert repr(leanjson.loads(text)) == repr(json.loads(text))
    assert leanjson.dumps_str(text) == json.dumps(text)


@pytest.mark.parametrize("text", ["", "{", "[] x", '{"a": 1} {}', "[1,]", "'x'"])
def test_leanjson_rejects_what_json_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        leanjson.loads(text)
