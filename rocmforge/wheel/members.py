"""Replace members of a wheel in place, with their RECORD rows (the build's RUNPATH repair)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from rocmforge.errors import CheckError
from rocmforge.util.fsutil import open_regular
from rocmforge.wheel.record import record_with
from rocmforge.wheel.stamp import dist_info_dir

__all__ = ["replace_members"]


def replace_members(path: Path, members: Mapping[str, bytes]) -> None:
    """Give the existing members ``members`` of the wheel at ``path`` new bytes, in place.

    Every other member is copied as it is; the replaced ones keep their name, time and mode,
    and RECORD lists their new sha256 and size. Written uncompressed into a temp file beside it
    and renamed over it: :func:`rocmforge.wheel.writer.normalize_wheel` gives it its final form.
    A name the wheel does not hold is a :class:`CheckError`.
    """
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".edit")
    tmp = Path(tmp_name)
    try:
        with (
            os.fdopen(fd, "wb") as out,
            open_regular(path) as raw,
            zipfile.ZipFile(raw) as src,
        ):
            mode = stat.S_IMODE(os.fstat(raw.fileno()).st_mode)
            names = src.namelist()
            missing = sorted(set(members) - set(names))
            if missing:
                raise CheckError(f"{path}: no member {', '.join(missing)} to replace")
            record_name = f"{dist_info_dir(names, path)}/RECORD"
            if record_name not in names:
                raise CheckError(f"{path}: {record_name} is missing")
            record = src.read(record_name).decode("utf-8")
            with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as dst:
                for info in src.infolist():
                    copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                    copy.external_attr = info.external_attr
                    copy.create_system = info.create_system
                    if info.filename == record_name:
                        dst.writestr(copy, record_with(record, members).encode("utf-8"))
                    elif info.filename in members:
                        dst.writestr(copy, members[info.filename])
                    elif info.is_dir():
                        dst.writestr(copy, b"")
                    else:
                        copy.file_size = info.file_size
                        with src.open(info) as fin, dst.open(copy, "w") as fout:
                            shutil.copyfileobj(fin, fout, 1 << 20)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        tmp.unlink(missing_ok=True)
        raise CheckError(f"{path}: cannot rewrite wheel: {exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
