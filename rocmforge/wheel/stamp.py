"""The wheel stamp: ``<name>.dist-info/rocmforge.json`` carries the input hash and the derivation.

The stamp is added before the wheel is normalized and is listed in RECORD with its sha256 and
size, so the wheel stays valid (pip installs it, RECORD verifies) and stays traceable after it is
copied off the machine and renamed. Its bytes are deterministic — no time, no host name — so two
builds of one derivation still give byte-identical wheels.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge import __version__
from rocmforge.errors import EXIT_BAD_INPUT, CheckError, RocmforgeError
from rocmforge.store.entry import input_hash
from rocmforge.util.fsutil import open_regular
from rocmforge.wheel.record import record_with

STAMP_NAME = "rocmforge.json"
STAMP_FORMAT = 1


class StampError(RocmforgeError):
    """A wheel's stamp cannot be read or is not a valid rocmforge stamp."""

    exit_code = EXIT_BAD_INPUT


@dataclass(frozen=True, slots=True, kw_only=True)
class Stamp:
    """A stamp read back from a wheel: the input hash, the derivation and who wrote it."""

    input_hash: str
    derivation: Mapping[str, Any]
    rocmforge: str
    member: str

    def consistent(self) -> bool:
        """Return True if the derivation really hashes to the input hash it claims."""
        return input_hash(self.derivation) == self.input_hash


def stamp_bytes(input_hash: str, derivation: Mapping[str, Any]) -> bytes:
    """Return the stamp file's bytes (sorted keys, fixed layout: deterministic)."""
    doc = {
        "format": STAMP_FORMAT,
        "input_hash": input_hash,
        "derivation": derivation,
        "rocmforge": __version__,
    }
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def dist_info_dir(names: list[str], wheel: Path) -> str:
    """Return the single top-level ``*.dist-info`` directory of a wheel's member names."""
    found = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
    if len(found) != 1:
        raise CheckError(f"{wheel}: expected exactly one .dist-info directory, found {found}")
    return found[0]


def stamp_wheel(path: Path, *, input_hash: str, derivation: Mapping[str, Any]) -> str:
    """Add (or replace) the stamp in the wheel at ``path`` in place; return the member name.

    The wheel is rewritten uncompressed into a temp file beside it and renamed over it;
    :func:`rocmforge.wheel.writer.normalize_wheel` then gives it its final, reproducible form.
    """
    data = stamp_bytes(input_hash, derivation)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".stamp")
    tmp = Path(tmp_name)
    try:
        # Never through a link or into a FIFO: $OUT is written by the build (see open_regular).
        with (
            os.fdopen(fd, "wb") as out,
            open_regular(path) as raw,
            zipfile.ZipFile(raw) as src,
        ):
            mode = stat.S_IMODE(os.fstat(raw.fileno()).st_mode)
            names = src.namelist()
            dist_info = dist_info_dir(names, path)
            member = f"{dist_info}/{STAMP_NAME}"
            record_name = f"{dist_info}/RECORD"
            if record_name not in names:
                raise CheckError(f"{path}: {record_name} is missing")
            record = src.read(record_name).decode("utf-8")
            with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as dst:
                for info in src.infolist():
                    if info.filename in (member, record_name):
                        continue
                    copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                    copy.external_attr = info.external_attr
                    copy.create_system = info.create_system
                    if info.is_dir():
                        dst.writestr(copy, b"")
                        continue
                    copy.file_size = info.file_size
                    with src.open(info) as fin, dst.open(copy, "w") as fout:
                        shutil.copyfileobj(fin, fout, 1 << 20)
                extra = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
                extra.external_attr = (stat.S_IFREG | 0o644) << 16
                dst.writestr(extra, data)
                rec = zipfile.ZipInfo(record_name, date_time=(1980, 1, 1, 0, 0, 0))
                rec.external_attr = (stat.S_IFREG | 0o644) << 16
                dst.writestr(rec, record_with(record, {member: data}).encode("utf-8"))
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        tmp.unlink(missing_ok=True)
        raise CheckError(f"{path}: cannot stamp wheel: {exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return member


def read_stamp(zf: zipfile.ZipFile, wheel: Path) -> Stamp | None:
    """Return the stamp of the open wheel ``zf`` or None if it has none.

    A stamp that is present but unreadable or malformed raises :class:`StampError`.
    """
    names = zf.namelist()
    candidates = [n for n in names if n.count("/") == 1 and n.endswith(f".dist-info/{STAMP_NAME}")]
    if not candidates:
        return None
    member = candidates[0]
    try:
        doc = json.loads(zf.read(member))
    except (ValueError, zipfile.BadZipFile, zlib.error, OSError) as exc:
        raise StampError(f"{wheel}: {member} is not readable JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise StampError(f"{wheel}: {member} is not a JSON object")
    input_hash, derivation = doc.get("input_hash"), doc.get("derivation")
    if not isinstance(input_hash, str) or not isinstance(derivation, dict):
        raise StampError(f"{wheel}: {member} lacks input_hash or derivation")
    return Stamp(
        input_hash=input_hash,
        derivation=derivation,
        rocmforge=str(doc.get("rocmforge", "?")),
        member=member,
    )


def read_wheel_stamp(wheel: Path) -> Stamp | None:
    """Open ``wheel`` and return its stamp (None if unstamped); errors name the file."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return read_stamp(zf, wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise StampError(f"{wheel}: cannot read wheel: {exc}") from exc
