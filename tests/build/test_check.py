"""A check that fails with ``No module named X``, where X is a ``Requires-Dist`` of the built
wheel, says to add it to ``[check] requirements``."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf


@pytest.mark.slow
def test_missing_runtime_requirement_is_named_with_the_fix(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    mkwheel = tiny_src / "mkwheel.py"
    text = mkwheel.read_text()
    assert "Version: {version}\\n" in text
    mkwheel.write_text(
        text.replace("Version: {version}\\n", "Version: {version}\\nRequires-Dist: RF_Dep>=1.0\\n")
    )
    (tiny_src / "tiny" / "__init__.py").write_text("import rf_dep\n")
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE.format(src=tiny_src))
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 1
    assert "No module named 'rf_dep'" in proc.stderr
    assert "Requires-Dist: RF_Dep>=1.0" in proc.stderr
    assert '[check] requirements as "RF_Dep==VERSION"' in proc.stderr


@pytest.mark.slow
def test_missing_module_not_required_gets_no_advice(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    (tiny_src / "tiny" / "__init__.py").write_text("import rf_other\n")
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE.format(src=tiny_src))
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 1
    assert "No module named 'rf_other'" in proc.stderr
    assert "[check] requirements" not in proc.stderr
