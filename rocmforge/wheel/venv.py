"""Venvs without pip: lay one out (or let ``python -m venv`` do it) and compute its paths.

Nothing here runs the venv's interpreter to learn its layout: the Python version comes from
``pyvenv.cfg`` and the scheme paths are those of a POSIX venv.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from rocmforge.errors import ToolchainError

__all__ = ["create_venv", "venv_python_version", "venv_scheme", "venv_site_packages"]


def create_venv(python: Path, venv: Path, *, version: str | None = None) -> None:
    """Create a venv without pip for ``python``; raise ToolchainError on failure.

    With ``version`` (the interpreter's full ``X.Y.Z``, known from the toolchain probe) the venv
    is laid out directly — ``pyvenv.cfg``, ``bin/python*`` symlinks, an empty site-packages —
    exactly as ``python -m venv --without-pip --symlinks`` would, without starting an interpreter
    (that costs ~70 ms, twice per build). Without it, ``python -m venv`` does the work.
    """
    if version is not None:
        _write_venv(python, venv, version)
        return
    try:
        subprocess.run(
            [os.fspath(python), "-m", "venv", "--without-pip", os.fspath(venv)],
            check=True,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise ToolchainError(f"{python}: interpreter not found, cannot create venv {venv}") from exc
    except OSError as exc:
        raise ToolchainError(f"{python}: cannot run to create venv {venv}: {exc}") from exc
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or exc.stdout or "").strip().splitlines()[-5:]
        raise ToolchainError(
            f"{python} -m venv {venv} failed with exit status {exc.returncode}: "
            + " | ".join(detail)
        ) from exc


def _write_venv(python: Path, venv: Path, version: str) -> None:
    real = Path(os.path.realpath(python))
    if not os.access(real, os.X_OK):
        raise ToolchainError(f"{python}: interpreter not found, cannot create venv {venv}")
    short = ".".join(version.split(".")[:2])
    try:
        (venv / "bin").mkdir(parents=True)
        (venv / "include").mkdir()
        (venv / "lib" / f"python{short}" / "site-packages").mkdir(parents=True)
        os.symlink("lib", venv / "lib64")
        for name in ("python", "python3", f"python{short}"):
            os.symlink(real, venv / "bin" / name)
        (venv / "pyvenv.cfg").write_text(
            f"home = {real.parent}\ninclude-system-site-packages = false\n"
            f"version = {version}\nexecutable = {real}\n",
            encoding="utf-8",
        )
    except OSError as exc:
        raise ToolchainError(f"cannot create venv {venv}: {exc}") from exc


def venv_python_version(venv: Path) -> str:
    """Return ``X.Y`` of the interpreter a venv was made from, read from its ``pyvenv.cfg``."""
    cfg = venv / "pyvenv.cfg"
    try:
        text = cfg.read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolchainError(f"{cfg}: not a venv ({exc.strerror or exc})") from exc
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip().lower()] = value.strip()
    for key in ("version", "version_info"):
        parts = values.get(key, "").split(".")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            return f"{parts[0]}.{parts[1]}"
    raise ToolchainError(f"{cfg}: no usable 'version' key")


def venv_site_packages(venv: Path) -> Path:
    """Return the venv's ``lib/pythonX.Y/site-packages`` (computed, without running Python)."""
    return venv / "lib" / f"python{venv_python_version(venv)}" / "site-packages"


def venv_scheme(prefix: Path, xy: str, distribution: str) -> dict[str, str]:
    """Return installer's scheme paths for ``distribution`` in a POSIX venv at ``prefix`` whose
    Python is ``xy`` (``3.11``)."""
    site = os.fspath(prefix / "lib" / f"python{xy}" / "site-packages")
    return {
        "purelib": site,
        "platlib": site,
        "scripts": os.fspath(prefix / "bin"),
        "data": os.fspath(prefix),
        "headers": os.fspath(prefix / "include" / "site" / f"python{xy}" / distribution),
    }
