"""Hashing primitives: canonical JSON and streaming blake3 / sha256 digests of files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import blake3

CHUNK = 1 << 20


def canonical_json(value: Any) -> bytes:
    """Return the canonical bytes of a JSON value: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def blake3_hex(data: bytes) -> str:
    """Return the hex blake3 digest of ``data``."""
    return blake3.blake3(data).hexdigest()


def file_digests(path: Path | str) -> tuple[str, str]:
    """Return ``(blake3_hex, sha256_hex)`` of a file, reading it once in chunks."""
    b3 = blake3.blake3()
    import hashlib  # ~15 ms (OpenSSL start-up): only paths that need sha256 pay for it

    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            b3.update(chunk)
            sha.update(chunk)
    return b3.hexdigest(), sha.hexdigest()


def file_blake3(path: Path | str) -> str:
    """Return the hex blake3 digest of a file (memory-mapped by blake3 for speed on big files)."""
    size = os.stat(path).st_size
    if size >= 1 << 22:
        return str(blake3.blake3(max_threads=blake3.blake3.AUTO).update_mmap(path).hexdigest())
    with open(path, "rb") as f:
        return blake3.blake3(f.read()).hexdigest()
