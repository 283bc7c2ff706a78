"""Portable binaries: ``-march=native`` in a build is warned about (file and fix), recorded in
meta.json and ``show``, and fails the build with ``[check] portable = true``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf

from rocmforge.build.portable import scan_wheel

C_SRC = "int twice(int x) { return 2 * x; }\n"


def native_recipe(tmp_path: Path, tiny_src: Path, step: str, extra: str = "") -> Path:
    (tiny_src / "twice.c").write_text(C_SRC)
    text = TINY_RECIPE.format(src=tiny_src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]',
        f"steps = [{json.dumps(step + ' && python mkwheel.py $OUT tiny 0.1')}]",
    )
    recipe = tmp_path / "native.toml"
    recipe.write_text(text + extra)
    return recipe


LOGGED = "set -x; cc -march=native -O2 -shared -fPIC -o tiny/_twice.so twice.c"


@pytest.fixture
def cc() -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")


@pytest.mark.slow
def test_native_build_warns_and_is_recorded(
    cc: None, tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    recipe = native_recipe(tmp_path, tiny_src, LOGGED)
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "compiled with -march=native" in proc.stderr
    assert "build.log line" in proc.stderr and "-march=x86-64-v2" in proc.stderr
    (report,) = json.loads(proc.stdout)
    meta = json.loads((Path(report["path"]) / "meta.json").read_text())
    assert meta["portability"][0]["flag"] == "-march=native"
    shown = rf("show", report["hash"], "--store", store)
    assert "not portable" in shown.stdout and "-march=native" in shown.stdout


@pytest.mark.slow
def test_portable_true_fails_the_build(
    cc: None, tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    recipe = native_recipe(tmp_path, tiny_src, LOGGED)
    recipe.write_text(
        recipe.read_text().replace('import = "tiny"', 'import = "tiny"\nportable = true')
    )
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 1
    assert "[check] portable = true" in proc.stderr and "-march=native" in proc.stderr
    assert not list((store / "entries").iterdir())


@pytest.mark.slow
def test_a_portable_build_has_no_finding(
    cc: None, tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    step = "set -x; cc -O2 -g -shared -fPIC -o tiny/_twice.so twice.c"
    recipe = native_recipe(tmp_path, tiny_src, step, "")
    recipe.write_text(
        recipe.read_text().replace('import = "tiny"', 'import = "tiny"\nportable = true')
    )
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "portab" not in proc.stderr
    (report,) = json.loads(proc.stdout)
    assert "portability" not in json.loads((Path(report["path"]) / "meta.json").read_text())


@pytest.mark.slow
def test_native_code_found_in_the_object_itself(
    cc: None, tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    """Without the command in the log, GCC's recorded options in the object give it away."""
    step = "cc -march=native -O2 -g -shared -fPIC -o tiny/_twice.so twice.c 2>/dev/null"
    recipe = native_recipe(tmp_path, tiny_src, "{ " + step + "; }")
    # keep the flag out of the log: the step line itself is logged, so hide it in a script
    (tiny_src / "build.sh").write_text(step + "\n")
    recipe.write_text(recipe.read_text().replace("{ " + step + "; }", "sh build.sh"))
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    (finding,) = scan_wheel(Path(report["wheels"][0]))
    assert finding.file.endswith("tiny/_twice.so") and "native" in finding.flag
    assert "tiny/_twice.so: compiled with -march=native (expanded by GCC)" in proc.stderr
