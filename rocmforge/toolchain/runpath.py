"""Where a wheel's libraries look for other libraries: ``DT_RUNPATH`` / ``DT_RPATH`` entries.

A wheel built with a pyenv (or other self-built) Python carries that interpreter's
``-Wl,-rpath,<prefix>/lib`` in every extension: a ``RUNPATH`` into the build machine
(``/root/.pyenv/versions/3.11.7/lib``). :func:`foreign_runpaths` finds, per shared library, the
entries that point neither inside the wheel (``$ORIGIN``-relative) nor into the toolchain root,
so the build can warn about them. ELF64 little-endian only, read with :mod:`struct` through
:func:`~rocmforge.toolchain.offload.elf_section` (``.dynamic`` and ``.dynstr``).
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections.abc import Sequence
from pathlib import Path

from rocmforge.toolchain.offload import OffloadError, elf_section, is_shared_library

_DYN = struct.Struct("<qQ")
DT_NULL, DT_RPATH, DT_RUNPATH = 0, 15, 29
#: Extensions bigger than this are not scanned in memory (their .dynamic is near the start,
#: but a whole-file read of a multi-GB torch library is not worth a warning).
MAX_SCAN_BYTES = 512 * 1024**2


def elf_runpaths(buf: bytes) -> list[str]:
    """Return the ``DT_RUNPATH`` and ``DT_RPATH`` entries of an ELF image, split on ``:``."""
    dyn, strs = elf_section(buf, ".dynamic"), elf_section(buf, ".dynstr")
    if dyn is None or strs is None:
        return []
    out: list[str] = []
    offset, size = dyn
    for pos in range(offset, offset + size - _DYN.size + 1, _DYN.size):
        tag, value = _DYN.unpack_from(buf, pos)
        if tag == DT_NULL:
            break
        if tag in (DT_RPATH, DT_RUNPATH) and value < strs[1]:
            start = strs[0] + value
            end = buf.find(b"\0", start, strs[0] + strs[1])
            text = buf[start : end if end >= 0 else strs[0] + strs[1]].decode("utf-8", "replace")
            out += [p for p in text.split(":") if p]
    return out


def _inside(path: str, roots: Sequence[str]) -> bool:
    if path.startswith(("$ORIGIN", "${ORIGIN}")):
        return True
    norm = os.path.normpath(path)
    return any(norm == r or norm.startswith(r.rstrip("/") + "/") for r in roots)


def foreign_runpaths(wheel: Path, *, allowed_roots: Sequence[str]) -> dict[str, list[str]]:
    """Return ``{library in the wheel: [runpath entries outside the wheel and allowed_roots]}``."""
    roots = [os.path.normpath(r) for r in allowed_roots if r and r != "/"]
    found: dict[str, list[str]] = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.is_dir() or not is_shared_library(info.filename):
                    continue
                if info.file_size > MAX_SCAN_BYTES:
                    continue
                buf = zf.read(info)
                if buf[:4] != b"\x7fELF":
                    continue
                try:
                    bad = [p for p in elf_runpaths(buf) if not _inside(p, roots)]
                except (OffloadError, struct.error):
                    continue  # a damaged library is the check's business, not this warning's
                if bad:
                    found[info.filename] = bad
    except (OSError, zipfile.BadZipFile) as exc:
        raise OffloadError(f"cannot read wheel {wheel}: {exc}") from exc
    return found
