"""Bad input through the CLI (in-process, ``rf_in``): one clear error per problem, exit code 2,
never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf_in

CASES = {
    "syntax": ("schema = 1\n[package\nname = 'x'\n", ".toml:2: invalid TOML"),
    "unknown-key": (TINY_RECIPE.replace("[check]", "[check]\nimprot = 'x'"), "did you mean"),
    "wrong-type": (TINY_RECIPE.replace('version = "0.1"', "version = 1"), "package.version"),
    "missing-source": (TINY_RECIPE.replace('[source]\npath = "{src}"\n', ""), "source"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_recipe_gives_one_clear_error(case: str, tmp_path: Path, tiny_src: Path) -> None:
    text, needle = CASES[case]
    recipe = tmp_path / f"{case}.toml"
    recipe.write_text(text.replace("{src}", str(tiny_src)))
    for command in ("realize", "plan"):
        proc = rf_in(command, recipe, "--store", tmp_path / "store")
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, proc.stderr
        assert str(recipe) in errors[0] and needle in errors[0]


def test_extends_cycle_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('schema = 1\nextends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('schema = 1\nextends = "a.toml"\n')
    proc = rf_in("realize", tmp_path / "a.toml", "--store", tmp_path / "store")
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "cycle" in errors[0], proc.stderr


def test_missing_recipe_file(tmp_path: Path) -> None:
    proc = rf_in("plan", tmp_path / "nope.toml", "--store", tmp_path / "store")
    assert proc.returncode == 2
    assert "nope.toml" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_source_path_is_one_error(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE.format(src=tmp_path / "does-not-exist"))
    proc = rf_in("realize", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 2, proc.stderr
    assert "does-not-exist" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["realize", "plan", "lock", "doctor"])
def test_a_recipe_that_is_not_utf8_is_bad_input(command: str, tmp_path: Path) -> None:
    recipe = tmp_path / "binary.toml"
    recipe.write_bytes(b"\x8e\xff\x00schema = 1\n")
    proc = (
        rf_in(command, recipe, "--store", tmp_path / "store")
        if command != "doctor"
        else rf_in(command, recipe)
    )
    assert proc.returncode == 2, proc.stderr
    assert "not valid UTF-8" in proc.stderr and "internal error" not in proc.stderr


@pytest.mark.parametrize("argv", [["du", "--top", "-1"], ["gc", "--keep-last", "-2"]])
def test_negative_counts_are_refused(argv: list[str], tmp_path: Path) -> None:
    proc = rf_in(*argv, "--store", tmp_path / "store")
    assert proc.returncode == 2 and "is negative" in proc.stderr
