"""Compare two wheels member by member (what differs when a rebuild is not byte-identical)."""

from __future__ import annotations

import zipfile
from pathlib import Path

__all__ = ["differing_members"]

_CHUNK = 1 << 20


def _same_bytes(
    za: zipfile.ZipFile, x: zipfile.ZipInfo, zb: zipfile.ZipFile, y: zipfile.ZipInfo
) -> bool:
    """Return True if members ``x`` of ``za`` and ``y`` of ``zb`` hold the same bytes (streamed)."""
    with za.open(x) as fa, zb.open(y) as fb:
        while True:
            ca, cb = fa.read(_CHUNK), fb.read(_CHUNK)
            if ca != cb:
                return False
            if not ca:
                return True


def differing_members(a: Path, b: Path) -> list[str]:
    """Return the members whose bytes (or presence) differ between wheels ``a`` and ``b``.

    Members present on one side only are named ``NAME (only in A)`` / ``NAME (only in B)``;
    identical members with different zip metadata (time, permissions, order) are named
    ``NAME (zip metadata)``. An unreadable archive is named ``(not a readable zip)``.
    """
    try:
        with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
            ia = {i.filename: i for i in za.infolist()}
            ib = {i.filename: i for i in zb.infolist()}
            out = [f"{n} (only in A)" for n in sorted(ia.keys() - ib.keys())]
            out += [f"{n} (only in B)" for n in sorted(ib.keys() - ia.keys())]
            for name in sorted(ia.keys() & ib.keys()):
                x, y = ia[name], ib[name]
                if x.CRC != y.CRC or x.file_size != y.file_size or not _same_bytes(za, x, zb, y):
                    out.append(name)
                elif (x.date_time, x.external_attr, x.compress_type) != (
                    y.date_time,
                    y.external_attr,
                    y.compress_type,
                ):
                    out.append(f"{name} (zip metadata)")
            if not out and [i.filename for i in za.infolist()] != [
                i.filename for i in zb.infolist()
            ]:
                out.append("(member order)")
            return out
    except (OSError, zipfile.BadZipFile):
        return ["(not a readable zip)"]
