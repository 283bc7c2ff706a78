"""Ninja's ``.ninja_log``: versions 5, 6 and 7, read strictly, finished or while ninja writes it.

The format is undocumented and has changed under the tools that read it: a first line
``# ninja log vN``, then one line per output of each finished edge, five tab-separated fields:
start and end (milliseconds since that ninja run began), the output's mtime, the output's path
and a hash of the command (hex; MurmurHash64A up to v6, rapidhash in v7, which is why a v7 log
restarts every hash). v6 (ninja 1.12) changed what the mtime field means, not the columns. An
output built twice in one log (two runs, a manifest restart) appears twice: the last line wins.

A log whose header is missing or names another version, or one with a malformed line (the
last line cut short included), is *foreign or truncated*: :func:`parse_ninja_log` raises
:class:`NinjaLogError` naming the file and the line, and the callers ignore such a log with one
warning. :class:`LiveNinjaLog` follows a log while ninja appends to it (ninja flushes each
finished edge): complete lines only, from the offset read so far.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from rocmforge.errors import RocmforgeError

#: The versions this reader knows; the columns are the same in all three.
VERSIONS = (5, 6, 7)
#: The header line's prefix.
HEADER = "# ninja log v"
#: A log larger than this is not read (a torch build's is ~3 MB).
MAX_BYTES = 256 * 1024 * 1024


class NinjaLogError(RocmforgeError):
    """A ``.ninja_log`` that is not one this reader knows (foreign, truncated, unreadable)."""


@dataclass(frozen=True, slots=True)
class NinjaEdge:
    """One line of the log: an output, when its edge started and ended (ms), its command hash."""

    start_ms: int
    end_ms: int
    output: str
    cmdhash: str

    @property
    def ms(self) -> int:
        """How long the edge ran, in milliseconds."""
        return max(0, self.end_ms - self.start_ms)


@dataclass(frozen=True, slots=True)
class NinjaLog:
    """A parsed log: its version and its lines (the last line of each output kept)."""

    version: int
    edges: tuple[NinjaEdge, ...]

    def durations(self) -> dict[str, int]:
        """``{output: ms}`` of every output in the log."""
        return {e.output: e.ms for e in self.edges}

    def runs(self) -> list[NinjaEdge]:
        """One line per edge (the outputs of one edge share start, end and hash), by start."""
        seen: dict[tuple[int, int, str], NinjaEdge] = {}
        for e in self.edges:
            seen.setdefault((e.start_ms, e.end_ms, e.cmdhash), e)
        return sorted(seen.values(), key=lambda e: (e.start_ms, e.end_ms, e.output))


def parse_header(line: str, *, where: str) -> int:
    """Return the version named by a log's first line; :class:`NinjaLogError` if foreign."""
    if not line.startswith(HEADER):
        raise NinjaLogError(f"{where}: not a ninja log (first line {line[:60]!r})")
    try:
        version = int(line[len(HEADER) :].strip())
    except ValueError:
        raise NinjaLogError(f"{where}: not a ninja log (first line {line[:60]!r})") from None
    if version not in VERSIONS:
        raise NinjaLogError(
            f"{where}: ninja log version {version}, this reader knows "
            + ", ".join(f"v{v}" for v in VERSIONS)
        )
    return version


def parse_line(line: str, *, where: str, number: int) -> NinjaEdge:
    """Return the edge of one log line; :class:`NinjaLogError` naming line ``number`` if bad."""
    fields = line.split("\t")
    if len(fields) != 5:
        raise NinjaLogError(f"{where}: line {number}: {len(fields)} fields, not 5: truncated?")
    start, end, mtime, output, cmdhash = fields
    try:
        s, e = int(start), int(end)
        int(mtime)
        int(cmdhash, 16)
    except ValueError:
        raise NinjaLogError(f"{where}: line {number}: not a ninja log line") from None
    if s < 0 or e < s or not output:
        raise NinjaLogError(f"{where}: line {number}: not a ninja log line")
    return NinjaEdge(start_ms=s, end_ms=e, output=output, cmdhash=cmdhash)


def parse_ninja_log(text: str, *, where: str) -> NinjaLog:
    """Parse a finished log's ``text`` (``where`` names it in errors)."""
    if not text:
        raise NinjaLogError(f"{where}: empty: truncated?")
    version = parse_header(text.split("\n", 1)[0], where=where)
    if not text.endswith("\n"):
        raise NinjaLogError(f"{where}: the last line is cut short: truncated")
    lines = text.split("\n")[:-1]
    latest: dict[str, NinjaEdge] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        edge = parse_line(line, where=where, number=number)
        latest.pop(edge.output, None)  # a rebuilt output moves to its latest place
        latest[edge.output] = edge
    return NinjaLog(version=version, edges=tuple(latest.values()))


def read_regular(path: str, *, limit: int = MAX_BYTES) -> bytes:
    """Read the regular file ``path`` without following a link at its last component.

    The build wrote it: a link, a FIFO or a device is refused (:class:`NinjaLogError`), and so
    is a file over ``limit`` bytes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise NinjaLogError(f"{path}: cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NinjaLogError(f"{path}: not a regular file")
        if st.st_size > limit:
            raise NinjaLogError(f"{path}: {st.st_size} bytes, over the {limit} read")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_ninja_log(path: str) -> tuple[str, NinjaLog]:
    """Return the text and the parse of the finished log at ``path``."""
    text = read_regular(path).decode("utf-8", "replace")
    return text, parse_ninja_log(text, where=path)


class LiveNinjaLog:
    """A log ninja is still writing: :meth:`poll` returns the edges finished since the last
    poll (complete lines only). A log that shrinks (ninja recompacts it when it starts) is read
    again from its start; a foreign one stops being read (``error`` says why)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.version: int | None = None
        self.error: str | None = None
        self._number = 0

    def poll(self) -> list[NinjaEdge]:
        """Read what was appended since the last call; [] when nothing (or unreadable)."""
        if self.error is not None:
            return []
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.error = f"{self.path}: not a regular file"
                return []
            if st.st_size < self.offset:  # rewritten (recompacted): start again
                self.offset, self.version, self._number = 0, None, 0
            if st.st_size == self.offset:
                return []
            os.lseek(fd, self.offset, os.SEEK_SET)
            data = os.read(fd, min(st.st_size - self.offset, 1 << 24))
        finally:
            os.close(fd)
        cut = data.rfind(b"\n")
        if cut < 0:
            return []
        self.offset += cut + 1
        out = []
        try:
            for raw in data[: cut + 1].decode("utf-8", "replace").split("\n")[:-1]:
                self._number += 1
                if self.version is None:
                    self.version = parse_header(raw, where=self.path)
                elif raw:
                    out.append(parse_line(raw, where=self.path, number=self._number))
        except NinjaLogError as exc:
            self.error = str(exc)
        return out
