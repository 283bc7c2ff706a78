"""Portable binaries: find host-specific code generation (``-march=native``) in a finished build.

A wheel compiled with ``-march=native`` (or ``-mtune=native``, ``-mcpu=native``) runs only on CPUs
like the build machine's; elsewhere it dies with "illegal instruction". Many projects turn it on
by default. After a build rocmforge looks in two places:

- the build log, for a compiler command line holding such a flag (setuptools, ``set -x`` steps
  and verbose build systems print them);
- every compiled object in the wheels (``.so``, ``.o``, ``.a``), for GCC's record of its options
  (``DW_AT_producer`` with ``-g``, ``.GCC.command.line`` with ``-frecord-gcc-switches``): either
  the flag itself or the cache-size parameters that only ``-march=native`` adds.

Each finding names the file and the fix. By default they are warnings, recorded in the entry's
``meta.json`` (``portability``) and shown by ``show``; ``[check] portable = true`` fails the build.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_FLAG = re.compile(rb"-m(?:arch|tune|cpu)=native\b")
# GCC's driver expands -march=native into the CPU's flags plus these cache parameters, which
# nothing else adds: their presence in a recorded producer string means "native".
_EXPANDED = re.compile(rb"GNU [A-Za-z+0-9]+ [^\x00]*?--param[= ]l1-cache-size=\d+")
_OBJECT = re.compile(r"\.(so(\.\d+)*|o|a)$")
FIX = (
    "drop the flag (the project's own option, e.g. an environment variable its setup.py reads, "
    "or a config setting) or target a portable baseline such as -march=x86-64-v2"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One place where host-specific code generation was seen."""

    file: str
    flag: str

    def message(self) -> str:
        """The warning line: the file, what was found, why it matters and the fix."""
        return (
            f"{self.file}: compiled with {self.flag}: the wheel may run only on CPUs like this "
            f"build machine's ('illegal instruction' elsewhere); {FIX}"
        )

    def to_json(self) -> dict[str, str]:
        """The record kept in ``meta.json``."""
        return {"file": self.file, "flag": self.flag}


def _in_bytes(data: bytes) -> str | None:
    m = _FLAG.search(data)
    if m:
        return m.group(0).decode()
    if _EXPANDED.search(data):
        return "-march=native (expanded by GCC)"
    return None


def scan_log(log: Path) -> list[Finding]:
    """Return the first finding per distinct flag in the build log at ``log``."""
    found: dict[str, Finding] = {}
    try:
        with open(log, "rb") as f:
            for n, line in enumerate(f, 1):
                for m in _FLAG.finditer(line):
                    flag = m.group(0).decode()
                    found.setdefault(flag, Finding(file=f"{log.name} line {n}", flag=flag))
    except OSError:
        return []
    return list(found.values())


def scan_wheel(wheel: Path) -> list[Finding]:
    """Return one finding per compiled object of ``wheel`` that records host-specific flags."""
    out = []
    try:
        with zipfile.ZipFile(wheel) as z:
            for name in sorted(z.namelist()):
                if not _OBJECT.search(name):
                    continue
                flag = _in_bytes(z.read(name))
                if flag:
                    out.append(Finding(file=f"{wheel.name}:{name}", flag=flag))
    except (OSError, zipfile.BadZipFile):
        return []
    return out


def scan_build(log: Path, wheels: Sequence[Path]) -> tuple[Finding, ...]:
    """Return every finding of a finished build: its log, then its wheels' compiled objects."""
    found = scan_log(log)
    for w in wheels:
        found.extend(scan_wheel(w))
    return tuple(found)
