"""``doctor``: what this machine offers for ROCm builds, and how a recipe fits it.

Reports the ROCm installs and their HIP clang, RAM and cores (all found by
:mod:`rocmforge.toolchain.machine`), asks ``rocminfo`` / ``amdgpu-arch`` /
``rocm_agent_enumerator`` for GPUs (none of them works without a GPU: that is reported as "no GPU
visible", not as an error), and reports bubblewrap and the sandbox level. For a recipe it adds
every lint finding (with :func:`~rocmforge.toolchain.machine.lint_facts`, as ``realize`` lints)
and whether the recipe's archs cover the GPUs found.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmforge.recipe.lints import Finding, LintFacts, check_archs, lint_recipe, recipe_archs
from rocmforge.recipe.model import Recipe
from rocmforge.toolchain.machine import (
    RocmInstall,
    cpu_count,
    find_rocm,
    lint_facts,
    ram_bytes,
    run_tool,
)
from rocmforge.toolchain.pythons import ProbedPython, probe_pythons

_GPU_NAME = re.compile(r"^\s*Name:\s+(gfx[0-9a-f]+)\b", re.MULTILINE)
_GFX = re.compile(r"^(gfx[0-9a-f]+)\b")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuProbe:
    """The GPUs one tool reported (``archs``), or why it reported none (``detail``)."""

    tool: str
    path: Path | None
    archs: tuple[str, ...] = ()
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return the probe as JSON-ready data."""
        return {
            "tool": self.tool,
            "path": str(self.path) if self.path else None,
            "archs": list(self.archs),
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineReport:
    """What this machine has for building: ROCm installs, GPUs, RAM, cores, sandbox."""

    rocm: tuple[RocmInstall, ...]
    gpu_probes: tuple[GpuProbe, ...]
    ram_bytes: int | None
    cpu_count: int | None
    bwrap: Path | None
    sandbox: str
    sandbox_warning: str | None
    #: The interpreters a recipe's ``[toolchain] python`` can name (None: not this machine).
    pythons: tuple[ProbedPython, ...] | None = None

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPU archs found by the first tool that found any (one entry per GPU)."""
        for probe in self.gpu_probes:
            if probe.archs:
                return probe.archs
        return ()

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {
            "rocm": [r.to_json() for r in self.rocm],
            "gpus": list(self.gpus),
            "gpu_probes": [p.to_json() for p in self.gpu_probes],
            "ram_bytes": self.ram_bytes,
            "cpu_count": self.cpu_count,
            "bwrap": str(self.bwrap) if self.bwrap else None,
            "sandbox": self.sandbox,
            "sandbox_warning": self.sandbox_warning,
            "pythons": None if self.pythons is None else [p.to_json() for p in self.pythons],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Coverage:
    """Whether a recipe's archs cover the GPUs found (``None``: nothing to compare)."""

    recipe_archs: tuple[str, ...]
    gpus: tuple[str, ...]
    missing: tuple[str, ...]
    covered: bool | None

    def to_json(self) -> dict[str, Any]:
        """Return the coverage as JSON-ready data."""
        return {
            "recipe_archs": list(self.recipe_archs),
            "gpus": list(self.gpus),
            "missing": list(self.missing),
            "covered": self.covered,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DoctorReport:
    """The machine report plus, for a recipe, its lint findings and GPU coverage."""

    machine: MachineReport
    recipe: Path | None = None
    findings: tuple[Finding, ...] = ()
    coverage: Coverage | None = None
    facts: LintFacts = field(default_factory=LintFacts)
    toolchain: str | None = None
    toolchain_error: str | None = None
    system: Mapping[str, Any] | None = None

    @property
    def blocking(self) -> bool:
        """True when ``realize`` of the recipe would stop before building."""
        return self.toolchain_error is not None or any(f.blocking for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {
            "machine": self.machine.to_json(),
            "recipe": str(self.recipe) if self.recipe else None,
            "lints": [f.to_json() for f in self.findings],
            "coverage": self.coverage.to_json() if self.coverage else None,
            "toolchain": self.toolchain,
            "toolchain_error": self.toolchain_error,
            "blocking": self.blocking if self.recipe else None,
            "system": dict(self.system) if self.system is not None else None,
        }


# --- GPUs ---------------------------------------------------------------------------------------


def _last_line(text: str) -> str:
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else ""


def probe_gpus(env: Mapping[str, str]) -> tuple[GpuProbe, ...]:
    """Ask ``rocminfo``, ``amdgpu-arch`` and ``rocm_agent_enumerator`` (those on PATH) for GPUs."""
    path = env.get("PATH", "")
    probes = []
    for tool in ("rocminfo", "amdgpu-arch", "rocm_agent_enumerator"):
        exe = shutil.which(tool, path=path)
        if exe is None:
            probes.append(GpuProbe(tool=tool, path=None, detail="not installed"))
            continue
        result = run_tool([exe], env=env)
        if result is None:
            probes.append(GpuProbe(tool=tool, path=Path(exe), detail="could not run"))
            continue
        rc, out, err = result
        if tool == "rocminfo":
            archs = tuple(_GPU_NAME.findall(out))
        else:
            archs = tuple(m.group(1) for ln in out.splitlines() if (m := _GFX.match(ln.strip())))
        archs = tuple(a for a in archs if a != "gfx000")  # the CPU agent
        detail = ""
        if not archs:
            known = [ln for ln in (out + "\n" + err).splitlines() if "ROCk module" in ln]
            why = _last_line(known[0] if known else "") or _last_line(err) or _last_line(out)
            detail = f"exited {rc}" + (f": {why}" if why else "") if rc else "listed no GPU"
        probes.append(GpuProbe(tool=tool, path=Path(exe), archs=archs, detail=detail))
    return tuple(probes)


# --- machine ------------------------------------------------------------------------------------


def probe_machine(
    env: Mapping[str, str] | None = None, *, sysroot: Path = Path("/")
) -> MachineReport:
    """Probe this machine (``env`` gives PATH and ROCM_PATH; ``sysroot`` holds /opt and /usr)."""
    from rocmforge.build.sandbox import detect_runner
    from rocmforge.errors import SandboxError

    env = dict(os.environ if env is None else env)
    try:
        runner = detect_runner(None)
        level, warning = runner.level, runner.warning
    except SandboxError as exc:  # auto never falls back: report why, and what to do
        level, warning = "unavailable", str(exc)
    bwrap = shutil.which("bwrap", path=env.get("PATH", ""))
    return MachineReport(
        rocm=find_rocm(env, sysroot),
        gpu_probes=probe_gpus(env),
        ram_bytes=ram_bytes(),
        cpu_count=cpu_count(),
        bwrap=Path(bwrap) if bwrap else None,
        sandbox=level,
        sandbox_warning=warning,
        pythons=probe_pythons(env) if sysroot == Path("/") else None,
    )


# --- recipes ------------------------------------------------------------------------------------


def coverage(recipe: Recipe, gpus: Sequence[str]) -> Coverage:
    """Compare the archs ``recipe`` builds for (or checks) with the GPUs found."""
    archs = [t for _, t in recipe_archs(recipe)] or [t for _, t in check_archs(recipe)]
    bases = tuple(dict.fromkeys(a.split(":", 1)[0] for a in archs))
    gpu_set = tuple(dict.fromkeys(gpus))
    missing = tuple(g for g in gpu_set if g not in bases)
    covered = None if not bases or not gpu_set else not missing
    return Coverage(recipe_archs=bases, gpus=gpu_set, missing=missing, covered=covered)


def check_toolchain(recipe: Recipe) -> tuple[str | None, str | None]:
    """Probe the recipe's toolchain as ``realize`` would; return (summary, error)."""
    import tempfile

    from rocmforge.errors import ToolchainError
    from rocmforge.toolchain.system import resolve_toolchain

    with tempfile.TemporaryDirectory(prefix="rocmforge-doctor-") as cache:
        try:
            tc = resolve_toolchain(recipe.toolchain, cache_dir=Path(cache))
        except ToolchainError as exc:
            return None, str(exc)
    fp = tc.fingerprint
    parts = [f"python {fp.get('python', {}).get('version', tc.python_version)}"]
    rocm = fp.get("rocm")
    if isinstance(rocm, dict) and rocm.get("version"):
        parts.insert(0, f"ROCm {rocm['version']}")
    cc = fp.get("cc")
    if isinstance(cc, dict) and cc.get("version"):
        parts.append(str(cc["version"]))
    error = None
    spec = recipe.toolchain
    if spec.kind == "rocm-sdk":  # what realize needs: the SDK wheels locked (the index to lock)
        from rocmforge.toolchain.rocmsdk import (
            SELECTOR,
            index_args,
            locked_module,
            locked_pins,
            no_index_message,
        )

        pins, missing = locked_pins(spec)
        if locked_module(spec) is None:  # the rocm sdist, source of the rocm_sdk module
            missing = (*missing, SELECTOR)
        what = f"ROCm SDK {spec.sdk_version} for {', '.join(spec.families)}"
        parts.insert(0, f"{what}: {len(pins)} wheels and the rocm_sdk module locked"
                     if not missing else f"{what}: not locked ({', '.join(missing)})")  # fmt: skip
        if missing:
            error = (
                f"toolchain.wheels: {what} is not locked; run `rocmforge lock {recipe.file}`"
                if index_args(spec)
                else no_index_message(spec, f"{what} is not locked")
            )
    return f"{recipe.toolchain.kind}: " + ", ".join(parts), error


def doctor(
    recipe: Recipe | None = None,
    *,
    env: Mapping[str, str] | None = None,
    sysroot: Path = Path("/"),
) -> DoctorReport:
    """Probe the machine and, given a loaded recipe, lint it and check its GPU coverage."""
    env = dict(os.environ if env is None else env)
    machine = probe_machine(env, sysroot=sysroot)
    system = system_summary(env) if sysroot == Path("/") else None
    if recipe is None:
        return DoctorReport(machine=machine, system=system)
    facts = lint_facts(recipe, env)
    summary, error = check_toolchain(recipe)
    return DoctorReport(
        toolchain=summary,
        toolchain_error=error,
        machine=machine,
        recipe=recipe.file,
        findings=lint_recipe(recipe, facts),
        coverage=coverage(recipe, machine.gpus),
        facts=facts,
        system=system,
    )


def system_summary(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return the system manifest this machine would hash, and what the sandbox masks.

    ``database`` says what covers ``/usr``: ``dpkg`` or ``rpm`` (with ``source``, the database
    read, ``reader`` for rpm, and ``note`` when both are present), ``content`` (no database,
    ``ROCMFORGE_SYSTEM_MANIFEST=content``: how many files and bytes that hashes), ``none``
    (realize and plan refuse: ``looked_for`` and the ``fallback``) or ``error``.
    """
    from rocmforge.errors import ToolchainError
    from rocmforge.toolchain.manifest import (
        SYSTEM_MANIFEST_ENV,
        detect_database,
        looked_for,
        scan,
        scan_content,
    )

    try:
        db = detect_database(environ=env)
        if db.kind == "none":
            return {
                "database": "none",
                "looked_for": looked_for(),
                "fallback": f"{SYSTEM_MANIFEST_ENV}=content",
            }
        m = scan_content(db, digests=False).manifest if db.kind == "content" else scan(db)
    except ToolchainError as exc:
        return {"database": "error", "error": str(exc)}
    return {
        "database": m.database,
        **{k: v for k, v in m.info.items() if v not in ("", None)},
        "packages": dict(sorted(m.packages.items())),
        "masked": list(m.masked),
        "masked_files": m.masked_files,
        "unowned_hashed": len(m.unowned),
    }
