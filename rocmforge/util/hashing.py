"""Hashing primitives: canonical JSON and streaming blake3 / sha256 digests of files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import blake3

from rocmforge.util.leanhash import file_blake3 as file_blake3

CHUNK = 1 << 20
#: From this size on, sha256 runs in a worker thread beside the caller's other work (both
#: release the GIL): a thread costs more than it saves below it.
THREADED = 8 << 20


class BackgroundHash:
    """Feed a hash object from one worker thread, in order: :meth:`update` returns at once.

    At most ``depth`` updates wait to be hashed; the data passed must not change until
    ``depth`` more :meth:`update` calls (or :meth:`result`) have returned. With the default
    depth of 1 that is the next call, so two buffers used in turn can be refilled safely; data
    nobody rewrites (bytes, a read-only mapping) can run further ahead, which lets a producer
    that stalls now and then (a writer throttled by the kernel) and the hashing overlap.
    :meth:`result` waits for the last update and returns the hash object.
    """

    def __init__(self, h: Any, *, depth: int = 1) -> None:
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self._h = h
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hash")
        self._pending: deque[Any] = deque()
        self._depth = depth

    def update(self, data: bytes | memoryview) -> None:
        """Hash ``data`` after everything given before, in the worker thread."""
        while len(self._pending) >= self._depth:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(self._h.update, data))

    def result(self) -> Any:
        """Wait for the updates and return the hash object."""
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._pool.shutdown(wait=True)
        return self._h


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
    if os.stat(path).st_size < THREADED:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                b3.update(chunk)
                sha.update(chunk)
        return b3.hexdigest(), sha.hexdigest()
    background = BackgroundHash(sha)  # sha256 (the slower) beside blake3 and the reads
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                background.update(chunk)
                b3.update(chunk)
    finally:
        background.result()
    return b3.hexdigest(), sha.hexdigest()


def file_sha256(path: Path | str) -> str:
    """Return the hex sha256 digest of a file, read in chunks."""
    import hashlib

    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha.update(chunk)
    return sha.hexdigest()
