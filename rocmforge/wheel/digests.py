"""A wheel's sha256 and blake3: of a file on disk, or computed while the writer writes it."""

from __future__ import annotations

import hashlib
import mmap
import os
from pathlib import Path
from typing import IO, Any

import blake3

from rocmforge.errors import CheckError
from rocmforge.util.hashing import BackgroundHash, file_digests

__all__ = ["HASH_DEPTH", "DigestingWriter", "wheel_digests"]

_CHUNK = 1 << 20
#: How many chunks the hashing threads may lag behind a copy (read-only mappings of the new
#: file's pages, or fresh bytes: nothing rewrites them).
HASH_DEPTH = 32


def wheel_digests(path: Path) -> dict[str, str]:
    """Return ``{"sha256": ..., "blake3": ...}`` of a wheel file, reading it once."""
    try:
        b3, sha = file_digests(path)
    except OSError as exc:
        raise CheckError(f"{path}: cannot read wheel: {exc}") from exc
    return {"sha256": sha, "blake3": b3}


class DigestingWriter:
    """The file ``zipfile`` writes a normalized wheel to; computes its sha256 and blake3 on the way.

    Every byte of the file is hashed once, in file order, without reading the file again for the
    bytes that matter: a big stored member's header and data are hashed as they are written (the
    header's final form, which ``zipfile`` rewrites after the data, is given in advance by
    :meth:`expect_header` and checked when it is rewritten); what ``zipfile`` writes otherwise
    (small members, whose headers it rewrites, and the central directory) is read back from the
    file once it can no longer change (:meth:`settle`). A rewrite of hashed bytes with other bytes
    makes the digests void (:meth:`digests` returns None and the caller hashes the file afresh).
    """

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._fd = out.fileno()
        self._pos = self._end = self._hashed = 0
        # fed only bytes nobody rewrites (see place()), so they may queue up
        self._sha = BackgroundHash(hashlib.sha256(), depth=HASH_DEPTH)
        self._b3 = BackgroundHash(blake3.blake3(), depth=HASH_DEPTH)
        self._header: bytes | None = None  # the final header of the next member, hashed ahead
        self._fixed: tuple[int, bytes] = (0, b"")  # hashed ahead of its final write
        self._direct = False
        self._valid = True
        self._placed = 0  # bytes copied into the file ahead of the write() that hashes them
        self._kernel_copy = True  # False once copy_file_range failed (another file system)

    def tell(self) -> int:
        """Return the current position."""
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move the position (``zipfile`` goes back to rewrite a member's header)."""
        self._pos = self._out.seek(offset, whence)
        return self._pos

    def flush(self) -> None:
        """Flush the underlying file."""
        self._out.flush()

    def write(self, data: Any) -> int:
        """Write ``data`` at the current position, hashing it if it is final already.

        After :meth:`place`, ``data`` is what it read back: it is hashed, and not written again.
        """
        view = memoryview(data)
        n = view.nbytes
        start = self._pos
        if self._placed:
            if n > self._placed or not self._direct or start != self._hashed:
                raise OSError(f"placed bytes written out of order at {start}")
            self._feed(view)
            self._placed -= n
            self._hashed += n
            self._pos += n
            self._end = max(self._end, self._pos)
            if not self._placed:
                self._out.seek(self._pos)
            return n
        if not self._valid:
            pass
        elif start < self._hashed:  # only the header given in advance may be (re)written here
            at, fixed = self._fixed
            inside = at <= start and start + n <= at + len(fixed)
            if not inside or fixed[start - at : start - at + n] != view:
                self._valid = False
        elif start == self._hashed and self._header is not None:
            header, self._header = self._header, None
            if n != len(header):
                self._valid = False
            else:
                self._feed(header)
                self._fixed = (start, header)
                self._hashed += n
                self._direct = True
        elif start == self._hashed and self._direct:
            self._feed(view)
            self._hashed += n
        self._out.write(view)
        self._pos += n
        self._end = max(self._end, self._pos)
        return n

    def expect_header(self, header: bytes) -> None:
        """Hash what is written so far; the next member's header will end up as ``header``, and
        its data is hashed as it is written, until :meth:`end_direct`."""
        self.settle()
        self._header = header

    def place(self, fd: int, offset: int, size: int) -> memoryview:
        """Copy up to ``size`` bytes of ``fd`` at ``offset`` to the current position with
        ``copy_file_range`` (in the kernel, as ``cp`` does) and return them as this file holds
        them now: a read-only mapping of the new file's pages (no copy into this process); empty
        when ``fd`` ended. The caller passes them to :meth:`write` next, which hashes them. Where
        the kernel cannot copy between the two files the bytes are read (new bytes each time),
        returned, and written by :meth:`write`. Either way nobody rewrites what is returned, so
        the hashing threads may lag behind by several chunks.
        """
        if self._kernel_copy:
            self._out.flush()
            try:
                got = os.copy_file_range(fd, self._fd, size, offset, self._pos)
            except OSError:
                self._kernel_copy = False
            else:
                if not got:
                    return memoryview(b"")
                start = self._pos - self._pos % mmap.ALLOCATIONGRANULARITY
                mapped = mmap.mmap(
                    self._fd, self._pos + got - start, access=mmap.ACCESS_READ, offset=start
                )
                self._placed = got
                return memoryview(mapped)[self._pos - start :]
        return memoryview(os.pread(fd, size, offset))

    def end_direct(self) -> None:
        """Stop hashing writes as they come (the member given to :meth:`expect_header` ended)."""
        self._direct = False
        self._header = None

    def settle(self) -> None:
        """Hash the bytes written since the last hashed one, read back from the file."""
        if not self._valid or self._end <= self._hashed:
            return
        self._out.flush()
        while self._hashed < self._end:
            chunk = os.pread(self._fd, min(_CHUNK, self._end - self._hashed), self._hashed)
            if not chunk:
                self._valid = False
                return
            self._feed(chunk)
            self._hashed += len(chunk)

    def _feed(self, data: Any) -> None:
        self._sha.update(data)
        self._b3.update(data)

    def digests(self) -> dict[str, str] | None:
        """Return the sha256 and blake3 of the whole file, or None if they could not be kept."""
        self.settle()
        sha, b3 = self._sha.result(), self._b3.result()
        if not self._valid:
            return None
        return {"sha256": sha.hexdigest(), "blake3": b3.hexdigest()}

    def close(self) -> None:
        """Stop the hashing threads (idempotent; the file itself is the caller's)."""
        self._sha.result()
        self._b3.result()
