"""Big members of a normalized wheel: the store probe, the kernel copy of a stored member and
the block deflate on several threads.

A member of :data:`STORE_PROBE_MIN` bytes or more whose start does not deflate well is stored
(:func:`incompressible`); a stored one is copied in the kernel (:func:`copy_stored`), any other
is deflated in blocks on several cores (:func:`deflate_blocks`). Both write the member's header
and register it with the ``zipfile`` writer as it would, so the bytes are those of the plain
``zipfile`` path (the byte identity is tested).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import struct
import zipfile
import zlib
from typing import IO, Any

from rocmforge.util.hashing import BackgroundHash
from rocmforge.wheel.digests import HASH_DEPTH, DigestingWriter
from rocmforge.wheel.record import urlsafe_b64

__all__ = [
    "COMPRESS_LEVEL",
    "STORE_PROBE_MIN",
    "STORE_PROBE_RATIO",
    "STORE_PROBE_SIZE",
    "copy_stored",
    "deflate_blocks",
    "incompressible",
    "stored_data_offset",
]

#: Deflate level used for every entry; part of what makes the bytes reproducible.
COMPRESS_LEVEL = 6
#: Chunk of the direct copy of a big stored member (fewer hand-offs to the hashing threads).
_DIRECT_CHUNK = 1 << 20
#: A big member to deflate is deflated in blocks of this size, on up to _DEFLATERS threads
#: (more would wait for the one inflating the source, ~340 MB/s against ~40 MB/s a deflater).
_BLOCK = 1 << 20
_DEFLATERS = 8
#: The input's cached pages are dropped after each this many bytes of a big member are copied.
_DROP_EVERY = 64 << 20
#: Members at least this big are probed before deflating (see :func:`incompressible`).
STORE_PROBE_MIN = 64 << 20
#: How much of a big member is test-deflated to decide whether it is stored instead.
STORE_PROBE_SIZE = 4 << 20
#: A probe that deflates to more than this fraction of its size marks the member incompressible.
STORE_PROBE_RATIO = 0.95


def incompressible(head: bytes) -> bool:
    """Return True if ``head`` (the start of a big member) does not deflate to less than 95 %.

    Deflating already-compressed or random data is slow (~40 MB/s) and gains nothing; such big
    members are stored. The decision depends only on the member's bytes, so it is reproducible.
    """
    deflater = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15)
    packed = len(deflater.compress(head)) + len(deflater.flush())
    return packed > STORE_PROBE_RATIO * len(head)


def stored_data_offset(src: zipfile.ZipFile, fd: int, info: zipfile.ZipInfo) -> int | None:
    """Return where a plain stored member's bytes start in the file ``fd``, after ``zipfile``
    has checked its local header (signature, name, flags); None if it is not plain stored."""
    if (
        info.compress_type != zipfile.ZIP_STORED
        or info.flag_bits & 0x1  # encrypted
        or info.compress_size != info.file_size
    ):
        return None
    with src.open(info):  # validates the local header as a read would
        pass
    header = os.pread(fd, 30, info.header_offset)
    if len(header) != 30:
        raise zipfile.BadZipFile(f"truncated local header of {info.filename}")
    name_len, extra_len = struct.unpack_from("<HH", header, 26)
    return int(info.header_offset) + 30 + int(name_len) + int(extra_len)


def _drop_cache(fd: int, start: int, end: int) -> None:
    """Let the kernel drop the cached pages of ``fd`` in ``[start, end)`` (already read)."""
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)


def _open_member(dst: zipfile.ZipFile, sink: DigestingWriter, zinfo: zipfile.ZipInfo) -> None:
    """Put ``zinfo``'s header where ``dst``'s next member goes, as ``ZipFile._open_to_write``
    does (its private ``start_dir``, ``_writecheck`` and ``_didModify``: the byte identity
    with the ``zipfile`` path is tested); the caller writes the header and the data."""
    registry: Any = dst
    sink.seek(dst.start_dir)
    zinfo.header_offset = sink.tell()
    registry._writecheck(zinfo)
    registry._didModify = True


def _close_member(dst: zipfile.ZipFile, sink: DigestingWriter, zinfo: zipfile.ZipInfo) -> None:
    """Register the member ``zinfo`` written up to ``sink``'s position with ``dst``, as
    ``zipfile``'s writer does when a member is closed."""
    dst.start_dir = sink.tell()
    dst.filelist.append(zinfo)
    dst.NameToInfo[zinfo.filename] = zinfo


class _MemberCheck:
    """RECORD's hash and the CRC-32 of one member, fed together (one worker thread)."""

    def __init__(self, algorithm: str | None) -> None:
        self.hash = hashlib.new(algorithm) if algorithm else None
        self.crc = 0

    def update(self, data: Any) -> None:
        """Feed ``data`` to both."""
        if self.hash is not None:
            self.hash.update(data)
        self.crc = zlib.crc32(data, self.crc)


def copy_stored(
    fd: int,
    offset: int,
    info: zipfile.ZipInfo,
    dst: zipfile.ZipFile,
    new: zipfile.ZipInfo,
    sink: DigestingWriter,
    algorithm: str | None,
    *,
    verify: bool,
) -> tuple[str | None, int]:
    """Copy a big stored member's bytes (at ``offset`` in ``fd``) into a stored member of ``dst``.

    The member's final header (the source's CRC and sizes) is known before its data, so it is
    written once and the member registered with ``dst`` as ``zipfile`` does after a write (its
    private ``start_dir``/``_writecheck``: the byte identity with the ``zipfile`` path is
    tested); ``zipfile``'s writer, which would compute the CRC again, is not used.
    The bytes are copied in the kernel (``copy_file_range``: cheaper than writing from a user
    buffer here) and read back from the new file, into one of two reused buffers, for
    ``sink``'s digests of the wheel (a worker thread) and, with ``verify``, RECORD's hash and
    the CRC (another worker), compared with RECORD by the caller and with the source's CRC
    here (the check a ``zipfile`` read makes): every hash is of the bytes written. Without
    ``verify`` the caller's install checks both (see
    :func:`rocmforge.wheel.writer.normalize_wheel`).
    The input's cached pages are dropped behind the copy, so that the output's pages do not
    come from fresh memory (the page cache would otherwise hold the wheel twice).
    Returns (urlsafe digest or None, size).
    """
    size = info.file_size
    final = copy.copy(new)
    final.compress_type = zipfile.ZIP_STORED
    final.flag_bits = 0
    final.CRC = info.CRC
    final.compress_size = final.file_size = size
    header = final.FileHeader(size * 1.05 > zipfile.ZIP64_LIMIT)  # zipfile's zip64 choice
    check = _MemberCheck(algorithm) if verify else None
    feed = BackgroundHash(check, depth=HASH_DEPTH) if check is not None else None
    done = 0
    try:
        _open_member(dst, sink, final)
        sink.expect_header(header)
        sink.write(header)
        while done < size:
            data = sink.place(fd, offset + done, min(_DIRECT_CHUNK, size - done))
            got = len(data)
            if got <= 0:
                raise zipfile.BadZipFile(f"{info.filename}: truncated member data")
            if feed is not None:
                feed.update(data)
            sink.write(data)
            done += got
            if done % _DROP_EVERY == 0 or done == size:
                _drop_cache(fd, offset + done - (done - 1) % _DROP_EVERY - 1, offset + done)
    finally:
        sink.end_direct()
        if feed is not None:
            feed.result()
    _close_member(dst, sink, final)
    if check is not None and check.crc != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")
    digest = check.hash if check is not None else None
    return (urlsafe_b64(digest.digest()) if digest is not None else None), done


def _deflate_block(block: bytes, window: bytes, last: bool) -> bytes:
    """Raw deflate of one block at :data:`COMPRESS_LEVEL`, primed with the 32 KiB before it and
    ended by a sync flush (the final block: the stream's end), as pigz splits a stream."""
    if window:
        deflater = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15, zdict=window)
    else:
        deflater = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15)
    return deflater.compress(block) + deflater.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def deflate_blocks(
    stream: IO[bytes],
    head: bytes,
    info: zipfile.ZipInfo,
    dst: zipfile.ZipFile,
    new: zipfile.ZipInfo,
    sink: DigestingWriter,
    algorithm: str | None,
) -> tuple[str | None, int]:
    """Deflate a big member read from ``stream`` (``head`` already read from it) into ``dst`` in
    blocks of :data:`_BLOCK`, compressed by up to :data:`_DEFLATERS` threads (zlib releases the
    GIL) and written in order.

    Each block is deflated on its own, primed with the 32 KiB before it, and all but the last
    end with a sync flush: the result is one valid deflate stream whose bytes depend on the
    block size and zlib, not on how many threads made it (a single-stream deflate of a 10 GB
    torch library is ~4 minutes at ~40 MB/s; the blocks cost ~0.1 % in size). The header is
    written first and rewritten with the CRC (the source's: ``zipfile`` checks it at the end of
    the read) and the compressed size, as ``zipfile`` does; the member is registered with
    ``dst`` as in :func:`copy_stored`. Returns (urlsafe digest of the content or None, size).
    """
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    size = info.file_size
    zinfo = copy.copy(new)
    zinfo.compress_type = zipfile.ZIP_DEFLATED
    zinfo.flag_bits = 0
    zinfo.CRC = zinfo.compress_size = 0
    zinfo.file_size = size
    zip64 = size * 1.05 > zipfile.ZIP64_LIMIT  # zipfile's choice, made before the data
    _open_member(dst, sink, zinfo)
    sink.write(zinfo.FileHeader(zip64))
    h = hashlib.new(algorithm) if algorithm else None
    feed = BackgroundHash(h, depth=HASH_DEPTH) if h is not None else None
    threads = max(1, min(_DEFLATERS, len(os.sched_getaffinity(0))))
    pending: deque[Future[bytes]] = deque()
    done = packed = 0
    window = b""
    block = head[:_BLOCK]
    rest = head[_BLOCK:]
    try:
        with ThreadPoolExecutor(threads, thread_name_prefix="deflate") as pool:
            while True:
                if len(block) < _BLOCK and done + len(block) < size:
                    block += stream.read(_BLOCK - len(block))
                if not block:
                    raise zipfile.BadZipFile(f"{info.filename}: truncated member data")
                done += len(block)
                if done > size:
                    raise zipfile.BadZipFile(f"{info.filename}: longer than its header says")
                if feed is not None:
                    feed.update(block)
                pending.append(pool.submit(_deflate_block, block, window, done == size))
                while pending and (done == size or len(pending) > 2 * threads or pending[0].done()):
                    data = pending.popleft().result()
                    sink.write(data)
                    packed += len(data)
                if done == size:
                    break
                window = block[-(32 << 10) :]
                block, rest = rest[:_BLOCK], rest[_BLOCK:]
        if stream.read(1):  # also lets zipfile check the CRC at the end of the member
            raise zipfile.BadZipFile(f"{info.filename}: longer than its header says")
    finally:
        if feed is not None:
            feed.result()
    end = sink.tell()
    zinfo.CRC = info.CRC
    zinfo.compress_size = packed
    if not zip64 and packed > zipfile.ZIP64_LIMIT:
        raise zipfile.LargeZipFile(f"{info.filename}: compressed size needs ZIP64")
    sink.seek(zinfo.header_offset)
    sink.write(zinfo.FileHeader(zip64))
    sink.seek(end)
    _close_member(dst, sink, zinfo)
    return (urlsafe_b64(h.digest()) if h is not None else None), done
