"""Build backends: PEP 517 config settings reach the backend, and builds are reproducible by
default (a fixed build directory for meson-python, compiler prefix maps), switchable per recipe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import DATA, WHEELHOUSE, rf

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
    proc = rf("plan", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 2
    assert "build.config-settings" in proc.stderr and "PEP 517 build only" in proc.stderr


def test_config_settings_must_be_strings(tmp_path: Path) -> None:
    recipe = settings_recipe(tmp_path, "[build.config-settings]\nbuilddir = 3\n")
    proc = rf("plan", recipe, "--store", tmp_path / "store")
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
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", a["wheels"][0]], check=True
    )
    run = subprocess.run(
        [py, "-c", "import rfmeson; print(rfmeson.mul(6, 7), rfmeson.where())"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    product, where = run.stdout.split()
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
        pytest.skip("no Rust toolchain on PATH; scripts/setup.sh installs Debian's rustc/cargo")
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
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run(
        [env_dir / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", "--no-deps",
         a["wheels"][0]],
        check=True,
    )  # fmt: skip
    run = subprocess.run(
        [env_dir / "bin" / "rfrust", "6", "7"], capture_output=True, text=True, check=True
    )
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


def real_sdist(tmp_path: Path, name: str, version: str) -> Path:
    """Unpack the PyPI sdist of ``name==version`` (fetched once into .ci/sdists) under tmp_path."""
    archive = SDISTS / f"{name}-{version}.tar.gz"
    if not archive.is_file():
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
             "--no-deps", "--no-binary", name, "-d", str(SDISTS), f"{name}=={version}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if not archive.is_file():
            pytest.skip(f"cannot fetch the {name} {version} sdist: {proc.stderr[-300:]}")
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
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", a["wheels"][0]], check=True
    )
    code = "from fastrlock.rlock import FastRLock; lock = FastRLock(); print(lock.acquire())"
    run = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert run.stdout.strip() == "True"


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
    """PyYAML's sdist compiled against Debian's libyaml (libyaml-dev, scripts/setup.sh)."""
    if not Path("/usr/include/yaml.h").is_file():
        pytest.skip("no libyaml headers; scripts/setup.sh installs libyaml-dev")
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
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", a["wheels"][0]], check=True
    )
    code = (
        "import yaml; assert yaml.__with_libyaml__; "
        "print(yaml.load('a: [1, 2]', Loader=yaml.CSafeLoader)['a'][1])"
    )
    run = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert run.stdout.strip() == "2"
