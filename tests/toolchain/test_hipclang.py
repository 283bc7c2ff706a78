"""A plain upstream clang as the HIP compiler of a ``rocm`` toolchain (``hip-clang``,
``device-libs``): probing, fingerprint, hashed device libraries, clear errors, env, lints.
Fake clangs here; ``test_hip_gfx942.py`` builds for real with Debian's clang-19."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, host_cache_dir, rf, rf_in

from rocmforge.errors import ToolchainError
from rocmforge.recipe.model import ToolchainSpec
from rocmforge.toolchain.system import resolve_toolchain

HIP_VERSION_H = (
    "#define HIP_VERSION_MAJOR 5\n#define HIP_VERSION_MINOR 2\n#define HIP_VERSION_PATCH 1\n"
)


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def fake_hip_clang(parent: Path, *, version: str = "19.1.7", tools: bool = True) -> Path:
    """A clang++ laid out like /usr/lib/llvm-19 (bin/clang, lib/libclang-cpp, the HIP tools)."""
    llvm = parent / "llvm-19"
    res = llvm / "lib" / "clang" / "19"
    (res / "include").mkdir(parents=True)
    (res / "include" / "__clang_hip_runtime_wrapper.h").write_text("/* wrapper */\n")
    (llvm / "lib" / "libclang-cpp.so.19.1").write_bytes(b"\x7fELF fake libclang-cpp")
    (llvm / "lib" / "libLLVM.so.19.1").write_bytes(b"\x7fELF fake libLLVM")
    clang = _script(
        llvm / "bin" / "clang",
        f'case "$1" in\n'
        f'  --version) echo "Fake clang version {version}"; echo "Target: x86_64-pc-linux-gnu";;\n'
        f'  -print-targets) echo "    amdgcn - AMD GCN GPUs"; echo "    x86-64 - 64-bit X86";;\n'
        f'  -print-resource-dir) echo "{res}";;\n'
        f"  *) exit 1;;\nesac\n",
    )
    if tools:
        for tool in ("clang-offload-bundler", "lld", "llvm-objcopy"):
            _script(llvm / "bin" / tool, "exit 0\n")
    link = parent / "bin" / "clang++-19"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(clang)
    return link


def fake_device_libs(parent: Path, archs: tuple[str, ...] = ("90a", "942")) -> Path:
    d = parent / "device-libs"
    d.mkdir(parents=True)
    for name in ("ocml.bc", "ockl.bc", "hip.bc", *(f"oclc_isa_version_{a}.bc" for a in archs)):
        (d / name).write_bytes(b"BC\xc0\xde" + name.encode())
    return d


def debian_root(parent: Path) -> Path:
    root = parent / "usr"
    (root / "include" / "hip").mkdir(parents=True, exist_ok=True)
    (root / "include" / "hip" / "hip_version.h").write_text(HIP_VERSION_H)
    return root


def _spec(tmp_path: Path, clang: Path, libs: Path) -> ToolchainSpec:
    return ToolchainSpec(
        kind="rocm", rocm="5.2", root=debian_root(tmp_path), hip_clang=str(clang), device_libs=libs
    )


@pytest.mark.slow
def test_probe_fingerprints_clang_tools_and_device_libs(tmp_path: Path) -> None:
    clang = fake_hip_clang(tmp_path)
    libs = fake_device_libs(tmp_path)
    tc = resolve_toolchain(_spec(tmp_path, clang, libs), cache_dir=host_cache_dir())
    rocm = tc.fingerprint["rocm"]
    hip = rocm["hip_clang"]
    assert hip["version"] == "Fake clang version 19.1.7"
    assert set(hip["libs"]) == {"libclang-cpp.so.19.1", "libLLVM.so.19.1"}
    assert set(hip["tools"]) == {"clang-offload-bundler", "lld", "llvm-objcopy"}
    assert hip["resource_headers"]["files"] == 1
    assert rocm["device_libs"]["isa"] == ["gfx90a", "gfx942"] and rocm["device_libs"]["files"] == 5
    assert "hipcc" not in rocm and "clang" not in rocm
    assert str(tmp_path) not in json.dumps(tc.fingerprint)  # no paths in what is hashed
    assert tc.env["HIP_CLANG"] == str(clang) and tc.env["HIP_DEVICE_LIB_PATH"] == str(libs)
    assert str(clang.resolve().parent) in tc.path_dirs
    assert str(libs) in tc.guards and str(libs / "oclc_isa_version_942.bc") in tc.guards
    assert str(clang.resolve()) in tc.guards


@pytest.mark.slow
def test_device_lib_content_changes_the_fingerprint(tmp_path: Path) -> None:
    clang = fake_hip_clang(tmp_path)
    libs = fake_device_libs(tmp_path)
    cache = host_cache_dir()
    before = resolve_toolchain(_spec(tmp_path / "a", clang, libs), cache_dir=cache).fingerprint
    (libs / "ocml.bc").write_bytes(b"BC\xc0\xde other ocml")
    after = resolve_toolchain(_spec(tmp_path / "b", clang, libs), cache_dir=cache).fingerprint
    assert before["rocm"]["device_libs"]["blake3"] != after["rocm"]["device_libs"]["blake3"]
    assert before["rocm"]["hip_clang"] == after["rocm"]["hip_clang"]


def test_missing_tool_names_its_package(tmp_path: Path) -> None:
    clang = fake_hip_clang(tmp_path, tools=False)
    libs = fake_device_libs(tmp_path)
    with pytest.raises(ToolchainError, match=r"bundler is missing; install clang-tools-19"):
        resolve_toolchain(_spec(tmp_path, clang, libs), cache_dir=host_cache_dir())


def test_missing_device_libs_and_clang_are_clear(tmp_path: Path) -> None:
    clang = fake_hip_clang(tmp_path)
    with pytest.raises(ToolchainError, match=r"device-libs: .* does not exist; create it"):
        resolve_toolchain(_spec(tmp_path, clang, tmp_path / "nope"), cache_dir=host_cache_dir())
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ToolchainError, match="no oclc_isa_version"):
        resolve_toolchain(_spec(tmp_path / "x", clang, empty), cache_dir=host_cache_dir())
    with pytest.raises(ToolchainError, match=r"'clang\+\+-99' is not an executable on PATH"):
        resolve_toolchain(
            _spec(tmp_path / "y", Path("clang++-99"), fake_device_libs(tmp_path / "y")),
            cache_dir=host_cache_dir(),
        )


def _recipe(tmp_path: Path, tiny_src: Path, clang: Path, libs: Path, archs: str) -> Path:
    root = debian_root(tmp_path)
    recipe = tmp_path / "hip.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src)
        + f'\n[toolchain]\nkind = "rocm"\nrocm = "5.2"\nroot = "{root}"\n'
        + f'hip-clang = "{clang}"\ndevice-libs = "{libs}"\n'
        + f'\n[env]\nGPU_TARGETS = "{archs}"\n'
    )
    return recipe


@pytest.mark.slow
def test_plan_uses_the_device_libs_for_arch_lints(tmp_path: Path, tiny_src: Path) -> None:
    clang = fake_hip_clang(tmp_path)
    libs = fake_device_libs(tmp_path)
    # gfx942 with ROCm 5.2 at the root: no RF102, the plain clang and its device libs decide.
    ok = rf("plan", _recipe(tmp_path, tiny_src, clang, libs, "gfx90a;gfx942"), "--store",
            tmp_path / "store", "--json")
    assert ok.returncode == 0, ok.stderr
    drv = json.loads(ok.stdout)["derivation"]
    assert drv["toolchain"]["rocm"]["device_libs"]["isa"] == ["gfx90a", "gfx942"]
    # An arch the device libs have no ISA file for: RF103 names what the toolchain targets.
    bad = rf("plan", _recipe(tmp_path, tiny_src, clang, libs, "gfx90a;gfx950"), "--store",
             tmp_path / "store")
    assert bad.returncode == 2
    assert "RF103" in bad.stderr and "gfx950" in bad.stderr and "gfx942" in bad.stderr


def test_device_libs_needs_hip_clang(tmp_path: Path, tiny_src: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src)
        + f'\n[toolchain]\nkind = "rocm"\nrocm = "5.2"\nroot = "{debian_root(tmp_path)}"\n'
        + 'device-libs = "/nowhere"\n'
    )
    proc = rf_in("plan", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 2 and "toolchain.device-libs" in proc.stderr
