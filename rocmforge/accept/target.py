"""Test store entries: their closure installed into a fresh venv, the checks run in it, the
proof kept beside each entry.

``rocmforge test TARGET`` (and ``realize --test``) come here. The closure is the entries named
and everything they were built against (``built_against``, transitively: torch with its
triton), plus the pinned requirement wheels of the recipe's ``[check]`` and ``[test]``. It is
installed into a fresh venv with the store's installed-once trees hard-linked in
(:mod:`rocmforge.wheel.wheelcache`: what ``uv`` does with its cache), so a second test of a
torch-sized closure links files instead of unpacking gigabytes. ``over`` layers the venv over
an existing environment (a ``.pth`` after the venv's own site-packages): a built torchvision
tested with the node's own torch. Then the torch tiers (:func:`rocmforge.accept.run.run_tier`)
and the project's ``[test]`` script (:func:`rocmforge.accept.run.run_script`) run, each one's
statement signed with the provenance key when one is set and kept in
``accepted/<hash>/`` of every entry named (:mod:`rocmforge.store.accepted`). A comm run is
also held against the last accepted run on a node of the same kind (last-known-good).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocmforge.accept.attest import statement as make_statement
from rocmforge.accept.devices import GpuDevices
from rocmforge.accept.report import FAILED, PASSED, AcceptanceReport, Check
from rocmforge.accept.run import TargetPython, probe_python, run_script, run_tier
from rocmforge.accept.thresholds import Thresholds
from rocmforge.build.sandbox import Runner
from rocmforge.errors import NoGpuError, UsageError
from rocmforge.store import layout
from rocmforge.store.accepted import last_known_good, run_name, write_run
from rocmforge.store.entry import DerivationDoc, Entry, read_derivation
from rocmforge.store.store import Store
from rocmforge.util.hashing import file_sha256

#: the distribution whose presence in the closure makes ``smoke`` the default tier
TORCH = "torch"
#: the checks' output, kept beside the first run's statement (``<run>.log``)
LOG_SUFFIX = ".log"


@dataclass(frozen=True, slots=True)
class Closure:
    """What one test installs: the entries named, every entry in their closure (dependencies
    first) with its wheels, and the requirement wheels installed beside them."""

    targets: tuple[Entry, ...]
    entries: tuple[Entry, ...]
    wheels: tuple[tuple[Path, str], ...]
    extra: tuple[tuple[Path, str], ...] = ()

    @property
    def has_torch(self) -> bool:
        """Whether a wheel of the closure is torch."""
        return any(layout.normal_name(e.name) == TORCH for e in self.entries)

    def archs(self) -> list[str] | None:
        """The GPU archs every GPU library of the closure's torch holds (``meta.json``
        ``archs``, as the build's check read them from the offload bundles): what the smoke
        tier holds each device's arch against. None when no torch entry recorded any (the
        tier then asks ``torch.cuda.get_arch_list()``)."""
        found: set[str] | None = None
        for e in self.entries:
            if layout.normal_name(e.name) != TORCH:
                continue
            for libs in (e.meta.archs or {}).values():
                for lib in libs.values() if isinstance(libs, Mapping) else ():
                    common = lib.get("common") if isinstance(lib, Mapping) else None
                    if isinstance(common, list) and common:
                        archs = {str(a).split(":")[0] for a in common}
                        found = archs if found is None else found & archs
        return sorted(found) if found is not None else None

    def subjects(self) -> list[dict[str, Any]]:
        """The statement's subjects: every wheel installed, by file name and sha256."""
        return [{"name": w.name, "digest": {"sha256": sha}} for w, sha in
                (*self.wheels, *self.extra)]  # fmt: skip


def closure_of(
    store: Store, targets: Sequence[Entry], extra: Sequence[tuple[Path, str]] = ()
) -> Closure:
    """The closure of ``targets`` in ``store``: raises UsageError naming a dependency that is
    not in the store."""
    from rocmforge.cache.push import with_closure

    entries = with_closure(store, targets)
    wheels: list[tuple[Path, str]] = []
    for e in entries:
        for record in e.meta.wheels:
            path = e.path / record.file
            wheels.append((path, record.sha256 or file_sha256(path)))
    return Closure(tuple(targets), tuple(entries), tuple(wheels), tuple(extra))


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def base_python(entries: Sequence[Entry], over: TargetPython | None = None) -> tuple[str, str]:
    """The interpreter the test venv is made from, and its ``X.Y.Z``: ``over``'s own when
    given, else the host's Python of the version the first entry was built with (its
    derivation's toolchain), found as ``realize`` finds ``[toolchain] python``
    (:func:`rocmforge.toolchain.pythons.find_python`). UsageError when none runs."""
    from rocmforge.toolchain.pythons import find_python

    if over is not None:
        return over.base_executable, over.version
    for e in entries:
        tool = DerivationDoc(read_derivation(e.path)).toolchain or {}
        py = tool.get("python")
        short = str(py.get("short", "")) if isinstance(py, Mapping) else ""
        if not short:
            continue
        path = find_python(short)
        found = _version_of(str(path)) if path is not None else None
        if path is None or found is None:
            raise UsageError(f"{e.name} {e.version} was built for Python {short}, and no "
                             f"python{short} runs here (--over PYTHON names an environment "
                             "to test in)")  # fmt: skip
        return os.path.realpath(path), found
    import sys

    return os.path.realpath(sys.executable), sys.version.split()[0]


@dataclass(frozen=True, slots=True)
class Installed:
    """The test venv: where it is, its interpreter, how many files it got, how long it took."""

    venv: Path
    python: str
    files: int
    seconds: float


def install_closure(
    closure: Closure,
    venv: Path,
    *,
    python: str,
    version: str,
    sources_dir: Path,
    linked: bool = True,
    over: TargetPython | None = None,
) -> Installed:
    """Make a fresh venv at ``venv`` from ``python`` and install the closure into it: every
    wheel's installed-once tree hard-linked in (``linked``; only where the venv is mounted
    read-only, i.e. in the sandbox), else pypa/installer straight into the venv."""
    from rocmforge.accept.run import TEST_VENV
    from rocmforge.errors import RequirementError
    from rocmforge.wheel.install import install_wheels
    from rocmforge.wheel.venv import create_venv, venv_site_packages
    from rocmforge.wheel.wheelcache import install_linked

    t = time.monotonic()
    create_venv(Path(python), venv, version=version)
    interpreter = f"{TEST_VENV}/bin/python" if linked else str(venv / "bin" / "python")
    items = [*closure.extra, *closure.wheels]
    files = 0
    if linked:
        xy = ".".join(version.split(".")[:2])
        done = install_linked(items, venv, sources_dir=sources_dir, python_xy=xy,
                              interpreter=interpreter)  # fmt: skip
        files = sum(d.files for d in done)
    else:
        install_wheels([w for w, _ in items], venv, interpreter=interpreter,
                       error=RequirementError)  # fmt: skip
    if over is not None and over.site:
        pth = venv_site_packages(venv) / "_rocmforge_over.pth"
        pth.write_text("".join(f"{d}\n" for d in over.site), encoding="utf-8")
    return Installed(venv, str(venv / "bin" / "python"), files, time.monotonic() - t)


@dataclass(frozen=True, slots=True)
class ProjectScript:
    """A recipe's ``[test]`` script: its file, arguments and timeout."""

    path: Path
    args: tuple[str, ...] = ()
    timeout: float = 600.0


@dataclass(frozen=True, slots=True)
class TierRun:
    """One tier's run: its report, the statement, and where the statement was kept."""

    report: AcceptanceReport
    statement: Mapping[str, Any]
    kept: tuple[Path, ...]
    signed: str | None


@dataclass(frozen=True, slots=True)
class TargetRun:
    """A whole ``rocmforge test TARGET``: the closure, the venv, each tier, the log."""

    closure: Closure
    installed: Installed
    runs: tuple[TierRun, ...]
    log: Path

    @property
    def exit_code(self) -> int:
        """1 when some tier failed, else 0."""
        return 1 if any(r.report.exit_code for r in self.runs) else 0


def judge_last_known_good(
    report: AcceptanceReport, store_root: Path, thresholds: Thresholds
) -> AcceptanceReport:
    """Add the ``last_known_good`` check to a comm report: its largest row's busbw against the
    newest passing comm run on a node of the same GPU model and count, at the same size, less
    ``thresholds.tolerance``; skipped (not judged) when there is none."""
    model, count = report.node.get("gpu_model"), report.node.get("gpu_count")
    sweep = next((c for c in report.checks if c.name == "sweep" and c.status == PASSED), None)
    if not isinstance(model, str) or not isinstance(count, int) or sweep is None:
        return report
    rows = sweep.figures.get("rows") or []
    if not rows:
        return report
    row = rows[-1]
    last = last_known_good(store_root, (model, count), before=report.started)
    if last is None or last.bandwidth is None or last.bandwidth[0] != int(row["bytes"]):
        check = Check("last_known_good", "skipped", 0.0, {},
                      f"no earlier accepted comm run on {count}x {model} at {row['bytes']} B")
    else:
        need = last.bandwidth[1] * (1 - thresholds.tolerance)
        ok = float(row["busbw"]) >= need
        check = Check("last_known_good", PASSED if ok else FAILED, 0.0, {
            "busbw": row["busbw"], "last": last.bandwidth[1], "tolerance": thresholds.tolerance,
            "last_run": str(last.file)},
            f"busbw {float(row['busbw']):.1f} GB/s {'>=' if ok else '<'} {need:.1f} "
            f"(last accepted {last.bandwidth[1]:.1f} GB/s on {last.started[:10]}, less "
            f"{thresholds.tolerance:.0%})")  # fmt: skip
    return replace(report, checks=(*report.checks, check))


def keep(
    store: Store, targets: Sequence[Entry], report: AcceptanceReport, stmt: Mapping[str, Any]
) -> tuple[tuple[Path, ...], str | None]:
    """Sign the statement when a provenance key is set and keep it with every target entry;
    return the files and the key's name (None: unsigned)."""
    from rocmforge.trust.signing import sign_payload, store_signing_key
    from rocmforge.util.fsutil import json_bytes

    payload = json_bytes(stmt)
    key = store_signing_key(store.root)
    raw = json_bytes(sign_payload(payload, key)) if key is not None else payload
    name = run_name(report.started, report.tier)
    kept = tuple(write_run(store.root, e.hash, name, raw) for e in targets)
    return kept, key.name if key is not None else None


def accept_closure(
    store: Store,
    closure: Closure,
    *,
    tiers: Sequence[str],
    runner: Runner,
    devices: GpuDevices,
    environ: Mapping[str, str],
    workdir: Path,
    scripts: Sequence[ProjectScript] = (),
    over: TargetPython | None = None,
    gpus: int | None = None,
    timeouts: Mapping[str, float] | None = None,
    thresholds: Thresholds | None = None,
    max_bytes: int = 8 << 30,
    store_runs: bool = True,
) -> TargetRun:
    """Install ``closure`` into a fresh venv under ``workdir``, run ``tiers`` and the project
    ``scripts`` there, and keep each run's statement with the target entries (``store_runs``).

    Torch tiers with no GPU visible raise :class:`~rocmforge.errors.NoGpuError` before anything
    is installed; a project script runs without GPUs too (none bound)."""
    from rocmforge.accept.run import DEFAULT_TIMEOUTS

    if tiers and devices.kind is None:
        raise NoGpuError(f"no GPU found for the {', '.join(tiers)} tier: looked for "
                         f"{devices.looked_for}")  # fmt: skip
    if not tiers and not scripts:
        raise UsageError("nothing to test: the closure has no torch and the recipe no [test] "
                         "script (--tier smoke asks for the torch tier anyway)")  # fmt: skip
    table = thresholds or Thresholds()
    python, version = base_python(closure.entries, over)
    installed = install_closure(closure, workdir / "venv", python=python, version=version,
                                sources_dir=store.sources_dir, linked=runner.level != "none",
                                over=over)  # fmt: skip
    target = probe_python(installed.python)
    if runner.level != "none":  # the venv is seen at TEST_VENV, its shebangs name that
        from rocmforge.accept.run import TEST_VENV

        host = str(installed.venv)
        target = replace(target, executable=f"{TEST_VENV}/bin/python",
                         mounts=tuple(m for m in target.mounts if m != host and not
                                      m.startswith(host + "/")),
                         relocated=((host, TEST_VENV),))  # fmt: skip
    subjects = closure.subjects()
    if over is not None:
        from rocmforge.accept.attest import subjects_of

        subjects += subjects_of([(f"{n}=={v} ({over.executable})", Path(r))
                                 for n, v, r in over.installed if r and os.path.isfile(r)])
    log_path = workdir / "test.log"
    runs: list[TierRun] = []
    limits = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
    with log_path.open("wb") as log:
        for tier in tiers:
            report = run_tier(tier, target, runner=runner, devices=devices,
                              workdir=workdir / tier, log=log, environ=environ, gpus=gpus,
                              archs=closure.archs(), timeouts=limits, thresholds=table,
                              max_bytes=max_bytes)  # fmt: skip
            if tier == "comm":
                report = judge_last_known_good(report, store.root, table)
            runs.append(_finish(store, closure, report, subjects, store_runs))
        for i, script in enumerate(scripts):
            report = run_script("project", target, script.path, script.args, runner=runner,
                                devices=devices, workdir=workdir / f"project-{i}", log=log,
                                environ=environ, timeouts=limits, default_check="project",
                                default_timeout=script.timeout)  # fmt: skip
            runs.append(_finish(store, closure, report, subjects, store_runs))
    kept_log = log_path
    if store_runs and runs:
        for path in runs[0].kept:  # one statement per target entry
            shutil.copyfile(log_path, path.with_suffix(LOG_SUFFIX))
        kept_log = runs[0].kept[0].with_suffix(LOG_SUFFIX) if runs[0].kept else log_path
    return TargetRun(closure, installed, tuple(runs), kept_log)


def _finish(
    store: Store,
    closure: Closure,
    report: AcceptanceReport,
    subjects: list[dict[str, Any]],
    store_runs: bool,
) -> TierRun:
    stmt = make_statement(report, subjects)
    kept, signed = keep(store, closure.targets, report, stmt) if store_runs else ((), None)
    return TierRun(report, stmt, kept, signed)
