"""The realize memo answers repeated realizes instantly but never serves a stale result."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import rf


def realize(recipe: Path, store: Path) -> tuple[str, str]:
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1], proc.stderr


def test_memo_hit_imports_nothing_heavy(tiny_recipe: Path, store: Path) -> None:
    wheel, _ = realize(tiny_recipe, store)
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "rocmforge",
            "realize",
            str(tiny_recipe),
            "--store",
            str(store),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == wheel
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    assert "rocmforge.memo" in imported
    for heavy in (
        "rocmforge.cli",
        "rocmforge.recipe.model",
        "tomllib",
        "sqlite3",
        "filelock",
        "argparse",
    ):
        assert heavy not in imported, heavy


def test_source_edit_and_new_file_in_empty_dir_are_seen(
    tiny_recipe: Path, tiny_src: Path, store: Path
) -> None:
    first, _ = realize(tiny_recipe, store)
    (tiny_src / "tiny" / "__init__.py").write_text("VALUE = 43\n")
    second, err = realize(tiny_recipe, store)
    assert second != first and "built" in err
    (tiny_src / "empty" / "deeper").mkdir(parents=True)
    third, _ = realize(tiny_recipe, store)
    assert third == second  # empty dirs are not content
    (tiny_src / "empty" / "deeper" / "new.txt").write_text("x")
    fourth, err = realize(tiny_recipe, store)
    assert fourth != third and "built" in err


def test_recipe_edit_is_seen(tiny_recipe: Path, store: Path) -> None:
    first, _ = realize(tiny_recipe, store)
    tiny_recipe.write_text(tiny_recipe.read_text() + '\n[env]\nFLAG = "1"\n')
    second, err = realize(tiny_recipe, store)
    assert second != first and "built" in err


def test_deleted_entry_is_rebuilt_not_printed(tiny_recipe: Path, store: Path) -> None:
    first, _ = realize(tiny_recipe, store)
    entry = Path(first).parent
    os.chmod(entry, 0o755)
    shutil.rmtree(entry)
    second, err = realize(tiny_recipe, store)
    assert second == first and Path(second).is_file() and "built" in err
