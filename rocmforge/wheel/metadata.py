"""What a wheel says of itself in its ``*.dist-info/METADATA``: the ``Requires-Dist`` lines."""

from __future__ import annotations

import zipfile
from email.parser import BytesParser
from pathlib import Path


def requires_dist(wheel: Path) -> list[str]:
    """Return the ``Requires-Dist`` lines of a wheel's METADATA (empty if unreadable)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            found = [n for n in z.namelist() if n.count("/") == 1]
            name = next((n for n in found if n.endswith(".dist-info/METADATA")), None)
            if name is None:
                return []
            meta = BytesParser().parsebytes(z.read(name), headersonly=True)
    except (OSError, zipfile.BadZipFile, KeyError):
        return []
    return [str(v) for v in meta.get_all("Requires-Dist") or []]
