"""Atomic file writes: a temp file in the same directory, fsync, rename — never a half file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically; the parent directory is created if missing.

    Raises :class:`OSError`; callers convert it into their own error with context. On any
    failure the temp file is removed and ``path`` is untouched.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_bytes(value: Any) -> bytes:
    """Return ``value`` as readable, stable JSON: sorted keys, indented, trailing newline."""
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()
