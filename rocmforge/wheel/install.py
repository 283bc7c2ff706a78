"""Offline installs of wheels into a venv-shaped tree with pypa/installer (no pip at all).

The scheme paths are computed from the venv's layout (:mod:`rocmforge.wheel.venv`), so an
install never runs the venv's interpreter and never touches the network; RECORD is verified
against the archive first.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

import installer
from installer.destinations import SchemeDictionaryDestination
from installer.exceptions import InstallerError
from installer.sources import WheelFile

from rocmforge.errors import CheckError, RocmforgeError
from rocmforge.wheel.names import parse_wheel_name
from rocmforge.wheel.venv import venv_python_version, venv_scheme

__all__ = ["INSTALLER_NAME", "install_wheel", "install_wheels"]

#: Value written to ``.dist-info/INSTALLER`` by :func:`install_wheels`.
INSTALLER_NAME = b"rocmforge\n"


def install_wheel(
    wheel: Path, prefix: Path, *, xy: str, interpreter: str, error: type[RocmforgeError]
) -> None:
    """Install ``wheel`` into the venv-shaped tree ``prefix`` with pypa/installer, offline, after
    verifying its RECORD; a failure raises ``error`` naming the wheel and ``prefix``."""
    try:
        name = parse_wheel_name(wheel.name)
    except CheckError as exc:
        raise error(str(exc)) from exc
    destination = SchemeDictionaryDestination(
        scheme_dict=venv_scheme(prefix, xy, name.distribution),
        interpreter=interpreter,
        script_kind="posix",
        hash_algorithm="sha256",
    )
    try:
        with WheelFile.open(wheel) as source:
            source.validate_record(validate_contents=True)
            installer.install(source, destination, {"INSTALLER": INSTALLER_NAME})
    except (InstallerError, ValueError, OSError, zipfile.BadZipFile) as exc:
        raise error(f"{wheel}: cannot install into {prefix}: {exc}") from exc


def install_wheels(
    wheels: Sequence[Path],
    venv: Path,
    *,
    interpreter: str,
    error: type[RocmforgeError] = CheckError,
) -> None:
    """Install each wheel into ``venv`` with pypa/installer, offline, after verifying its RECORD.

    ``interpreter`` goes into the shebang of generated scripts; it may differ from the host path of
    the venv's python (the venv can be mounted elsewhere inside a sandbox). Failures raise
    ``error`` (CheckError by default; pass RequirementError when installing build requirements)
    naming the wheel.
    """
    xy = venv_python_version(venv)
    for wheel in wheels:
        install_wheel(wheel, venv, xy=xy, interpreter=interpreter, error=error)
