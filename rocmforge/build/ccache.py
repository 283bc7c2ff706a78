"""The compiler cache (ccache) inside the sandbox: wiring, statistics and maintenance.

ccache was chosen over sccache by measurement (README "Compiler cache"): the same speed-up and
byte identity, no daemon that can outlive the sandbox, and concurrent builds on one directory
are supported. The cache never enters the derivation: it is not part of the recipe's hashed
fields, and every setting that could change what a hit returns is fixed here:

* one directory per toolchain fingerprint (``store/ccache/<namespace>``, or below a configured
  shared directory), bound read-write at the fixed path :data:`CACHE_INSIDE`;
* ``compiler_check=string:<toolchain fingerprint hash>``: the toolchain's identity (clang, its
  LLVM libraries, the device libraries, hipcc) is the key, not the driver's mtime;
* an empty read-only config file (``CCACHE_CONFIGPATH``), so no build can change another's
  hashing through ``ccache.conf``; ``base_dir`` and ``sloppiness`` stay unset;
* compilers are wrapped, never hipcc: ``CC``/``CXX`` and the usual compiler names on ``PATH``
  point at two-line wrappers that ``exec ccache <real compiler>``; a ROCm toolchain's clang is
  wrapped through ``HIP_CLANG_PATH``; ``cmake-launcher`` mode sets CMake's launcher variables
  instead of wrapping ``CC``/``CXX`` (PyTorch's CMake).

Each build writes its own stats log (``CCACHE_STATSLOG``), so concurrent builds sharing one cache
still report their own hits and misses.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.build.sandbox import Mount, Runner
from rocmforge.errors import RocmforgeError
from rocmforge.store import layout
from rocmforge.store.measure import CCACHE_ENV_DIR, CCACHE_ENV_SIZE, compiler_cache_usage
from rocmforge.util.fsutil import write_atomic
from rocmforge.util.hashing import blake3_hex, canonical_json


class CompilerCacheError(RocmforgeError):
    """The compiler cache is misconfigured or its tool failed (exit 3: the environment)."""


#: Where the cache directory is bound inside the sandbox (fixed: no path enters a hit).
CACHE_INSIDE = "/ccache"
#: Where the wrapper directory is bound inside the sandbox.
WRAP_INSIDE = "/opt/rocmforge/ccwrap"
#: Where the per-build stats directory is bound inside the sandbox.
STATS_INSIDE = "/build/ccstats"
#: The default maximum size of each cache namespace (ccache's suffixes: k, M, G, T, Ki, Mi ...).
DEFAULT_MAX_SIZE = "20G"
#: A shared cache directory for a cluster's builders (NFS, say); default ``<store>/ccache``.
ENV_DIR = CCACHE_ENV_DIR
#: The maximum size of each namespace (``CCACHE_MAXSIZE``).
ENV_SIZE = CCACHE_ENV_SIZE
#: The modes ``[build] compiler-cache`` takes (besides true/false).
MODES = ("wrap", "cmake-launcher")

_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?([kMGT]i?)?$")
_CLANG = re.compile(r"^clang(\+\+)?(-[0-9]+)?$")
_HOST_COMPILERS = ("cc", "c++", "gcc", "g++", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-g++")
_HIT_COUNTERS = ("direct_cache_hit", "preprocessed_cache_hit")
_MISS_COUNTERS = ("cache_miss",)
# Counters that are outcomes of a call but neither hit nor miss (links, failures, -E ...).
_NOT_OUTCOMES = frozenset(
    {
        "direct_cache_miss",
        "preprocessed_cache_miss",
        "local_storage_hit",
        "local_storage_miss",
        "local_storage_read_hit",
        "local_storage_read_miss",
        "local_storage_write",
        "remote_storage_hit",
        "remote_storage_miss",
        "remote_storage_read_hit",
        "remote_storage_read_miss",
        "remote_storage_write",
        "remote_storage_error",
        "remote_storage_timeout",
        "cleanups_performed",
        "files_in_cache",
        "cache_size_kibibyte",
        "recache",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheSettings:
    """Where the compiler caches live and how big each may grow (from the environment)."""

    root: Path
    max_size: str
    shared: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheSetup:
    """What a build adds for the cache: mounts and env (never hashed), and its stats log."""

    directory: Path
    namespace: str
    mounts: tuple[Mount, ...]
    env: Mapping[str, str]
    stats_log: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheStats:
    """One build's compiler-cache counters, from its stats log."""

    compiles: int
    hits: int
    misses: int
    uncacheable: int
    namespace: str

    @property
    def hit_rate(self) -> float:
        """Hits over cacheable compiles (0.0 when there were none)."""
        done = self.hits + self.misses
        return self.hits / done if done else 0.0

    def to_json(self) -> dict[str, Any]:
        """Return the counters as JSON-ready data (the ``compiler_cache`` field of meta.json)."""
        return {
            "compiles": self.compiles,
            "hits": self.hits,
            "misses": self.misses,
            "uncacheable": self.uncacheable,
            "namespace": self.namespace,
        }

    def summary(self) -> str:
        """Return the one-line form: ``ccache 120/121 hits (99%), 1 miss, 3 uncacheable``."""
        from rocmforge.store.showtext import cache_summary

        return cache_summary(self.hits, self.misses, self.uncacheable)


def settings(store_root: Path, env: Mapping[str, str] | None = None) -> CacheSettings:
    """Return the cache settings: ``$ROCMFORGE_COMPILER_CACHE_DIR`` or ``<store>/ccache``, and
    ``$ROCMFORGE_COMPILER_CACHE_SIZE`` (default 20G); a bad size raises CompilerCacheError."""
    env = os.environ if env is None else env
    size = env.get(ENV_SIZE, "").strip() or DEFAULT_MAX_SIZE
    if not _SIZE.match(size):
        raise CompilerCacheError(f"{ENV_SIZE}={size!r} is not a size like '20G', '500M' or '1.5Ti'")
    shared = env.get(ENV_DIR, "").strip()
    if shared and not os.path.isabs(shared):
        raise CompilerCacheError(f"{ENV_DIR}={shared!r} must be an absolute directory")
    root = Path(shared) if shared else store_root / layout.CCACHE
    return CacheSettings(root=root, max_size=size, shared=bool(shared))


def executable() -> str | None:
    """Return the host's ccache if the sandbox can run it (it lives under /usr), else None."""
    found = shutil.which("ccache", path="/usr/bin:/usr/local/bin:/bin")
    if found is None:
        return None
    return found if os.path.realpath(found).startswith("/usr/") else None


def namespace(fingerprint: Mapping[str, Any]) -> str:
    """Return the cache namespace of a toolchain: 16 hex digits of its fingerprint's hash."""
    return toolchain_key(fingerprint)[:16]


def toolchain_key(fingerprint: Mapping[str, Any]) -> str:
    """Return the full hash of a toolchain fingerprint (ccache's ``compiler_check`` string)."""
    return blake3_hex(canonical_json(dict(fingerprint)))


def _script(ccache: str, real: str) -> bytes:
    return f'#!/bin/sh\nexec {ccache} {real} "$@"\n'.encode()


def _write_exec(path: Path, data: bytes) -> None:
    write_atomic(path, data, mode=0o755, durable=False)  # the build's scratch directory


def _real(name: str, search: str) -> str | None:
    found = shutil.which(name, path=search)
    return os.path.abspath(found) if found else None


def _clang_dir(env: Mapping[str, str]) -> Path | None:
    """The directory hipcc takes clang from: HIP_CLANG_PATH, ROCm's llvm/bin, or ``<root>/bin``."""
    if env.get("HIP_CLANG_PATH"):
        return Path(env["HIP_CLANG_PATH"])
    root = env.get("ROCM_PATH") or env.get("HIP_PATH")
    if not root:
        return None
    llvm = Path(root) / "llvm" / "bin"
    return llvm if llvm.is_dir() else Path(root) / "bin"


def _device_identity(env: Mapping[str, str]) -> str:
    """For a ROCm toolchain: ``-`` and a digest of what the fingerprint does not cover but a HIP
    compile reads (the device bitcode libraries, clang's LLVM libraries) by path, size and
    mtime; a change gives new keys (misses), never a stale hit. Empty for other toolchains."""
    root = env.get("ROCM_PATH")
    clang_dir = _clang_dir(env)
    if not root or clang_dir is None:
        return ""
    patterns = [
        f"{root}/amdgcn/bitcode/*.bc",
        f"{root}/lib/*/amdgcn/bitcode/*.bc",
        f"{root}/llvm/lib/clang/*/lib/amdgcn/bitcode/*.bc",
        f"{root}/lib/llvm/lib/clang/*/lib/amdgcn/bitcode/*.bc",
    ]
    for clang in sorted(clang_dir.glob("clang*")):
        lib = clang.resolve().parent.parent / "lib"
        patterns += [f"{lib}/libLLVM*.so*", f"{lib}/libclang-cpp*.so*"]
    rows = []
    for pattern in dict.fromkeys(patterns):
        for path in sorted(glob.glob(pattern)):
            with contextlib.suppress(OSError):
                st = os.stat(path)
                rows.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}")
    return "-" + blake3_hex("\n".join(rows).encode())[:32]


def prepare(
    *,
    fingerprint: Mapping[str, Any],
    build_env: Mapping[str, str],
    recipe_name: str,
    mode: str,
    root: Path,
    cache: CacheSettings,
    runner: Runner,
) -> CacheSetup | None:
    """Make the wrapper directory under ``root`` and return the cache's mounts and env.

    ``build_env`` is the build's environment (its CC, CXX, PATH, ROCM_PATH). Returns None when
    ccache is not installed (the build then runs without a cache).
    """
    ccache = executable()
    if ccache is None:
        return None
    ns = namespace(fingerprint)
    directory = cache.root / ns
    directory.mkdir(parents=True, exist_ok=True)
    wrap = root / "ccwrap"
    stats = root / "ccstats"
    for d in (wrap / "bin", stats):
        d.mkdir(parents=True, exist_ok=True)
    write_atomic(wrap / "ccache.conf", b"", durable=False)
    mounts = (
        Mount(host=directory, inside=CACHE_INSIDE, writable=True),
        Mount(host=wrap, inside=WRAP_INSIDE),
        Mount(host=stats, inside=STATS_INSIDE, writable=True),
    )
    at_cache, at_wrap, at_stats = (runner.sandbox_path(m) for m in mounts)
    search = build_env.get("PATH", "/usr/bin:/bin")
    env: dict[str, str] = {
        "CCACHE_DIR": at_cache,
        "CCACHE_CONFIGPATH": f"{at_wrap}/ccache.conf",
        "CCACHE_CONFIGPATH2": f"{at_wrap}/ccache.conf",
        "CCACHE_COMPILERCHECK": f"string:{toolchain_key(fingerprint)}{_device_identity(build_env)}",
        "CCACHE_NAMESPACE": recipe_name,
        "CCACHE_MAXSIZE": cache.max_size,
        "CCACHE_STATSLOG": f"{at_stats}/stats.log",
        "CCACHE_TEMPDIR": f"{at_stats}/tmp",
    }
    if mode == "cmake-launcher":
        for lang in ("C", "CXX", "HIP"):
            env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] = ccache
    else:
        real: dict[str, str | None] = {n: _real(n, search) for n in _HOST_COMPILERS}
        for var in ("CC", "CXX"):  # the toolchain's own compilers, by their absolute paths
            value = build_env.get(var, "")
            real[os.path.basename(value)] = value if os.path.isabs(value) else _real(value, search)
        for name, path in real.items():
            if name and path is not None:
                _write_exec(wrap / "bin" / name, _script(ccache, path))
        for var in ("CC", "CXX"):
            base = os.path.basename(build_env.get(var, ""))
            if base and (wrap / "bin" / base).exists():
                env[var] = f"{at_wrap}/bin/{base}"
        env["PATH"] = f"{at_wrap}/bin:{search}"
    clang_dir = _clang_dir(build_env)
    if clang_dir is not None and clang_dir.is_dir():
        # hipcc runs $HIP_CLANG_PATH/clang++-NN and derives its include dir from ../lib.
        hip = wrap / "hip"
        (hip / "bin").mkdir(parents=True, exist_ok=True)
        for item in sorted(clang_dir.iterdir()):
            if _CLANG.match(item.name) and os.access(item, os.X_OK):
                _write_exec(hip / "bin" / item.name, _script(ccache, str(item)))
        link = hip / "lib"
        if not link.is_symlink():
            link.symlink_to(clang_dir.parent / "lib")
        env["HIP_CLANG_PATH"] = f"{at_wrap}/hip/bin"
    return CacheSetup(directory=directory, namespace=ns, mounts=mounts, env=env, stats_log=stats)


def read_stats(setup: CacheSetup) -> CacheStats:
    """Return the counters of the build's stats log (zeros when nothing was compiled)."""
    counts: dict[str, int] = {}
    try:
        text = (setup.stats_log / "stats.log").read_text("utf-8", "replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            counts[line] = counts.get(line, 0) + 1
    hits = sum(counts.get(k, 0) for k in _HIT_COUNTERS)
    misses = sum(counts.get(k, 0) for k in _MISS_COUNTERS)
    other = sum(
        n
        for k, n in counts.items()
        if k not in _HIT_COUNTERS and k not in _MISS_COUNTERS and k not in _NOT_OUTCOMES
    )
    return CacheStats(
        compiles=hits + misses + other,
        hits=hits,
        misses=misses,
        uncacheable=other,
        namespace=setup.namespace,
    )


def stats_from_json(value: Mapping[str, Any]) -> CacheStats:
    """Return :class:`CacheStats` from meta.json's ``compiler_cache`` table."""
    return CacheStats(
        compiles=int(value.get("compiles", 0)),
        hits=int(value.get("hits", 0)),
        misses=int(value.get("misses", 0)),
        uncacheable=int(value.get("uncacheable", 0)),
        namespace=str(value.get("namespace", "")),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheUsage:
    """The compiler cache's size on disk: bytes and files over all namespaces, and how many of
    the files are cache entries (ccache's results and manifests; the rest is stats and locks)."""

    root: Path
    namespaces: int
    files: int
    entries: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        """Return the usage as JSON-ready data."""
        return {
            "root": str(self.root),
            "namespaces": self.namespaces,
            "files": self.files,
            "entries": self.entries,
            "bytes": self.bytes,
        }


def usage(cache: CacheSettings) -> CacheUsage:
    """Return the disk usage of every namespace below ``cache.root`` (allocated blocks;
    :func:`rocmforge.store.measure.compiler_cache_usage`)."""
    spaces, files, entries, size = compiler_cache_usage(os.fspath(cache.root))
    return CacheUsage(root=cache.root, namespaces=spaces, files=files, entries=entries, bytes=size)


def maintain(cache: CacheSettings, *, clear: bool) -> CacheUsage:
    """Trim every namespace to the max size (``ccache --cleanup``) or clear it (``--clear``);
    return the usage afterwards. Runs the host's ccache with the builds' settings."""
    ccache = executable()
    if ccache is None:
        raise CompilerCacheError("ccache is not installed: apt-get install ccache")
    if cache.root.is_dir():
        conf = "/dev/null"  # like the builds' empty config: nothing but the environment counts
        for ns in sorted(cache.root.iterdir()):
            if not ns.is_dir():
                continue
            env = {
                "PATH": "/usr/bin:/bin",
                "CCACHE_DIR": str(ns),
                "CCACHE_CONFIGPATH": conf,
                "CCACHE_CONFIGPATH2": conf,
                "CCACHE_MAXSIZE": cache.max_size,
            }
            done = subprocess.run(
                [ccache, "--clear" if clear else "--cleanup"],
                env=env,
                capture_output=True,
                check=False,
            )
            if done.returncode != 0:
                err = done.stderr.decode("utf-8", "replace").strip()
                raise CompilerCacheError(f"ccache failed on {ns}: {err}")
    return usage(cache)
