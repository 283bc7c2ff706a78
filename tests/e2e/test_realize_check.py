"""``realize --check``: a cached derivation rebuilt in a fresh sandbox, compared byte for byte.

Real builds through the real CLI: the shipped demo, the HIP demo, a multi-file C project, and a
deliberately irreproducible recipe whose differing file must be named.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, TINY_RECIPE, rf

MULTI_SETUP = """\
from setuptools import Extension, setup

setup(
    name="multi",
    version="0.1",
    packages=["multi"],
    package_data={"multi": ["data/*.txt"]},
    ext_modules=[Extension("multi._native", sources=["src/a.c", "src/b.c"], include_dirs=["src"])],
)
"""

MULTI_RECIPE = """\
schema = 1

[package]
name = "multi"
version = "0.1"

[source]
path = "{src}"

[requirements]
build = ["setuptools==75.6.0"]

[check]
import = "multi._native"
"""


def realize_then_check(recipe: Path, store: Path) -> tuple[dict, object]:
    """Realize ``recipe`` into ``store``, then ``realize --check`` it; return both results."""
    first = rf("realize", recipe, "--store", store, "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    [report] = json.loads(first.stdout)
    return report, rf("realize", "--check", recipe, "--store", store, "--json")


@pytest.mark.slow
def test_check_rebuilds_the_demo_byte_identical(tmp_path: Path, wheelhouse: Path) -> None:
    src = tmp_path / "demo"
    shutil.copytree(REPO / "examples" / "demo", src)
    recipe = tmp_path / "demo.toml"
    text = (REPO / "recipes" / "demo.toml").read_text()
    recipe.write_text(text.replace('path = "../examples/demo"', f'path = "{src}"'))
    shutil.copy(REPO / "recipes" / "demo.lock", tmp_path / "demo.lock")  # its locked closure
    report, check = realize_then_check(recipe, tmp_path / "store")
    assert check.returncode == 0, check.stderr[-3000:]
    [result] = json.loads(check.stdout)
    assert result["identical"] is True and result["hash"] == report["hash"]
    assert result["differences"] == {}
    text_out = rf("realize", "--check", recipe, "--store", tmp_path / "store")
    assert text_out.returncode == 0 and "byte-identical" in text_out.stderr


@pytest.mark.slow
def test_check_multi_file_project(tmp_path: Path, wheelhouse: Path) -> None:
    src = tmp_path / "multi"
    (src / "multi" / "data").mkdir(parents=True)
    (src / "src").mkdir()
    (src / "setup.py").write_text(MULTI_SETUP)
    (src / "multi" / "__init__.py").write_text("from multi._native import total\n")
    (src / "multi" / "data" / "values.txt").write_text("1 2 3\n")
    (src / "src" / "ab.h").write_text("int a(void);\nint b(void);\n")
    (src / "src" / "a.c").write_text(
        '#include <Python.h>\n#include "ab.h"\n'
        "static PyObject *total(PyObject *s, PyObject *n) { return PyLong_FromLong(a() + b()); }\n"
        'static PyMethodDef m[] = {{"total", total, METH_NOARGS, 0}, {0}};\n'
        'static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, "_native", 0, -1, m};\n'
        "PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&d); }\n"
        "int a(void) { return 1; }\n"
    )
    (src / "src" / "b.c").write_text('#include "ab.h"\nint b(void) { return 2; }\n')
    recipe = tmp_path / "multi.toml"
    recipe.write_text(MULTI_RECIPE.format(src=src))
    _, check = realize_then_check(recipe, tmp_path / "store")
    assert check.returncode == 0, check.stderr[-3000:]
    assert json.loads(check.stdout)[0]["identical"] is True


@pytest.mark.slow
def test_check_hip_demo(tmp_path: Path, wheelhouse: Path) -> None:
    if shutil.which("hipcc") is None:
        pytest.skip("hipcc not installed (apt-get install hipcc: Debian 12's ROCm 5.2)")
    _, check = realize_then_check(REPO / "recipes" / "hip-demo.toml", tmp_path / "store")
    assert check.returncode == 0, check.stderr[-3000:]
    assert json.loads(check.stdout)[0]["identical"] is True


@pytest.mark.slow
def test_check_names_the_files_that_differ(tmp_path: Path, tiny_src: Path) -> None:
    # A build that is not reproducible: it writes a fresh random value into the package.
    (tiny_src / "rand.py").write_text(
        "import uuid\nopen('tiny/r.py', 'w').write(repr(str(uuid.uuid4())))\n"
    )
    step = "python rand.py"
    recipe = tmp_path / "random.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace(
            'steps = ["python mkwheel.py', f'steps = ["{step}", "python mkwheel.py'
        )
    )
    _, check = realize_then_check(recipe, tmp_path / "store")
    assert check.returncode == 1, check.stderr
    [result] = json.loads(check.stdout)
    [(wheel, members)] = result["differences"].items()
    assert wheel == "tiny-0.1-py3-none-any.whl"
    assert "tiny/r.py" in members and "tiny/__init__.py" not in members
    text = rf("realize", "--check", recipe, "--store", tmp_path / "store")
    assert text.returncode == 1 and "DIFFERS" in text.stderr
    assert "    tiny/r.py" in text.stdout


def test_check_needs_a_cached_build(tmp_path: Path, tiny_recipe: Path) -> None:
    done = rf("realize", "--check", tiny_recipe, "--store", tmp_path / "store")
    assert done.returncode == 2
    assert "is not in the store" in done.stderr and "rocmforge realize" in done.stderr
