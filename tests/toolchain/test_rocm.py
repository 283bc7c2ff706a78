"""The ``kind = "rocm"`` toolchain: version probing on fake roots laid out as ``/opt/rocm-X`` and as
Debian's ``/usr``, the declared/probed mismatch, the stat cache, the derived env, and the missing
root stopping ``realize`` before any fetch."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import host_cache_dir, rf_in

from rocmforge.errors import ToolchainError
from rocmforge.recipe.model import ToolchainSpec
from rocmforge.toolchain.rocm import read_rocm_version
from rocmforge.toolchain.system import resolve_toolchain
from rocmforge.util.hashing import file_blake3

ROCM_VERSION_H = """\
#ifndef ROCM_VERSION_H
#define ROCM_VERSION_H
#define ROCM_VERSION_MAJOR   {0}
#define ROCM_VERSION_MINOR   {1}
#define ROCM_VERSION_PATCH   {2}
#endif
"""

HIP_VERSION_H = """\
#define HIP_VERSION_MAJOR {0}
#define HIP_VERSION_MINOR {1}
#define HIP_VERSION_PATCH {2}
#define HIP_VERSION_GITHASH ""
"""


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _fake_hipcc(root: Path, clang: Path, hip_version: str, calls: Path) -> None:
    # Mimics `HIPCC_VERBOSE=1 hipcc --version`: the command it runs, then the compiler's answer.
    _script(
        root / "bin" / "hipcc",
        f'echo run >> "{calls}"\n'
        f'[ "$HIP_PLATFORM" = amd ] || {{ echo "nvcc fatal : no HIP_PLATFORM" >&2; exit 1; }}\n'
        f'echo "hipcc-cmd: {clang} --version"\n'
        f'echo "HIP version: {hip_version}"\n'
        f'exec "{clang}" --version\n',
    )


def opt_root(tmp_path: Path, version: str = "6.2.4") -> Path:
    """A fake ROCm install laid out like /opt/rocm-X (rocm-core header, llvm/bin/clang)."""
    root = tmp_path / f"rocm-{version}"
    h = root / "include" / "rocm-core" / "rocm_version.h"
    h.parent.mkdir(parents=True)
    h.write_text(ROCM_VERSION_H.format(*version.split(".")))
    (root / ".info").mkdir()
    (root / ".info" / "version").write_text(f"{version}-120\n")
    clang = _script(
        root / "llvm" / "bin" / "clang", 'echo "AMD clang version 18.0.0git (roc-6.2.4 24355)"\n'
    )
    (root / "llvm" / "bin" / "clang++").symlink_to("clang")
    _fake_hipcc(root, root / "llvm" / "bin" / "clang++", "6.2.41134-65d174c3e", tmp_path / "calls")
    assert clang.exists()
    return root


def debian_root(tmp_path: Path) -> Path:
    """A fake root laid out like Debian 12's /usr: hip_version.h, hipcc calling clang++-15."""
    root = tmp_path / "usr"
    h = root / "include" / "hip" / "hip_version.h"
    h.parent.mkdir(parents=True)
    h.write_text(HIP_VERSION_H.format(5, 2, 21153))
    clang = _script(
        root / "lib" / "llvm-15" / "bin" / "clang", 'echo "Debian clang version 15.0.6"\n'
    )
    (root / "bin").mkdir()
    (root / "bin" / "clang++-15").symlink_to(clang)
    _fake_hipcc(root, root / "bin" / "clang++-15", "5.2.21153-0", tmp_path / "calls")
    return root


def spec(root: Path, rocm: str) -> ToolchainSpec:
    return ToolchainSpec(kind="rocm", rocm=rocm, root=root)


def test_opt_layout_probe(tmp_path: Path) -> None:
    root = opt_root(tmp_path)
    tc = resolve_toolchain(spec(root, "6.2.4"), cache_dir=host_cache_dir())
    fp = tc.fingerprint["rocm"]
    assert tc.fingerprint["kind"] == "rocm"
    assert (fp["version"], fp["version_file"]) == ("6.2.4", "include/rocm-core/rocm_version.h")
    assert fp["clang"]["version"].startswith("AMD clang version 18.0.0git")
    assert fp["clang"]["blake3"] == file_blake3(root / "llvm" / "bin" / "clang")
    assert fp["hipcc"]["blake3"] == file_blake3(root / "bin" / "hipcc")
    assert fp["hip_version"] == "6.2.41134-65d174c3e"
    assert "python" in tc.fingerprint and "cc" in tc.fingerprint  # the host side stays
    assert str(root) not in repr(tc.fingerprint)  # paths are runtime data, not fingerprint
    for name in ("ROCM_PATH", "ROCM_HOME", "HIP_PATH"):
        assert tc.env[name] == str(root)
    assert tc.env["HIP_PLATFORM"] == "amd"
    assert not {"CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH"} & set(tc.env)
    assert tc.path_dirs[:2] == (str(root / "bin"), str(root / "llvm" / "bin"))
    assert root in tc.mounts  # not under /usr: bound read-only into the sandbox


@pytest.mark.parametrize("declared", ["6.2", "6.2.4", "6"])
def test_declared_prefix_matches(tmp_path: Path, declared: str) -> None:
    root = opt_root(tmp_path)
    resolve_toolchain(spec(root, declared), cache_dir=host_cache_dir())


def test_mismatch_names_both(tmp_path: Path) -> None:
    root = opt_root(tmp_path)
    with pytest.raises(ToolchainError) as exc:
        resolve_toolchain(spec(root, "6.1.3"), cache_dir=host_cache_dir())
    assert "6.1.3" in str(exc.value) and "6.2.4" in str(exc.value)
    assert str(root) in str(exc.value)


def test_debian_layout(tmp_path: Path) -> None:
    root = debian_root(tmp_path)
    found = read_rocm_version(root)
    assert found is not None
    assert (found.version, found.comparable) == ("5.2.21153", "5.2")
    tc = resolve_toolchain(spec(root, "5.2"), cache_dir=host_cache_dir())
    fp = tc.fingerprint["rocm"]
    assert fp["version_file"] == "include/hip/hip_version.h"
    assert fp["clang"]["version"] == "Debian clang version 15.0.6"
    assert fp["clang"]["blake3"] == file_blake3(root / "lib" / "llvm-15" / "bin" / "clang")
    # hip_version.h's third part is HIP's build number: only major.minor is compared.
    resolve_toolchain(spec(root, "5.2.3"), cache_dir=host_cache_dir())
    with pytest.raises(ToolchainError, match=r"declares ROCm 5\.3 .* holds ROCm 5\.2 \(HIP"):
        resolve_toolchain(spec(root, "5.3"), cache_dir=host_cache_dir())


def test_info_version_fallback(tmp_path: Path) -> None:
    root = opt_root(tmp_path, "6.1.2")
    shutil.rmtree(root / "include")
    found = read_rocm_version(root)
    assert found is not None and (found.version, found.file) == ("6.1.2", ".info/version")
    shutil.rmtree(root / ".info")
    assert read_rocm_version(root) is None
    with pytest.raises(ToolchainError, match="no ROCm version under"):
        resolve_toolchain(spec(root, "6.1"), cache_dir=host_cache_dir())


@pytest.mark.slow
def test_probe_is_stat_cached(tmp_path: Path) -> None:
    root = opt_root(tmp_path)
    calls = tmp_path / "calls"
    a = resolve_toolchain(spec(root, "6.2.4"), cache_dir=host_cache_dir())
    b = resolve_toolchain(spec(root, "6.2.4"), cache_dir=host_cache_dir())
    assert calls.read_text().count("run") == 1
    assert a.fingerprint == b.fingerprint
    # A changed compiler is re-probed and changes the fingerprint (and so the hash).
    clang = root / "llvm" / "bin" / "clang"
    clang.write_text(clang.read_text() + "# rebuilt\n")
    c = resolve_toolchain(spec(root, "6.2.4"), cache_dir=host_cache_dir())
    assert c.fingerprint["rocm"]["clang"]["blake3"] != a.fingerprint["rocm"]["clang"]["blake3"]
    # The version header changing (an in-place upgrade) is seen too, and then asserted.
    h = root / "include" / "rocm-core" / "rocm_version.h"
    h.write_text(ROCM_VERSION_H.format(6, 3, 0))
    with pytest.raises(ToolchainError, match=r"6\.3\.0"):
        resolve_toolchain(spec(root, "6.2.4"), cache_dir=host_cache_dir())


def test_missing_root_stops_realize_before_any_fetch(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        'schema = 1\n[package]\nname = "x"\nversion = "1"\n'
        '[source]\ngit = "https://invalid.example/never-fetched.git"\n'
        'rev = "a8d6afb511a69687bbb2b7e88a3cf67917e1697e"\n'
        '[toolchain]\nkind = "rocm"\nrocm = "6.2.4"\nroot = "/nonexistent/rocm-6.2.4"\n'
        '[requirements]\nbuild = ["not-a-real-package-xyz==1.0"]\n'
    )
    store = tmp_path / "store"
    proc = rf_in("realize", recipe, "--store", store)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "/nonexistent/rocm-6.2.4" in lines[0] and "rocmforge doctor" in lines[0]
    assert not list(store.rglob("*.git")) and not list(store.rglob("*.whl"))


@pytest.mark.hip
@pytest.mark.skipif(
    shutil.which("hipcc") is None and os.environ.get("CI") != "true",
    reason="hipcc not installed (apt-get install hipcc); CI installs it",
)
@pytest.mark.slow
def test_real_debian_rocm(tmp_path: Path) -> None:
    tc = resolve_toolchain(spec(Path("/usr"), "5.2"), cache_dir=host_cache_dir())
    fp = tc.fingerprint["rocm"]
    assert fp["version"].startswith("5.2.") and fp["version_file"] == "include/hip/hip_version.h"
    assert "clang version 15" in fp["clang"]["version"]
    assert tc.mounts == resolve_toolchain(ToolchainSpec(), cache_dir=host_cache_dir()).mounts
