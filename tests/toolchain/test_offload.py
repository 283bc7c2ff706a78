"""GPU-arch verification: the offload-bundle reader against objects and libraries compiled by the
real hipcc for 1, 2 and 3 archs, against hand-built compressed bundles (CCOB v1/v2/v3, zlib and
zstd) inside a hand-built ELF, and ``[check] archs`` failing a realize whose wheel lacks an arch."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest
import zstandard
from conftest import TINY_RECIPE, rf

from rocmforge.toolchain.offload import (
    BUNDLE_MAGIC,
    LibraryArchs,
    OffloadError,
    arch_problems,
    parse_bundle,
    read_file_archs,
    scan_bundles,
    wheel_archs,
)

KERNEL = """\
#include <hip/hip_runtime.h>
__global__ void {name}_kernel(float* a) {{ a[threadIdx.x] += 1.0f; }}
extern "C" int {name}(float* a) {{
  hipLaunchKernelGGL({name}_kernel, dim3(1), dim3(1), 0, 0, a);
  return (int)hipGetLastError();
}}
"""


def require_hipcc() -> str:
    """Return hipcc's path; skip without it, except in CI (which installs it) where that fails."""
    hipcc = shutil.which("hipcc")
    if hipcc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("hipcc is missing in CI: scripts/setup.sh should install it (apt hipcc)")
        pytest.skip("hipcc not installed (apt-get install hipcc: Debian 12's ROCm 5.2)")
    return hipcc


def hipcc(*args: str | Path, cwd: Path) -> None:
    env = dict(os.environ, HIP_PLATFORM="amd")  # the CUDA toolkit here would make it pick nvcc
    proc = subprocess.run(
        [require_hipcc(), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def hip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Objects for 1, 2 and 3 archs, and a library linking a 2-arch and a 1-arch object."""
    require_hipcc()
    d = tmp_path_factory.mktemp("hip")
    sets = {"one": ["gfx90a"], "two": ["gfx90a", "gfx940"], "three": ["gfx90a", "gfx940", "gfx908"]}
    for name, archs in sets.items():
        (d / f"{name}.hip").write_text(KERNEL.format(name=name))
        offload = [f"--offload-arch={a}" for a in archs]
        hipcc("-fPIC", *offload, "-c", f"{name}.hip", "-o", f"{name}.o", cwd=d)
    hipcc("-shared", "two.o", "one.o", "-o", "libmixed.so", cwd=d)
    (d / "only940.hip").write_text(KERNEL.format(name="only940"))
    hipcc("-fPIC", "-shared", "--offload-arch=gfx940", "only940.hip", "-o", "libonly940.so", cwd=d)
    return d


@pytest.mark.hip
@pytest.mark.slow
@pytest.mark.parametrize(
    ("obj", "archs"),
    [("one", {"gfx90a"}), ("two", {"gfx90a", "gfx940"}), ("three", {"gfx90a", "gfx940", "gfx908"})],
)
def test_hipcc_objects(hip: Path, obj: str, archs: set[str]) -> None:
    lib = read_file_archs(hip / f"{obj}.o")
    assert lib is not None and len(lib.bundles) == 1
    assert lib.union == archs == lib.common
    assert any(i.startswith("host-") for i in lib.bundles[0].ids)  # host entry is not an arch


@pytest.mark.hip
@pytest.mark.slow
def test_library_union_and_common(hip: Path) -> None:
    lib = read_file_archs(hip / "libmixed.so")
    assert lib is not None and len(lib.bundles) == 2
    assert lib.union == {"gfx90a", "gfx940"}
    assert lib.common == {"gfx90a"}  # the kernel of one.o has no gfx940 code
    assert lib.to_json() == {"bundles": 2, "union": ["gfx90a", "gfx940"], "common": ["gfx90a"]}
    problems = arch_problems({"libmixed.so": lib}, ["gfx90a", "gfx940"])
    assert problems and "lacks gfx940 (only in some of its 2 bundles" in problems[0]


@pytest.mark.hip
@pytest.mark.slow
def test_wheel_archs_and_problems(hip: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "p-1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(hip / "libonly940.so", "p/lib/libonly940.so.1")
        z.write(hip / "three.o", "p/three.o")  # not a shared library: ignored
        z.writestr("p/fake.so", b"not an ELF")
        z.writestr("p/__init__.py", "")
    libs = wheel_archs(wheel)
    assert set(libs) == {"p/lib/libonly940.so.1"}
    assert libs["p/lib/libonly940.so.1"].union == {"gfx940"}
    assert arch_problems(libs, ["gfx940"]) == []
    missing = arch_problems(libs, ["gfx90a"])
    assert any("lacks gfx90a" in p for p in missing)
    assert any("unexpected gfx940" in p for p in missing)


def test_host_only_library_has_no_bundles(tmp_path: Path) -> None:
    # A plain C library (gcc) has no .hip_fatbin: no bundle, and an empty listing never passes.
    (tmp_path / "a.c").write_text("int f(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "a.c", "-o", "liba.so"], cwd=tmp_path, check=True)
    lib = read_file_archs(tmp_path / "liba.so")
    assert lib is not None and lib.bundles == ()
    assert read_file_archs(tmp_path / "a.c") is None
    assert arch_problems({}, ["gfx90a"]) == [
        "no HIP offload bundle (.hip_fatbin) found in any shared library of the wheel"
    ]


# --- hand-built bundles --------------------------------------------------------------------------


def bundle(targets: list[str], code: bytes = b"\x7fELF-device-code") -> bytes:
    """An uncompressed clang offload bundle with a host entry and one entry per target."""
    ids = [b"host-x86_64-unknown-linux"] + [
        f"hipv4-amdgcn-amd-amdhsa--{t}".encode() for t in targets
    ]
    header = len(BUNDLE_MAGIC) + 8 + sum(24 + len(i) for i in ids)
    out = bytearray(BUNDLE_MAGIC + struct.pack("<Q", len(ids)))
    blobs = b""
    for i in ids:
        data = b"" if i.startswith(b"host") else code + i
        out += struct.pack("<QQQ", header + len(blobs), len(data), len(i)) + i
        blobs += data
    return bytes(out + blobs)


def ccob(payload: bytes, *, version: int, method: int) -> bytes:
    """Wrap ``payload`` the way clang-offload-bundler --compress does (format v1, v2 or v3)."""
    data = zlib.compress(payload) if method == 0 else zstandard.ZstdCompressor().compress(payload)
    h = 0x1234567890ABCDEF
    if version == 1:
        return b"CCOB" + struct.pack("<HHIQ", 1, method, len(payload), h) + data
    if version == 2:
        total = 24 + len(data)
        return b"CCOB" + struct.pack("<HHIIQ", 2, method, total, len(payload), h) + data
    total = 32 + len(data)
    return b"CCOB" + struct.pack("<HHQQQ", 3, method, total, len(payload), h) + data


def make_elf(sections: dict[str, bytes]) -> bytes:
    """A minimal ELF64 little-endian shared object holding ``sections`` (plus .shstrtab)."""
    names = b"\0"
    name_offsets = []
    for n in [*sections, ".shstrtab"]:
        name_offsets.append(len(names))
        names += n.encode() + b"\0"
    body = bytearray(64)
    placed = []
    for data in sections.values():
        body += b"\0" * (-len(body) % 4096)  # .hip_fatbin is 4096-aligned in real files
        placed.append((len(body), len(data)))
        body += data
    placed.append((len(body), len(names)))
    body += names
    body += b"\0" * (-len(body) % 8)
    shoff = len(body)
    headers = bytes(64)
    for i, (off, size) in enumerate(placed):
        kind = 3 if i == len(placed) - 1 else 1
        headers += struct.pack("<IIQQQQIIQQ", name_offsets[i], kind, 2, 0, off, size, 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = struct.pack(
        "<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(placed) + 1,
        len(placed),
    )  # fmt: skip
    body[:64] = header
    return bytes(body + headers)


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("method", [0, 1], ids=["zlib", "zstd"])
def test_compressed_bundles(tmp_path: Path, version: int, method: int) -> None:
    plain = bundle(["gfx90a"])
    packed = ccob(bundle(["gfx942", "gfx90a:xnack-"]), version=version, method=method)
    pad = b"\0" * 13
    section = plain + pad + packed + pad + ccob(bundle(["gfx942"]), version=version, method=method)
    path = tmp_path / "libx.so"
    path.write_bytes(make_elf({".text": b"\x90" * 100, ".hip_fatbin": section}))
    lib = read_file_archs(path)
    assert lib is not None
    assert [b.compressed for b in lib.bundles] == [False, True, True]
    assert [sorted(b.archs) for b in lib.bundles] == [
        ["gfx90a"],
        ["gfx90a:xnack-", "gfx942"],
        ["gfx942"],
    ]
    assert lib.union == {"gfx90a", "gfx90a:xnack-", "gfx942"}
    assert lib.common == frozenset()


@pytest.mark.hip
@pytest.mark.slow
def test_real_bundle_compressed(hip: Path) -> None:
    # The bundle hipcc wrote, compressed as ROCm >= 6.2 does, reads back to the same archs.
    raw = (hip / "three.o").read_bytes()
    start = raw.index(BUNDLE_MAGIC)
    ids, end = parse_bundle(raw, start)
    for version, method in [(2, 0), (3, 1)]:
        packed = ccob(raw[start:end], version=version, method=method)
        [b] = scan_bundles(packed)
        assert b.compressed and b.ids == ids
        assert b.archs == {"gfx90a", "gfx940", "gfx908"}


def test_damaged_bundles_raise(tmp_path: Path) -> None:
    good = ccob(bundle(["gfx90a"]), version=2, method=1)
    with pytest.raises(OffloadError, match="claims"):
        scan_bundles(good[:-5])
    with pytest.raises(OffloadError, match="compression method 7"):
        scan_bundles(b"CCOB" + struct.pack("<HHIIQ", 2, 7, 24, 0, 0))
    with pytest.raises(OffloadError, match="truncated"):
        scan_bundles(bundle(["gfx90a"])[:40])
    path = tmp_path / "libbad.so"
    path.write_bytes(make_elf({".hip_fatbin": good[:-5]}))
    with pytest.raises(OffloadError, match=r"libbad\.so"):
        read_file_archs(path)


def test_library_json_sorted() -> None:
    lib = LibraryArchs(path="x", bundles=scan_bundles(bundle(["gfx942", "gfx90a"])))
    assert lib.to_json() == {
        "bundles": 1,
        "union": ["gfx90a", "gfx942"],
        "common": ["gfx90a", "gfx942"],
    }


# --- [check] archs in a real realize -------------------------------------------------------------


def arch_recipe(tmp_path: Path, src: Path, archs: list[str]) -> Path:
    text = TINY_RECIPE.format(src=src) + f"archs = {json.dumps(archs)}\n"
    path = tmp_path / f"r-{'-'.join(archs)}.toml"
    path.write_text(text)
    return path


@pytest.mark.hip
@pytest.mark.slow
def test_check_archs_fails_realize(hip: Path, tiny_src: Path, tmp_path: Path) -> None:
    shutil.copy(hip / "libonly940.so", tiny_src / "tiny" / "libkernels.so")
    store = tmp_path / "store"
    proc = rf("realize", arch_recipe(tmp_path, tiny_src, ["gfx90a"]), "--store", store)
    assert proc.returncode == 1, proc.stderr
    assert "tiny/libkernels.so lacks gfx90a" in proc.stderr
    assert "unexpected gfx940" in proc.stderr
    assert not list(store.glob("*/meta.json"))  # nothing published
    ok = rf("realize", arch_recipe(tmp_path, tiny_src, ["gfx940"]), "--store", store, "--json")
    assert ok.returncode == 0, ok.stderr
    [report] = json.loads(ok.stdout)
    meta = json.loads((Path(report["path"]) / "meta.json").read_text())
    assert meta["archs"] == {
        "tiny-0.1-py3-none-any.whl": {
            "tiny/libkernels.so": {"bundles": 1, "union": ["gfx940"], "common": ["gfx940"]}
        }
    }


@pytest.mark.slow
def test_check_archs_empty_listing_fails(tiny_src: Path, tmp_path: Path) -> None:
    proc = rf("realize", arch_recipe(tmp_path, tiny_src, ["gfx90a"]), "--store", tmp_path / "s")
    assert proc.returncode == 1
    assert "no HIP offload bundle" in proc.stderr


def amdgpu_elf(mach: int) -> bytes:
    """The first 64 bytes of an AMDGPU code object: e_machine 224, e_flags with ``mach``."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 64, 3]) + bytes(7)
    return struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 224, 1, 0, 0, 0, 0x500 | mach, 64, 0, 0,
                       64, 0, 0)  # fmt: skip


@pytest.mark.parametrize("compressed", [False, True])
def test_elf_machine_must_match_the_entry_id(tmp_path: Path, compressed: bool) -> None:
    """An entry labelled gfx942 whose code object is gfx90a code does not count as gfx942."""
    raw = bundle(["gfx90a", "gfx942"], code=amdgpu_elf(0x3F))  # both entries hold gfx90a code
    section = ccob(raw, version=2, method=1) if compressed else raw
    path = tmp_path / "libx.so"
    path.write_bytes(make_elf({".hip_fatbin": section}))
    lib = read_file_archs(path)
    assert lib is not None
    assert lib.union == {"gfx90a"}
    assert lib.mismatched == ("hipv4-amdgcn-amd-amdhsa--gfx942",)
    assert lib.to_json()["mismatched"] == ["hipv4-amdgcn-amd-amdhsa--gfx942"]
    problems = arch_problems({"libx.so": lib}, ["gfx90a", "gfx942"])
    assert any("lacks gfx942" in p for p in problems)
    assert any("ELF machine contradicts its id" in p for p in problems)
    # The right machine for each id: both count, nothing is listed as mismatched.
    good = bundle(["gfx942"], code=amdgpu_elf(0x4C))
    path.write_bytes(make_elf({".hip_fatbin": good}))
    lib = read_file_archs(path)
    assert lib is not None and lib.union == {"gfx942"} and "mismatched" not in lib.to_json()
