"""The ``kind = "rocm"`` toolchain: probe a ROCm root, assert the declared version, derive the env.

The probe reads the real ROCm version from the root (``include/rocm-core/rocm_version.h``, else
``include/hip/hip_version.h``, else ``.info/version``), asks ``hipcc`` which clang it runs (the
``hipcc-cmd:`` line of ``HIPCC_VERBOSE=1 hipcc --version``; ``llvm/bin/clang`` when there is no
hipcc), and digests both. Results are cached by the stat signature of the files read, like the
system probe. The host side (python, cc, cxx) is the ordinary system toolchain.

The derived build environment is ``ROCM_PATH``, ``ROCM_HOME``, ``HIP_PATH`` (all the root),
``HIP_PLATFORM=amd`` (a CUDA toolkit on the same machine would otherwise make hipcc pick nvcc) and
the toolchain's bin directories on ``PATH`` — never ``CPATH``, which can mix two ROCm versions'
headers.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.errors import ToolchainError
from rocmforge.recipe.model import ToolchainSpec
from rocmforge.store import layout
from rocmforge.toolchain.probe import Toolchain, run_probe
from rocmforge.util.hashing import file_blake3
from rocmforge.util.statcache import StatCache

ROCM_PROBE_VERSION = 1

#: Where the ROCm version is read from, in order of preference (relative to the root).
VERSION_FILES = (
    "include/rocm-core/rocm_version.h",
    "include/hip/hip_version.h",
    ".info/version",
)

_DEFINE = r"#\s*define\s+{}_VERSION_{}\s+(\d+)"
_INFO = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")
_HIPCC_CMD = re.compile(r"hipcc-cmd:\s*(\S+)")
_HIP_VERSION = re.compile(r"HIP version:\s*(\S+)")
_HIPCC_HELPERS = ("hipcc.pl", "hipvars.pm", "hipcc.bin")


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmVersion:
    """The ROCm version found under a root.

    ``version`` is what the file says (``6.2.4``; for ``hip_version.h`` the HIP version, whose
    third part is a build number: ``5.2.21153``); ``comparable`` is the part a declared version is
    checked against (``6.2.4``, or only ``5.2`` from ``hip_version.h``).
    """

    version: str
    comparable: str
    file: str


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _header_version(text: str, prefix: str) -> tuple[str, str, str] | None:
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(_DEFINE.format(prefix, part), text)
        if m is None:
            return None
        parts.append(m.group(1))
    return parts[0], parts[1], parts[2]


def read_rocm_version(root: Path) -> RocmVersion | None:
    """Return the ROCm version installed under ``root``, or None if no version file says."""
    text = _read_text(root / VERSION_FILES[0])
    if text is not None and (v := _header_version(text, "ROCM")):
        return RocmVersion(version=".".join(v), comparable=".".join(v), file=VERSION_FILES[0])
    text = _read_text(root / VERSION_FILES[1])
    if text is not None and (v := _header_version(text, "HIP")):
        return RocmVersion(version=".".join(v), comparable=".".join(v[:2]), file=VERSION_FILES[1])
    text = _read_text(root / VERSION_FILES[2])
    if text is not None and (m := _INFO.match(text)):
        found = ".".join(p for p in m.groups() if p is not None)
        return RocmVersion(version=found, comparable=found, file=VERSION_FILES[2])
    return None


def version_matches(declared: str, found: RocmVersion) -> bool:
    """Return True if ``declared`` (``6.2`` or ``6.2.4``) agrees with ``found``.

    As many parts are compared as the declaration gives, but never more than the version file
    can vouch for (``hip_version.h`` knows only major.minor of ROCm).
    """
    want = declared.split(".")
    have = found.comparable.split(".")
    n = min(len(want), len(have))
    return [int(x) for x in want[:n]] == [int(x) for x in have[:n]]


def _shown(found: RocmVersion) -> str:
    if found.comparable == found.version:
        return f"{found.version} (from {found.file})"
    return f"{found.comparable} (HIP {found.version}, from {found.file})"


def missing_root_message(spec: ToolchainSpec) -> str:
    """The one-line error for a ROCm root that does not exist."""
    return (
        f'toolchain.root: ROCm root {spec.root} does not exist (declared rocm = "{spec.rocm}"); '
        "install that ROCm there or fix the recipe - run `rocmforge doctor` to see what this "
        "machine has"
    )


def _probe_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME")}
    env.update(
        LC_ALL="C",
        HIP_PLATFORM="amd",
        HIPCC_VERBOSE="1",
        ROCM_PATH=str(root),
        HIP_PATH=str(root),
    )
    return env


def _clang_version(output: str) -> str:
    for line in output.splitlines():
        if "clang version" in line:
            return line.strip()
    return ""


def _file_info(path: Path) -> dict[str, Any]:
    real = path.resolve()
    return {"path": str(real), "link": str(path), "blake3": file_blake3(real)}


def probe_rocm(
    root: Path, *, hip_clang: str | None = None, device_libs: Path | None = None
) -> dict[str, Any]:
    """Probe the ROCm install at ``root``: version, HIP clang and digests (raw, with paths).

    With ``hip_clang`` (a plain upstream clang++) the root's hipcc is not looked at: that clang
    and its ``device_libs`` directory are probed instead (:mod:`rocmforge.toolchain.hipclang`).
    """
    found = read_rocm_version(root)
    if found is None:
        raise ToolchainError(
            f"toolchain.root: no ROCm version under {root} (looked for "
            + ", ".join(VERSION_FILES)
            + "); is this a ROCm install? run `rocmforge doctor`"
        )
    env = _probe_env(root)
    probe: dict[str, Any] = {
        "version": found.version,
        "comparable": found.comparable,
        "version_file": {"path": str(root / found.file), "name": found.file},
    }
    if hip_clang is not None:
        from rocmforge.toolchain.hipclang import probe_device_libs, probe_hip_clang

        if device_libs is None:
            raise ToolchainError("toolchain.device-libs: required with hip-clang")
        probe["hip_clang"] = probe_hip_clang(hip_clang)
        probe["device_libs"] = probe_device_libs(device_libs)
        return probe
    hipcc = root / "bin" / "hipcc"
    clang: Path | None = None
    if os.access(hipcc, os.X_OK):
        out = run_probe([str(hipcc), "--version"], env=env, with_stderr=True)
        m = _HIP_VERSION.search(out)
        probe["hip_version"] = m.group(1) if m else ""
        probe["hipcc"] = _file_info(hipcc)
        # Debian's hipcc is a perl stub exec'ing hipcc.pl; newer ROCm ships hipcc.bin.
        for helper in _HIPCC_HELPERS:
            if (hipcc.parent / helper).is_file():
                probe["hipcc"][helper] = file_blake3((hipcc.parent / helper).resolve())
        cmd = _HIPCC_CMD.search(out)
        if cmd and os.path.isabs(cmd.group(1)) and os.path.exists(cmd.group(1)):
            clang = Path(cmd.group(1))
            probe["clang"] = {**_file_info(clang), "version": _clang_version(out)}
    if clang is None:
        llvm = root / "llvm" / "bin" / "clang"
        if not os.access(llvm, os.X_OK):
            if "hipcc" in probe:
                raise ToolchainError(f"toolchain.root: cannot tell which clang {hipcc} runs")
            raise ToolchainError(
                f"toolchain.root: no HIP compiler under {root} (neither bin/hipcc nor "
                "llvm/bin/clang); run `rocmforge doctor`"
            )
        out = run_probe([str(llvm), "--version"], env=env, with_stderr=True)
        probe["clang"] = {**_file_info(llvm), "version": _clang_version(out)}
    return probe


def _fingerprint(probe: Mapping[str, Any]) -> dict[str, Any]:
    from rocmforge.toolchain.hipclang import fingerprint as hip_fingerprint

    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: strip(v) for k, v in value.items() if k not in ("path", "link")}
        return value

    plain = {k: strip(v) for k, v in probe.items() if k not in _HIP_CLANG_KEYS}
    return {k: v for k, v in plain.items() if k != "version_file"} | {
        "version_file": probe["version_file"]["name"]
    } | {k: hip_fingerprint(probe[k]) for k in _HIP_CLANG_KEYS if k in probe}


_HIP_CLANG_KEYS = ("hip_clang", "device_libs")


def _guards(probe: Mapping[str, Any]) -> list[str]:
    out = [probe["version_file"]["path"]]
    if "hip_clang" in probe:
        from rocmforge.toolchain.hipclang import guards

        out += guards(probe["hip_clang"]) + guards(probe["device_libs"])
    for key in ("hipcc", "clang"):
        if key in probe:
            out += [probe[key]["path"], probe[key]["link"]]
    if "hipcc" in probe:
        bindir = os.path.dirname(probe["hipcc"]["link"])
        out += [os.path.join(bindir, h) for h in _HIPCC_HELPERS if h in probe["hipcc"]]
    return list(dict.fromkeys(out))


def resolve_rocm(spec: ToolchainSpec, *, cache_dir: Path, host: Toolchain) -> Toolchain:
    """Return the toolchain for a ``kind = "rocm"`` spec.

    ``host`` is the system toolchain (python, cc, cxx) already resolved for ``spec``; the ROCm
    probe is added to its fingerprint, env, PATH, mounts and guards. A missing root, an unknown
    layout or a declared/probed version mismatch raises :class:`ToolchainError`.
    """
    root = spec.root
    if root is None or not root.is_dir():
        raise ToolchainError(missing_root_message(spec))
    cache = StatCache(cache_dir / layout.CACHE_TOOLCHAIN)
    key = f"rocm|{ROCM_PROBE_VERSION}|{root}"
    if spec.hip_clang is not None:
        import shutil

        key += f"|{spec.hip_clang}|{shutil.which(spec.hip_clang)}|{spec.device_libs}"
    probe = cache.get(key)
    if probe is None:
        probe = probe_rocm(root, hip_clang=spec.hip_clang, device_libs=spec.device_libs)
        cache.put(key, probe, _guards(probe))
    found = RocmVersion(
        version=probe["version"], comparable=probe["comparable"], file=probe["version_file"]["name"]
    )
    if spec.rocm is not None and not version_matches(spec.rocm, found):
        raise ToolchainError(
            f"toolchain.rocm: the recipe declares ROCm {spec.rocm} but {root} holds ROCm "
            f"{_shown(found)}; fix toolchain.rocm or toolchain.root"
        )
    dirs = [str(root / "bin")]
    if (root / "llvm" / "bin").is_dir():
        dirs.append(str(root / "llvm" / "bin"))
    extra_env: dict[str, str] = {}
    outside = [root]
    if "hip_clang" in probe:
        # The build compiles HIP with $HIP_CLANG --rocm-device-lib-path=$HIP_DEVICE_LIB_PATH.
        dirs.append(probe["hip_clang"]["bin"])
        extra_env = {
            "HIP_CLANG": probe["hip_clang"]["link"],
            "HIP_DEVICE_LIB_PATH": probe["device_libs"]["path"],
        }
        outside += [Path(probe["device_libs"]["path"]), Path(probe["hip_clang"]["bin"]).parent]
    else:
        dirs.append(str(Path(probe["clang"]["link"]).parent))
    mounts = list(host.mounts)
    for place in outside:
        in_usr = str(place) == "/usr" or str(place).startswith("/usr/")
        if not in_usr or str(place).startswith("/usr/local"):  # /usr/local is masked: mount it
            for p in (place, place.resolve()):
                if p not in mounts:
                    mounts.append(p)
    env = {
        **host.env,
        "ROCM_PATH": str(root),
        "ROCM_HOME": str(root),
        "HIP_PATH": str(root),
        "HIP_PLATFORM": "amd",
        **extra_env,
    }
    # Headers, math libraries and device bitcode: by package version (+ md5 check) or content.
    from rocmforge.toolchain.rocmroot import root_coverage

    coverage, coverage_guards = root_coverage(root, cache_dir=cache_dir)
    return dataclasses.replace(
        host,
        fingerprint={
            **host.fingerprint,
            "kind": "rocm",
            "rocm": {**_fingerprint(probe), "coverage": coverage},
        },
        env=env,
        path_dirs=tuple(dict.fromkeys([*dirs, *host.path_dirs])),
        mounts=tuple(mounts),
        guards=tuple(dict.fromkeys([*host.guards, *_guards(probe), *coverage_guards])),
    )
