"""Wheel utilities: parse names, make venvs, install offline, normalize to reproducible bytes.

Installing uses pypa/installer with scheme paths computed from the venv's layout, so it never runs
the venv's interpreter and never touches the network (there is no pip involved at all).
Normalizing rewrites a wheel so that two builds of the same inputs give the same bytes: sorted
entries, fixed timestamps, fixed permissions and a fixed compression level. The contents of each
file are left alone, so RECORD stays valid; RECORD is verified while the wheel is rewritten.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import csv
import hashlib
import io
import mmap
import os
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import IO, Any

import blake3
import installer
from installer.destinations import SchemeDictionaryDestination
from installer.exceptions import InstallerError
from installer.sources import WheelFile
from packaging.utils import parse_wheel_filename

from rocmforge.errors import CheckError, RocmforgeError, ToolchainError
from rocmforge.util.fsutil import fsync_path, open_regular
from rocmforge.util.hashing import THREADED, BackgroundHash, file_digests

__all__ = [
    "WheelName",
    "create_venv",
    "install_wheels",
    "normalize_wheel",
    "parse_wheel_name",
    "venv_site_packages",
    "wheel_digests",
]

#: Oldest timestamp a zip entry can carry (the DOS epoch), as seconds since the Unix epoch.
ZIP_MIN_EPOCH = 315532800  # 1980-01-01T00:00:00Z
#: Newest timestamp a zip entry can carry.
ZIP_MAX_EPOCH = 4354819198  # 2107-12-31T23:59:58Z
#: Deflate level used for every entry; part of what makes the bytes reproducible.
COMPRESS_LEVEL = 6
#: Value written to ``.dist-info/INSTALLER`` by :func:`install_wheels`.
INSTALLER_NAME = b"rocmforge\n"

_CHUNK = 1 << 20
#: Chunk of the direct copy of a big stored member (fewer hand-offs to the hashing threads).
_DIRECT_CHUNK = 1 << 20
#: How many such chunks the hashing threads may lag behind the copy (read-only mappings of the
#: new file's pages, or fresh bytes: nothing rewrites them).
_QUEUED = 32
#: A big member to deflate is deflated in blocks of this size, on up to _DEFLATERS threads
#: (more would wait for the one inflating the source, ~340 MB/s against ~40 MB/s a deflater).
_BLOCK = 1 << 20
_DEFLATERS = 8
#: The input's cached pages are dropped after each this many bytes of a big member are copied.
_DROP_EVERY = 64 << 20
#: Members at least this big are probed before deflating (see :func:`_incompressible`).
STORE_PROBE_MIN = 64 << 20
#: How much of a big member is test-deflated to decide whether it is stored instead.
STORE_PROBE_SIZE = 4 << 20
#: A probe that deflates to more than this fraction of its size marks the member incompressible.
STORE_PROBE_RATIO = 0.95
_WEAK_HASHES = frozenset({"md5", "sha1"})
_UNSIGNED_RECORD_FILES = ("RECORD", "RECORD.jws", "RECORD.p7s")


@dataclass(frozen=True, slots=True, kw_only=True)
class WheelName:
    """The parts of a wheel file name.

    ``distribution`` is the canonical (PEP 503) project name, ``version`` the normalized version,
    ``build`` the optional build tag as written, ``tags`` the ``python-abi-platform`` triple as
    written (compressed tag sets such as ``py2.py3`` are kept as they are).
    """

    distribution: str
    version: str
    build: str | None
    tags: str


def parse_wheel_name(filename: str) -> WheelName:
    """Parse a wheel file name (a bare name or a path); raise CheckError if it is not one."""
    name = PurePath(filename).name
    try:
        dist, version, build, _ = parse_wheel_filename(name)
    except ValueError as exc:
        raise CheckError(f"not a wheel file name: {filename!r} ({exc})") from exc
    parts = name[: -len(".whl")].split("-")
    return WheelName(
        distribution=str(dist),
        version=str(version),
        build=parts[2] if build else None,
        tags="-".join(parts[-3:]),
    )


def create_venv(python: Path, venv: Path, *, version: str | None = None) -> None:
    """Create a venv without pip for ``python``; raise ToolchainError on failure.

    With ``version`` (the interpreter's full ``X.Y.Z``, known from the toolchain probe) the venv
    is laid out directly — ``pyvenv.cfg``, ``bin/python*`` symlinks, an empty site-packages —
    exactly as ``python -m venv --without-pip --symlinks`` would, without starting an interpreter
    (that costs ~70 ms, twice per build). Without it, ``python -m venv`` does the work.
    """
    if version is not None:
        _write_venv(python, venv, version)
        return
    try:
        subprocess.run(
            [os.fspath(python), "-m", "venv", "--without-pip", os.fspath(venv)],
            check=True,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise ToolchainError(f"{python}: interpreter not found, cannot create venv {venv}") from exc
    except OSError as exc:
        raise ToolchainError(f"{python}: cannot run to create venv {venv}: {exc}") from exc
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or exc.stdout or "").strip().splitlines()[-5:]
        raise ToolchainError(
            f"{python} -m venv {venv} failed with exit status {exc.returncode}: "
            + " | ".join(detail)
        ) from exc


def _write_venv(python: Path, venv: Path, version: str) -> None:
    real = Path(os.path.realpath(python))
    if not os.access(real, os.X_OK):
        raise ToolchainError(f"{python}: interpreter not found, cannot create venv {venv}")
    short = ".".join(version.split(".")[:2])
    try:
        (venv / "bin").mkdir(parents=True)
        (venv / "include").mkdir()
        (venv / "lib" / f"python{short}" / "site-packages").mkdir(parents=True)
        os.symlink("lib", venv / "lib64")
        for name in ("python", "python3", f"python{short}"):
            os.symlink(real, venv / "bin" / name)
        (venv / "pyvenv.cfg").write_text(
            f"home = {real.parent}\ninclude-system-site-packages = false\n"
            f"version = {version}\nexecutable = {real}\n",
            encoding="utf-8",
        )
    except OSError as exc:
        raise ToolchainError(f"cannot create venv {venv}: {exc}") from exc


def _venv_python_version(venv: Path) -> str:
    """Return ``X.Y`` of the interpreter a venv was made from, read from its ``pyvenv.cfg``."""
    cfg = venv / "pyvenv.cfg"
    try:
        text = cfg.read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolchainError(f"{cfg}: not a venv ({exc.strerror or exc})") from exc
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip().lower()] = value.strip()
    for key in ("version", "version_info"):
        parts = values.get(key, "").split(".")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            return f"{parts[0]}.{parts[1]}"
    raise ToolchainError(f"{cfg}: no usable 'version' key")


def venv_site_packages(venv: Path) -> Path:
    """Return the venv's ``lib/pythonX.Y/site-packages`` (computed, without running Python)."""
    return venv / "lib" / f"python{_venv_python_version(venv)}" / "site-packages"


def venv_scheme(prefix: Path, xy: str, distribution: str) -> dict[str, str]:
    """Return installer's scheme paths for ``distribution`` in a POSIX venv at ``prefix`` whose
    Python is ``xy`` (``3.11``)."""
    site = os.fspath(prefix / "lib" / f"python{xy}" / "site-packages")
    return {
        "purelib": site,
        "platlib": site,
        "scripts": os.fspath(prefix / "bin"),
        "data": os.fspath(prefix),
        "headers": os.fspath(prefix / "include" / "site" / f"python{xy}" / distribution),
    }


def install_wheel(
    wheel: Path, prefix: Path, *, xy: str, interpreter: str, error: type[RocmforgeError]
) -> None:
    """Install ``wheel`` into the venv-shaped tree ``prefix`` with pypa/installer, offline, after
    verifying its RECORD; a failure raises ``error`` naming the wheel and ``prefix``."""
    try:
        name = parse_wheel_name(wheel.name)
    except CheckError as exc:
        raise error(str(exc)) from exc
    destination = SchemeDictionaryDestination(
        scheme_dict=venv_scheme(prefix, xy, name.distribution),
        interpreter=interpreter,
        script_kind="posix",
        hash_algorithm="sha256",
    )
    try:
        with WheelFile.open(wheel) as source:
            source.validate_record(validate_contents=True)
            installer.install(source, destination, {"INSTALLER": INSTALLER_NAME})
    except (InstallerError, ValueError, OSError, zipfile.BadZipFile) as exc:
        raise error(f"{wheel}: cannot install into {prefix}: {exc}") from exc


def install_wheels(
    wheels: Sequence[Path],
    venv: Path,
    *,
    interpreter: str,
    error: type[RocmforgeError] = CheckError,
) -> None:
    """Install each wheel into ``venv`` with pypa/installer, offline, after verifying its RECORD.

    ``interpreter`` goes into the shebang of generated scripts; it may differ from the host path of
    the venv's python (the venv can be mounted elsewhere inside a sandbox). Failures raise
    ``error`` (CheckError by default; pass RequirementError when installing build requirements)
    naming the wheel.
    """
    xy = _venv_python_version(venv)
    for wheel in wheels:
        install_wheel(wheel, venv, xy=xy, interpreter=interpreter, error=error)


def _zip_date_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    """Return the zip ``date_time`` for ``epoch``, clamped to what zip can store, in UTC.

    Zip keeps seconds at two-second resolution; an odd second is stored (and read back) one lower.
    """
    clamped = min(max(epoch, ZIP_MIN_EPOCH), ZIP_MAX_EPOCH)
    t = time.gmtime(clamped)
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


def _dist_info_dir(names: Sequence[str], wheel: Path) -> str:
    """Return the single top-level ``*.dist-info`` directory name of a wheel."""
    found = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
    if len(found) != 1:
        raise CheckError(f"{wheel}: expected exactly one .dist-info directory, found {found}")
    return found[0]


def _entry_order(name: str, dist_info: str) -> tuple[int, str]:
    """Sort key: payload first, then ``.dist-info`` files, then RECORD (and its signatures)."""
    if name == f"{dist_info}/RECORD":
        return (3, name)
    if name in (f"{dist_info}/RECORD.jws", f"{dist_info}/RECORD.p7s"):
        return (2, name)
    if name.startswith(f"{dist_info}/"):
        return (1, name)
    return (0, name)


@dataclass(frozen=True, slots=True, kw_only=True)
class _RecordRow:
    """One RECORD line: the hash algorithm and urlsafe-base64 digest, and the size, if given."""

    algorithm: str | None
    digest: str | None
    size: int | None


def _parse_record(text: str, wheel: Path, record_path: str) -> dict[str, _RecordRow]:
    """Parse RECORD into ``{path: row}``; raise CheckError on malformed or duplicate rows."""
    rows: dict[str, _RecordRow] = {}
    problems: list[str] = []
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row:
            continue
        if len(row) != 3:
            problems.append(f"line {lineno}: expected 3 fields, got {len(row)}")
            continue
        path, hash_field, size_field = row
        algorithm = digest = None
        if hash_field:
            algorithm, sep, digest = hash_field.partition("=")
            if not sep or algorithm not in hashlib.algorithms_guaranteed:
                problems.append(f"line {lineno}: {path}: bad hash field {hash_field!r}")
                continue
            if algorithm in _WEAK_HASHES:
                problems.append(f"line {lineno}: {path}: weak hash {algorithm} not allowed")
                continue
        size = None
        if size_field:
            if not size_field.isdigit():
                problems.append(f"line {lineno}: {path}: bad size {size_field!r}")
                continue
            size = int(size_field)
        if path in rows:
            problems.append(f"line {lineno}: {path}: listed twice")
            continue
        rows[path] = _RecordRow(algorithm=algorithm, digest=digest, size=size)
    if problems:
        raise CheckError(f"{wheel}: malformed {record_path}: " + "; ".join(problems))
    return rows


def _urlsafe_b64(digest: bytes) -> str:
    """Encode a digest the way RECORD does: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _incompressible(head: bytes) -> bool:
    """Return True if ``head`` (the start of a big member) does not deflate to less than 95 %.

    Deflating already-compressed or random data is slow (~40 MB/s) and gains nothing; such big
    members are stored. The decision depends only on the member's bytes, so it is reproducible.
    """
    deflater = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15)
    packed = len(deflater.compress(head)) + len(deflater.flush())
    return packed > STORE_PROBE_RATIO * len(head)


def _copy_member(
    src: IO[bytes],
    dst: IO[bytes],
    algorithm: str | None,
    *,
    head: bytes = b"",
    threaded: bool = False,
) -> tuple[str | None, int]:
    """Copy ``head`` then the rest of one member, hashing while streaming.

    Memory stays bounded by the chunk size (plus ``head``); returns (urlsafe digest or None, size).
    With ``threaded`` (a big member) the digest is computed in a worker thread beside the
    write (and its CRC), each chunk hashed in order.
    """
    h = hashlib.new(algorithm) if algorithm else None
    feed: Any = h
    if h is not None and threaded:
        feed = BackgroundHash(h)
    size = 0
    try:
        if head:
            if feed is not None:
                feed.update(head)
            dst.write(head)
            size += len(head)
        while chunk := src.read(_CHUNK):
            if feed is not None:
                feed.update(chunk)
            dst.write(chunk)
            size += len(chunk)
    finally:
        if feed is not h:
            feed.result()
    return (_urlsafe_b64(h.digest()) if h is not None else None), size


class _DigestingWriter:
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
        self._sha = BackgroundHash(hashlib.sha256(), depth=_QUEUED)
        self._b3 = BackgroundHash(blake3.blake3(), depth=_QUEUED)
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


def normalize_wheel(
    path: Path,
    *,
    epoch: int,
    add: Mapping[str, bytes] | None = None,
    durable: bool = True,
    rehash_big: bool = True,
    dest: Path | None = None,
) -> dict[str, str]:
    """Rewrite the wheel at ``path`` in place (or to ``dest``) so that its bytes are reproducible.

    Entries are sorted (``.dist-info`` files after the payload, RECORD last), every timestamp is
    ``max(epoch, 1980-01-01)`` in UTC, permissions are 0644 or 0755 (executable bit kept), entries
    are deflated at a fixed level with no extra fields and no comments (a member of 64 MiB or
    more whose first 4 MiB do not deflate below 95 % is stored instead). File contents are not
    changed. RECORD is verified on the way (every file listed, digest and size matching); on any
    mismatch CheckError is raised and the original wheel is left untouched. The byte identity holds
    for a given Python ``zipfile`` and zlib. The wheel is streamed member by member (memory does
    not grow with its size) and ZIP64 records are written where sizes or offsets need them.
    ``add`` (names inside ``.dist-info`` to bytes, e.g. the rocmforge stamp) is written in the
    same pass and listed in RECORD, giving the same bytes as adding it first and normalizing after.
    ``durable=False`` skips the fsyncs (a wheel in a build directory that is sealed later).
    ``rehash_big=False`` is for a caller that installs the wheel with RECORD validation next (the
    build's check): a big stored member copied byte for byte then keeps RECORD's digest without
    hashing it here (its size and CRC are still checked), so that member's sha256 is computed
    once, by the install, not twice: on a 4 GiB member that is 2 s of CPU.
    ``dest``: write the normalized wheel there and leave ``path`` as it is (replacing a 4 GiB
    input in place frees it on the way, ~0.5 s; a build's scratch copy goes with its directory).

    Returns the new wheel's ``{"sha256": ..., "blake3": ...}`` (as :func:`wheel_digests`),
    computed while it was written.
    """
    date_time = _zip_date_time(epoch)
    target = path if dest is None else dest
    directory = target.parent
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            mode, digests = _rewrite(path, out, date_time, add, rehash_big=rehash_big)
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.chmod(tmp, mode)
        if digests is None:  # not expected: zipfile rewrote bytes other than a member header
            digests = wheel_digests(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_path(directory, directory=True)
    return digests


def _rewrite(
    path: Path,
    out: IO[bytes],
    date_time: tuple[int, int, int, int, int, int],
    add: Mapping[str, bytes] | None = None,
    *,
    rehash_big: bool = True,
) -> tuple[int, dict[str, str] | None]:
    """Write the normalized form of the wheel at ``path`` to ``out``, verifying RECORD.

    ``path`` is opened only if it is a regular file itself (a build may have left a symlink or
    a FIFO there); returns its permission bits and the digests of what was written (None if they
    could not be computed on the way).
    """
    sink = _DigestingWriter(out)
    try:
        with open_regular(path) as raw, zipfile.ZipFile(raw) as src:
            _rewrite_zip(
                path, src, sink, date_time, add, source_fd=raw.fileno(), rehash_big=rehash_big
            )
            return stat.S_IMODE(os.fstat(raw.fileno()).st_mode), sink.digests()
    except zipfile.BadZipFile as exc:
        raise CheckError(f"{path}: not a valid zip archive: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise CheckError(f"{path}: RECORD is not UTF-8: {exc}") from exc
    except OSError as exc:
        raise CheckError(f"{path}: cannot rewrite wheel: {exc}") from exc
    finally:
        sink.close()


def _stored_data_offset(src: zipfile.ZipFile, fd: int, info: zipfile.ZipInfo) -> int | None:
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


def _open_member(dst: zipfile.ZipFile, sink: _DigestingWriter, zinfo: zipfile.ZipInfo) -> None:
    """Put ``zinfo``'s header where ``dst``'s next member goes, as ``ZipFile._open_to_write``
    does (its private ``start_dir``, ``_writecheck`` and ``_didModify``: the byte identity
    with the ``zipfile`` path is tested); the caller writes the header and the data."""
    registry: Any = dst
    sink.seek(dst.start_dir)
    zinfo.header_offset = sink.tell()
    registry._writecheck(zinfo)
    registry._didModify = True


def _close_member(dst: zipfile.ZipFile, sink: _DigestingWriter, zinfo: zipfile.ZipInfo) -> None:
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


def _copy_stored(
    fd: int,
    offset: int,
    info: zipfile.ZipInfo,
    dst: zipfile.ZipFile,
    new: zipfile.ZipInfo,
    sink: _DigestingWriter,
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
    ``verify`` the caller's install checks both (see :func:`normalize_wheel`).
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
    feed = BackgroundHash(check, depth=_QUEUED) if check is not None else None
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
    return (_urlsafe_b64(digest.digest()) if digest is not None else None), done


def _rewrite_zip(
    path: Path,
    src: zipfile.ZipFile,
    out: _DigestingWriter,
    date_time: tuple[int, int, int, int, int, int],
    add: Mapping[str, bytes] | None = None,
    *,
    source_fd: int,
    rehash_big: bool = True,
) -> None:
    """Copy every member of ``src`` into a new zip on ``out`` in normalized form.

    ``add`` maps file names inside the ``.dist-info`` directory to bytes written in the same pass
    (replacing a member of that name) and listed in the rewritten RECORD. ``source_fd`` is the
    file ``src`` reads: big stored members are read from it directly (and, unless
    ``rehash_big``, keep RECORD's digest: see :func:`normalize_wheel`).
    """
    infos = src.infolist()
    names = [i.filename for i in infos]
    duplicates = sorted(n for n, k in Counter(names).items() if k > 1)
    if duplicates:
        raise CheckError(f"{path}: duplicate zip entries: {duplicates}")
    dist_info = _dist_info_dir(names, path)
    record_path = f"{dist_info}/RECORD"
    if record_path not in names:
        raise CheckError(f"{path}: {record_path} is missing")
    record_text = src.read(record_path).decode("utf-8")
    contents: dict[str, bytes] = {f"{dist_info}/{n}": data for n, data in (add or {}).items()}
    if contents:
        record_text = _record_with(record_text, contents)
        contents[record_path] = record_text.encode("utf-8")
    record = _parse_record(record_text, path, record_path)
    unsigned = {f"{dist_info}/{n}" for n in _UNSIGNED_RECORD_FILES}
    infos = [i for i in infos if i.filename not in contents]
    for name, data in contents.items():
        made = zipfile.ZipInfo(name)
        made.external_attr = (stat.S_IFREG | 0o644) << 16
        made.file_size = len(data)
        infos.append(made)
    problems: list[str] = []
    seen: set[str] = set()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in sorted(infos, key=lambda i: _entry_order(i.filename, dist_info)):
            new = zipfile.ZipInfo(info.filename, date_time=date_time)
            new.create_system = 3
            new.compress_type = zipfile.ZIP_DEFLATED
            _set_compress_level(new, COMPRESS_LEVEL)
            new.comment = b""
            new.extra = b""
            if info.is_dir():
                new.external_attr = (0o40755 << 16) | 0x10
                dst.writestr(new, b"", compress_type=zipfile.ZIP_STORED)
                continue
            mode = info.external_attr >> 16
            executable = bool(mode and stat.S_ISREG(mode) and mode & 0o111)
            new.external_attr = (0o100755 if executable else 0o100644) << 16
            new.file_size = info.file_size  # lets zipfile decide zip64 from the real size
            row = record.get(info.filename)
            seen.add(info.filename)
            algorithm = row.algorithm if row else None
            at = None
            if info.filename not in contents and info.file_size >= STORE_PROBE_MIN:
                at = _stored_data_offset(src, source_fd, info)
            if at is not None and _incompressible(os.pread(source_fd, STORE_PROBE_SIZE, at)):
                digest, size = _copy_stored(
                    source_fd, at, info, dst, new, out, algorithm, verify=rehash_big
                )
                if not rehash_big and row is not None:
                    digest = row.digest  # verified by the caller's install (validate_record)
            else:
                digest, size = _copy_through_zipfile(
                    src, info, contents, dst, new, algorithm, sink=out, verify=rehash_big
                )
                if digest is None and not rehash_big and row is not None:
                    digest = row.digest  # verified by the caller's install (validate_record)
            if info.filename in unsigned:
                continue
            if row is None:
                problems.append(f"{info.filename} is not listed in RECORD")
            elif row.digest is None:
                problems.append(f"{info.filename} has no hash in RECORD")
            elif digest != row.digest:
                problems.append(f"{info.filename}: {row.algorithm} does not match RECORD")
            elif row.size is not None and row.size != size:
                problems.append(f"{info.filename}: size {size} does not match RECORD {row.size}")
        missing = sorted(p for p in record if p not in seen and not p.endswith("/"))
        problems.extend(f"{p} is listed in RECORD but not in the archive" for p in missing)
        if problems:
            raise CheckError(f"{path}: RECORD does not match the archive: " + "; ".join(problems))
        dst.comment = b""


def _copy_through_zipfile(
    src: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    contents: Mapping[str, bytes],
    dst: zipfile.ZipFile,
    new: zipfile.ZipInfo,
    algorithm: str | None,
    *,
    sink: _DigestingWriter,
    verify: bool = True,
) -> tuple[str | None, int]:
    """Copy one member (or the bytes ``contents`` gives for its name) with ``zipfile`` on both
    sides: inflated and CRC-checked on read, deflated unless it is big and incompressible. A big
    member to deflate is deflated in blocks on several cores (:func:`_deflate_blocks`), its
    RECORD digest left to the caller's install unless ``verify``."""
    opened = io.BytesIO(contents[info.filename]) if info.filename in contents else None
    with opened if opened is not None else src.open(info) as stream:
        head = stream.read(STORE_PROBE_SIZE) if info.file_size >= STORE_PROBE_MIN else b""
        if head and _incompressible(head):
            new.compress_type = zipfile.ZIP_STORED
        elif head and opened is None:
            return _deflate_blocks(
                stream, head, info, dst, new, sink, algorithm if verify else None
            )
        with dst.open(new, "w") as out:
            return _copy_member(
                stream, out, algorithm, head=head, threaded=info.file_size >= THREADED
            )


def _deflate_block(block: bytes, window: bytes, last: bool) -> bytes:
    """Raw deflate of one block at :data:`COMPRESS_LEVEL`, primed with the 32 KiB before it and
    ended by a sync flush (the final block: the stream's end), as pigz splits a stream."""
    if window:
        deflater = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15, zdict=window)
    else:
        deflater = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15)
    return deflater.compress(block) + deflater.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _deflate_blocks(
    stream: IO[bytes],
    head: bytes,
    info: zipfile.ZipInfo,
    dst: zipfile.ZipFile,
    new: zipfile.ZipInfo,
    sink: _DigestingWriter,
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
    ``dst`` as in :func:`_copy_stored`. Returns (urlsafe digest of the content or None, size).
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
    feed = BackgroundHash(h, depth=_QUEUED) if h is not None else None
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
    return (_urlsafe_b64(h.digest()) if h is not None else None), done


def _record_with(record: str, members: Mapping[str, bytes]) -> str:
    """Return RECORD text listing ``members`` (replacing their old rows), RECORD's own row last."""
    rows = [r for r in csv.reader(record.splitlines()) if r and r[0] not in members]
    record_rows = [r for r in rows if r[0].endswith(".dist-info/RECORD")]
    rows = [r for r in rows if r not in record_rows]
    for name, data in members.items():
        rows.append([name, f"sha256={_urlsafe_b64(hashlib.sha256(data).digest())}", str(len(data))])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([*rows, *record_rows])
    return out.getvalue()


def _set_compress_level(info: zipfile.ZipInfo, level: int) -> None:
    """Fix the deflate level of one entry (``ZipFile.open(info, "w")`` ignores the archive's)."""
    if sys.version_info >= (3, 13):
        info.compress_level = level
    else:
        info._compresslevel = level  # type: ignore[attr-defined]


def wheel_digests(path: Path) -> dict[str, str]:
    """Return ``{"sha256": ..., "blake3": ...}`` of a wheel file, reading it once."""
    try:
        b3, sha = file_digests(path)
    except OSError as exc:
        raise CheckError(f"{path}: cannot read wheel: {exc}") from exc
    return {"sha256": sha, "blake3": b3}


def _same_bytes(
    za: zipfile.ZipFile, x: zipfile.ZipInfo, zb: zipfile.ZipFile, y: zipfile.ZipInfo
) -> bool:
    """Return True if members ``x`` of ``za`` and ``y`` of ``zb`` hold the same bytes (streamed)."""
    with za.open(x) as fa, zb.open(y) as fb:
        while True:
            ca, cb = fa.read(_CHUNK), fb.read(_CHUNK)
            if ca != cb:
                return False
            if not ca:
                return True


def differing_members(a: Path, b: Path) -> list[str]:
    """Return the members whose bytes (or presence) differ between wheels ``a`` and ``b``.

    Members present on one side only are named ``NAME (only in A)`` / ``NAME (only in B)``;
    identical members with different zip metadata (time, permissions, order) are named
    ``NAME (zip metadata)``. An unreadable archive is named ``(not a readable zip)``.
    """
    try:
        with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
            ia = {i.filename: i for i in za.infolist()}
            ib = {i.filename: i for i in zb.infolist()}
            out = [f"{n} (only in A)" for n in sorted(ia.keys() - ib.keys())]
            out += [f"{n} (only in B)" for n in sorted(ib.keys() - ia.keys())]
            for name in sorted(ia.keys() & ib.keys()):
                x, y = ia[name], ib[name]
                if x.CRC != y.CRC or x.file_size != y.file_size or not _same_bytes(za, x, zb, y):
                    out.append(name)
                elif (x.date_time, x.external_attr, x.compress_type) != (
                    y.date_time,
                    y.external_attr,
                    y.compress_type,
                ):
                    out.append(f"{name} (zip metadata)")
            if not out and [i.filename for i in za.infolist()] != [
                i.filename for i in zb.infolist()
            ]:
                out.append("(member order)")
            return out
    except (OSError, zipfile.BadZipFile):
        return ["(not a readable zip)"]
