"""Run an acceptance tier in a Python under test, in a sandbox that binds the GPUs.

The checks themselves are scripts the interpreter under test runs (``smoke_script.py``,
``comm_script.py``: torch and the standard library only). They announce each check before it
starts (with its timeout) and report it when it ends, one line each; :class:`CheckClock` turns
the announcements into the sandbox's moving deadline, so a hung kernel or collective is killed
at its own check's timeout, and the report names the check that hung. Nothing here prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from rocmforge.accept.devices import GpuDevices, visible_count
from rocmforge.accept.report import FAILED, NOT_RUN, PASSED, SKIPPED, AcceptanceReport, Check
from rocmforge.accept.thresholds import Thresholds
from rocmforge.build.sandbox import Mount, Runner
from rocmforge.errors import NoGpuError, UsageError

START = "ROCMFORGE-START "
RESULT = "ROCMFORGE-CHECK "
SCRIPTS = Path(__file__).resolve().parent
TIERS = ("smoke", "comm")
#: each check's timeout in seconds unless the command line says otherwise
DEFAULT_TIMEOUTS = {"import": 120.0, "compile": 300.0, "init": 120.0, "sweep": 600.0}
DEFAULT_TIMEOUT = 120.0
#: variables of the caller that reach the checks (device selection, NCCL/RCCL, ROCm, CUDA)
PASSED_PREFIXES = ("NCCL_", "RCCL_", "HSA_", "HIP_", "ROCR_", "CUDA_", "TORCH_", "NVSHMEM_",
                   "MIOPEN_", "PYTORCH_")  # fmt: skip
@dataclass(frozen=True, slots=True)
class TargetPython:
    """The interpreter under test and the directories it needs to see (its prefixes, its
    ``sys.path``), read by running it once."""

    executable: str
    version: str
    mounts: tuple[str, ...]
    #: the installed distributions the tests exercise: (name, version, its RECORD file)
    installed: tuple[tuple[str, str, str], ...] = ()
    #: where the host's GPU driver library (``libcuda.so.1``) was found, when not in /usr:
    #: mounted and put on ``LD_LIBRARY_PATH`` in the sandbox
    driver_dirs: tuple[str, ...] = ()
    #: its ``site-packages`` directories (what a venv layered over it puts in a ``.pth``)
    site: tuple[str, ...] = ()
    #: the interpreter a venv of it is made from (``sys._base_executable``, resolved)
    base_executable: str = ""
    #: directories mounted elsewhere in the sandbox, (host, inside): a test venv made under
    #: the store is seen at :data:`TEST_VENV` (the store may sit below ``/tmp``, which the
    #: sandbox replaces)
    relocated: tuple[tuple[str, str], ...] = ()


class CheckClock:
    """Reads the checks' lines as they arrive: which check runs, until when, what ended.

    :meth:`deadline` is the sandbox's moving deadline (the running check's start plus its
    timeout); :meth:`feed` is its ``on_line``.
    """

    def __init__(self, timeouts: Mapping[str, float]) -> None:
        self.timeouts = timeouts
        self.current: str | None = None
        self.current_timeout = 0.0
        self.until: float | None = None
        self.done: list[Check] = []
        self.tail: list[str] = []

    def feed(self, line: str) -> None:
        """Take one output line of the checks."""
        self.tail = [*self.tail[-39:], line]
        if line.startswith(START):
            info = _payload(line, START)
            name = str(info.get("check", "?"))
            self.current = name
            self.current_timeout = float(self.timeouts.get(name, info.get("timeout", 120)))
            self.until = time.monotonic() + self.current_timeout
        elif line.startswith(RESULT):
            info = _payload(line, RESULT)
            self.done.append(Check(
                name=str(info.get("check", "?")), status=str(info.get("status", FAILED)),
                seconds=float(info.get("seconds", 0.0)), figures=info.get("figures") or {},
                detail=str(info.get("detail", "")),
            ))  # fmt: skip
            self.current, self.until = None, None

    def deadline(self) -> float | None:
        """When the running check must have ended (``time.monotonic``), or None."""
        return self.until


def _payload(line: str, prefix: str) -> dict[str, Any]:
    try:
        value = json.loads(line[len(prefix) :])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def probe_python(executable: str) -> TargetPython:
    """Run ``executable`` once to learn its version and the directories it reads; raise
    :class:`~rocmforge.errors.UsageError` naming it if it does not run."""
    code = (
        "import json, os, sys\n"
        "from importlib import metadata\n"
        "found = []\n"
        "for name in ('torch', 'triton', 'pytorch-triton-rocm'):\n"
        "    try:\n"
        "        d = metadata.distribution(name)\n"
        "    except metadata.PackageNotFoundError:\n"
        "        continue\n"
        "    record = d.locate_file(d._path.name + '/RECORD') if hasattr(d, '_path') else None\n"
        "    found.append([d.metadata['Name'], d.version, str(record) if record else ''])\n"
        "drivers = []\n"
        "try:\n"
        "    import ctypes\n"
        "    ctypes.CDLL('libcuda.so.1')\n"
        "    with open('/proc/self/maps') as f:\n"
        "        drivers = sorted({os.path.dirname(ln.split()[-1]) for ln in f\n"
        "                          if '/libcuda.so' in ln})\n"
        "except OSError:\n"
        "    pass\n"
        "print(json.dumps({'version': sys.version.split()[0], 'installed': found, "
        "'drivers': drivers, 'site': [p for p in sys.path if p.endswith(('site-packages', "
        "'dist-packages'))], 'base': os.path.realpath(getattr(sys, '_base_executable', "
        "sys.executable)), "
        "'dirs': [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, "
        "os.path.dirname(os.path.realpath(sys.executable)), *sys.path]}))"
    )
    try:
        proc = subprocess.run([executable, "-c", code], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"--python {executable}: cannot run it: {exc}") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"--python {executable}: exited with status {proc.returncode}: {last}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    dirs = sorted({os.path.realpath(d) for d in info["dirs"] if d and os.path.isdir(d)})
    # /usr is in every sandbox already (read-only); /usr/local is not.
    wanted = [d for d in dirs if not (d == "/usr" or d.startswith("/usr/")) or
              d == "/usr/local" or d.startswith("/usr/local/")]  # fmt: skip
    top = [d for d in wanted if not any(d != o and d.startswith(o.rstrip("/") + "/")
                                        for o in wanted)]  # fmt: skip
    installed = tuple((str(n), str(v), str(r)) for n, v, r in info.get("installed", []))
    drivers = tuple(d for d in map(str, info.get("drivers", [])) if d.startswith("/")
                    and not (d.startswith("/usr/") and not d.startswith("/usr/local/")))
    site = tuple(str(d) for d in info.get("site", []) if os.path.isdir(str(d)))
    return TargetPython(executable, str(info["version"]), tuple(top), installed, drivers,
                        site, str(info.get("base") or executable))  # fmt: skip


def device_mounts(devices: GpuDevices) -> list[Mount]:
    """The device nodes, bound with their device access, and ``/sys`` read-only."""
    mounts = [Mount(host=Path(n), inside=n, device=True) for n in devices.nodes]
    if mounts and os.path.isdir("/sys"):
        mounts.append(Mount(host=Path("/sys"), inside="/sys"))
    return mounts


def passed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's variables that select devices or tune NCCL/RCCL, ROCm and CUDA."""
    return {k: v for k, v in environ.items() if k.startswith(PASSED_PREFIXES)}


def check_env(python: TargetPython, environ: Mapping[str, str]) -> dict[str, str]:
    """The whole environment the checks run with: a clean one (``PATH`` of the interpreter's
    directory and the system's, ``HOME``/``TMPDIR`` ``/tmp``, unbuffered output, no user site),
    the caller's :func:`passed_env`, and ``LD_LIBRARY_PATH`` to the host's GPU driver when
    the probe found it outside ``/usr``."""
    env = {
        "PATH": f"{os.path.dirname(python.executable)}:/usr/bin:/bin",
        "HOME": "/tmp",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": "/tmp",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
        **passed_env(environ),
    }
    if python.driver_dirs:
        env["LD_LIBRARY_PATH"] = ":".join(python.driver_dirs)
    return env


def python_mounts(python: TargetPython) -> list[Mount]:
    """What the sandbox must show of the interpreter under test: its relocated directories,
    then its prefixes, ``sys.path`` and driver directories (the outermost of nested ones)."""
    shown = sorted({*python.mounts, *python.driver_dirs})
    shown = [d for d in shown if not any(d != o and d.startswith(o.rstrip("/") + "/")
                                         for o in shown)]  # fmt: skip
    return [*(Mount(host=Path(h), inside=i) for h, i in python.relocated),
            *(Mount(host=Path(d), inside=d) for d in shown)]  # fmt: skip


def run_tier(
    tier: str,
    python: TargetPython,
    *,
    runner: Runner,
    devices: GpuDevices,
    workdir: Path,
    log: BinaryIO,
    environ: Mapping[str, str],
    gpus: int | None = None,
    archs: Sequence[str] | None = None,
    timeouts: Mapping[str, float] | None = None,
    thresholds: Thresholds | None = None,
    max_bytes: int = 8 << 30,
) -> AcceptanceReport:
    """Run ``tier`` (``smoke`` or ``comm``) in ``python`` under ``runner``; return the report.

    Raises :class:`~rocmforge.errors.NoGpuError` when no GPU is visible (nothing to test) and
    :class:`~rocmforge.errors.UsageError` for an unknown tier.
    """
    if tier not in TIERS:
        raise UsageError(f"--tier {tier}: not a tier; choose from {', '.join(TIERS)}")
    if devices.kind is None:
        raise NoGpuError(f"no GPU found: looked for {devices.looked_for}")
    expected, why = (gpus, f"--gpus {gpus}") if gpus is not None else visible_count(devices)
    if expected == 0:
        raise NoGpuError(f"no GPU visible: {why} ({devices.gpus} found)")
    limits = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
    config: dict[str, Any] = {"timeouts": limits}
    if tier == "smoke":
        script = SCRIPTS / "smoke_script.py"
        config.update(expected_devices=expected, expected_why=why,
                      archs=list(archs) if archs else None)  # fmt: skip
        args = [json.dumps(config)]
    else:
        script = SCRIPTS / "comm_script.py"
        config.update(world_size=expected, max_bytes=max_bytes)
        args = ["launch", json.dumps(config)]
    report = run_script(tier, python, script, args, runner=runner, devices=devices,
                        workdir=workdir, log=log, environ=environ, timeouts=limits,
                        scripts=Mount(host=SCRIPTS, inside="/accept"))  # fmt: skip
    if tier == "comm" and thresholds is not None:
        report = replace(report, checks=(*report.checks, judge_bandwidth(report.checks,
                                                                          thresholds)))
    return report


#: where a project's ``[test]`` script directory is mounted in the sandbox
PROJECT_DIR = "/project"
#: where the test venv of ``rocmforge test TARGET`` is mounted in the sandbox
TEST_VENV = "/test/venv"


def run_script(
    tier: str,
    python: TargetPython,
    script: Path,
    args: Sequence[str],
    *,
    runner: Runner,
    devices: GpuDevices,
    workdir: Path,
    log: BinaryIO,
    environ: Mapping[str, str],
    timeouts: Mapping[str, float],
    scripts: Mount | None = None,
    default_check: str = "run",
    default_timeout: float | None = None,
) -> AcceptanceReport:
    """Run ``python script args...`` in the sandbox with the GPUs bound (those found: none is
    fine here) and read its checks: the lines it prints with :data:`START` and :data:`RESULT`.

    ``scripts`` mounts the script's directory (default: at :data:`PROJECT_DIR`). A script that
    reports no check of its own is one check, ``default_check``, judged by its exit status
    within ``default_timeout`` seconds (else the sum of ``timeouts`` plus 600).
    """
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    workdir.mkdir(parents=True, exist_ok=True)
    env = check_env(python, environ)
    mount = scripts or Mount(host=script.parent, inside=PROJECT_DIR)
    mounts = [mount, *python_mounts(python), *device_mounts(devices)]
    inside = str(script) if runner.level == "none" else f"{mount.inside}/{script.name}"
    argv = [python.executable, inside, *args]
    clock = CheckClock(timeouts)
    whole = default_timeout if default_timeout is not None else sum(timeouts.values()) + 600
    if default_timeout is not None:  # until the script announces a check, this is its budget
        clock.until = time.monotonic() + default_timeout
        clock.current, clock.current_timeout = default_check, default_timeout
    t = time.monotonic()
    result = runner.run(argv, cwd="/tmp" if runner.level != "none" else str(workdir), env=env,
                        mounts=mounts, timeout=whole + 60, log=log,
                        on_line=clock.feed, deadline=clock.deadline)  # fmt: skip
    seconds = time.monotonic() - t
    checks = list(clock.done)
    if result.timed_out and clock.current is not None:
        checks.append(Check(clock.current, FAILED, clock.current_timeout, {},
                            f"timed out after {clock.current_timeout:g} s: killed (the last "
                            "lines of its output are in the log)"))  # fmt: skip
    elif result.returncode != 0 and not any(c.status == FAILED for c in checks):
        checks.append(Check(clock.current or default_check, FAILED, 0.0, {},
                            f"exited with status {result.returncode}: "
                            f"{telling_line(clock.tail)[:400]}"))
    elif not checks:
        checks.append(Check(default_check, PASSED, seconds, {"exit_status": 0},
                            f"{script.name} exited with status 0"))
    return AcceptanceReport(tier=tier, python=python.executable, checks=tuple(checks),
                            node=node_facts(checks, devices, python), started=started,
                            seconds=seconds, sandbox=runner.level)  # fmt: skip


#: words of the line that says why a run ended, in a Python traceback or NCCL/RCCL's log
TELLING = ("Error", "NCCL WARN", "RCCL WARN", "Exception", "error:")


def telling_line(tail: Sequence[str]) -> str:
    """The line of ``tail`` that says why a run ended: the line after NCCL's ``Last error:``,
    else the last that names an error (a traceback's last line, an NCCL WARN), else the last
    non-empty line."""
    lines = [ln.strip() for ln in tail if ln.strip()]
    for i in range(len(lines) - 2, -1, -1):  # NCCL's own words follow its "Last error:"
        if lines[i].endswith("Last error:"):
            return lines[i + 1]
    for line in reversed(lines):
        if any(word in line for word in TELLING):
            return line
    return lines[-1] if lines else "no output"


def judge_bandwidth(checks: Sequence[Check], thresholds: Thresholds) -> Check:
    """The verdict on the sweep's largest in-place row against the threshold table."""
    sweep = next((c for c in checks if c.name == "sweep" and c.status == PASSED), None)
    init = next((c for c in checks if c.name == "init"), None)
    if sweep is None or not sweep.figures.get("rows"):
        return Check("bandwidth", NOT_RUN, 0.0, {}, "no sweep to judge")
    row = sweep.figures["rows"][-1]
    world = int(sweep.figures.get("world_size", 1))
    device = str(init.figures.get("device", "")) if init else ""
    figures = {"bytes": row["bytes"], "busbw": row["busbw"], "algbw": row["algbw"]}
    line = thresholds.line_for(device, world)
    if line is None:
        return Check("bandwidth", SKIPPED, 0.0, figures,
                     f"no threshold for {device or 'this device'} x{world}: busbw "
                     f"{row['busbw']:.1f} GB/s at {row['bytes']} B recorded, not judged")
    key, need = line
    figures["threshold"] = need
    ok = row["busbw"] >= need
    verdict = ">=" if ok else "<"
    return Check("bandwidth", PASSED if ok else FAILED, 0.0, figures,
                 f"in-place busbw {row['busbw']:.1f} GB/s at {row['bytes']} B {verdict} "
                 f"{need:g} GB/s ({key})")


def node_facts(
    checks: Sequence[Check], devices: GpuDevices, python: TargetPython
) -> dict[str, Any]:
    """The node's facts the checks found: GPU model and count, archs, runtime versions."""
    facts: dict[str, Any] = {"hostname": os.uname().nodename, "stack": devices.kind,
                             "gpus_found": devices.gpus, "python": python.version}  # fmt: skip
    by = {c.name: c for c in checks}
    if "archs" in by and by["archs"].figures.get("devices"):
        devs = by["archs"].figures["devices"]
        facts["gpu_model"] = devs[0]["name"]
        facts["gpu_count"] = len(devs)
        facts["archs"] = sorted({d["arch"] for d in devs})
    elif "init" in by:
        facts["gpu_model"] = by["init"].figures.get("device")
        facts["gpu_count"] = by["init"].figures.get("world_size")
    if "import" in by:
        facts["torch"] = by["import"].figures.get("torch")
    if "runtime" in by:
        facts.update({k: v for k, v in by["runtime"].figures.items() if v})
    return facts


@dataclass(frozen=True, slots=True)
class AcceptanceRun:
    """A finished run: the report, its in-toto statement and the checks' full log."""

    report: AcceptanceReport
    statement: Mapping[str, Any]
    log: Path


def accept_python(
    executable: str,
    *,
    tier: str,
    runner: Runner,
    workdir: Path,
    environ: Mapping[str, str],
    devices: GpuDevices,
    gpus: int | None = None,
    timeouts: Mapping[str, float] | None = None,
    thresholds: Thresholds | None = None,
    max_bytes: int = 8 << 30,
) -> AcceptanceRun:
    """Test the environment of ``executable`` (``rocmforge test --python``): probe it, run
    ``tier``, and make the statement about its installed torch (and triton)."""
    from rocmforge.accept.attest import statement, subjects_of
    from rocmforge.accept.thresholds import Thresholds as Table

    python = probe_python(executable)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{tier}.log"
    with log_path.open("wb") as log:
        report = run_tier(tier, python, runner=runner, devices=devices, workdir=workdir,
                          log=log, environ=environ, gpus=gpus, timeouts=timeouts,
                          thresholds=thresholds or Table(), max_bytes=max_bytes)  # fmt: skip
    files = [(f"{n}=={v} ({executable})", Path(r)) for n, v, r in python.installed
             if r and os.path.isfile(r)]  # fmt: skip
    return AcceptanceRun(report, statement(report, subjects_of(files)), log_path)
