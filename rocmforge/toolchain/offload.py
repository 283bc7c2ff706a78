"""Which GPU archs a binary holds: clang offload bundles in ELF ``.hip_fatbin`` sections.

HIP device code sits in the ``.hip_fatbin`` section of each object and shared library, one bundle
per linked object, so a library can hold several bundles with different arch sets. A bundle is
either uncompressed (magic ``__CLANG_OFFLOAD_BUNDLE__``, then a u64 entry count and per entry
u64 offset, u64 size, u64 id length and the id, e.g. ``hipv4-amdgcn-amd-amdhsa--gfx90a``) or
compressed (magic ``CCOB``, u16 version, u16 method — 0 zlib, 1 zstd — then for v2 u32 total size,
u32 uncompressed size, u64 hash; for v3 the same as u64; v1 has no total size), whose payload is an
uncompressed bundle. ELF64 section headers are parsed here with :mod:`struct`.

For each library the report gives the union of archs over its bundles and the archs present in
every bundle: a kernel whose bundle lacks an arch fails on that GPU even if other bundles have it.

An entry's id is only a label: each amdgcn code object that is an AMDGPU ELF (e_machine 224) is
also checked by its ``e_flags`` machine (the low byte: 0x3f gfx90a, 0x4c gfx942, ...). An entry
whose ELF says another machine than its id is not counted for that arch, and is listed under
``mismatched`` (:data:`ELF_MACH` covers the datacenter archs; others are taken by their id).
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.errors import RocmforgeError

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
SECTION = ".hip_fatbin"

_ELF_MAGIC = b"\x7fELF"
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SHT_NOBITS = 8
_TARGET = re.compile(r"(gfx[0-9a-z]+(?::[A-Za-z]+[+-])*)$")
_SHARED_LIB = re.compile(r"\.so(\.[0-9]+)*$")
_COPY_CHUNK = 1 << 20


#: AMDGPU ELF ``e_flags & 0xff`` (EF_AMDGPU_MACH) of the archs whose code objects are checked.
ELF_MACH: dict[str, int] = {
    "gfx906": 0x2F,
    "gfx908": 0x30,
    "gfx90a": 0x3F,
    "gfx940": 0x40,
    "gfx941": 0x4B,
    "gfx942": 0x4C,
    "gfx950": 0x4F,
}
_EM_AMDGPU = 224


class OffloadError(RocmforgeError):
    """A file claims to hold an offload bundle that cannot be read (truncated, bad method)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Bundle:
    """One offload bundle: where it starts in its section, its entry ids and its GPU archs."""

    offset: int
    compressed: bool
    ids: tuple[str, ...]
    #: Entries whose code object is an AMDGPU ELF for another machine than the id says.
    mismatched: tuple[str, ...] = ()

    @property
    def archs(self) -> frozenset[str]:
        """The GPU targets (``gfx90a``, ``gfx90a:xnack-``) of the bundle's amdgcn entries."""
        out = set()
        for ident in self.ids:
            m = _TARGET.search(ident)
            if "amdgcn" in ident and m and ident not in self.mismatched:
                out.add(m.group(1))
        return frozenset(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class LibraryArchs:
    """The offload bundles found in one library and what they add up to."""

    path: str
    bundles: tuple[Bundle, ...]

    @property
    def union(self) -> frozenset[str]:
        """Every arch held by at least one bundle."""
        return frozenset().union(*(b.archs for b in self.bundles))

    @property
    def common(self) -> frozenset[str]:
        """The archs held by every bundle (empty if there are none)."""
        if not self.bundles:
            return frozenset()
        return frozenset.intersection(*(b.archs for b in self.bundles))

    @property
    def mismatched(self) -> tuple[str, ...]:
        """Entry ids (over all bundles) whose ELF machine contradicts the id."""
        return tuple(sorted({i for b in self.bundles for i in b.mismatched}))

    def to_json(self) -> dict[str, Any]:
        """Return ``{"bundles": N, "union": [...], "common": [...]}`` (sorted).

        ``mismatched`` is added only when some entry's ELF contradicts its id.
        """
        out: dict[str, Any] = {
            "bundles": len(self.bundles),
            "union": sorted(self.union),
            "common": sorted(self.common),
        }
        if self.mismatched:
            out["mismatched"] = list(self.mismatched)
        return out


def _u64(buf: Any, pos: int, what: str) -> int:
    if pos + 8 > len(buf):
        raise OffloadError(f"truncated offload bundle: {what} at byte {pos}")
    return int(struct.unpack_from("<Q", buf, pos)[0])


def parse_bundle(buf: Any, start: int = 0) -> tuple[tuple[str, ...], int]:
    """Parse the uncompressed bundle at ``buf[start:]``; return its entry ids and its end offset."""
    if bytes(buf[start : start + len(BUNDLE_MAGIC)]) != BUNDLE_MAGIC:
        raise OffloadError(f"no offload bundle magic at byte {start}")
    pos = start + len(BUNDLE_MAGIC)
    count = _u64(buf, pos, "entry count")
    pos += 8
    if count > 4096:
        raise OffloadError(f"implausible offload bundle entry count {count} at byte {start}")
    ids, end = [], pos
    for _ in range(count):
        offset, size, id_len = (_u64(buf, pos + 8 * i, "entry header") for i in range(3))
        pos += 24
        if id_len > 4096 or pos + id_len > len(buf):
            raise OffloadError(f"truncated offload bundle entry id at byte {pos}")
        ids.append(bytes(buf[pos : pos + id_len]).decode("utf-8", "replace"))
        pos += id_len
        end = max(end, pos, start + offset + size)
    return tuple(ids), end


def mismatched_entries(buf: Any, start: int = 0) -> tuple[str, ...]:
    """Return the ids of the bundle at ``buf[start:]`` whose AMDGPU ELF names another machine.

    Only ids whose arch is in :data:`ELF_MACH` and whose code object is an AMDGPU ELF are
    judged; an empty or non-ELF entry is left to its id.
    """
    pos = start + len(BUNDLE_MAGIC)
    count = _u64(buf, pos, "entry count")
    pos += 8
    out = []
    for _ in range(count):
        offset, size, id_len = (_u64(buf, pos + 8 * i, "entry header") for i in range(3))
        pos += 24
        ident = bytes(buf[pos : pos + id_len]).decode("utf-8", "replace")
        pos += id_len
        m = _TARGET.search(ident)
        want = ELF_MACH.get(m.group(1).split(":", 1)[0]) if m and "amdgcn" in ident else None
        co = start + offset
        if want is None or size < 52 or co + 52 > len(buf):
            continue
        head = bytes(buf[co : co + 52])
        if head[:4] != _ELF_MAGIC or struct.unpack_from("<H", head, 18)[0] != _EM_AMDGPU:
            continue
        if struct.unpack_from("<I", head, 48)[0] & 0xFF != want:
            out.append(ident)
    return tuple(out)


def decompress_ccob(buf: Any, start: int = 0) -> tuple[bytes, int]:
    """Decompress the ``CCOB`` bundle at ``buf[start:]``; return the payload and the end offset."""
    if bytes(buf[start : start + 4]) != CCOB_MAGIC:
        raise OffloadError(f"no compressed bundle magic at byte {start}")
    if start + 8 > len(buf):
        raise OffloadError(f"truncated compressed bundle header at byte {start}")
    version, method = struct.unpack_from("<HH", buf, start + 4)
    if version == 1:
        header, total, size = 20, None, int(struct.unpack_from("<I", buf, start + 8)[0])
    elif version == 2:
        header = 24
        total, size = (int(x) for x in struct.unpack_from("<II", buf, start + 8))
    elif version == 3:
        header = 32
        total, size = _u64(buf, start + 8, "total size"), _u64(buf, start + 16, "size")
    else:
        raise OffloadError(f"unsupported compressed bundle version {version} at byte {start}")
    if total is not None and (total < header or start + total > len(buf)):
        raise OffloadError(f"compressed bundle at byte {start} claims {total} bytes; file is short")
    stop = start + total if total is not None else len(buf)
    payload = bytes(buf[start + header : stop])
    dec: Any
    if method == 0:
        dec = zlib.decompressobj()
    elif method == 1:
        import zstandard

        dec = zstandard.ZstdDecompressor().decompressobj()
    else:
        raise OffloadError(f"unknown compression method {method} in bundle at byte {start}")
    try:
        data = dec.decompress(payload)
    except (zlib.error, Exception) as exc:
        raise OffloadError(f"cannot decompress bundle at byte {start}: {exc}") from exc
    if len(data) != size:
        raise OffloadError(
            f"compressed bundle at byte {start}: {len(data)} bytes decompressed, header says {size}"
        )
    end = stop if total is not None else stop - len(dec.unused_data)
    return data, end


def scan_bundles(buf: Any, start: int = 0, end: int | None = None) -> tuple[Bundle, ...]:
    """Return every bundle in ``buf[start:end]`` (a ``.hip_fatbin`` section), in order.

    ``buf`` is anything with ``find(sub, start, end)``, slicing and the buffer protocol: bytes or
    an mmap of the whole file (so a huge section is never copied).
    """
    stop = len(buf) if end is None else end
    out: list[Bundle] = []
    pos = start
    while True:
        a, c = buf.find(BUNDLE_MAGIC, pos, stop), buf.find(CCOB_MAGIC, pos, stop)
        hits = [x for x in (a, c) if x >= 0]
        if not hits:
            break
        at = min(hits)
        if at == a:
            ids, after = parse_bundle(buf, at)
            out.append(
                Bundle(
                    offset=at - start, compressed=False, ids=ids,
                    mismatched=mismatched_entries(buf, at),
                )
            )
        else:
            data, after = decompress_ccob(buf, at)
            inner = scan_bundles(data)
            if not inner:
                raise OffloadError(f"compressed bundle at byte {at} holds no offload bundle")
            out += [
                Bundle(offset=at - start, compressed=True, ids=b.ids, mismatched=b.mismatched)
                for b in inner
            ]
        pos = max(after, at + 4)
    return tuple(out)


def elf_section(buf: Any, name: str) -> tuple[int, int] | None:
    """Return ``(offset, size)`` of section ``name`` in an ELF64 little-endian image, or None."""
    if bytes(buf[:4]) != _ELF_MAGIC or len(buf) < 64:
        return None
    if buf[4] != 2 or buf[5] != 1:
        raise OffloadError("only 64-bit little-endian ELF files are read")
    shoff = int(struct.unpack_from("<Q", buf, 0x28)[0])
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", buf, 0x3A)
    if shoff == 0:
        return None
    if shentsize != _SHDR.size or shoff + _SHDR.size > len(buf):
        raise OffloadError("damaged ELF section header table")
    first = _SHDR.unpack_from(buf, shoff)
    if shnum == 0:  # extended numbering: the real count sits in section 0
        shnum = first[5]
    if shstrndx == 0xFFFF:
        shstrndx = first[6]
    if shoff + shnum * _SHDR.size > len(buf) or shstrndx >= shnum:
        raise OffloadError("damaged ELF section header table")
    headers = [_SHDR.unpack_from(buf, shoff + i * _SHDR.size) for i in range(shnum)]
    str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
    want = name.encode()
    for h in headers:
        start = str_off + h[0]
        if start + len(want) >= min(len(buf), str_off + str_size + 1):
            continue
        if bytes(buf[start : start + len(want) + 1]) == want + b"\0":
            if h[1] == _SHT_NOBITS:
                return None
            if h[4] + h[5] > len(buf):
                raise OffloadError(f"section {name} runs past the end of the file")
            return int(h[4]), int(h[5])
    return None


def read_file_archs(path: Path | str, *, shown: str | None = None) -> LibraryArchs | None:
    """Return the bundles in ELF file ``path``'s ``.hip_fatbin``; None if it is not ELF."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != _ELF_MAGIC:
                return None
            size = os.fstat(f.fileno()).st_size
            with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
                found = elf_section(m, SECTION)
                if found is None:
                    return LibraryArchs(path=shown or str(path), bundles=())
                offset, length = found
                bundles = scan_bundles(m, offset, offset + length)
    except OSError as exc:
        raise OffloadError(f"cannot read {path}: {exc}") from exc
    except OffloadError as exc:
        raise OffloadError(f"{shown or path}: {exc}") from exc
    return LibraryArchs(path=shown or str(path), bundles=bundles)


def is_shared_library(name: str) -> bool:
    """Return True for ``lib/x.so``, ``libfoo.so.1.2`` and extension modules (``*.so``)."""
    return bool(_SHARED_LIB.search(name))


def wheel_archs(wheel: Path, *, tmp_dir: Path | None = None) -> dict[str, LibraryArchs]:
    """Return, for every shared library in ``wheel`` that holds offload bundles, its archs.

    Each library is streamed to a temporary file and memory-mapped, so a multi-GB library never
    sits in memory whole.
    """
    out: dict[str, LibraryArchs] = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.is_dir() or not is_shared_library(info.filename):
                    continue
                with zf.open(info) as src:
                    if src.read(4) != _ELF_MAGIC:
                        continue
                with (
                    tempfile.NamedTemporaryFile(dir=tmp_dir, suffix=".so") as tmp,
                    zf.open(info) as src,
                ):
                    shutil.copyfileobj(src, tmp, _COPY_CHUNK)
                    tmp.flush()
                    lib = read_file_archs(tmp.name, shown=info.filename)
                if lib is not None and lib.bundles:
                    out[info.filename] = lib
    except (OSError, zipfile.BadZipFile) as exc:
        raise OffloadError(f"cannot read wheel {wheel}: {exc}") from exc
    return out


def arch_problems(libs: Mapping[str, LibraryArchs], want: Sequence[str]) -> list[str]:
    """Return what is wrong with ``libs`` for a recipe asking for exactly the archs ``want``.

    No bundle at all is a problem (an empty listing must never pass); so is a library whose
    bundles miss a wanted arch (in any bundle) or hold one that was not asked for.
    """
    wanted = frozenset(want)
    if not libs:
        return ["no HIP offload bundle (.hip_fatbin) found in any shared library of the wheel"]
    problems = []
    for name, lib in sorted(libs.items()):
        missing = sorted(wanted - lib.common)
        extra = sorted(lib.union - wanted)
        if missing:
            partly = sorted(set(missing) & lib.union)
            how = f" (only in some of its {len(lib.bundles)} bundles: {', '.join(partly)})"
            problems.append(
                f"{name} lacks {', '.join(missing)}"
                + (how if partly else "")
                + f"; it holds {', '.join(sorted(lib.union)) or 'no GPU code'}"
            )
        if extra:
            problems.append(f"{name} holds unexpected {', '.join(extra)}")
        if lib.mismatched:
            problems.append(
                f"{name}: code object ELF machine contradicts its id: {', '.join(lib.mismatched)}"
            )
    return problems
