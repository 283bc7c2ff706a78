"""Cheap facts about this machine: its ROCm installs, RAM and cores, and the lint facts.

Finds ROCm installs (``$ROCM_PATH``, ``/opt/rocm*``, Debian's ``/usr``), reads their versions from
the headers and finds their HIP clang; reads total RAM and the usable CPU count. From these,
:func:`lint_facts` builds the :class:`~rocmforge.recipe.lints.LintFacts` that ``realize``,
``plan`` and ``doctor`` lint a recipe with: the lints themselves never probe the machine, their
caller passes the facts in.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.recipe.lints import LintFacts
from rocmforge.recipe.model import Recipe
from rocmforge.toolchain.rocm import read_rocm_version

#: Seconds a probed tool (``clang --version``, ``rocminfo``) may run.
TOOL_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmInstall:
    """One ROCm found on the machine: its root, version (and the file it came from), HIP clang."""

    root: Path
    version: str | None
    raw_version: str | None
    version_file: Path | None
    hip_clang: Path | None = None
    hip_clang_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the install as JSON-ready data."""
        return {
            "root": str(self.root),
            "version": self.version,
            "raw_version": self.raw_version,
            "version_file": str(self.version_file) if self.version_file else None,
            "hip_clang": str(self.hip_clang) if self.hip_clang else None,
            "hip_clang_version": self.hip_clang_version,
        }


def run_tool(argv: Sequence[str], *, env: Mapping[str, str]) -> tuple[int, str, str] | None:
    """Run a probe tool; return ``(exit status, stdout, stderr)``, None if it cannot start."""
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TOOL_TIMEOUT,
            check=False,
            env={**env, "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.returncode, proc.stdout, proc.stderr


# --- ROCm installs ------------------------------------------------------------------------------


def rocm_version(root: Path) -> tuple[str | None, str | None, Path | None]:
    """Return ``(ROCm version, what the file says, file)`` for the ROCm under ``root``.

    Uses :func:`rocmforge.toolchain.rocm.read_rocm_version` (``rocm_version.h``, then
    ``hip_version.h`` whose third part is a HIP build number, then ``.info/version``).
    """
    found = read_rocm_version(root)
    if found is None:
        return None, None, None
    return found.comparable, found.version, root / found.file


def _clang_version(exe: Path) -> str | None:
    out = run_tool([str(exe), "--version"], env={"PATH": "/usr/bin:/bin"})
    if out is None or out[0] != 0 or not out[1].strip():
        return None
    return out[1].splitlines()[0].strip()


def hip_clang(root: Path) -> Path | None:
    """Return the HIP clang++ of the ROCm at ``root`` (``llvm/bin``, ``lib/llvm/bin``, Debian)."""
    for d in (root / "llvm" / "bin", root / "lib" / "llvm" / "bin"):
        if os.access(d / "clang++", os.X_OK):
            return d / "clang++"
    # Debian's hipcc runs the versioned clang++-NN beside it in /usr/bin.
    bin_dir = root / "bin"
    if (bin_dir / "hipcc").exists():
        versioned = sorted(
            bin_dir.glob("clang++-[0-9]*"), key=lambda p: int(p.name.rsplit("-", 1)[1] or 0)
        )
        if versioned:
            return versioned[-1]
        if os.access(bin_dir / "clang++", os.X_OK):
            return bin_dir / "clang++"
    return None


def rocm_candidates(env: Mapping[str, str], sysroot: Path) -> list[Path]:
    """Where to look: ``$ROCM_PATH``, ``/opt/rocm``, ``/opt/rocm-*`` (newest first), ``/usr``."""
    out: list[Path] = []
    if env.get("ROCM_PATH"):
        out.append(Path(env["ROCM_PATH"]))
    opt = sysroot / "opt"
    out.append(opt / "rocm")
    try:
        versioned = [p for p in opt.iterdir() if p.name.startswith("rocm-")]
    except OSError:
        versioned = []
    out += sorted(versioned, key=lambda p: p.name, reverse=True)
    out.append(sysroot / "usr")
    return out


def find_rocm(env: Mapping[str, str], sysroot: Path = Path("/")) -> tuple[RocmInstall, ...]:
    """Return every ROCm install found (a root with a readable version), without duplicates."""
    found: list[RocmInstall] = []
    seen: set[str] = set()
    for root in rocm_candidates(env, sysroot):
        real = os.path.realpath(root)
        if real in seen or not root.is_dir():
            continue
        version, raw, file = rocm_version(root)
        if version is None:
            continue
        seen.add(real)
        clang = hip_clang(root)
        found.append(
            RocmInstall(
                root=root,
                version=version,
                raw_version=raw,
                version_file=file,
                hip_clang=clang,
                hip_clang_version=_clang_version(clang) if clang else None,
            )
        )
    return tuple(found)


# --- RAM and cores ------------------------------------------------------------------------------


def ram_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Total RAM in bytes from ``/proc/meminfo`` (None if unreadable)."""
    try:
        text = meminfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    m = re.search(r"^MemTotal:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def cpu_count() -> int | None:
    """CPUs this process may use (the affinity mask), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


# --- lint facts ---------------------------------------------------------------------------------


def lint_facts(recipe: Recipe, env: Mapping[str, str] | None = None) -> LintFacts:
    """Cheap facts for linting ``recipe``: the ROCm version at its root, RAM, cores, host env."""
    env = os.environ if env is None else env
    version = None
    root = recipe.toolchain.root
    if recipe.toolchain.kind == "rocm" and root is not None and root.is_dir():
        version, _, _ = rocm_version(Path(root))
    targets = None
    if recipe.toolchain.hip_clang and recipe.toolchain.device_libs is not None:
        from rocmforge.toolchain.hipclang import device_lib_archs

        targets = device_lib_archs(recipe.toolchain.device_libs)
    return LintFacts(
        rocm_version=version, targets=targets, ram_bytes=ram_bytes(), cpu_count=cpu_count(),
        host_env=dict(env),
    )
