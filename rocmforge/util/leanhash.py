"""A file's blake3 digest with nothing else imported (``os`` and ``blake3``).

:func:`file_blake3` is the one implementation: :mod:`rocmforge.util.hashing` re-exports it, and
``audit``'s reader (:mod:`rocmforge.store.readers`) calls it, the store classes not loaded.
"""

from __future__ import annotations

import os

import blake3

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from pathlib import Path


def file_blake3(path: Path | str) -> str:
    """Return the hex blake3 digest of a file (memory-mapped by blake3 for speed on big files)."""
    size = os.stat(path).st_size
    if size >= 1 << 22:
        return str(blake3.blake3(max_threads=blake3.blake3.AUTO).update_mmap(path).hexdigest())
    with open(path, "rb") as f:
        return blake3.blake3(f.read()).hexdigest()
