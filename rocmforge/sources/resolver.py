"""Resolve build requirement specifiers to an exact closure (``rocmforge lock`` only).

Two resolvers, same result shape: ``uv pip compile`` (the default: ~0.7 s for PyTorch's ~30
build requirements with a warm cache, against ~5.4 s for pip, measured by ``bench/bench_lock.py``)
and, where uv is not installed, pip's own resolver through ``pip install --dry-run --report``.
``ROCMFORGE_RESOLVER=pip`` forces pip. Both resolve binary wheels only, for the recipe's Python
version on this platform, and both get the index options of ``ROCMFORGE_PIP_ARGS``
(``--index-url``, ``--extra-index-url``, ``--find-links``, ``--no-index``) so a site mirror works.

``constraints`` (``name==version`` lines) steer a re-lock to keep what was locked before.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmforge.errors import RequirementError

_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """An exact closure: ``(normalised name, version)`` pairs sorted by name, and who made it."""

    pins: tuple[tuple[str, str], ...]
    resolver: str


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_args() -> tuple[str, ...]:
    """Return the extra index options from ``ROCMFORGE_PIP_ARGS`` (shell-split)."""
    return tuple(shlex.split(os.environ.get("ROCMFORGE_PIP_ARGS", "")))


def find_uv() -> str | None:
    """Return the uv executable (the ``uv`` package's, else one on PATH), or None."""
    try:
        import uv  # type: ignore[import-not-found, unused-ignore]

        found = str(uv.find_uv_bin())
        if os.access(found, os.X_OK):
            return found
    except (ImportError, FileNotFoundError):
        pass
    return shutil.which("uv")


def resolve_closure(
    requires: Sequence[str],
    *,
    python_version: str,
    constraints: Sequence[str] = (),
    extra_args: Sequence[str] | None = None,
) -> Resolution:
    """Resolve ``requires`` (PEP 508 lines) to the exact closure of binary wheels.

    Raises :class:`RequirementError` with the resolver's own explanation if there is no solution.
    """
    args = tuple(pip_args() if extra_args is None else extra_args)
    choice = os.environ.get("ROCMFORGE_RESOLVER", "")
    uv = None if choice == "pip" else find_uv()
    if choice == "uv" and uv is None:
        raise RequirementError("ROCMFORGE_RESOLVER=uv but uv is not installed (pip install uv)")
    with tempfile.TemporaryDirectory(prefix="rocmforge-lock-") as tmp:
        reqs = Path(tmp, "requirements.in")
        reqs.write_text("".join(f"{r}\n" for r in requires), encoding="utf-8")
        cons = Path(tmp, "constraints.txt")
        cons.write_text("".join(f"{c}\n" for c in constraints), encoding="utf-8")
        if uv is not None:
            return _uv(uv, reqs, cons, python_version, args)
        return _pip(reqs, cons, Path(tmp), python_version, args)


def _run(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        raise RequirementError(f"cannot run {what}: {exc}") from exc
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        lines = [ln for ln in lines if not ln.startswith("WARNING")] or ["no output"]
        raise RequirementError(
            f"{what} found no solution for the build requirements: " + " | ".join(lines[:8])
        )
    return proc


def _uv(uv: str, reqs: Path, cons: Path, python_version: str, args: Sequence[str]) -> Resolution:
    argv = [
        uv, "pip", "compile", str(reqs), "--constraint", str(cons), "--python-version",
        python_version, "--only-binary", ":all:", "--no-header", "--no-annotate", "--quiet",
        "--no-config", *args,
    ]  # fmt: skip
    proc = _run(argv, "uv pip compile")
    pins = []
    for line in proc.stdout.splitlines():
        m = _LINE.match(line.strip())
        if m:
            pins.append((_canonical(m.group(1)), m.group(2)))
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=False)
    name = version.stdout.split()[1] if version.stdout.split()[1:] else "?"
    return Resolution(pins=tuple(sorted(pins)), resolver=f"uv {name}")


def _pip(reqs: Path, cons: Path, tmp: Path, python_version: str, args: Sequence[str]) -> Resolution:
    report = tmp / "report.json"
    argv = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
        "--disable-pip-version-check", "--only-binary", ":all:", "--python-version",
        python_version, "--target", str(tmp / "target"), "--report", str(report),
        "-c", str(cons), *args, "-r", str(reqs),
    ]  # fmt: skip
    _run(argv, "pip's resolver")
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
        pins = [
            (_canonical(i["metadata"]["name"]), str(i["metadata"]["version"]))
            for i in data["install"]
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RequirementError(f"pip's resolver wrote no usable report: {exc}") from exc
    from importlib.metadata import PackageNotFoundError, version

    try:
        name = version("pip")
    except PackageNotFoundError:
        name = "?"
    return Resolution(pins=tuple(sorted(pins)), resolver=f"pip {name}")
