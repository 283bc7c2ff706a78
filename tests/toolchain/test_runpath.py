"""drop_runpaths on libraries gcc really links: what the loader reads after, and what stays."""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from rocmforge.toolchain.offload import elf_section
from rocmforge.toolchain.runpath import (
    DT_RUNPATH,
    drop_runpaths,
    elf_runpaths,
    interpreter_lib_dirs,
)

PY_LIB = "/root/.pyenv/versions/3.11.7/lib"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _link(tmp_path: Path, name: str, *flags: str) -> bytes:
    (tmp_path / "a.c").write_text("int rf_answer(void) { return 42; }\n")
    out = tmp_path / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", out, tmp_path / "a.c", *flags], check=True)
    return out.read_bytes()


def _readelf(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    lib = ctypes.CDLL(str(path))  # the loader still takes it
    assert lib.rf_answer() == 42
    proc = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    assert not proc.stderr, proc.stderr
    return proc.stdout


def _is_py(path: str) -> bool:
    return path == PY_LIB


def test_the_interpreters_entry_goes_and_the_projects_stays_with_no_trace(tmp_path: Path) -> None:
    buf = _link(tmp_path, "a.so", f"-Wl,-rpath,{PY_LIB}", "-Wl,-rpath,/opt/elsewhere/lib")
    assert elf_runpaths(buf) == [PY_LIB, "/opt/elsewhere/lib"]
    new, dropped = drop_runpaths(buf, _is_py)
    assert dropped == [PY_LIB] and len(new) == len(buf)
    assert elf_runpaths(new) == ["/opt/elsewhere/lib"]
    assert PY_LIB.encode() not in new  # the freed bytes are zeroed, not left behind
    assert "Library runpath: [/opt/elsewhere/lib]" in _readelf(tmp_path, "a2.so", new)


def test_an_rpath_emptied_is_removed_not_left_empty(tmp_path: Path) -> None:
    buf = _link(tmp_path, "b.so", f"-Wl,-rpath,{PY_LIB}")
    new, dropped = drop_runpaths(buf, _is_py)
    assert dropped == [PY_LIB] and elf_runpaths(new) == []
    text = _readelf(tmp_path, "b2.so", new)
    assert "RUNPATH" not in text and "RPATH" not in text  # an empty one would search the cwd
    assert text.rstrip().endswith("0x0")  # DT_NULL still ends the table


def test_old_style_rpath_with_the_interpreter_last(tmp_path: Path) -> None:
    buf = _link(tmp_path, "c.so", f"-Wl,-rpath,$ORIGIN/../lib:{PY_LIB}", "-Wl,--disable-new-dtags")
    new, dropped = drop_runpaths(buf, _is_py)
    assert dropped == [PY_LIB] and elf_runpaths(new) == ["$ORIGIN/../lib"]
    assert "Library rpath: [$ORIGIN/../lib]" in _readelf(tmp_path, "c2.so", new)


def test_nothing_to_drop_leaves_the_bytes(tmp_path: Path) -> None:
    buf = _link(tmp_path, "d.so", "-Wl,-rpath,/opt/elsewhere/lib")
    assert drop_runpaths(buf, _is_py) == (buf, [])


def _point_soname_at(buf: bytes, text: bytes) -> bytes:
    """Make DT_SONAME name ``text`` inside the RUNPATH string (a tail the linker merged)."""
    dyn, strs = elf_section(buf, ".dynamic"), elf_section(buf, ".dynstr")
    assert dyn and strs
    entries = [(p, *struct.unpack_from("<qQ", buf, p)) for p in range(dyn[0], dyn[0] + dyn[1], 16)]
    runpath = next(v for _, t, v in entries if t == DT_RUNPATH)
    at = buf.index(text, strs[0] + runpath) - strs[0]
    out = bytearray(buf)
    pos = next(p for p, t, _ in entries if t == 14)  # DT_SONAME
    struct.pack_into("<qQ", out, pos, 14, at)
    return bytes(out)


def test_bytes_another_name_shares_are_not_touched(tmp_path: Path) -> None:
    # kept part is a tail: the entry points at it, the shared bytes stay
    buf = _link(tmp_path, "e.so", f"-Wl,-rpath,{PY_LIB}:/opt/keep", "-Wl,-soname,libe.so")
    buf = _point_soname_at(buf, b"keep")
    new, dropped = drop_runpaths(buf, _is_py)
    assert dropped == [PY_LIB] and elf_runpaths(new) == ["/opt/keep"]
    assert "Library soname: [keep]" in _readelf(tmp_path, "e2.so", new)
    # kept part is not a tail: left as it was (the build warns)
    buf = _link(tmp_path, "f.so", f"-Wl,-rpath,/opt/keep:{PY_LIB}", "-Wl,-soname,libf.so")
    buf = _point_soname_at(buf, b"3.11.7/lib")
    assert drop_runpaths(buf, _is_py) == (buf, [])


def test_interpreter_lib_dirs_are_the_prefix_lib_dirs(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / "lib").symlink_to(tmp_path / "real")
    dirs = interpreter_lib_dirs(tmp_path / "py")
    assert dirs == sorted([str(tmp_path / "py/lib"), str(tmp_path / "py/lib64"),
                           str(tmp_path / "real")])  # fmt: skip
