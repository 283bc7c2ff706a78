"""A plain upstream clang as the HIP compiler of a ``kind = "rocm"`` toolchain.

``[toolchain] hip-clang = "clang++-19"`` makes the build compile HIP with that clang (``-x hip
--offload-arch=...``) instead of the root's hipcc; the root still supplies the HIP headers and
runtime (``/usr`` on Debian). Debian 12's clang-19 targets gfx942, which its hipcc (ROCm 5.2,
clang-15) cannot.

The probe runs ``clang --version`` and ``-print-resource-dir``, checks that the tools a HIP
compile needs sit beside the real driver (``clang-offload-bundler``, ``lld``, ``llvm-objcopy``:
a missing one fails only halfway through a build otherwise), and digests the driver, the
``libclang-cpp`` and ``libLLVM`` libraries it runs (95% of the compiler's bytes), those tools and
the resource headers. ``device-libs`` is the AMDGPU bitcode directory handed to clang with
``--rocm-device-lib-path`` (clang uses only one, so it must hold every ``.bc`` file): its whole
content is hashed, since compile flags pick different files. Paths are kept out of the
fingerprint; the stat cache and the memo are guarded by every file read.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from rocmforge.errors import ToolchainError
from rocmforge.toolchain.probe import run_probe
from rocmforge.util.hashing import blake3_hex, file_blake3

#: Tools clang's HIP driver runs or looks up beside itself, and the Debian package holding each.
HIP_TOOLS = {
    "clang-offload-bundler": "clang-tools-19",
    "lld": "lld-19",
    "llvm-objcopy": "llvm-19",
}
_ISA_FILE = re.compile(r"^oclc_isa_version_([0-9a-f]+)\.bc$")


def device_lib_archs(directory: Path) -> frozenset[str] | None:
    """Return the GPU archs ``directory`` has an ``oclc_isa_version_*.bc`` for (None: no dir)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    return frozenset(f"gfx{m.group(1)}" for n in names if (m := _ISA_FILE.match(n)))


def _tree(directory: Path) -> tuple[str, list[str]]:
    """Return (blake3 over ``rel NUL blake3 NUL`` of every file in order, the files read)."""
    files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        files.extend(os.path.join(dirpath, f) for f in sorted(filenames))
    rels = sorted(files, key=lambda f: os.fsencode(os.path.relpath(f, directory)))
    text = "".join(f"{os.path.relpath(f, directory)}\0{file_blake3(f)}\0" for f in rels)
    return blake3_hex(text.encode("utf-8", "surrogateescape")), rels


def probe_device_libs(directory: Path) -> dict[str, Any]:
    """Probe the device-library directory: its content digest, file count and ISA archs."""
    archs = device_lib_archs(directory)
    if archs is None:
        raise ToolchainError(
            f"toolchain.device-libs: {directory} does not exist; create it with "
            "`scripts/make-device-libs.sh DIR` (scripts/setup.sh --with-hip does)"
        )
    if not archs:
        raise ToolchainError(
            f"toolchain.device-libs: no oclc_isa_version_*.bc in {directory}; it must hold the "
            "whole AMDGPU device library (clang reads only one --rocm-device-lib-path)"
        )
    digest, files = _tree(directory)
    return {
        "path": str(directory),
        "blake3": digest,
        "files": len(files),
        "isa": sorted(archs),
        "guards": [str(directory), *files],
    }


def _digest(path: Path) -> dict[str, Any]:
    real = path.resolve()
    return {"path": str(real), "link": str(path), "blake3": file_blake3(real)}


def _llvm_libs(llvm: Path, version: str) -> dict[str, Any]:
    """Digest libclang-cpp and libLLVM: beside the driver's tree, else in the multiarch dir.

    Debian links ``llvm-19/lib/libclang-cpp.so.19.1`` there but leaves ``libLLVM.so.19.1`` only
    in ``/usr/lib/<multiarch>``, where the loader finds it.
    """
    import sysconfig

    major = m.group(1) if (m := re.search(r"version (\d+)\.", version)) else "*"
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    libs: dict[str, Any] = {}
    for stem in ("libclang-cpp", "libLLVM"):
        for d in (llvm / "lib", Path("/usr/lib") / multiarch, Path("/usr/lib64")):
            found = [
                lib for pattern in (f"{stem}.so.{major}*", f"{stem}-{major}*.so*")
                for lib in sorted(d.glob(pattern)) if lib.is_file()
            ]
            if found:
                libs[found[0].resolve().name] = _digest(found[0])
                break
    return libs


def probe_hip_clang(name: str) -> dict[str, Any]:
    """Probe the clang++ named ``name`` (a command on PATH or an absolute path)."""
    found = name if os.path.isabs(name) else shutil.which(name)
    if not found or not os.access(found, os.X_OK):
        raise ToolchainError(
            f"toolchain.hip-clang: {name!r} is not an executable on PATH; install clang-19 and "
            "lld-19 (scripts/setup.sh --with-hip) or give its absolute path"
        )
    link = Path(found)
    real = link.resolve()
    out = run_probe([str(link), "--version"], with_stderr=True)
    version = next((ln.strip() for ln in out.splitlines() if "clang version" in ln), "")
    if not version:
        raise ToolchainError(f"toolchain.hip-clang: {found} --version does not name a clang")
    targets = run_probe([str(link), "-print-targets"], with_stderr=True)
    if "amdgcn" not in targets:
        raise ToolchainError(f"toolchain.hip-clang: {found} ({version}) has no AMDGPU backend")
    llvm = real.parent.parent  # /usr/lib/llvm-19/bin/clang -> /usr/lib/llvm-19
    libs = _llvm_libs(llvm, version)
    tools: dict[str, Any] = {}
    for tool, package in HIP_TOOLS.items():
        path = real.parent / tool
        if not os.access(path, os.X_OK):
            raise ToolchainError(
                f"toolchain.hip-clang: {path} is missing; install {package} "
                "(clang's HIP driver needs it beside the compiler)"
            )
        tools[tool] = _digest(path)
    resource = Path(run_probe([str(link), "-print-resource-dir"]).strip()) / "include"
    headers, header_files = _tree(resource) if resource.is_dir() else ("", [])
    # Package upgrades rename new headers into place: guarding the directories is enough and
    # keeps a no-op realize from stat'ing some 240 headers.
    header_dirs = sorted({os.path.dirname(f) for f in header_files} | {str(resource)})
    return {
        **_digest(link),
        "version": version,
        "libs": libs,
        "tools": tools,
        "resource_headers": {"blake3": headers, "files": len(header_files)},
        "bin": str(real.parent),
        "guards": header_dirs,
    }


def fingerprint(probe: dict[str, Any]) -> dict[str, Any]:
    """Return ``probe`` (hip_clang or device_libs) without paths and guard lists."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: strip(v) for k, v in value.items()
                if k not in ("path", "link", "bin", "guards")
            }
        return value

    result: dict[str, Any] = strip(probe)
    return result


def guards(probe: dict[str, Any]) -> list[str]:
    """Return every file the probe read (and the directories it listed)."""
    out: list[str] = list(probe.get("guards", []))

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k in ("path", "link"):
                    out.append(str(v))
                elif k != "guards":
                    walk(v)

    walk(probe)
    return out
