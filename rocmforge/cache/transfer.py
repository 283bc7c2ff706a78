"""Moving blob bytes: one pass from a stream to a file with the digests computed on the way.

A substituted wheel is read once into a large buffer, and from that same buffer it is hashed
(sha256, and blake3 for wheels) and written: no second read of the data, no per-chunk copies
in Python. sha256 (the slowest part, ~1.9 GB/s with SHA-NI) runs in a worker thread on chunk
*k* while the caller's thread hashes blake3, writes chunk *k* and reads chunk *k+1* into the
other buffer (both hashers release the GIL): with a second core free the copy can cost about
as much as the sha256 alone; on a loaded machine the threads take turns and it costs its CPU
time (~0.5 s per 500 MB, against ~0.2 s for ``cp``'s in-kernel copy). Starting writeback
while streaming (``sync_file_range``) was tried and dropped: it blocked the writes (0.77 s ->
1.27 s median).

A push of a local file to a ``file://`` cache needs no hashing (the digest comes from the
entry's meta.json): :func:`copy_file` lets the kernel copy (``copy_file_range``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import Future

# hashlib (OpenSSL start-up) and threads are imported on first use: a realize that
# only asks whether caches are configured must not pay for them.

#: Bytes per read: large enough that per-call overhead vanishes, small enough to stay in cache.
CHUNK = 1 << 20
#: Below this a stream is copied in the caller's thread alone (a thread costs more than it saves).
_THREADED = 4 * CHUNK


@dataclass(frozen=True, slots=True)
class Copied:
    """What :func:`copy_hashing` moved: the byte count and the hex digests."""

    size: int
    sha256: str | None
    blake3: str | None


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to ``fd``."""
    data = memoryview(data)
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _fill(readinto: Callable[[memoryview], int | None], buf: memoryview) -> int:
    """Read into ``buf`` until it is full or the stream ends; return the byte count."""
    got = 0
    while got < len(buf):
        n = readinto(buf[got:])
        if not n:
            break
        got += n
    return got


def copy_hashing(
    src: object, fd: int, *, limit: int, blake3: bool, sha256: bool = True
) -> Copied:
    """Copy the stream ``src`` into the open file ``fd``, hashing in the same pass.

    ``src`` has ``readinto`` (a file, an HTTP response) or ``read``. Reading stops once more
    than ``limit`` bytes came (the returned size then exceeds ``limit``: the caller refuses).
    ``blake3`` also computes the blake3 digest; ``sha256=False`` skips sha256 (a wheel, whose
    signed blake3 is what is checked: ~3x faster to compute). The file is not fsynced here.
    """
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    import blake3 as b3mod

    readinto = getattr(src, "readinto", None)
    if readinto is None:
        read = src.read  # type: ignore[attr-defined]

        def readinto(buf: memoryview) -> int:
            data = read(len(buf))
            buf[: len(data)] = data
            return len(data)

    sha = hashlib.sha256() if sha256 else None
    b3 = b3mod.blake3() if blake3 else None
    bufs = [memoryview(bytearray(CHUNK)), memoryview(bytearray(CHUNK))]
    threaded = sha is not None and limit >= _THREADED
    pool = ThreadPoolExecutor(1, thread_name_prefix="sha256") if threaded else None
    pending: Future[None] | None = None
    size = 0
    try:
        i = 0
        while True:
            n = _fill(readinto, bufs[i])
            if not n:
                break
            size += n
            if size > limit:
                break
            chunk = bufs[i][:n]
            if pool is not None:
                # sha256 of the previous chunk is done before this one starts (order), and the
                # buffer it read is not refilled before that (two buffers, alternating).
                if pending is not None:
                    pending.result()
                pending = pool.submit(sha.update, chunk)  # type: ignore[union-attr]
            elif sha is not None:
                sha.update(chunk)
            if b3 is not None:
                b3.update(chunk)
            write_all(fd, chunk)
            i ^= 1
        if pending is not None:
            pending.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return Copied(
        size,
        sha.hexdigest() if sha is not None else None,
        b3.hexdigest() if b3 is not None else None,
    )


def copy_file(src: str, fd: int) -> None:
    """Copy the file ``src`` into the open file ``fd`` in the kernel (no hashing, no fsync)."""
    with open(src, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        done = 0
        try:
            while done < size:
                n = os.copy_file_range(f.fileno(), fd, size - done)
                if n == 0:
                    break
                done += n
        except OSError:
            # Not supported between these filesystems: a plain read/write loop from here.
            buf = memoryview(bytearray(CHUNK))
            f.seek(done)
            while n := f.readinto(buf):
                write_all(fd, buf[:n])
