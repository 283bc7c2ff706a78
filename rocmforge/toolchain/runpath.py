"""Where a wheel's libraries look for other libraries: ``DT_RUNPATH`` / ``DT_RPATH`` entries.

A wheel built with a pyenv (or other self-built) Python carries that interpreter's
``-Wl,-rpath,<prefix>/lib`` in every extension: a ``RUNPATH`` into the build machine
(``/root/.pyenv/versions/3.11.7/lib``). :func:`foreign_runpaths` finds, per shared library, the
entries that point neither inside the wheel (``$ORIGIN``-relative) nor into the toolchain root,
so the build can warn about them. :func:`drop_runpaths` removes entries from an ELF image (the
build drops the toolchain interpreter's own ``<prefix>/lib`` that way, as auditwheel would): in
place, without growing anything, and only where no other string of the dynamic string table
shares the bytes it changes. ELF64 little-endian only, read with :mod:`struct` through
:func:`~rocmforge.toolchain.offload.elf_section` (``.dynamic``, ``.dynstr`` and the sections
that name strings in it).
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rocmforge.toolchain.offload import OffloadError, elf_section, is_shared_library

_DYN = struct.Struct("<qQ")
DT_NULL, DT_RPATH, DT_RUNPATH = 0, 15, 29
#: Dynamic tags whose value is an offset into ``.dynstr``: NEEDED, SONAME, RPATH, RUNPATH,
#: CONFIG, DEPAUDIT, AUDIT, AUXILIARY, FILTER.
_STRING_TAGS = frozenset(
    {1, 14, 15, 29, 0x6FFFFEFA, 0x6FFFFEFB, 0x6FFFFEFC, 0x7FFFFFFD, 0x7FFFFFFF}
)
_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym: st_name first
_VERNEED = struct.Struct("<HHIII")  # vn_version, vn_cnt, vn_file, vn_aux, vn_next
_VERNAUX = struct.Struct("<IHHII")  # vna_hash, vna_flags, vna_other, vna_name, vna_next
#: vd_version, vd_flags, vd_ndx, vd_cnt, vd_hash, vd_aux, vd_next
_VERDEF = struct.Struct("<HHHHIII")
_VERDAUX = struct.Struct("<II")  # vda_name, vda_next
#: Extensions bigger than this are not scanned in memory (their .dynamic is near the start,
#: but a whole-file read of a multi-GB torch library is not worth a warning).
MAX_SCAN_BYTES = 512 * 1024**2


def elf_runpaths(buf: bytes) -> list[str]:
    """Return the ``DT_RUNPATH`` and ``DT_RPATH`` entries of an ELF image, split on ``:``."""
    dyn, strs = elf_section(buf, ".dynamic"), elf_section(buf, ".dynstr")
    if dyn is None or strs is None:
        return []
    out: list[str] = []
    offset, size = dyn
    for pos in range(offset, offset + size - _DYN.size + 1, _DYN.size):
        tag, value = _DYN.unpack_from(buf, pos)
        if tag == DT_NULL:
            break
        if tag in (DT_RPATH, DT_RUNPATH) and value < strs[1]:
            start = strs[0] + value
            end = buf.find(b"\0", start, strs[0] + strs[1])
            text = buf[start : end if end >= 0 else strs[0] + strs[1]].decode("utf-8", "replace")
            out += [p for p in text.split(":") if p]
    return out


def _dynamic_entries(buf: bytes, dyn: tuple[int, int]) -> list[tuple[int, int, int]]:
    """``(file offset, tag, value)`` of each ``.dynamic`` entry before ``DT_NULL``."""
    out: list[tuple[int, int, int]] = []
    offset, size = dyn
    for pos in range(offset, offset + size - _DYN.size + 1, _DYN.size):
        tag, value = _DYN.unpack_from(buf, pos)
        if tag == DT_NULL:
            break
        out.append((pos, tag, value))
    return out


def _chain(buf: bytes, section: tuple[int, int] | None, head: struct.Struct,
           aux: struct.Struct, names: Callable[[tuple[int, ...]], tuple[int, ...]],
           links: Callable[[tuple[int, ...]], tuple[int, int, int]], aux_name: int,
           aux_next: int) -> list[int]:
    """The ``.dynstr`` offsets named by a version section (``.gnu.version_r``/``_d``): a list of
    records (``links`` gives count, aux offset, next offset), each with a list of aux records."""
    if section is None:
        return []
    start, size = section
    end = start + size
    out: list[int] = []
    pos, seen = start, 0
    while start <= pos <= end - head.size and seen < 1 << 16:
        rec = head.unpack_from(buf, pos)
        out += names(rec)
        count, aux_off, next_off = links(rec)
        apos = pos + aux_off
        for _ in range(count):
            if not start <= apos <= end - aux.size:
                break
            a = aux.unpack_from(buf, apos)
            out.append(a[aux_name])
            if not a[aux_next]:
                break
            apos += a[aux_next]
        if not next_off:
            break
        pos, seen = pos + next_off, seen + 1
    return out


def _string_refs(buf: bytes, entries: Sequence[tuple[int, int, int]]) -> Counter[int]:
    """How often each ``.dynstr`` offset is named: by the dynamic entries, the dynamic symbols
    and the symbol versions (needed and defined)."""
    refs: Counter[int] = Counter(v for _, tag, v in entries if tag in _STRING_TAGS)
    dynsym = elf_section(buf, ".dynsym")
    if dynsym is not None:
        start, size = dynsym
        refs.update(
            _SYM.unpack_from(buf, p)[0]
            for p in range(start, start + size - _SYM.size + 1, _SYM.size)
        )
    refs.update(_chain(
        buf, elf_section(buf, ".gnu.version_r"), _VERNEED, _VERNAUX,
        names=lambda r: (r[2],), links=lambda r: (r[1], r[3], r[4]), aux_name=3, aux_next=4,
    ))  # fmt: skip
    refs.update(_chain(
        buf, elf_section(buf, ".gnu.version_d"), _VERDEF, _VERDAUX,
        names=lambda r: (), links=lambda r: (r[3], r[5], r[6]), aux_name=0, aux_next=1,
    ))  # fmt: skip
    return refs


def drop_runpaths(buf: bytes, drop: Callable[[str], bool]) -> tuple[bytes, list[str]]:
    """Return ``buf`` with the ``DT_RUNPATH``/``DT_RPATH`` entries ``drop`` says yes to removed,
    and the entries removed (an unchanged ``buf`` and ``[]`` when there is nothing to drop).

    In place, as ``patchelf`` does but without growing a section: the kept entries are written
    over the old string and the freed bytes zeroed (so no build-machine path stays behind); a
    string left empty removes its dynamic entry (the later entries move up, the freed slot is
    ``DT_NULL``), since an empty RUNPATH would search the current directory. Where another name
    of the dynamic string table shares the string's bytes (the linker merges tails), they are not
    touched: the kept tail is pointed at instead, an emptied entry only removed, and an entry
    whose kept part is not a tail is left as it was (the build then warns about it).
    """
    dyn, strs = elf_section(buf, ".dynamic"), elf_section(buf, ".dynstr")
    if dyn is None or strs is None:
        return buf, []
    entries = _dynamic_entries(buf, dyn)
    paths = [e for e in entries if e[1] in (DT_RPATH, DT_RUNPATH) and e[2] < strs[1]]
    if not paths:
        return buf, []
    refs = _string_refs(buf, entries)
    out = bytearray(buf)
    gone: set[int] = set()
    dropped: list[str] = []
    for pos, tag, value in paths:
        start = strs[0] + value
        end = buf.find(b"\0", start, strs[0] + strs[1])
        if end < 0:
            continue  # an unterminated string: a damaged table is not this step's to mend
        parts = buf[start:end].decode("utf-8", "surrogateescape").split(":")
        cut = [p for p in parts if p and drop(p)]
        if not cut:
            continue
        kept = [p for p in parts if not (p and drop(p))]
        new = ":".join(kept).encode("utf-8", "surrogateescape") if any(kept) else b""
        shared = sum(n for off, n in refs.items() if value <= off <= value + end - start) > 1
        if shared and new and not buf[start:end].endswith(b":" + new):
            continue  # the kept part is not a tail of the shared bytes: left as it was
        if not new:
            gone.add(pos)
        elif shared:  # point at the kept tail, leave the bytes to their other names
            _DYN.pack_into(out, pos, tag, value + (end - start) - len(new))
        if not shared:
            out[start:end] = new + bytes(end - start - len(new))
        dropped += cut
    if gone:
        kept_entries = [out[p : p + _DYN.size] for p, _, _ in entries if p not in gone]
        first = entries[0][0]
        span = (len(entries) + 1) * _DYN.size  # the entries and their DT_NULL
        out[first : first + span] = b"".join(kept_entries).ljust(span, b"\0")
    return bytes(out), dropped


def _inside(path: str, roots: Sequence[str]) -> bool:
    if path.startswith(("$ORIGIN", "${ORIGIN}")):
        return True
    norm = os.path.normpath(path)
    return any(norm == r or norm.startswith(r.rstrip("/") + "/") for r in roots)


def _elf_libraries(zf: zipfile.ZipFile) -> Iterator[tuple[zipfile.ZipInfo, bytes]]:
    """The shared libraries of a wheel that are ELF files of at most MAX_SCAN_BYTES, read."""
    for info in zf.infolist():
        if info.is_dir() or not is_shared_library(info.filename):
            continue
        if info.file_size > MAX_SCAN_BYTES:
            continue
        buf = zf.read(info)
        if buf[:4] == b"\x7fELF":
            yield info, buf


def foreign_runpaths(wheel: Path, *, allowed_roots: Sequence[str]) -> dict[str, list[str]]:
    """Return ``{library in the wheel: [runpath entries outside the wheel and allowed_roots]}``."""
    roots = [os.path.normpath(r) for r in allowed_roots if r and r != "/"]
    found: dict[str, list[str]] = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info, buf in _elf_libraries(zf):
                try:
                    bad = [p for p in elf_runpaths(buf) if not _inside(p, roots)]
                except (OffloadError, struct.error):
                    continue  # a damaged library is the check's business, not this warning's
                if bad:
                    found[info.filename] = bad
    except (OSError, zipfile.BadZipFile) as exc:
        raise OffloadError(f"cannot read wheel {wheel}: {exc}") from exc
    return found


def interpreter_lib_dirs(prefix: Path | str) -> list[str]:
    """The library directories of a Python prefix that its ``sysconfig`` ``LDSHARED``/``LDFLAGS``
    put into every extension as ``-Wl,-rpath`` (pyenv, conda, a ``--prefix`` build): ``lib`` and
    ``lib64``, as written and with links resolved."""
    dirs = [os.path.join(str(prefix), d) for d in ("lib", "lib64")]
    return sorted({os.path.normpath(p) for d in dirs for p in (d, os.path.realpath(d))})


def strip_wheel_runpaths(
    wheel: Path, *, dirs: Sequence[str]
) -> tuple[dict[str, bytes], dict[str, list[str]]]:
    """Return the rewritten bytes of each shared library in ``wheel`` whose RUNPATH/RPATH names one
    of ``dirs`` (:func:`drop_runpaths`), and per library the entries dropped. Nothing is written:
    the caller puts the members back into the wheel (with their RECORD rows)."""
    wanted = {os.path.normpath(d) for d in dirs}
    members: dict[str, bytes] = {}
    dropped: dict[str, list[str]] = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info, buf in _elf_libraries(zf):
                try:
                    new, cut = drop_runpaths(buf, lambda p: os.path.normpath(p) in wanted)
                except (OffloadError, struct.error):
                    continue  # a damaged library is the check's business
                if cut:
                    members[info.filename], dropped[info.filename] = new, cut
    except (OSError, zipfile.BadZipFile) as exc:
        raise OffloadError(f"cannot read wheel {wheel}: {exc}") from exc
    return members, dropped
