"""The wheel writer: normalize a wheel to reproducible bytes, verifying RECORD on the way.

Normalizing rewrites a wheel so that two builds of the same inputs give the same bytes: sorted
entries, fixed timestamps, fixed permissions and a fixed compression level. The contents of each
file are left alone, so RECORD stays valid; RECORD is verified while the wheel is rewritten, and
the new file's digests are computed while it is written (:mod:`rocmforge.wheel.digests`). Big
members take the paths of :mod:`rocmforge.wheel.bigmembers`.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from rocmforge.errors import CheckError
from rocmforge.util.fsutil import fsync_path, open_regular
from rocmforge.util.hashing import THREADED, BackgroundHash
from rocmforge.wheel.bigmembers import (
    COMPRESS_LEVEL,
    STORE_PROBE_MIN,
    STORE_PROBE_SIZE,
    copy_stored,
    deflate_blocks,
    incompressible,
    stored_data_offset,
)
from rocmforge.wheel.digests import DigestingWriter, wheel_digests
from rocmforge.wheel.record import parse_record, record_with, urlsafe_b64

__all__ = ["ZIP_MAX_EPOCH", "ZIP_MIN_EPOCH", "normalize_wheel"]

#: Oldest timestamp a zip entry can carry (the DOS epoch), as seconds since the Unix epoch.
ZIP_MIN_EPOCH = 315532800  # 1980-01-01T00:00:00Z
#: Newest timestamp a zip entry can carry.
ZIP_MAX_EPOCH = 4354819198  # 2107-12-31T23:59:58Z

_CHUNK = 1 << 20
_UNSIGNED_RECORD_FILES = ("RECORD", "RECORD.jws", "RECORD.p7s")


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
    sink = DigestingWriter(out)
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
    return (urlsafe_b64(h.digest()) if h is not None else None), size


def _rewrite_zip(
    path: Path,
    src: zipfile.ZipFile,
    out: DigestingWriter,
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
        record_text = record_with(record_text, contents)
        contents[record_path] = record_text.encode("utf-8")
    record = parse_record(record_text, path, record_path)
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
                at = stored_data_offset(src, source_fd, info)
            if at is not None and incompressible(os.pread(source_fd, STORE_PROBE_SIZE, at)):
                digest, size = copy_stored(
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
    sink: DigestingWriter,
    verify: bool = True,
) -> tuple[str | None, int]:
    """Copy one member (or the bytes ``contents`` gives for its name) with ``zipfile`` on both
    sides: inflated and CRC-checked on read, deflated unless it is big and incompressible. A big
    member to deflate is deflated in blocks on several cores (:func:`deflate_blocks`), its
    RECORD digest left to the caller's install unless ``verify``."""
    opened = io.BytesIO(contents[info.filename]) if info.filename in contents else None
    with opened if opened is not None else src.open(info) as stream:
        head = stream.read(STORE_PROBE_SIZE) if info.file_size >= STORE_PROBE_MIN else b""
        if head and incompressible(head):
            new.compress_type = zipfile.ZIP_STORED
        elif head and opened is None:
            return deflate_blocks(stream, head, info, dst, new, sink, algorithm if verify else None)
        with dst.open(new, "w") as out:
            return _copy_member(
                stream, out, algorithm, head=head, threaded=info.file_size >= THREADED
            )


def _set_compress_level(info: zipfile.ZipInfo, level: int) -> None:
    """Fix the deflate level of one entry (``ZipFile.open(info, "w")`` ignores the archive's)."""
    if sys.version_info >= (3, 13):
        info.compress_level = level
    else:
        info._compresslevel = level  # type: ignore[attr-defined]
