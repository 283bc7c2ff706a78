"""Decode an 8-bit RGB or RGBA PNG (what headless Chromium's screenshots are) to RGB bytes.

The tests look at a screenshot's pixels; this is the whole of PNG they need (no interlacing,
no palette), so no imaging library is installed for it.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_rgb(path: Path) -> tuple[int, int, bytes]:
    """Return ``(width, height, rgb)`` of the PNG at ``path`` (row-major, 3 bytes a pixel)."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat = 8, []
    width = height = depth = ctype = interlace = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError(f"{path}: only 8-bit RGB/RGBA, not interlaced (got {depth}/{ctype})")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    out = bytearray()
    for y in range(height):
        start = y * (stride + 1)
        filt, row = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if filt == 1:
                row[i] = (row[i] + a) & 0xFF
            elif filt == 2:
                row[i] = (row[i] + b) & 0xFF
            elif filt == 3:
                row[i] = (row[i] + (a + b) // 2) & 0xFF
            elif filt == 4:
                row[i] = (row[i] + _paeth(a, b, c)) & 0xFF
        if bpp == 3:
            out += row
        else:
            for i in range(0, stride, 4):
                out += row[i : i + 3]
        prev = row
    return width, height, bytes(out)
