"""Wheel file names: the distribution, version, build tag and tags a name carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from packaging.utils import parse_wheel_filename

from rocmforge.errors import CheckError

__all__ = ["WheelName", "parse_wheel_name"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WheelName:
    """The parts of a wheel file name.

    ``distribution`` is the canonical (PEP 503) project name, ``version`` the normalized version,
    ``build`` the optional build tag as written, ``tags`` the ``python-abi-platform`` triple as
    written (compressed tag sets such as ``py2.py3`` are kept as they are).
    """

    distribution: str
    version: str
    build: str | None
    tags: str


def parse_wheel_name(filename: str) -> WheelName:
    """Parse a wheel file name (a bare name or a path); raise CheckError if it is not one."""
    name = PurePath(filename).name
    try:
        dist, version, build, _ = parse_wheel_filename(name)
    except ValueError as exc:
        raise CheckError(f"not a wheel file name: {filename!r} ({exc})") from exc
    parts = name[: -len(".whl")].split("-")
    return WheelName(
        distribution=str(dist),
        version=str(version),
        build=parts[2] if build else None,
        tags="-".join(parts[-3:]),
    )
