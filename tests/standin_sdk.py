"""Stand-in ROCm SDK wheels for CI, made from Debian's ROCm files (no AMD index is reachable).

They are laid out exactly as AMD's wheels lay out theirs (ROCm/TheRock,
``build_tools/packaging/python/templates`` and ``_therock_utils/py_packaging.py``): the same
distribution names, the same top-level directories and the same ``rocm-sdk path`` answers:

* ``rocm-sdk-core``: ``rocm_sdk_core/`` (pure package) and ``_rocm_sdk_core/`` (platform files:
  ``lib/llvm/bin/clang`` and the tools beside it, ``lib/llvm/lib/libLLVM*`` and
  ``libclang-cpp*`` (the driver's RUNPATH is ``$ORIGIN/../lib``), ``lib/llvm/lib/clang/N/include``,
  ``lib/llvm/amdgcn/bitcode`` (Debian's device libs plus the generated gfx942 file),
  ``lib/libamdhip64.so.5`` and the HSA runtime, ``share/therock/dist_info.json``);
* ``rocm-sdk-devel``: ``rocm_sdk_devel/_devel.tar`` holding ``_rocm_sdk_devel/``: the HIP headers
  and ``share/hip/version`` verbatim, every runtime file as a relative symlink into its runtime
  package, ``lib/libamdhip64.so`` as a soname symlink (``rocm-sdk path --root`` is
  ``_rocm_sdk_devel``, ``--bin`` its ``bin``, ``--cmake`` its ``lib/cmake``);
* ``rocm-sdk-libraries-<family>`` (legacy per-family) and ``rocm-sdk-libraries`` with one
  ``rocm-sdk-device-<gfx>`` per ISA (multi-arch): ``_rocm_sdk_libraries[_<family>]/`` with a
  per-arch kernel database file; a device wheel ships ``.devel_links/<gfx>.json``;
* the selector sdist ``rocm`` (``rocm-<version>.tar.gz``, TheRock's ``templates/rocm``):
  ``rocm-<version>/setup.py`` (which, like AMD's, would probe the GPU to pick its dependencies:
  this one refuses to run, so a test sees it never does), ``pyproject.toml``, ``PKG-INFO`` and
  ``src/rocm_sdk/`` with a generated ``_dist_info.py`` (version, nonce, default and available
  families, the package and library tables), ``initialize_process`` / ``preload_libraries`` /
  ``find_libraries`` as AMD's ``__init__.py`` has them and ``python -m rocm_sdk path|version``.

Debian's compiler and runtime are ROCm 5.2-era (HIP 5.2, clang 19): the versions on the wheels are
made up. ``pad`` adds incompressible bytes to the core wheel (the store bench's 2 GB SDK).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from base64 import urlsafe_b64encode
from collections.abc import Iterable, Sequence
from pathlib import Path

LLVM = Path("/usr/lib/llvm-19")
MULTIARCH = Path("/usr/lib/x86_64-linux-gnu")
DEVICE_LIBS = Path("/usr/local/lib/rocmforge/device-libs")
TOOLS = ("clang", "lld", "clang-offload-bundler", "llvm-objcopy")
ALIASES = {"clang++": "clang", "clang-19": "clang", "ld.lld": "lld"}
HIP_LIBS = ("libamdhip64.so.5", "libhsa-runtime64.so.1", "libhsakmt.so.1")
EPOCH = (2026, 7, 1, 0, 0, 0)
ISAS = {"gfx94X-dcgpu": ("gfx940", "gfx941", "gfx942"), "gfx90X-dcgpu": ("gfx908", "gfx90a")}


def available() -> str | None:
    """Why the stand-ins cannot be made here (None: they can)."""
    need = [LLVM / "bin" / t for t in TOOLS] + [DEVICE_LIBS / "oclc_isa_version_942.bc"]
    need += [MULTIARCH / lib for lib in HIP_LIBS] + [Path("/usr/include/hip/hip_runtime.h")]
    missing = [str(p) for p in need if not p.exists()]
    return ", ".join(missing) if missing else None


def _norm(name: str) -> str:
    return name.replace("-", "_")


class _Wheel:
    """A wheel being written: members in order, then dist-info with a RECORD."""

    def __init__(self, dest: Path, name: str, version: str) -> None:
        self.name, self.version = name, version
        self.path = dest / f"{_norm(name)}-{version}-py3-none-linux_x86_64.whl"
        self.zf = zipfile.ZipFile(self.path, "w")
        self.record: list[str] = []

    def add(self, arc: str, data: bytes, *, exe: bool = False) -> None:
        info = zipfile.ZipInfo(arc, EPOCH)
        info.external_attr = ((0o755 if exe else 0o644) | 0o100000) << 16
        big = len(data) > (1 << 20)
        info.compress_type = zipfile.ZIP_STORED if big else zipfile.ZIP_DEFLATED
        self.zf.writestr(info, data)
        digest = urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{arc},sha256={digest},{len(data)}")

    def add_file(self, arc: str, src: Path) -> None:
        self.add(arc, src.read_bytes(), exe=os.access(src, os.X_OK) and src.suffix != ".bc")

    def close(self, requires: Sequence[str] = ()) -> Path:
        di = f"{_norm(self.name)}-{self.version}.dist-info"
        meta = f"Metadata-Version: 2.1\nName: {self.name}\nVersion: {self.version}\n"
        meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
        self.add(f"{di}/METADATA", meta.encode())
        wheel = "Wheel-Version: 1.0\nGenerator: rocmforge-standin\nRoot-Is-Purelib: false\n"
        self.add(f"{di}/WHEEL", (wheel + "Tag: py3-none-linux_x86_64\n").encode())
        record = "\n".join([*self.record, f"{di}/RECORD,,"]) + "\n"
        self.zf.writestr(zipfile.ZipInfo(f"{di}/RECORD", EPOCH), record)
        self.zf.close()
        return self.path


def _pure(w: _Wheel, package: str, version: str, extra: str = "") -> None:
    """The pure-Python package every SDK wheel carries (``_dist_info.py`` as TheRock writes)."""
    dist = f'__version__ = {version!r}\nPY_PACKAGE_SUFFIX_NONCE = ""\n{extra}'
    w.add(f"{package}/__init__.py", b"from ._dist_info import __version__\n")
    w.add(f"{package}/_dist_info.py", dist.encode())


#: ``src/rocm_sdk/__init__.py`` of the stand-in ``rocm`` sdist: AMD's API (TheRock
#: ``templates/rocm/src/rocm_sdk/__init__.py``): the same functions, arguments and answers.
MODULE_INIT = '''"""The rocm_sdk module (stand-in of AMD's, same API)."""
import importlib
import os
import re
from pathlib import Path

from ._dist_info import __version__

__all__ = ["__version__", "find_libraries", "initialize_process"]


def find_libraries(*shortnames):
    from . import _dist_info

    paths = []
    for shortname in shortnames:
        try:
            entry = _dist_info.ALL_LIBRARIES[shortname]
        except KeyError:
            raise ModuleNotFoundError(f"Unknown rocm library '{shortname}'")
        package = entry.package
        family = _dist_info.determine_target_family() if package.is_target_specific else None
        module = importlib.import_module(package.get_py_package_name(family))
        relpath = Path(module.__file__).parent / entry.posix_relpath
        found = sorted(relpath.glob(entry.so_pattern))
        if not found:
            raise FileNotFoundError(
                f"Could not find rocm library '{shortname}' at path '{relpath},' no match for "
                f"pattern '{entry.so_pattern}'"
            )
        paths.append(found[0])
    return paths


_ALL_CDLLS = {}


def preload_libraries(*shortnames, rtld_global=True):
    import ctypes

    mode = ctypes.RTLD_GLOBAL if rtld_global is True else ctypes.RTLD_LOCAL
    for shortname in shortnames:
        if shortname in _ALL_CDLLS:
            continue
        paths = find_libraries(shortname)
        if paths:
            _ALL_CDLLS[shortname] = ctypes.CDLL(str(paths[0]), mode=mode)


def initialize_process(*, preload_shortnames=None, rtld_global=True, env_override=True,
                       check_version=None, fail_on_version_mismatch=False, **kwargs):
    if preload_shortnames:
        preload_libraries(*preload_shortnames, rtld_global=rtld_global)
    if env_override:
        extra = [s.strip() for s in re.split("[,;]", os.getenv("ROCM_SDK_PRELOAD_LIBRARIES", ""))]
        if [s for s in extra if s]:
            preload_libraries(*[s for s in extra if s], rtld_global=rtld_global)
    if check_version:
        pattern = re.escape(check_version).replace("\\\\*", ".*")
        if not re.match(f"^{pattern}$", __version__):
            message = (
                f"The program was compiled against a ROCm version matching '{pattern}' but the "
                f"installed ROCm version in this Python environment is {__version__}."
            )
            if fail_on_version_mismatch:
                raise RuntimeError(message)
            import warnings

            warnings.warn(message)
'''

#: ``_dist_info.py`` of the stand-in sdist: the template's tables and target-family logic
#: (``ROCM_SDK_TARGET_FAMILY``, then ``offload-arch``, then the default), then the lines
#: TheRock's ``py_packaging.py`` appends when it makes the sdist.
MODULE_DIST_INFO = '''"""Distribution information (generated)."""
import importlib.util
import os
import subprocess

CACHED_TARGET_FAMILY = None
ALL_PACKAGES = {}
ALL_LIBRARIES = {}


class PackageEntry:
    def __init__(self, logical_name, dist_package_template, *, pure_py_package_name,
                 template_directory, required=False):
        self.logical_name = logical_name
        self.dist_package_template = dist_package_template
        self.pure_py_package_name = pure_py_package_name
        self.required = required
        ALL_PACKAGES[logical_name] = self

    @property
    def is_target_specific(self):
        return "{target_family}" in self.dist_package_template

    def get_dist_package_name(self, target_family=None):
        kwargs = {} if target_family is None else {"target_family": target_family.split(":")[0]}
        return self.dist_package_template.format(**kwargs)

    def get_py_package_name(self, target_family=None):
        name = self.get_dist_package_name(target_family)
        return "_" + name.replace("-", "_") + PY_PACKAGE_SUFFIX_NONCE

    def has_py_package(self, target_family=None):
        return importlib.util.find_spec(self.get_py_package_name(target_family)) is not None


class LibraryEntry:
    def __init__(self, shortname, package_name, so_pattern, dll_pattern, posix_relpath="lib"):
        self.shortname = shortname
        self.package = ALL_PACKAGES[package_name]
        self.posix_relpath = posix_relpath
        self.so_pattern = so_pattern
        ALL_LIBRARIES[shortname] = self


def discover_current_target_family():
    try:
        out = subprocess.check_output(["offload-arch"], text=True, stderr=subprocess.STDOUT)
    except Exception:
        return None
    for arch in out.split():
        for suffix in ("-all", "-dgpu", "-igpu", "-dcgpu"):
            if arch[:-1] + "X" + suffix in AVAILABLE_TARGET_FAMILIES:
                return arch[:-1] + "X" + suffix
        if arch in AVAILABLE_TARGET_FAMILIES:
            return arch
    return None


def determine_target_family():
    global CACHED_TARGET_FAMILY
    if CACHED_TARGET_FAMILY is not None:
        return CACHED_TARGET_FAMILY
    family = os.getenv("ROCM_SDK_TARGET_FAMILY")
    if family is None:
        family = discover_current_target_family() or DEFAULT_TARGET_FAMILY
    if family not in AVAILABLE_TARGET_FAMILIES:
        raise ValueError(f"Requested ROCM_SDK_TARGET_FAMILY={family} is not available")
    CACHED_TARGET_FAMILY = family
    return family


PackageEntry("meta", "rocm", pure_py_package_name="rocm_sdk", template_directory="rocm",
             required=True)
PackageEntry("core", "rocm-sdk-core", pure_py_package_name="rocm_sdk_core",
             template_directory="rocm-sdk-core", required=True)
PackageEntry("libraries", "rocm-sdk-libraries-{target_family}",
             pure_py_package_name="rocm_sdk_libraries", template_directory="rocm-sdk-libraries")
PackageEntry("device", "rocm-sdk-device-{target_family}", pure_py_package_name="rocm_sdk_device",
             template_directory="rocm-sdk-device")
PackageEntry("devel", "rocm-sdk-devel", pure_py_package_name="rocm_sdk_devel",
             template_directory="rocm-sdk-devel")
LibraryEntry("amdhip64", "core", "libamdhip64.so*", "amdhip64*.dll")
LibraryEntry("hsa-runtime64", "core", "libhsa-runtime64.so*", "")

__version__ = "DEFAULT"
PY_PACKAGE_SUFFIX_NONCE = "_DEFAULT"
DEFAULT_TARGET_FAMILY = "DEFAULT"
AVAILABLE_TARGET_FAMILIES = []
'''

MODULE_MAIN = '''"""rocm-sdk CLI (stand-in): path --root/--bin/--cmake, version, targets."""
import importlib
import json
import sys
from pathlib import Path

from . import _dist_info as di


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["version"]:
        print(di.__version__)
    elif argv[:1] == ["targets"]:
        core = importlib.import_module(di.ALL_PACKAGES["core"].get_py_package_name())
        info = Path(core.__file__).parent / "share" / "therock" / "dist_info.json"
        print(json.loads(info.read_text())["dist_amdgpu_targets"])
    elif argv[:1] == ["path"] and len(argv) == 2:
        devel = importlib.import_module(di.ALL_PACKAGES["devel"].get_py_package_name())
        root = Path(devel.__file__).parent
        print({"--root": root, "--bin": root / "bin", "--cmake": root / "lib" / "cmake"}[argv[1]])
    else:
        sys.exit("usage: rocm-sdk {path --root|--bin|--cmake, version, targets}")


if __name__ == "__main__":
    main()
'''

#: The stand-in's ``setup.py``: AMD's decides ``install_requires`` by probing the GPU when it
#: runs; rocmforge must never run it, so this one fails loudly if anything does.
MODULE_SETUP = b'''import sys

sys.exit("stand-in rocm sdist: setup.py ran (it would probe the GPU to choose its wheels)")
'''


def build_module_sdist(dest: Path, version: str, families: Sequence[str]) -> Path:
    """Write the stand-in selector sdist ``rocm-<version>.tar.gz`` into ``dest``; return it."""
    top = f"rocm-{version}"
    dist_info = MODULE_DIST_INFO + f"__version__ = {version!r}\nPY_PACKAGE_SUFFIX_NONCE = ''\n"
    dist_info += f"DEFAULT_TARGET_FAMILY = {sorted(families)[0]!r}\n"
    dist_info += "".join(f"AVAILABLE_TARGET_FAMILIES.append({f!r})\n" for f in families)
    dist_info += "THIS_TARGET_FAMILY = None\nTHIS_PACKAGE_ENTRY = ALL_PACKAGES['meta']\n"
    pkg_info = f"Metadata-Version: 2.1\nName: rocm\nVersion: {version}\n".encode()
    members = {
        "PKG-INFO": pkg_info,
        "setup.py": MODULE_SETUP,
        "pyproject.toml": b'[build-system]\nrequires = ["setuptools>=70.2.0"]\n'
                          b'build-backend = "setuptools.build_meta"\n',
        "setup.cfg": b"[egg_info]\ntag_build = \ntag_date = 0\n",
        "src/rocm_sdk/__init__.py": MODULE_INIT.encode(),
        "src/rocm_sdk/__main__.py": MODULE_MAIN.encode(),
        "src/rocm_sdk/_dist_info.py": dist_info.encode(),
        "src/rocm.egg-info/PKG-INFO": pkg_info,
    }
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{top}.tar.gz"
    import gzip

    with (
        open(path, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf,
    ):
        for name, data in members.items():
            _regular(tf, f"{top}/{name}", data)
    return path


def _tree(root: Path) -> Iterable[tuple[str, Path]]:
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            p = Path(dirpath) / f
            yield p.relative_to(root).as_posix(), p


def _core_files() -> list[tuple[str, Path]]:
    """(path below ``_rocm_sdk_core``, Debian file) of the core wheel."""
    out = [(f"lib/llvm/bin/{t}", (LLVM / "bin" / t).resolve()) for t in TOOLS]
    out += [(f"lib/llvm/bin/{a}", (LLVM / "bin" / t).resolve()) for a, t in ALIASES.items()]
    for lib in ("libclang-cpp.so.19.1", "libLLVM.so.19.1"):
        src = LLVM / "lib" / lib if (LLVM / "lib" / lib).exists() else MULTIARCH / lib
        out.append((f"lib/llvm/lib/{lib}", src.resolve()))
    out += [(f"lib/llvm/lib/clang/19/include/{rel}", p)
            for rel, p in _tree(LLVM / "lib" / "clang" / "19" / "include")]  # fmt: skip
    out += [(f"lib/llvm/amdgcn/bitcode/{rel}", p) for rel, p in _tree(DEVICE_LIBS)]
    out += [(f"lib/{lib}", (MULTIARCH / lib).resolve()) for lib in HIP_LIBS]
    return out


def _devel_files() -> list[tuple[str, Path]]:
    """Files only the devel package has (verbatim in its tarball): headers, HIP version."""
    out = [(f"include/hip/{rel}", p) for rel, p in _tree(Path("/usr/include/hip"))]
    out.append(("share/hip/version", Path("/usr/share/hip/version")))
    return out


def _symlink(tf: tarfile.TarFile, name: str, target: str) -> None:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mtime, ti.mode = tarfile.SYMTYPE, target, 0, 0o777
    tf.addfile(ti)


def _regular(tf: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = len(data), 0, mode
    tf.addfile(ti, io.BytesIO(data))


def build_sdk(
    dest: Path,
    version: str,
    families: Sequence[str],
    *,
    pad: int = 0,
    tag: str = "",
    only: Sequence[str] = (),
) -> list[Path]:
    """Write the stand-in wheels for ``version`` and ``families`` into ``dest``; return them.

    ``tag`` changes the core wheel's bytes (a respin); ``only`` limits which wheels are written.
    """
    dest.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []

    def want(name: str) -> bool:
        return not only or name in only

    runtime: list[tuple[str, str]] = []  # (package dir, path below it) for the devel symlinks
    isas = [f for f in families if not f.endswith(("-dcgpu", "-all", "-dgpu", "-igpu"))]
    targets = sorted({i for f in families for i in ISAS.get(f, (f,))})

    core = _Wheel(dest, "rocm-sdk-core", version) if want("rocm-sdk-core") else None
    for rel, src in _core_files():
        runtime.append(("_rocm_sdk_core", rel))
        if core is not None:
            core.add_file(f"_rocm_sdk_core/{rel}", src)
    info = {"dist_amdgpu_targets": ";".join(targets), "standin": tag or "debian"}
    runtime.append(("_rocm_sdk_core", "share/therock/dist_info.json"))
    if core is not None:
        _pure(core, "rocm_sdk_core", version)
        core.add("_rocm_sdk_core/__init__.py", b"")
        core.add("_rocm_sdk_core/share/therock/dist_info.json", json.dumps(info).encode())
        left, n = pad, 0
        while left > 0:  # incompressible filler (a big SDK for the bench)
            size = min(left, 64 << 20)
            core.add(f"_rocm_sdk_core/lib/filler/blob{n:03d}.bin", os.urandom(size))
            left, n = left - size, n + 1
        out.append(core.close())

    def libraries(name: str, platform: str, archs: Sequence[str]) -> None:
        for arch in archs:
            runtime.append((platform, f"lib/rocblas/library/TensileLibrary_{arch}.dat"))
        if not want(name):
            return
        w = _Wheel(dest, name, version)
        _pure(w, "rocm_sdk_libraries", version)
        w.add(f"{platform}/__init__.py", b"")
        for arch in archs:
            w.add(f"{platform}/lib/rocblas/library/TensileLibrary_{arch}.dat", f"{arch}\n".encode())
        out.append(w.close([f"rocm-sdk-core=={version}"]))

    for family in families:
        if family not in isas:
            libraries(f"rocm-sdk-libraries-{family}", f"_rocm_sdk_libraries_{_norm(family)}",
                      ISAS.get(family, ()))  # fmt: skip
    if isas:
        libraries("rocm-sdk-libraries", "_rocm_sdk_libraries", ())
    for isa in isas:
        if not want(f"rocm-sdk-device-{isa}"):
            continue
        w = _Wheel(dest, f"rocm-sdk-device-{isa}", version)
        _pure(w, "rocm_sdk_device", version, "LIBRARIES_PY_PACKAGE_NAME = '_rocm_sdk_libraries'\n")
        rel = f"lib/rocblas/library/TensileLibrary_{isa}.dat"
        w.add(f"_rocm_sdk_libraries/{rel}", f"{isa}\n".encode())
        target = "/".join([".."] * len(rel.split("/")) + ["_rocm_sdk_libraries", rel])
        links = {"version": version, "links": [{"relpath": rel, "target": target}]}
        w.add(f"_rocm_sdk_libraries/.devel_links/{isa}.json", json.dumps(links).encode())
        out.append(w.close([f"rocm-sdk-libraries=={version}"]))

    if want("rocm-sdk-devel"):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            _regular(tf, "_rocm_sdk_devel/__init__.py", b"")
            for rel, src in _devel_files():
                _regular(tf, f"_rocm_sdk_devel/{rel}", src.read_bytes())
            for package, rel in runtime:
                up = "/".join([".."] * len(rel.split("/")))
                _symlink(tf, f"_rocm_sdk_devel/{rel}", f"{up}/{package}/{rel}")
            _symlink(tf, "_rocm_sdk_devel/lib/libamdhip64.so", "libamdhip64.so.5")
            # where clang's --rocm-path looks for the device libraries (a directory symlink)
            _symlink(tf, "_rocm_sdk_devel/amdgcn", "lib/llvm/amdgcn")
            script = b"#!/bin/sh\necho standin\n"
            _regular(tf, "_rocm_sdk_devel/bin/rocm-sdk-standin", script, 0o755)
        w = _Wheel(dest, "rocm-sdk-devel", version)
        _pure(w, "rocm_sdk_devel", version)
        w.add("rocm_sdk_devel/_devel.tar", buf.getvalue())
        out.append(w.close([f"rocm-sdk-core=={version}"]))
    if want("rocm"):
        out.append(build_module_sdist(dest, version, families))
    return out
