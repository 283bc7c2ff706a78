"""Build backends: PEP 517 config settings reach the backend, and builds are reproducible by
default (a fixed build directory for meson-python, compiler prefix maps), switchable per recipe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import DATA, WHEELHOUSE, commit_all, git, rf, rf_in

BACKENDS = DATA / "backends"

SETTINGS_RECIPE = """\
schema = 1

[package]
name = "rfsettings"
version = "0.1"

[source]
path = "{src}"

[build]
{build}

[check]
import = "rfsettings"
"""

MESON_PINS = [
    "meson-python==0.22.1",
    "meson==1.12.1",
    "ninja==1.13.0",
    "pyproject-metadata==0.12.1",
    "packaging==26.4",
]

MESON_RECIPE = """\
schema = 1

[package]
name = "rfmeson"
version = "0.3.0"

[source]
path = "{src}"

[toolchain]
kind = "system"
python = "3.11"

[requirements]
build = {pins}

[build]
{build}

[check]
import = "rfmeson"
"""


def realize(recipe: Path, store: Path) -> dict:
    """Realize ``recipe`` into ``store`` through the CLI and return its JSON report."""
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    return report


def check(recipe: Path, store: Path) -> dict:
    """Rebuild the cached build of ``recipe`` with ``realize --check`` and return its JSON report
    (exit 0: the fresh build's wheels are byte-identical to the stored ones)."""
    proc = rf("realize", recipe, "--store", store, "--check", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (report,) = json.loads(proc.stdout)
    assert report["identical"] is True
    return report


def seen_by_backend(wheel: str) -> dict:
    """Return what the in-tree backend recorded in the wheel it built."""
    with zipfile.ZipFile(wheel) as z:
        text = z.read("rfsettings/__init__.py").decode()
    return json.loads(text.split("=", 1)[1].strip()[1:-1])


def venv_with(tmp_path: Path, wheel: str, *pins: str) -> Path:
    """Install ``wheel`` (and ``pins`` from the wheelhouse, with their dependencies) into the
    venv ``tmp_path/venv``, made on first use; return its python."""
    env_dir = tmp_path / "venv"
    again = env_dir.exists()
    if not again:
        venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    how = ["--find-links", str(WHEELHOUSE)] if pins else ["--no-deps"]
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-index", *how,
         *(["--force-reinstall"] if again else []), wheel, *pins],
        check=True,
    )  # fmt: skip
    return py


def python_says(py: Path, code: str, cwd: Path) -> str:
    """What ``py -c code`` prints, stripped (run in ``cwd``, failing on a non-zero exit)."""
    run = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True, cwd=cwd)
    return run.stdout.strip()


def settings_recipe(tmp_path: Path, build: str) -> Path:
    src = tmp_path / "settings-src"
    if not src.exists():
        shutil.copytree(BACKENDS / "settingsdemo", src)
    recipe = tmp_path / "settings.toml"
    recipe.write_text(SETTINGS_RECIPE.format(src=src, build=build))
    return recipe


@pytest.mark.slow
def test_config_settings_reach_the_backend_and_are_hashed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    recipe = settings_recipe(
        tmp_path, '[build.config-settings]\nbuilddir = "out"\nsetup-args = ["-Da=1", "-Db=2"]\n'
    )
    first = realize(recipe, store)
    seen = seen_by_backend(first["wheels"][0])
    assert seen["config_settings"] == {"builddir": "out", "setup-args": ["-Da=1", "-Db=2"]}
    plan = json.loads(rf("plan", recipe, "--store", store, "--json").stdout)
    assert plan["derivation"]["build"]["config-settings"]["builddir"] == "out"
    recipe.write_text(recipe.read_text().replace('"out"', '"elsewhere"'))
    second = realize(recipe, store)
    assert second["hash"] != first["hash"] and second["cached"] is False
    assert seen_by_backend(second["wheels"][0])["config_settings"]["builddir"] == "elsewhere"


@pytest.mark.slow
def test_no_config_settings_means_none(tmp_path: Path) -> None:
    report = realize(settings_recipe(tmp_path, ""), tmp_path / "store")
    assert seen_by_backend(report["wheels"][0])["config_settings"] is None


@pytest.mark.slow
def test_prefix_maps_reach_the_compiler_flags_unless_switched_off(tmp_path: Path) -> None:
    store = tmp_path / "store"
    on = realize(settings_recipe(tmp_path, ""), store)
    cflags = seen_by_backend(on["wheels"][0])["CFLAGS"]
    assert "-ffile-prefix-map=/build/src=." in cflags.split()
    off = realize(settings_recipe(tmp_path, "reproducible = false"), store)
    assert off["hash"] != on["hash"]
    assert seen_by_backend(off["wheels"][0])["CFLAGS"] is None


def test_config_settings_with_steps_is_bad_input(tmp_path: Path) -> None:
    recipe = settings_recipe(
        tmp_path, 'steps = ["true"]\n[build.config-settings]\nbuilddir = "out"\n'
    )
    proc = rf_in("plan", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 2
    assert "build.config-settings" in proc.stderr and "PEP 517 build only" in proc.stderr


def test_config_settings_must_be_strings(tmp_path: Path) -> None:
    recipe = settings_recipe(tmp_path, "[build.config-settings]\nbuilddir = 3\n")
    proc = rf_in("plan", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 2
    assert "build.config-settings.builddir" in proc.stderr
    assert "string or an array of strings" in proc.stderr


@pytest.fixture
def meson_wheels() -> Path:
    """The wheelhouse with the meson-python backend (filled by scripts/test.sh)."""
    for pin in MESON_PINS:
        name, version = pin.split("==")
        if not list(WHEELHOUSE.glob(f"{name.replace('-', '_')}-{version}-*.whl")):
            pytest.skip(f"no {pin} wheel in {WHEELHOUSE}; run scripts/test.sh")
    return WHEELHOUSE


def meson_recipe(tmp_path: Path, build: str = "") -> Path:
    src = tmp_path / "meson-src"
    if not src.exists():
        shutil.copytree(BACKENDS / "mesondemo", src)
    recipe = tmp_path / "meson.toml"
    recipe.write_text(MESON_RECIPE.format(src=src, pins=json.dumps(MESON_PINS), build=build))
    return recipe


def wheel_member(wheel: str, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(suffix)]
        return z.read(name)


@pytest.mark.slow
def test_meson_python_builds_byte_identical_and_runs(meson_wheels: Path, tmp_path: Path) -> None:
    recipe = meson_recipe(tmp_path)
    a = realize(recipe, tmp_path / "store")
    assert not a["cached"]
    assert check(recipe, tmp_path / "store")["hash"] == a["hash"]
    config = wheel_member(a["wheels"][0], "rfmeson/_config.py").decode()
    assert ".mesonpy-" not in config and "build/rocmforge" in config
    py = venv_with(tmp_path, a["wheels"][0])
    said = python_says(py, "import rfmeson; print(rfmeson.mul(6, 7), rfmeson.where())", tmp_path)
    product, where = said.split()
    assert product == "42"
    assert not where.startswith("/build"), where  # __FILE__ is prefix-mapped


@pytest.mark.slow
def test_meson_python_without_reproducible_differs(meson_wheels: Path, tmp_path: Path) -> None:
    """The control: with rocmforge's additions off, meson-python's random build directory
    lands in the wheel and two builds differ (so the test above proves the feature)."""
    recipe = meson_recipe(tmp_path, "reproducible = false")
    a = realize(recipe, tmp_path / "store")
    config = wheel_member(a["wheels"][0], "rfmeson/_config.py").decode()
    assert ".mesonpy-" in config
    proc = rf("realize", recipe, "--store", tmp_path / "store", "--check", "--json")
    assert proc.returncode == 1, proc.stderr
    (report,) = json.loads(proc.stdout)
    assert report["identical"] is False


@pytest.mark.slow
def test_meson_recipe_builddir_wins(meson_wheels: Path, tmp_path: Path) -> None:
    recipe = meson_recipe(tmp_path, '[build.config-settings]\nbuild-dir = "bd-mine"\n')
    report = realize(recipe, tmp_path / "store")
    assert "bd-mine" in wheel_member(report["wheels"][0], "rfmeson/_config.py").decode()


SKFMM_RECIPE = """\
schema = 1

[package]
name = "scikit-fmm"
version = "2025.6.23"

[source]
path = "{src}"

[toolchain]
kind = "system"
python = "3.11"

[requirements]
build = {pins}

[check]
import = "skfmm"
requirements = ["numpy==2.0.2"]
"""


@pytest.mark.slow
def test_meson_python_sdist_from_pypi_builds_byte_identical_and_runs(
    meson_wheels: Path, tmp_path: Path
) -> None:
    """scikit-fmm's sdist: C++ extensions against numpy's C API, built by meson-python."""
    if not list(WHEELHOUSE.glob("numpy-2.0.2-*.whl")):
        pytest.skip(f"no numpy 2.0.2 wheel in {WHEELHOUSE}; run scripts/test.sh")
    src = real_sdist(tmp_path, "scikit_fmm", "2025.6.23")
    recipe = tmp_path / "skfmm.toml"
    recipe.write_text(SKFMM_RECIPE.format(src=src, pins=json.dumps([*MESON_PINS, "numpy==2.0.2"])))
    a = realize(recipe, tmp_path / "store")
    log = rf("log", a["hash"], "--store", tmp_path / "store").stdout
    assert "meson setup" in log and "build/rocmforge" in log  # the fixed build directory
    check(recipe, tmp_path / "store")
    py = venv_with(tmp_path, a["wheels"][0], "numpy==2.0.2")
    code = (
        "import numpy as np, skfmm; phi = np.ones(5); phi[2] = -1; "
        "print(' '.join(f'{v:.1f}' for v in skfmm.distance(phi)))"
    )
    assert python_says(py, code, tmp_path) == "1.5 0.5 -0.5 0.5 1.5"


RUST_RECIPE = """\
schema = 1

[package]
name = "rfrust"
version = "0.1.0"

[source]
path = "{src}"

[toolchain]
kind = "system"
python = "3.11"
rust = "host"

[requirements]
build = ["maturin==1.16.0"]
"""


@pytest.fixture
def rust_ready() -> None:
    """cargo and rustc on PATH (rustup or Debian) and the maturin wheel (scripts/test.sh)."""
    if shutil.which("cargo") is None or shutil.which("rustc") is None:
        pytest.skip("no Rust toolchain on PATH; scripts/test.sh installs Debian's rustc/cargo")
    if not list(WHEELHOUSE.glob("maturin-1.16.0-*.whl")):
        pytest.skip(f"no maturin 1.16.0 wheel in {WHEELHOUSE}; run scripts/test.sh")


def rust_recipe(tmp_path: Path, *, toolchain: bool = True, deps: str = "") -> Path:
    src = tmp_path / "rust-src"
    if not src.exists():
        shutil.copytree(BACKENDS / "rustdemo", src)
    if deps:
        cargo = src / "Cargo.toml"
        cargo.write_text(cargo.read_text() + deps)
        (src / "Cargo.lock").unlink()
    recipe = tmp_path / "rust.toml"
    text = RUST_RECIPE.format(src=src)
    recipe.write_text(text if toolchain else text.replace('rust = "host"\n', ""))
    return recipe


@pytest.mark.slow
def test_maturin_builds_with_the_declared_rust_toolchain(
    rust_ready: None, tmp_path: Path
) -> None:
    recipe = rust_recipe(tmp_path)
    plan = json.loads(rf("plan", recipe, "--store", tmp_path / "s", "--json").stdout)
    rust = plan["derivation"]["toolchain"]["rust"]
    assert rust["rustc"]["release"] and len(rust["rustc"]["blake3"]) == 64
    assert "path" not in json.dumps(rust)
    a = realize(recipe, tmp_path / "store")
    check(recipe, tmp_path / "store")
    py = venv_with(tmp_path, a["wheels"][0])
    rfrust = py.parent / "rfrust"
    run = subprocess.run([rfrust, "6", "7"], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "42"


@pytest.mark.slow
def test_maturin_without_a_rust_toolchain_says_to_declare_one(
    rust_ready: None, tmp_path: Path
) -> None:
    proc = rf("realize", rust_recipe(tmp_path, toolchain=False), "--store", tmp_path / "store")
    assert proc.returncode == 1
    assert 'rust = "host"' in proc.stderr


@pytest.mark.slow
def test_a_crate_that_is_not_vendored_is_a_clear_error(rust_ready: None, tmp_path: Path) -> None:
    recipe = rust_recipe(tmp_path, deps='itoa = "1"\n')
    proc = rf("realize", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 1
    assert "the sandbox has no network" in proc.stderr
    assert "vendor the crates or declare them as an input" in proc.stderr


# -- real sdists from PyPI ----------------------------------------------------------------

SDISTS = WHEELHOUSE.parent / "sdists"


def fetch_sdist(name: str, version: str, *, crates: Path | None = None) -> Path:
    """Download the PyPI sdist of ``name==version`` into .ci/sdists once; return its path (which
    may not exist when the download failed). pip prepares the sdist's metadata, which for maturin
    runs `cargo metadata`: with ``crates`` (a crate directory such as Debian's
    /usr/share/cargo/registry) cargo resolves there, offline, instead of asking crates.io."""
    archive = SDISTS / f"{name}-{version}.tar.gz"
    if archive.is_file():
        return archive
    env = dict(os.environ)
    if crates is not None:
        from rocmforge.build.builder import cargo_config

        home = SDISTS / ".cargo-home"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(cargo_config(str(crates)))
        env["CARGO_HOME"] = str(home)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
         "--no-deps", "--no-binary", name, "-d", str(SDISTS), f"{name}=={version}"],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if not archive.is_file():
        sys.stderr.write(f"cannot fetch the {name} {version} sdist: {proc.stderr[-600:]}\n")
    return archive


def real_sdist(tmp_path: Path, name: str, version: str, *, crates: Path | None = None) -> Path:
    """Unpack the PyPI sdist of ``name==version`` (fetched once into .ci/sdists) under tmp_path."""
    archive = fetch_sdist(name, version, crates=crates)
    if not archive.is_file():
        pytest.skip(f"cannot fetch the {name} {version} sdist (see stderr)")
    with tarfile.open(archive) as tf:
        tf.extractall(tmp_path / "sdist", filter="data")
    return tmp_path / "sdist" / f"{name}-{version}"


CYTHON_RECIPE = """\
schema = 1

[package]
name = "fastrlock"
version = "0.8.3"

[source]
path = "{src}"

[toolchain]
kind = "system"
python = "3.11"

[requirements]
build = ["setuptools==75.6.0", "Cython==3.1.4"]

[build.config-settings]
# fastrlock's setup.py regenerates its C from the .pyx only when asked (sys.argv)
"--global-option" = ["--with-cython"]

[check]
import = "fastrlock.rlock"
"""


@pytest.mark.slow
def test_cython_sdist_from_pypi_builds_byte_identical_and_runs(tmp_path: Path) -> None:
    if not list(WHEELHOUSE.glob("cython-3.1.4-*.whl")) or not list(
        WHEELHOUSE.glob("setuptools-75.6.0-*.whl")
    ):
        pytest.skip(f"no Cython 3.1.4 / setuptools wheel in {WHEELHOUSE}; run scripts/test.sh")
    src = real_sdist(tmp_path, "fastrlock", "0.8.3")
    recipe = tmp_path / "fastrlock.toml"
    recipe.write_text(CYTHON_RECIPE.format(src=src))
    a = realize(recipe, tmp_path / "store")
    check(recipe, tmp_path / "store")
    log = rf("log", a["hash"], "--store", tmp_path / "store").stdout
    assert "building with Cython 3.1.4" in log  # the config setting reached setup.py
    py = venv_with(tmp_path, a["wheels"][0])
    code = "from fastrlock.rlock import FastRLock; lock = FastRLock(); print(lock.acquire())"
    assert python_says(py, code, tmp_path) == "True"


LIBYAML_RECIPE = """\
schema = 1

[package]
name = "pyyaml"
version = "6.0.2"

[source]
path = "{src}"

[toolchain]
kind = "system"
python = "3.11"

[requirements]
build = ["setuptools==75.6.0", "wheel==0.45.1", "Cython==3.1.4"]

[build.config-settings]
# PyYAML's in-tree backend: fail rather than quietly build pure Python when libyaml is missing
pyyaml_build_config = '{{"force": 1}}'

[check]
import = "yaml._yaml"
"""


@pytest.mark.slow
def test_c_extension_against_a_debian_library_builds_byte_identical_and_runs(
    tmp_path: Path,
) -> None:
    """PyYAML's sdist compiled against Debian's libyaml (libyaml-dev, scripts/test.sh)."""
    if not Path("/usr/include/yaml.h").is_file():
        pytest.skip("no libyaml headers; scripts/test.sh installs libyaml-dev")
    for pin in ("cython-3.1.4", "setuptools-75.6.0", "wheel-0.45.1"):
        if not list(WHEELHOUSE.glob(f"{pin}-*.whl")):
            pytest.skip(f"no {pin} wheel in {WHEELHOUSE}; run scripts/test.sh")
    src = real_sdist(tmp_path, "pyyaml", "6.0.2")
    recipe = tmp_path / "pyyaml.toml"
    recipe.write_text(LIBYAML_RECIPE.format(src=src))
    a = realize(recipe, tmp_path / "store")
    with zipfile.ZipFile(a["wheels"][0]) as z:
        (ext,) = [n for n in z.namelist() if n.startswith("yaml/_yaml.") and n.endswith(".so")]
        assert b"libyaml-0.so" in z.read(ext)  # linked against the Debian library
    check(recipe, tmp_path / "store")
    py = venv_with(tmp_path, a["wheels"][0])
    code = (
        "import yaml; assert yaml.__with_libyaml__; "
        "print(yaml.load('a: [1, 2]', Loader=yaml.CSafeLoader)['a'][1])"
    )
    assert python_says(py, code, tmp_path) == "2"


PYBIND11_RECIPE = """\
schema = 1

[package]
name = "hnswlib"
version = "0.8.0"

[source]
path = "{src}"

[toolchain]
kind = "system"
python = "3.11"

[requirements]
build = ["setuptools==75.6.0", "wheel==0.45.1", "numpy==2.2.6", "pybind11==2.13.6"]

[env]
# hnswlib's setup.py compiles with -march=native unless told not to
HNSWLIB_NO_NATIVE = "1"

[check]
import = "hnswlib"
portable = true
"""


@pytest.mark.slow
def test_pybind11_sdist_from_pypi_builds_byte_identical_and_runs(tmp_path: Path) -> None:
    """hnswlib's sdist: a pybind11 C++ extension built by setuptools against numpy."""
    for pin in ("setuptools-75.6.0", "wheel-0.45.1", "numpy-2.2.6", "pybind11-2.13.6"):
        if not list(WHEELHOUSE.glob(f"{pin}-*.whl")):
            pytest.skip(f"no {pin} wheel in {WHEELHOUSE}; run scripts/test.sh")
    src = real_sdist(tmp_path, "hnswlib", "0.8.0")
    recipe = tmp_path / "hnswlib.toml"
    recipe.write_text(PYBIND11_RECIPE.format(src=src))
    a = realize(recipe, tmp_path / "store")  # portable = true: no -march=native got through
    check(recipe, tmp_path / "store")
    py = venv_with(tmp_path, a["wheels"][0], "numpy==2.2.6")
    code = (
        "import hnswlib, numpy as np; i = hnswlib.Index(space='l2', dim=2); "
        "i.init_index(max_elements=3); i.add_items(np.array([[0, 0], [5, 5], [9, 9]], "
        "dtype='float32')); print(i.knn_query(np.array([[4.5, 5.2]], dtype='float32'), k=1)"
        "[0][0][0])"
    )
    assert python_says(py, code, tmp_path) == "1"


SKBUILD_RECIPE = """\
schema = 1

[package]
name = "pybind11"
version = "3.0.1"

[source]
path = "{src}"

[toolchain]
kind = "system"
python = "3.11"

[requirements]
build = ["scikit-build-core==0.11.6", "pathspec==0.12.1", "packaging==26.4"]

[check]
import = "pybind11"
"""

EXTENSION = """\
#include <pybind11/pybind11.h>
int mul(int a, int b) { return a * b; }
PYBIND11_MODULE(rfmul, m) { m.def("mul", &mul); }
"""


@pytest.mark.slow
def test_scikit_build_core_sdist_from_pypi_builds_byte_identical_and_works(
    tmp_path: Path,
) -> None:
    """pybind11 3's own sdist is a scikit-build-core (CMake) project; the installed headers then
    compile an extension in a fresh venv."""
    if shutil.which("cmake") is None:
        pytest.skip("no cmake on PATH; scripts/test.sh installs it")
    for pin in ("scikit_build_core-0.11.6", "pathspec-0.12.1", "packaging-26.4"):
        if not list(WHEELHOUSE.glob(f"{pin}-*.whl")):
            pytest.skip(f"no {pin} wheel in {WHEELHOUSE}; run scripts/test.sh")
    src = real_sdist(tmp_path, "pybind11", "3.0.1")
    recipe = tmp_path / "pybind11.toml"
    recipe.write_text(SKBUILD_RECIPE.format(src=src))
    a = realize(recipe, tmp_path / "store")
    check(recipe, tmp_path / "store")
    py = venv_with(tmp_path, a["wheels"][0])
    includes = subprocess.run(
        [py, "-m", "pybind11", "--includes"], capture_output=True, text=True, check=True
    ).stdout.split()
    (tmp_path / "rfmul.cpp").write_text(EXTENSION)
    subprocess.run(
        ["c++", "-O0", "-shared", "-fPIC", "-std=c++17", *includes, "rfmul.cpp",
         "-o", "rfmul.so"],
        cwd=tmp_path, check=True,
    )  # fmt: skip
    run = subprocess.run(
        [py, "-c", "import rfmul; print(rfmul.mul(6, 7))"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert run.stdout.strip() == "42"


SUBMODULE_RECIPE = """\
schema = 1

[package]
name = "rfsub"
version = "0.1"

[source]
git = "{repo}"
rev = "{rev}"
submodules = true
allow-local-submodules = true

[toolchain]
kind = "system"
python = "3.11"

[requirements]
build = ["setuptools==75.6.0"]

[check]
import = "rfsub"
"""

SUBMODULE_SETUP = """\
from setuptools import Extension, setup

setup(
    name="rfsub",
    version="0.1",
    ext_modules=[Extension("rfsub", ["native/rfsub.cpp"], include_dirs=["native/include"],
                           language="c++")],
)
"""

SUBMODULE_CPP = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "mul.hpp"

static PyObject *py_mul(PyObject *, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return nullptr;
    return PyLong_FromLong(rfsub::mul(a, b));
}
static PyObject *py_where(PyObject *, PyObject *) { return PyUnicode_FromString(__FILE__); }
static PyMethodDef methods[] = {{"mul", py_mul, METH_VARARGS, nullptr},
                                {"where", py_where, METH_NOARGS, nullptr},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "rfsub", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_rfsub(void) { return PyModule_Create(&module); }
"""


@pytest.mark.slow
def test_git_source_with_cpp_in_a_submodule_builds_byte_identical_and_runs(
    tmp_path: Path,
) -> None:
    """A test-made git repository whose C++ code lives in a submodule."""
    if not list(WHEELHOUSE.glob("setuptools-75.6.0-*.whl")):
        pytest.skip(f"no setuptools 75.6.0 wheel in {WHEELHOUSE}; run scripts/test.sh")
    native = tmp_path / "native"
    (native / "include").mkdir(parents=True)
    (native / "rfsub.cpp").write_text(SUBMODULE_CPP)
    (native / "include" / "mul.hpp").write_text(
        "namespace rfsub { inline long mul(long a, long b) { return a * b; } }\n"
    )
    git(native, "init", "-q")
    native_commit = commit_all(native, "the C++ code")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "setup.py").write_text(SUBMODULE_SETUP)
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    git(repo, "init", "-q")
    git(repo, "submodule", "add", "-q", str(native), "native")
    rev = commit_all(repo, "the package, its C++ in a submodule")
    recipe = tmp_path / "rfsub.toml"
    recipe.write_text(SUBMODULE_RECIPE.format(repo=repo, rev=rev))
    a = realize(recipe, tmp_path / "store")
    plan = json.loads(rf("plan", recipe, "--store", tmp_path / "store", "--json").stdout)
    assert native_commit in json.dumps(plan["derivation"]["source"])
    check(recipe, tmp_path / "store")
    py = venv_with(tmp_path, a["wheels"][0])
    said = python_says(py, "import rfsub; print(rfsub.mul(6, 7), rfsub.where())", tmp_path)
    product, where = said.split()
    assert product == "42"
    assert not where.startswith("/build"), where  # __FILE__ is prefix-mapped


# -- a real maturin sdist whose crates come from Debian (the Debian Rust packaging model) ---------

DEBIAN_CRATES = Path("/usr/share/cargo/registry")

#: ahocorasick_rs 0.12.3 is a maturin/PyO3 project with no Cargo.lock that needs exactly these
#: two crate series; Debian 12 packages them (librust-pyo3-dev 0.17.3, librust-aho-corasick-dev
#: 0.7.19) with all their dependencies.
AHOCORASICK_CRATES = {"pyo3": "0.17.", "aho-corasick": "0.7."}

MATURIN_RECIPE = """\
schema = 1

[package]
name = "ahocorasick-rs"
version = "0.12.3"

[source]
path = "{src}"

[toolchain]
kind = "system"
python = "3.11"
rust = "{rust}"

[requirements]
build = ["maturin==1.16.0"]

[inputs.crates]
path = "{crates}"
env = "DEBIAN_CRATES"
crates = true

[check]
import = "ahocorasick_rs"
"""


def debian_crates_fit() -> None:
    """Skip (with the reason) unless Debian's crate registry holds what ahocorasick_rs needs."""
    for crate, series in AHOCORASICK_CRATES.items():
        have = sorted(p.name for p in DEBIAN_CRATES.glob(f"{crate}-[0-9]*"))
        if not any(h.startswith(f"{crate}-{series}") for h in have):
            pytest.skip(
                f"ahocorasick_rs 0.12.3 needs the {crate} {series}x crate; "
                f"{DEBIAN_CRATES} has {have or 'none'} (Debian 12's librust-pyo3-dev and "
                "librust-aho-corasick-dev fit; scripts/test.sh installs them where they do)"
            )


def maturin_sdist_recipe(tmp_path: Path, rust: str) -> Path:
    src = tmp_path / "sdist" / "ahocorasick_rs-0.12.3"
    if not src.exists():
        real_sdist(tmp_path, "ahocorasick_rs", "0.12.3", crates=DEBIAN_CRATES)
    recipe = tmp_path / f"ahocorasick-{rust}.toml"
    recipe.write_text(MATURIN_RECIPE.format(src=src, rust=rust, crates=DEBIAN_CRATES))
    return recipe


def install_and_search(tmp_path: Path, wheel: str) -> str:
    py = venv_with(tmp_path, wheel)
    code = (
        "import ahocorasick_rs as a; s = a.AhoCorasick(['he', 'she', 'hers']); "
        "print(s.find_matches_as_strings('ushers'))"
    )
    return python_says(py, code, tmp_path)


@pytest.mark.slow
def test_real_maturin_sdist_builds_offline_with_debian_crates(
    rust_ready: None, tmp_path: Path
) -> None:
    """ahocorasick_rs 0.12.3 from PyPI (maturin + PyO3, crates not vendored) through the default
    PEP 517 path: Debian's crate registry as an [inputs] tree with crates = true replaces
    crates.io; realize, install, call, then realize --check rebuilds it byte for byte."""
    debian_crates_fit()
    recipe = maturin_sdist_recipe(tmp_path, "host")
    store = tmp_path / "store"
    # The control: without the crates input cargo has nowhere to get pyo3 from.
    without = tmp_path / "no-crates.toml"
    without.write_text(recipe.read_text().split("[inputs.crates]")[0])
    proc = rf("realize", without, "--store", store)
    assert proc.returncode == 1
    assert "the sandbox has no network" in proc.stderr
    assert "vendor the crates or declare them as an input" in proc.stderr
    plan = json.loads(rf("plan", recipe, "--store", store, "--json").stdout)
    assert plan["derivation"]["inputs"]["crates"]["crates"] is True
    a = realize(recipe, store)
    assert not a["cached"]
    commit = plan["derivation"]["toolchain"]["rust"]["rustc"]["commit"]
    if len(commit) == 40:  # rustup's std records its commit: the declared toolchain compiled it
        assert f"/rustc/{commit}/".encode() in wheel_member(a["wheels"][0], ".so")
    log = rf("log", a["hash"], "--store", store).stdout
    assert "Compiling pyo3 v0.17" in log and "Compiling aho-corasick v0.7" in log
    check(recipe, store)
    assert install_and_search(tmp_path, a["wheels"][0]) == "['she']"


@pytest.mark.slow
def test_debian_rustc_and_cargo_when_rustup_comes_first(
    rust_ready: None, tmp_path: Path
) -> None:
    """rust = "debian": Debian's /usr/bin/rustc and cargo build the real sdist even when a rustup
    install comes first on PATH; the fingerprint is Debian's compiler, and so is the code."""
    if not (Path("/usr/bin/rustc").is_file() and Path("/usr/bin/cargo").is_file()):
        pytest.skip("no Debian rustc/cargo in /usr/bin; scripts/test.sh installs them")
    debian_crates_fit()
    release = subprocess.run(
        ["/usr/bin/rustc", "-vV"], capture_output=True, text=True, check=True
    ).stdout.split("release: ")[1].split()[0]
    recipe = maturin_sdist_recipe(tmp_path, "debian")
    store = tmp_path / "store"
    plan = json.loads(rf("plan", recipe, "--store", store, "--json").stdout)
    rust = plan["derivation"]["toolchain"]["rust"]
    assert rust["rustc"]["release"] == release
    assert rust["cargo"]["version"].startswith("cargo ")
    host = json.loads(
        rf("plan", maturin_sdist_recipe(tmp_path, "host"), "--store", store, "--json").stdout
    )["derivation"]["toolchain"]["rust"]
    if Path(shutil.which("rustc") or "").resolve() != Path("/usr/bin/rustc"):
        assert host["rustc"]["blake3"] != rust["rustc"]["blake3"]  # two compilers, two hashes
    a = realize(recipe, store)
    ext = wheel_member(a["wheels"][0], ".so")
    assert f"/usr/src/rustc-{release}/".encode() in ext  # Debian's std, built by Debian's rustc
    # (no rebuild check here: test_real_maturin_sdist_builds_offline_with_debian_crates proves
    # this sdist byte-identical; a second release build of pyo3 cost this test half its ~6 min)
    assert install_and_search(tmp_path, a["wheels"][0]) == "['she']"


def test_crates_input_needs_a_rust_toolchain_and_is_one(tmp_path: Path) -> None:
    crates = tmp_path / "crates"
    crates.mkdir()
    recipe = tmp_path / "r.toml"
    body = (
        'schema = 1\n[package]\nname = "x"\nversion = "1"\n[source]\npath = "."\n'
        '[inputs.a]\npath = "crates"\nenv = "A"\ncrates = true\n'
    )
    recipe.write_text(body)
    proc = rf_in("plan", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 2
    assert "inputs.a.crates" in proc.stderr and "[toolchain] rust" in proc.stderr
    recipe.write_text(
        body + '[inputs.b]\npath = "crates"\nenv = "B"\ncrates = true\n'
        '[toolchain]\nrust = "host"\n'
    )
    proc = rf_in("plan", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 2
    assert "inputs.b.crates" in proc.stderr and "one crate source" in proc.stderr


def test_cargo_config_replaces_crates_io_offline() -> None:
    from rocmforge.build.builder import cargo_config

    text = cargo_config('/inputs/crates/a "b"')
    config = tomllib.loads(text)
    assert config["source"]["crates-io"]["replace-with"] == "rocmforge-inputs"
    assert config["source"]["rocmforge-inputs"]["directory"] == '/inputs/crates/a "b"'
    assert config["net"]["offline"] is True


@pytest.mark.slow
def test_a_cargo_lock_the_crates_do_not_match_is_diagnosed_and_patched_away(
    rust_ready: None, tmp_path: Path
) -> None:
    """An sdist whose Cargo.lock pins a pyo3 that the crate input lacks fails with
    cargo-lock-mismatch; a [source] patches patch deleting Cargo.lock (Debian's practice) lets
    cargo resolve against the input, and the build goes through."""
    from rocmforge.build.builder import cargo_config

    debian_crates_fit()
    recipe = maturin_sdist_recipe(tmp_path, "host")
    src = tmp_path / "sdist" / "ahocorasick_rs-0.12.3"
    home = tmp_path / "cargo-home"
    home.mkdir()
    (home / "config.toml").write_text(cargo_config(str(DEBIAN_CRATES)))
    subprocess.run(
        ["cargo", "generate-lockfile", "--offline"],
        cwd=src, env={**os.environ, "CARGO_HOME": str(home)}, check=True, capture_output=True,
    )  # fmt: skip
    lock = src / "Cargo.lock"
    text = lock.read_text()
    have = text.split('name = "pyo3"\nversion = "', 1)[1].split('"', 1)[0]
    pinned = 'name = "pyo3"\nversion = "0.17.99"'  # no such release
    lock.write_text(text.replace(f'name = "pyo3"\nversion = "{have}"', pinned))
    store = tmp_path / "store"
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 1
    assert "Cargo.lock pins (pyo3" in proc.stderr and "[source] patches" in proc.stderr
    patch = tmp_path / "no-lock.patch"
    diff = subprocess.run(
        ["git", "diff", "--no-index", "Cargo.lock", "/dev/null"],
        cwd=src, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    patch.write_text(diff)
    with_patch = recipe.read_text().replace("[source]\n", f'[source]\npatches = ["{patch}"]\n')
    recipe.write_text(with_patch)
    a = realize(recipe, store)
    assert install_and_search(tmp_path, a["wheels"][0]) == "['she']"
