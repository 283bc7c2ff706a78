"""GPU acceptance without a GPU: what the checks' runner does around them, for real.

The interpreter under test is a real venv whose ``torch`` is a small package written here: one
whose import hangs (the per-check timeout must kill it), one that says no GPU is usable (the
run must stop there). The sandbox is real bubblewrap; the attestation is validated with the
in-toto attestation library.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import rf

from rocmforge.accept.attest import PREDICATE_TYPE, statement, subjects_of
from rocmforge.accept.devices import GpuDevices, find_devices, visible_count
from rocmforge.accept.report import AcceptanceReport, Check
from rocmforge.accept.run import judge_bandwidth, probe_python, run_tier
from rocmforge.accept.thresholds import Thresholds, parse_thresholds
from rocmforge.build.sandbox import BwrapRunner, Mount
from rocmforge.errors import NoGpuError, RecipeError

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap is not installed")
#: a host's devices as the tests pretend them: one CUDA GPU with no node to bind
ONE_GPU = GpuDevices("cuda", (), 1, {})


def _venv_with_torch(tmp_path: Path, init: str) -> str:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(init)
    return str(venv / "bin" / "python")


@needs_bwrap
@pytest.mark.slow
def test_a_hung_check_is_killed_at_its_own_timeout(tmp_path: Path) -> None:
    python = probe_python(_venv_with_torch(tmp_path, "import time\ntime.sleep(600)\n"))
    t = time.monotonic()
    with (tmp_path / "log").open("wb") as log:
        report = run_tier("smoke", python, runner=BwrapRunner(BWRAP or "bwrap"),
                          devices=ONE_GPU, workdir=tmp_path / "w", log=log, environ={},
                          timeouts={"import": 2})  # fmt: skip
    took = time.monotonic() - t
    assert took < 20, took  # the run's own limit is minutes: the check's 2 s killed it
    [check] = report.checks
    assert check.name == "import" and check.status == "failed"
    assert "timed out after 2 s" in check.detail
    assert report.result == "FAILED" and report.exit_code == 1


@needs_bwrap
@pytest.mark.slow
def test_a_torch_without_a_gpu_stops_the_run_after_is_available(tmp_path: Path) -> None:
    init = (
        "__version__ = '0.0-test'\n"
        "class version:\n    hip = None\n    cuda = '13.0'\n    git_version = 'abc'\n"
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
    )
    python = probe_python(_venv_with_torch(tmp_path, init))
    assert any(d.endswith("site-packages") or "venv" in d for d in python.mounts)
    with (tmp_path / "log").open("wb") as log:
        report = run_tier("smoke", python, runner=BwrapRunner(BWRAP or "bwrap"),
                          devices=ONE_GPU, workdir=tmp_path / "w", log=log, environ={})
    names = [(c.name, c.status) for c in report.checks]
    assert names == [("import", "passed"), ("is_available", "failed")], names
    assert "is_available() is False" in report.checks[1].detail
    assert report.checks[0].figures["torch"] == "0.0-test"
    assert report.exit_code == 1


def test_no_gpu_is_exit_3_naming_what_was_looked_for(tmp_path: Path) -> None:
    if find_devices().kind is not None:
        pytest.skip("this host has GPU device nodes")
    proc = rf("test", "--python", sys.executable)
    assert proc.returncode == 3, proc.stderr
    assert "no GPU found: looked for /dev/kfd" in proc.stderr
    with pytest.raises(NoGpuError, match="no GPU visible: CUDA_VISIBLE_DEVICES="):
        run_tier("smoke", probe_python(sys.executable), runner=BwrapRunner("bwrap"),
                 devices=GpuDevices("cuda", (), 2, {"CUDA_VISIBLE_DEVICES": ""}),
                 workdir=tmp_path, log=(tmp_path / "log").open("wb"), environ={})


def test_devices_and_the_visible_count(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    assert find_devices(str(dev), {}).kind is None
    for name in ("kfd", "dri/renderD128", "dri/renderD129", "dri/card0"):
        (dev / name).touch()
    found = find_devices(str(dev), {"HIP_VISIBLE_DEVICES": "1"})
    assert found.kind == "rocm" and found.gpus == 2
    assert found.nodes == (str(dev / "kfd"), str(dev / "dri/renderD128"),
                           str(dev / "dri/renderD129"))  # fmt: skip
    assert visible_count(found) == (1, "HIP_VISIBLE_DEVICES=1")
    assert visible_count(GpuDevices("rocm", (), 8, {})) == (8, "8 GPU device node(s) found")
    nv = tmp_path / "nv"
    nv.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (nv / name).touch()
    cuda = find_devices(str(nv), {})
    assert cuda.kind == "cuda" and cuda.gpus == 2
    assert set(cuda.nodes) == {str(nv / n) for n in ("nvidia0", "nvidia1", "nvidiactl",
                                                      "nvidia-uvm")}  # fmt: skip


@needs_bwrap
def test_a_device_mount_is_bound_with_device_access(tmp_path: Path) -> None:
    """``/dev/zero`` bound at another path: readable as a device only with ``device=True``
    (a plain bind is mounted nodev)."""
    results = {}
    for device in (True, False):
        log = tmp_path / f"log-{device}"
        with log.open("wb") as f:
            res = BwrapRunner(BWRAP or "bwrap").run(
                ["/usr/bin/head", "-c", "4", "/opt/zero"], cwd="/", env={}, timeout=30, log=f,
                mounts=[Mount(host=Path("/dev/zero"), inside="/opt/zero", device=device)],
            )
        results[device] = (res.returncode, log.read_bytes())
    assert results[True] == (0, b"\0\0\0\0")
    assert results[False][0] != 0


def test_thresholds_table_and_its_errors(tmp_path: Path) -> None:
    t = parse_thresholds({"H200 x1": 100, "MI300X x4": 150.5, "tolerance": 0.05},
                         file=tmp_path / "t.toml", key="thresholds")  # fmt: skip
    assert t.line_for("AMD Instinct MI300X", 8) == ("MI300X x8", 304.0)  # the built-in row
    assert t.line_for("AMD Instinct MI300X", 4) == ("MI300X x4", 150.5)
    assert t.line_for("NVIDIA H200", 1) == ("H200 x1", 100.0)
    assert t.line_for("NVIDIA H200", 2) is None and t.tolerance == 0.05
    with pytest.raises(RecipeError) as err:
        parse_thresholds({"MI300X": 3, "MI300X x8": "fast", "tolerance": 2},
                         file=tmp_path / "t.toml", key="test.comm.thresholds")  # fmt: skip
    text = str(err.value)
    assert "test.comm.thresholds.MI300X:" in text and '"MODEL xN"' in text
    assert 'test.comm.thresholds."MI300X x8": must be a bus bandwidth' in text
    assert "test.comm.thresholds.tolerance: must be a fraction" in text


def test_bad_thresholds_file_is_exit_2_with_the_key_path(tmp_path: Path) -> None:
    bad = tmp_path / "t.toml"
    bad.write_text('"MI300X x8" = -1\n')
    proc = rf("test", "--python", sys.executable, "--thresholds", bad)
    assert proc.returncode == 2, proc.stderr
    assert f'{bad}: thresholds."MI300X x8": must be a bus bandwidth' in proc.stderr
    assert "Traceback" not in proc.stderr


def _sweep(device: str, busbw: float, world: int = 8) -> list[Check]:
    rows = [{"bytes": 8 << 30, "algbw": busbw / 1.75, "busbw": busbw, "time_us": 1.0}]
    return [Check("init", "passed", 1.0, {"device": device, "world_size": world}),
            Check("sweep", "passed", 9.0, {"rows": rows, "world_size": world})]


def test_the_bandwidth_verdict_reads_the_largest_in_place_row() -> None:
    good = judge_bandwidth(_sweep("AMD Instinct MI300X", 312.0), Thresholds())
    assert good.status == "passed" and ">= 304 GB/s (MI300X x8)" in good.detail
    low = judge_bandwidth(_sweep("AMD Instinct MI300X", 250.0), Thresholds())
    assert low.status == "failed" and "250.0 GB/s at 8589934592 B < 304" in low.detail
    none = judge_bandwidth(_sweep("NVIDIA H200", 0.0, world=1), Thresholds())
    assert none.status == "skipped" and "no threshold for NVIDIA H200 x1" in none.detail


def test_the_statement_is_a_valid_in_toto_test_result(tmp_path: Path) -> None:
    from google.protobuf import json_format
    from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    wheel = tmp_path / "torch-2.10.0-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    checks = (*_sweep("AMD Instinct MI300X", 312.0),
              Check("bandwidth", "passed", 0.0, {"busbw": 312.0}, "ok"),
              Check("flash", "skipped", 0.0, {}, "not built"))  # fmt: skip
    report = AcceptanceReport(tier="comm", python="/x/bin/python", checks=checks,
                              node={"gpu_model": "AMD Instinct MI300X", "gpu_count": 8},
                              started="2026-12-02T08:00:00Z", seconds=12.0, sandbox="bwrap")
    st = statement(report, subjects_of([(wheel.name, wheel)]))
    st = json.loads(json.dumps(st))  # what is written is JSON
    pb = json_format.ParseDict(st, statement_pb2.Statement())  # unknown fields fail
    Statement.copy_from_pb(pb).validate()
    assert st["predicateType"] == PREDICATE_TYPE
    pred = json_format.ParseDict(st["predicate"], test_result_pb2.TestResult())
    for rd in [*pb.subject, *pred.configuration]:
        ResourceDescriptor.copy_from_pb(rd).validate()
    assert pred.result == "WARNED"
    assert list(pred.passed_tests) == ["init", "sweep", "bandwidth"]
    assert list(pred.warned_tests) == ["flash"] and not pred.failed_tests
    import hashlib

    assert st["subject"][0]["digest"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    sweep = next(c for c in st["predicate"]["configuration"] if c["name"] == "check:sweep")
    assert sweep["annotations"]["figures"]["rows"][0]["busbw"] == 312.0


def test_the_failure_line_is_ncclS_own_words() -> None:
    """Real output of a rank whose NCCL_SOCKET_IFNAME names no interface (NCCL 2.28.9, torch
    2.11, taken on the lent GPU machine): the report names NCCL's last error, not the INFO
    line printed after it."""
    from rocmforge.accept.run import telling_line

    text = (Path(__file__).parent.parent / "data" / "accept" / "nccl-nosuch0.txt").read_text()
    assert telling_line(text.splitlines()) == "[rank0]: Bootstrap : no socket interface found"
    tb = ["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: bad", ""]
    assert telling_line(tb) == "ValueError: bad"
    assert telling_line(["one", "two", ""]) == "two" and telling_line([]) == "no output"


@needs_bwrap
@pytest.mark.slow
def test_a_device_whose_arch_the_wheel_lacks_stops_before_any_kernel(tmp_path: Path) -> None:
    init = (
        "__version__ = '2.10.0+rocm7.1'\n"
        "class version:\n    hip = '7.1.0'\n    cuda = None\n    git_version = 'abc'\n"
        "class _Props:\n    gcnArchName = 'gfx90a:sramecc+:xnack-'\n    major, minor = 9, 0\n"
        "class cuda:\n"
        "    is_available = staticmethod(lambda: True)\n"
        "    device_count = staticmethod(lambda: 1)\n"
        "    get_device_name = staticmethod(lambda i: 'AMD Instinct MI250X')\n"
        "    get_device_properties = staticmethod(lambda i: _Props())\n"
        "    get_arch_list = staticmethod(lambda: ['gfx90a'])\n"
    )
    python = probe_python(_venv_with_torch(tmp_path, init))
    with (tmp_path / "log").open("wb") as log:
        report = run_tier("smoke", python, runner=BwrapRunner(BWRAP or "bwrap"),
                          devices=ONE_GPU, workdir=tmp_path / "w", log=log, environ={},
                          archs=["gfx942"])  # what the wheel's libraries hold  # fmt: skip
    names = [(c.name, c.status) for c in report.checks]
    assert names[-1] == ("archs", "failed"), names  # no matmul, conv, ... after it
    detail = report.checks[-1].detail
    assert "AMD Instinct MI250X" in detail and "gfx90a:sramecc+:xnack-" in detail
    assert "only gfx942" in detail and "rebuild with gfx90a" in detail
    assert report.exit_code == 1
