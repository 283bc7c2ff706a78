"""Failure diagnosis: each known failure string on a real-looking log excerpt, and end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA, TINY_RECIPE, rf

from rocmforge.build.diagnose import PATTERNS, diagnose_lines, diagnose_log, failed_record_path
from rocmforge.errors import BuildError, BuildTimeout, Diagnosis

LOGS = DATA / "logs"


def _expected(log: Path) -> str:
    """The pattern id a log excerpt must produce: its file name up to a known id."""
    ids = sorted((p.id for p in PATTERNS), key=len, reverse=True)
    return next(i for i in ids if log.stem.startswith(i))


EXCERPTS = sorted(p for p in LOGS.glob("*.log") if p.stem != "unrecognised")


@pytest.mark.parametrize("log", EXCERPTS, ids=[p.stem for p in EXCERPTS])
def test_each_excerpt_is_diagnosed(log: Path) -> None:
    found = diagnose_log(log)
    assert found, f"{log.name}: nothing recognised"
    first = found[0]
    assert first.id == _expected(log)
    assert first.cause and first.fix
    assert first.line is not None
    assert first.evidence in log.read_text().splitlines()[first.line - 1]


def test_every_pattern_has_an_excerpt() -> None:
    covered = {_expected(p) for p in EXCERPTS}
    assert covered == {p.id for p in PATTERNS}


def test_captured_names_reach_cause_and_fix() -> None:
    [dev] = diagnose_log(LOGS / "rocm-dev-package.log")
    assert '"hipblaslt"' in dev.cause and "hipblaslt dev package" in dev.fix
    [arch] = diagnose_log(LOGS / "arch-not-supported-devlib.log")
    assert "gfx1100" in arch.cause
    mixed = diagnose_log(LOGS / "mixed-rocm.log")[0]
    assert "hipGetDevicePropertiesR0600" in mixed.cause
    cxx = diagnose_log(LOGS / "libstdcxx-headers.log")[0]
    assert "'cmath'" in cxx.cause


def test_oom_from_the_exit_status_alone() -> None:
    [d] = diagnose_lines(
        ["[12/900] Building CXX object foo.o"], message="step 2/2 exited with status 137"
    )
    assert d.id == "oom-killed" and d.line is None and "MAX_JOBS" in d.fix


def test_order_follows_the_log_and_duplicates_collapse() -> None:
    lines = [
        "CMake Error: File /b/aten/src/ATen/hip/HIPConfig.h.in does not exist.",
        "c++: fatal error: Killed signal terminated program cc1plus",
        "CMake Error: File /b/other/HIPConfig.h.in does not exist.",
    ]
    found = diagnose_lines(lines)
    assert [d.id for d in found] == ["hipify-missing", "oom-killed"]
    assert found[0].line == 1


def test_unrecognised_failure_gives_nothing() -> None:
    assert diagnose_log(LOGS / "unrecognised.log") == ()
    assert diagnose_log(LOGS / "does-not-exist.log") == ()


def test_failed_record_path() -> None:
    log = Path("/s/failed/abc-tiny-0.1.log.zst")
    assert failed_record_path(log) == Path("/s/failed/abc-tiny-0.1.json")


@pytest.mark.slow
def test_failed_build_prints_cause_and_fix_and_stores_them(tmp_path: Path, tiny_src: Path) -> None:
    step = "echo \\\"nvcc fatal   : Unknown option '--offload-arch=gfx90a'\\\"; exit 1"
    text = TINY_RECIPE.format(src=tiny_src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]', f'steps = ["{step}"]'
    )
    recipe = tmp_path / "fails.toml"
    recipe.write_text(text)
    store = tmp_path / "store"
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    tail_at = err.index("nvcc fatal")
    cause_at = err.index("cause: hipcc chose nvcc")
    assert tail_at < cause_at
    assert 'fix: use [toolchain] kind = "rocm" (it sets HIP_PLATFORM=amd)' in err
    [record_file] = (store / "failed").glob("*.json")
    [log] = (store / "failed").glob("*.log.zst")
    assert failed_record_path(log) == record_file
    record = json.loads(record_file.read_text())
    assert record["name"] == "tiny" and record["log"] == log.name
    assert record["diagnosis"][0]["id"] == "nvcc-picked"
    assert "exited with status 1" in record["error"]


def test_build_error_is_built_whole() -> None:
    """Tail and diagnosis are constructor arguments; with_log makes a new error, same class."""
    d = Diagnosis(id="oom", cause="killed", fix="fewer jobs", evidence="Killed", line=3)
    err = BuildError("step 1/1 exited with status 1", log_tail=["a", "b"], diagnosis=[d])
    assert err.log_tail == ("a", "b") and err.diagnosis == (d,)
    timeout = BuildTimeout("step 1/1 timed out after 1 s")
    logged = timeout.with_log(log_tail=("x",), log_path=None, kept_dir=None, diagnosis=(d,))
    assert type(logged) is BuildTimeout and str(logged) == str(timeout)
    assert logged.log_tail == ("x",) and logged.diagnosis == (d,)
    assert timeout.log_tail == () and timeout.diagnosis == ()


def _realize_failing(tmp_path: Path, tiny_src: Path, step: str, extra: str = "") -> BuildError:
    from rocmforge.build.sandbox import detect_runner
    from rocmforge.pipeline.realize import realize
    from rocmforge.recipe.load import load_recipe
    from rocmforge.sources.requirements import PipFetcher
    from rocmforge.store.store import open_store

    text = TINY_RECIPE.format(src=tiny_src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]', f'steps = ["{step}"]{extra}'
    )
    recipe = tmp_path / "fails.toml"
    recipe.write_text(text)
    with pytest.raises(BuildError) as info:
        realize(
            load_recipe(recipe),
            store=open_store(tmp_path / "store"),
            fetcher=PipFetcher(),
            runner_factory=lambda: detect_runner(None),
        )
    return info.value


@pytest.mark.slow
def test_raised_build_error_carries_tail_and_diagnosis(tmp_path: Path, tiny_src: Path) -> None:
    step = "echo \\\"nvcc fatal   : Unknown option '--offload-arch=gfx90a'\\\"; exit 1"
    err = _realize_failing(tmp_path, tiny_src, step)
    assert type(err) is BuildError and "exited with status 1" in str(err)
    assert any("nvcc fatal" in line for line in err.log_tail), err.log_tail
    assert [d.id for d in err.diagnosis][:1] == ["nvcc-picked"]
    assert err.log_path is not None and err.log_path.is_file() and err.kept_dir is None


@pytest.mark.slow
def test_raised_timeout_keeps_its_class_and_tail(tmp_path: Path, tiny_src: Path) -> None:
    err = _realize_failing(tmp_path, tiny_src, "echo started; sleep 30", '\ntimeout = "1s"')
    assert type(err) is BuildTimeout and "timed out" in str(err)
    assert any("started" in line for line in err.log_tail), err.log_tail


def test_every_pattern_is_documented() -> None:
    from conftest import REPO

    doc = (REPO / "docs" / "lints.md").read_text()
    for p in PATTERNS:
        assert f"| {p.id} |" in doc, p.id


def test_the_line_is_the_evidence_not_the_step_header() -> None:
    lines = [
        "rocmforge: step 1/1: echo 'No GPU arch specified for ROCm build' >&2; exit 1",
        "-- configuring",
        "No GPU arch specified for ROCm build",
    ]
    (found,) = diagnose_lines(lines)
    assert found.id == "no-gpu-arch" and found.line == 3


@pytest.mark.slow
def test_a_build_that_tries_the_network_is_told_to_declare_an_input(
    tmp_path: Path, tiny_src: Path
) -> None:
    recipe = tmp_path / "net.toml"
    step = "python -c 'import socket; socket.getaddrinfo(\\\"pypi.org\\\", 443)'"
    recipe.write_text(TINY_RECIPE.format(src=tiny_src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]', f'steps = ["{step}"]'))  # fmt: skip
    proc = rf("realize", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 1, proc.stderr
    assert "the sandbox has no network" in proc.stderr and "declare it as an input" in proc.stderr


def test_a_known_cmake_error_comes_before_scikit_build_cores_summary_line() -> None:
    lines = [
        "*** Configuring CMake...",
        "CMake Error at cmake/public/LoadHIP.cmake:33 (find_package):",
        '  Could not find a package configuration file provided by "hipblaslt" with any of',
        "*** CMake configuration failed",
    ]
    found = diagnose_lines(lines)
    assert [d.id for d in found] == ["rocm-dev-package", "skbuild-cmake-failed"], found
    assert "configuration" in found[1].cause


UNDECLARED_CARGO_LOG = """\
rocmforge: [2026-11-30T18:47:07Z] PEP 517 build: build_wheel
Running `maturin pep517 build-wheel -i /build/venv/bin/python --compatibility off`
error: failed to parse lock file at: /build/src/Cargo.lock

Caused by:
  lock file version `4` was found, but this version of Cargo does not understand this lock file
💥 maturin failed
  Caused by: Cargo metadata failed. Does your crate compile with `cargo build`?
  Caused by: `cargo metadata` exited with an error:
"""


def test_cargo_that_ran_undeclared_is_named(tmp_path: Path) -> None:
    """Debian's /usr/bin/cargo is on the sandbox PATH: a recipe without [toolchain] rust runs
    it, and whatever goes wrong, the diagnosis says the toolchain is undeclared."""
    from rocmforge.build.diagnose import diagnose_undeclared_rust

    log = tmp_path / "build.log"
    log.write_text(UNDECLARED_CARGO_LOG)
    [found] = diagnose_undeclared_rust(log)
    assert found.id == "undeclared-rust" and found.line == 8
    assert 'rust = "host"' in found.fix
    log.write_text("rocmforge: [t] step 1/1: cargo build\nerror: setup.py failed\n")
    assert diagnose_undeclared_rust(log) == ()


def test_missing_rocm_sdk_module_points_at_the_sdk_requirement(tmp_path: Path) -> None:
    """A wheel's _rocm_init (TheRock's torch) failing the check for want of rocm_sdk is not a
    missing build requirement: the fix is the wheel's SDK requirement and [toolchain.module]."""
    from rocmforge.build.diagnose import diagnose_missing_module

    log = tmp_path / "build.log"
    log.write_text(
        "rocmforge: check: import torch\n"
        '  File "/check/venv/lib/python3.11/site-packages/torch/_rocm_init.py", line 2\n'
        "ModuleNotFoundError: No module named 'rocm_sdk'\n"
    )
    [d] = diagnose_missing_module(log, wheels=[], recipe=Path("/r/mi300x.toml"))
    assert d.id == "missing-rocm-sdk-module" and d.line == 3
    assert "PYTORCH_EXTRA_INSTALL_REQUIREMENTS" in d.fix
    assert "rocmforge lock /r/mi300x.toml" in d.fix
    other = tmp_path / "other.log"
    other.write_text("ModuleNotFoundError: No module named 'yaml'\n")
    assert [x.id for x in diagnose_missing_module(other, wheels=[], recipe=Path("r"))] == [
        "missing-build-module"
    ]
