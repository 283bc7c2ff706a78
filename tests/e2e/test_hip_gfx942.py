"""MI300X code in CI: ``recipes/hip-gfx942.toml`` built for real by Debian's plain clang-19 for
gfx90a + gfx942 in the sandbox, both archs proved by ``[check] archs`` and by ``audit``, and the
gfx942 code object checked independently by its ELF header (e_flags mach 0x4c), not only its id.
CI installs clang-19 and the device libraries (``scripts/test.sh``); there a missing
compiler fails instead of skipping. The ROCm version is read from /usr, never assumed."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, rf

from rocmforge.toolchain.rocm import read_rocm_version

DEVICE_LIBS = Path("/usr/local/lib/rocmforge/device-libs")
MACH = {0x3F: "gfx90a", 0x40: "gfx940", 0x4C: "gfx942"}


def _need_clang19() -> None:
    missing = [t for t in ("clang++-19",) if shutil.which(t) is None]
    if not (DEVICE_LIBS / "oclc_isa_version_942.bc").exists():
        missing.append(str(DEVICE_LIBS))
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"missing in CI: {missing}; scripts/test.sh installs them")
        pytest.skip(f"not installed: {missing} (scripts/test.sh)")


def _recipe(tmp_path: Path, archs: str, check: str) -> Path:
    """The committed recipe with the ROCm version this machine has (Debian 12: 5.2, 13: 5.7)."""
    found = read_rocm_version(Path("/usr"))
    assert found is not None, "no HIP headers under /usr (libamdhip64-dev)"
    text = (REPO / "recipes" / "hip-gfx942.toml").read_text()
    text = text.replace('rocm = "5.2"', f'rocm = "{found.comparable}"', 1)
    src = REPO / "examples" / "hip-demo"
    text = text.replace('path = "../examples/hip-demo"', f'path = "{src}"')
    text = text.replace('HIPDEMO_ARCHS = "gfx90a;gfx942"', f'HIPDEMO_ARCHS = "{archs}"')
    text = text.replace('archs = ["gfx90a", "gfx942"]', f"archs = {check}")
    recipe = tmp_path / "hip-gfx942.toml"
    recipe.write_text(text)
    return recipe


def _fatbin_machs(so: bytes) -> dict[str, int]:
    """Bundle id -> ELF e_flags mach of its code object, read straight from .hip_fatbin."""
    shoff = struct.unpack_from("<Q", so, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", so, 0x3A)
    sh = [struct.unpack_from("<IIQQQQIIQQ", so, shoff + i * shentsize) for i in range(shnum)]
    stroff = sh[shstrndx][4]
    (blob,) = [
        so[off : off + size]
        for name, _t, _f, _a, off, size, *_ in sh
        if so[stroff + name : so.index(b"\0", stroff + name)] == b".hip_fatbin"
    ]
    assert blob[:24] == b"__CLANG_OFFLOAD_BUNDLE__"
    (n,) = struct.unpack_from("<Q", blob, 24)
    pos, out = 32, {}
    for _ in range(n):
        off, size, idlen = struct.unpack_from("<QQQ", blob, pos)
        ident = blob[pos + 24 : pos + 24 + idlen].decode()
        pos += 24 + idlen
        co = blob[off : off + size]
        if "amdgcn" in ident:
            assert co[:4] == b"\x7fELF" and struct.unpack_from("<H", co, 18)[0] == 224  # AMDGPU
            out[ident] = struct.unpack_from("<I", co, 48)[0] & 0xFF
    return out


@pytest.mark.hip
@pytest.mark.slow
def test_gfx942_with_plain_clang(tmp_path: Path, wheelhouse: Path) -> None:
    _need_clang19()
    store = tmp_path / "store"
    recipe = _recipe(tmp_path, "gfx90a;gfx942", '["gfx90a", "gfx942"]')
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [report] = json.loads(proc.stdout)
    entry = Path(report["path"])
    [wheel] = report["wheels"]
    lib = "hipdemo/_hip.cpython-311-x86_64-linux-gnu.so"
    meta = json.loads((entry / "meta.json").read_text())
    both = {"bundles": 1, "union": ["gfx90a", "gfx942"], "common": ["gfx90a", "gfx942"]}
    assert meta["archs"][Path(wheel).name] == {lib: both}  # what [check] archs verified
    if shutil.which("bwrap"):
        assert meta["sandbox"] == "bwrap"
    with zipfile.ZipFile(wheel) as zf:
        machs = _fatbin_machs(zf.read(lib))
    assert {i.rsplit("--", 1)[1]: MACH.get(m) for i, m in machs.items()} == {
        "gfx90a": "gfx90a", "gfx942": "gfx942"
    }
    drv = json.loads((entry / "derivation.json").read_text())
    hip = drv["toolchain"]["rocm"]["hip_clang"]
    assert "clang version 19." in hip["version"]
    assert "gfx942" in drv["toolchain"]["rocm"]["device_libs"]["isa"]
    assert "hipcc" not in drv["toolchain"]["rocm"]
    # audit proves both archs, verified (from the entry) and claimed (read from the wheel itself)
    audit = rf("audit", wheel, "--store", store)
    assert audit.returncode == 0, audit.stderr
    assert f"{lib}: gfx90a, gfx942 (1 bundle(s))" in audit.stdout
    copy = tmp_path / "elsewhere.whl"
    shutil.copy(wheel, copy)
    claimed = rf("audit", copy, "--store", tmp_path / "other-store", "--json")
    assert claimed.returncode == 5, claimed.stderr
    assert json.loads(claimed.stdout)[0]["archs"] == {lib: both}


@pytest.mark.hip
@pytest.mark.slow
def test_check_archs_fails_when_gfx942_is_missing(tmp_path: Path, wheelhouse: Path) -> None:
    """The same build for gfx90a only: [check] archs asking for gfx942 fails the build."""
    _need_clang19()
    recipe = _recipe(tmp_path, "gfx90a", '["gfx90a", "gfx942"]')
    proc = rf("realize", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "gfx942" in proc.stderr
    assert not list((tmp_path / "store" / "entries").glob("*-hipdemo-*"))
