"""MI355X code in CI: a real gfx950 code object, made by a real clang that can emit gfx950, proved
by the arch check a build's wheels go through (``rocmforge.build.check.check_archs``).

LLVM learned gfx950 in 20: Debian 12's clang-19 rejects it, Debian 13's clang-22 (and Debian 12's
clang-22 from bookworm-security) emits it. ``scripts/gfx950-clang.sh`` (run by ``scripts/setup.sh
--for-tests``) puts such a clang at ``/usr/local/lib/rocmforge/clang-gfx950``; there a missing
compiler fails under ``CI=true`` instead of skipping. The code object is bundled here in Python
(the documented format, docs/flagship.md "MI355X"): Debian 12's clang-offload-bundler-19 does not
know gfx950 and writes the id ``hipv4-amdgcn-amd-amdhsa--gfx950-`` (an empty target ID after the
triple), which is not a gfx950 entry; the ELF inside is what the check judges.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from rocmforge.build.check import check_archs
from rocmforge.errors import CheckError
from rocmforge.toolchain.offload import BUNDLE_MAGIC, ELF_MACH

pytestmark = pytest.mark.slow

#: Where scripts/gfx950-clang.sh puts the compiler (a link to clang-22, or trixie's through its
#: loader) and the device linker beside it.
PLACED = Path("/usr/local/lib/rocmforge/clang-gfx950")
KERNEL = "__attribute__((amdgpu_kernel)) void scale(float *p) { p[0] = p[0] * 2.0f + 1.0f; }\n"
CANDIDATES = ("clang-22", "clang-21", "clang-20")


def _compile(clang: str, out: Path, arch: str = "gfx950") -> subprocess.CompletedProcess[str]:
    src = out.parent / "scale.c"
    src.write_text(KERNEL)
    cmd = [clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={arch}", "-nogpulib", "-O2", "-c"]
    return subprocess.run(
        [*cmd, src.name, "-o", str(out)],
        cwd=src.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _gfx950_clang(tmp_path: Path) -> str:
    """The first compiler that emits gfx950 here; skip (fail in CI) saying what was tried."""
    tried = []
    env = os.environ.get("ROCMFORGE_GFX950_CLANG")
    names = [env] if env else []
    names += [str(PLACED)] if PLACED.exists() else []
    names += [c for c in (shutil.which(n) for n in CANDIDATES) if c]
    for name in names:
        proc = _compile(name, tmp_path / "probe.o")
        if proc.returncode == 0:
            return name
        tried.append(f"{name}: {(proc.stderr.strip().splitlines() or ['failed'])[-1]}")
    why = "; ".join(tried) or f"none of {PLACED}, {', '.join(CANDIDATES)} is installed"
    if os.environ.get("CI") == "true":
        pytest.fail(f"no gfx950-capable clang in CI ({why}); scripts/gfx950-clang.sh installs one")
    pytest.skip(f"no clang here emits gfx950 ({why}); scripts/gfx950-clang.sh installs one")


def _link(clang: str, obj: Path) -> Path:
    """The code object as HIP bundles hold it (ET_DYN), linked by the lld beside the compiler;
    the relocatable object when no such lld runs here (same e_machine and e_flags)."""
    version = Path(clang).name.removeprefix("clang-")
    lld = Path(clang).with_name(f"ld.lld-{version}")
    if not lld.exists():
        lld = Path(shutil.which(f"ld.lld-{version}") or "/nonexistent")
    if not lld.exists():
        return obj
    out = obj.with_suffix(".co")
    subprocess.run([str(lld), "-shared", str(obj), "-o", str(out)], check=True, timeout=120)
    return out


def _bundle(entries: list[tuple[str, bytes]]) -> bytes:
    """An uncompressed clang offload bundle (ROCM.md): magic, u64 count, per entry u64 offset,
    u64 size, u64 id length and the id; code objects 4096-aligned after the header."""
    header = len(BUNDLE_MAGIC) + 8 + sum(24 + len(i) for i, _ in entries)
    pos, table, body = -(-header // 4096) * 4096, b"", b""
    for ident, blob in entries:
        table += struct.pack("<QQQ", pos, len(blob), len(ident)) + ident.encode()
        body += blob + b"\0" * (-len(blob) % 4096)
        pos += len(blob) + (-len(blob) % 4096)
    out = BUNDLE_MAGIC + struct.pack("<Q", len(entries)) + table
    return out + b"\0" * (-(-header // 4096) * 4096 - len(out)) + body


def _wheel(tmp_path: Path, bundle: bytes, name: str) -> Path:
    """A wheel whose extension module carries ``bundle`` as its ``.hip_fatbin`` section."""
    for tool in ("cc", "objcopy"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (scripts/setup.sh)")
    work = tmp_path / name
    work.mkdir()
    (work / "host.c").write_text("int hip_host_stub(void) { return 0; }\n")
    (work / "fatbin").write_bytes(bundle)
    so = work / "_scale.so"
    subprocess.run(["cc", "-shared", "-fPIC", "host.c", "-o", so.name], cwd=work, check=True)
    subprocess.run(
        ["objcopy", "--add-section", ".hip_fatbin=fatbin",
         "--set-section-flags", ".hip_fatbin=alloc,readonly", so.name], cwd=work, check=True,
    )  # fmt: skip
    wheel = work / "gfx950demo-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(so, "gfx950demo/_scale.so")
    return wheel


def test_gfx950_code_object_is_proved_by_the_arch_check(tmp_path: Path) -> None:
    clang = _gfx950_clang(tmp_path)
    obj = tmp_path / "scale.o"
    proc = _compile(clang, obj)
    assert proc.returncode == 0, proc.stderr
    co = _link(clang, obj).read_bytes()
    # the ELF itself: AMDGPU (224), mach 0x4f = gfx950, whatever any id says
    assert co[:4] == b"\x7fELF" and struct.unpack_from("<H", co, 18)[0] == 224
    assert struct.unpack_from("<I", co, 48)[0] & 0xFF == ELF_MACH["gfx950"] == 0x4F
    host = ("host-x86_64-unknown-linux-gnu-", b"")
    wheel = _wheel(tmp_path, _bundle([host, ("hipv4-amdgcn-amd-amdhsa--gfx950", co)]), "good")
    log = io.BytesIO()
    report = check_archs([wheel], ["gfx950"], workdir=tmp_path, log=log)
    assert report[wheel.name]["gfx950demo/_scale.so"] == {
        "bundles": 1, "union": ["gfx950"], "common": ["gfx950"],
    }  # fmt: skip
    assert b"archs gfx950 verified" in log.getvalue()
    # a recipe that promised MI300X code gets a failure naming what the wheel really holds
    with pytest.raises(CheckError) as err:
        check_archs([wheel], ["gfx942"], workdir=tmp_path, log=io.BytesIO())
    assert "lacks gfx942" in str(err.value) and "unexpected gfx950" in str(err.value)
    # the same gfx950 code object labelled gfx942: the ELF contradicts the id, and it is refused
    lie = _wheel(tmp_path, _bundle([host, ("hipv4-amdgcn-amd-amdhsa--gfx942", co)]), "lie")
    with pytest.raises(CheckError) as err:
        check_archs([lie], ["gfx942"], workdir=tmp_path, log=io.BytesIO())
    assert "contradicts its id: hipv4-amdgcn-amd-amdhsa--gfx942" in str(err.value)


def test_debian_12_clang_19_cannot_emit_gfx950(tmp_path: Path) -> None:
    """What the MI355X recipe says about Debian 12's own compiler, checked where it is installed."""
    clang19 = shutil.which("clang-19")
    if clang19 is None:
        pytest.skip("clang-19 not installed (scripts/setup.sh --for-tests)")
    proc = _compile(clang19, tmp_path / "scale.o")
    assert proc.returncode != 0 and "invalid target ID 'gfx950'" in proc.stderr
    assert _compile(clang19, tmp_path / "scale942.o", "gfx942").returncode == 0
