"""Whatever Python the host has: rocmforge on 3.11-3.13, recipes choosing their build Python.

The slow tests install rocmforge from a wheel of this checkout into a venv of every *other*
supported Python found on the machine (pyenv's, ``/usr/bin/python3.X``) and realize with it;
their dependencies come from ``.ci/wheelhouse/py3.X`` (:func:`prefetch`, run by
``scripts/test.sh``). A version that is not installed is skipped, saying so; under ``CI=true``
at least one other minor version than the suite's must run.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from conftest import DATA, REPO, TINY_RECIPE, WHEELHOUSE, rf, rf_in

from rocmforge.toolchain.pythons import find_python, host_pythons

SUPPORTED = ("3.11", "3.12", "3.13")
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
OTHERS = tuple(v for v in SUPPORTED if v != HERE)
#: rocmforge's runtime dependencies (pyproject.toml), pinned to the suite venv's versions.
DEPS = ("tomlkit", "blake3", "filelock", "zstandard", "packaging", "installer", "PyNaCl")


def deps_dir(short: str) -> Path:
    """Where :func:`prefetch` puts rocmforge's dependencies for Python ``short``."""
    return WHEELHOUSE / f"py{short}"


def prefetch() -> None:
    """Download rocmforge's dependencies (binary wheels, this venv's versions) for every
    supported Python found here, so the tests below install offline (scripts/test.sh); the
    suite's own Python's are for tests/e2e/test_readme.py (``pip install .`` of a fresh clone)."""
    pins = [f"{d}=={metadata.version(d)}" for d in DEPS]
    for short in SUPPORTED:
        if find_python(short) is None:
            continue
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
             "--only-binary", ":all:", "--python-version", short, "-d", str(deps_dir(short)),
             *pins],
            check=True,
        )  # fmt: skip


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


# --- finding a recipe's Python ------------------------------------------------------------------


def test_pyenv_shims_stand_for_their_versions_selected_first(tmp_path: Path) -> None:
    root = tmp_path / "pyenv"
    old = script(root / "versions" / "3.12.1" / "bin" / "python3.12", "exit 0")
    new = script(root / "versions" / "3.12.9" / "bin" / "python3.12", "exit 0")
    script(root / "shims" / "python3.12", "exit 127")  # a shim: never what a recipe gets
    env = {"PATH": f"{root / 'shims'}", "PYENV_ROOT": str(root), "HOME": str(tmp_path)}
    assert find_python("3.12", env) == new  # none selected: the newest
    (root / "version").write_text("3.12.1\n")
    assert find_python("3.12", env) == old  # pyenv's global version
    assert find_python("3.12", {**env, "PYENV_VERSION": "3.12.9"}) == new
    # a directory before the shims on PATH comes first; pyenv off PATH is still looked in
    first = script(tmp_path / "bin" / "python3.12", "exit 0")
    assert find_python("3.12", {**env, "PATH": f"{first.parent}:{root / 'shims'}"}) == first
    assert find_python("3.12", {**env, "PATH": str(tmp_path / "empty")}) == old
    listed = [
        (p.path, p.chosen)
        for p in host_pythons({**env, "PATH": str(first.parent)})
        if p.short == "3.12"
    ]
    assert listed == [(first, True), (old, False), (new, False)]


def test_missing_python_names_the_key_and_what_was_found(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE.format(src=tmp_path) + '\n[toolchain]\npython = "3.99"\n')
    proc = rf_in("realize", recipe, "--store", tmp_path / "store")
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert str(recipe) in line and "toolchain.python" in line and "python3.99" in line, line
    assert f"{HERE} ({find_python(HERE)})" in line, line  # what it could have used instead


@pytest.mark.slow  # two doctor runs: ~2 s each (the dpkg manifest)
def test_doctor_lists_the_pythons_with_venv_and_headers(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mine = bin_dir / f"python{HERE}"
    mine.symlink_to(os.path.realpath(sys.executable))
    script(bin_dir / "python3.42", "echo 'broken interpreter' >&2; exit 3")
    env = {"PATH": str(bin_dir), "PYENV_ROOT": str(tmp_path / "no-pyenv"), "ROCM_PATH": ""}
    proc = rf("doctor", "--json", env={**env, "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    pythons = json.loads(proc.stdout)["machine"]["pythons"]
    by_path = {p["path"]: p for p in pythons}
    headers = os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    assert by_path[str(mine)] == {
        "short": HERE, "version": platform.python_version(), "path": str(mine), "found": "PATH",
        "chosen": True, "venv": True, "headers": headers, "error": None,
    }  # fmt: skip
    broken = by_path[str(bin_dir / "python3.42")]
    assert broken["version"] is None and "broken interpreter" in broken["error"]
    assert os.path.realpath(sys.executable) not in by_path  # the same file is listed once
    text = rf("doctor", env={**env, "HOME": str(tmp_path)}).stdout
    assert f"{platform.python_version()} {mine} (PATH; venv yes" in text, text
    assert f'for python = "{HERE}")' in text
    assert f"3.42 {bin_dir / 'python3.42'} (PATH): does not run: exited 3" in text


# --- rocmforge itself on the other Pythons ------------------------------------------------------


def other_python(short: str) -> Path:
    """The host's Python ``short``, or skip (a failure under CI when no other one exists)."""
    found = find_python(short)
    if found is None:
        pytest.skip(f"Python {short} is not installed here (looked where recipes look)")
    if not deps_dir(short).is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{deps_dir(short)} is missing: scripts/test.sh prefetches it")
        pytest.skip(f"no {deps_dir(short)}: run scripts/test.sh (it prefetches the wheels)")
    return found


def test_ci_runs_at_least_one_other_python() -> None:
    found = [v for v in OTHERS if find_python(v) is not None]
    if not found and os.environ.get("CI") == "true":
        pytest.fail(f"CI needs a Python among {OTHERS} besides the suite's {HERE}: none found")
    if not found:
        pytest.skip(f"no Python among {OTHERS} here: the other-Python tests skip")


@pytest.fixture(scope="module")
def rocmforge_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this checkout (``pip wheel --no-deps``), built from a copy of its files."""
    base = tmp_path_factory.mktemp("rfwheel")
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "bin", src / "bin")
    shutil.copytree(REPO / "rocmforge", src / "rocmforge",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    if not list(WHEELHOUSE.glob("setuptools-*.whl")):
        pytest.skip(f"no setuptools wheel in {WHEELHOUSE}: run scripts/test.sh")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
         "--no-index", "--find-links", str(WHEELHOUSE), "-w", str(base / "dist"), str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (base / "dist").glob("rocmforge-*.whl")
    return wheel


def venv_with_rocmforge(short: str, wheel: Path, where: Path) -> Path:
    """A venv of the host's Python ``short`` with rocmforge installed from ``wheel``."""
    python = other_python(short)
    venv = where / f"venv{short}"
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True, capture_output=True,
                   env=clean_env())  # fmt: skip
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--no-index", "--find-links", str(deps_dir(short)), str(wheel)],
        capture_output=True, text=True, check=False, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return venv


def clean_env() -> dict[str, str]:
    """This environment without what would make a venv import this checkout or use a store."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ROCMFORGE_STORE")}


def run_in(venv: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the venv's ``rocmforge``: deprecations are errors, nothing of this checkout leaks in."""
    env = {**clean_env(), "PYTHONWARNINGS": "error::DeprecationWarning"}
    return subprocess.run(
        [str(venv / "bin" / "rocmforge"), *map(str, args)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("short", OTHERS)
def test_rocmforge_runs_and_realizes_on_another_python(
    short: str, rocmforge_wheel: Path, tmp_path: Path
) -> None:
    venv = venv_with_rocmforge(short, rocmforge_wheel, tmp_path)
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import rocmforge, sys; print(rocmforge.__file__);"
         "print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=clean_env(),
    ).stdout.split()  # fmt: skip
    assert where[0].startswith(str(venv)) and where[1] == short, where
    version = run_in(venv, "--version", cwd=tmp_path)
    assert version.returncode == 0 and "0.1.0" in version.stdout, version.stderr
    doctor = run_in(venv, "doctor", "--json", cwd=tmp_path)
    assert doctor.returncode == 0, doctor.stderr
    machine = json.loads(doctor.stdout)["machine"]
    assert machine["sandbox"] == "bwrap", machine["sandbox_warning"]
    assert short in {p["short"] for p in machine["pythons"] if p["chosen"]}
    # the tiny recipe, built with this same Python, in bwrap; then a cache hit
    src = tmp_path / "tiny-src"
    (src / "tiny").mkdir(parents=True)
    shutil.copy(DATA / "mkwheel.py", src / "mkwheel.py")
    (src / "tiny" / "__init__.py").write_text("VALUE = 42\n")
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_RECIPE.format(src=src) + f'\n[toolchain]\npython = "{short}"\n')
    args = ("realize", recipe, "--store", tmp_path / "store", "--sandbox", "bwrap", "--json")
    first = run_in(venv, *args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (built,) = json.loads(first.stdout)
    assert built["cached"] is False and built["sandbox"] == "bwrap"
    assert Path(built["wheels"][0]).is_file()
    second = run_in(venv, *args, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    (hit,) = json.loads(second.stdout)
    assert hit["cached"] is True and hit["hash"] == built["hash"]


# --- a recipe's build Python --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("short", OTHERS)
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "host-python3"])
def test_demo_builds_a_c_extension_for_the_python_the_recipe_names(
    short: str, pinned: bool, wheelhouse: Path, tmp_path: Path
) -> None:
    """``python = "3.X"`` builds for that Python; the shipped ``python = "3"`` for the host's
    first ``python3``, with the same lock (its only wheel is pure)."""
    python = find_python(short)
    if python is None:
        pytest.skip(f"Python {short} is not installed here (looked where recipes look)")
    headers = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not (Path(headers) / "Python.h").is_file():
        pytest.skip(f"{python} has no headers (python{short}-dev): no C extension builds")
    tag = "cp" + short.replace(".", "")
    recipe = tmp_path / "demo.toml"
    text = (REPO / "recipes" / "demo.toml").read_text()
    assert 'python = "3" ' in text  # the shipped demo builds for the host's Python 3
    lock = (REPO / "recipes" / "demo.lock").read_text()  # setuptools: a py3-none-any wheel
    env: dict[str, str] = {}
    if pinned:
        text = text.replace('python = "3" ', f'python = "{short}" ')
        lock = lock.replace('python = "3"', f'python = "{short}"')
    else:  # unchanged recipe and lock; the host's first python3 is that version
        env["PATH"] = f"{python.parent}{os.pathsep}{os.environ['PATH']}"
        if not (python.parent / "python3").exists():
            pytest.skip(f"no python3 beside {python}")
    recipe.write_text(text.replace('"../examples/demo"', f'"{REPO / "examples" / "demo"}"'))
    (tmp_path / "demo.lock").write_text(lock)
    proc = rf("realize", recipe, "--store", tmp_path / "store", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    (wheel,) = map(Path, report["wheels"])
    assert wheel.name.startswith(f"rfdemo-1.0.0-{tag}-{tag}-linux_"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        (ext,) = [n for n in z.namelist() if n.endswith(".so")]
    assert f".cpython-{short.replace('.', '')}-" in ext, ext
    venv = tmp_path / "venv"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{short}" / "site-packages"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import rfdemo; print(rfdemo.add(2, 3))"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert run.stdout.split() == ["5"], run.stderr


def test_host_python3_refuses_a_lock_that_fits_one_python_only(tmp_path: Path) -> None:
    """``python = "3"`` locks only pure wheels: numpy's cp311 wheel would not install on the
    next host's 3.12, so lock names it and the fix (exit 1 or 2, never a lock written)."""
    if not list(WHEELHOUSE.glob("numpy-2.0.2-*.whl")):
        pytest.skip("needs numpy 2.0.2 in the wheelhouse (scripts/test.sh fetches it)")
    src = tmp_path / "src"
    src.mkdir()
    (tmp_path / "r.toml").write_text(
        'schema = 1\n[package]\nname = "p"\nversion = "1"\n[source]\npath = "src"\n'
        '[toolchain]\npython = "3"\n[requirements]\nbuild = ["numpy==2.0.2"]\n'
        '[build]\nsteps = ["true"]\n'
    )
    proc = rf_in("lock", tmp_path / "r.toml", "--store", tmp_path / "store")
    assert proc.returncode != 0
    assert "needs pure-Python build requirements" in proc.stderr
    assert "numpy-2.0.2-cp311" in proc.stderr and "traceback" not in proc.stderr.lower()
    assert not (tmp_path / "r.lock").exists()
