"""The Rust toolchain of a recipe: ``[toolchain] rust``, for maturin and setuptools-rust projects.

``rust = "host"`` takes the ``rustc`` and ``cargo`` found on PATH — a rustup install (whose
proxies are followed to the real toolchain through ``rustc --print sysroot``) or Debian's
``rustc``/``cargo`` packages; ``rust = "debian"`` takes Debian's ``/usr/bin/rustc`` and ``cargo``
even when a rustup install comes first on PATH; ``rust = "/path/to/toolchain"`` names a toolchain
directory (its ``bin/rustc`` and ``bin/cargo``). Either way:

- the fingerprint holds ``rustc -vV`` (release, commit, host, LLVM), ``cargo -V`` and the blake3
  digests of what really runs: ``rustc``, ``cargo`` and the ``librustc_driver`` library that is
  the compiler proper; paths are not hashed;
- the toolchain directory is mounted read-only and its ``bin`` goes first on PATH, so no rustup
  proxy or ``RUSTUP_HOME`` is needed inside the sandbox;
- ``CARGO_HOME`` is private to the build (under its ``HOME``) and cargo runs offline
  (``CARGO_NET_OFFLINE=true``): crates must be vendored in the source or given as an input.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

from rocmforge.errors import ToolchainError
from rocmforge.toolchain.probe import PROBE_VERSION, Toolchain, run_probe
from rocmforge.util.hashing import file_blake3
from rocmforge.util.statcache import StatCache

HOST = "host"
DEBIAN = "debian"
DEBIAN_ROOT = "/usr"  # Debian's rustc and cargo packages: /usr/bin/{rustc,cargo}


def _sysroot(spec: str) -> Path:
    if spec == DEBIAN:
        if not (Path(DEBIAN_ROOT) / "bin" / "rustc").is_file():
            raise ToolchainError(
                'toolchain.rust = "debian": no /usr/bin/rustc (apt-get install rustc cargo)'
            )
        return Path(DEBIAN_ROOT)
    if spec != HOST:
        root = Path(spec)
        if not (root / "bin" / "rustc").is_file():
            raise ToolchainError(f"toolchain.rust: {root} has no bin/rustc (give a toolchain dir)")
        return root.resolve()
    rustc = shutil.which("rustc")
    if rustc is None:
        raise ToolchainError(
            'toolchain.rust = "host": `rustc` not found on PATH (install rustup, or Debian\'s '
            "rustc and cargo packages)"
        )
    out = run_probe([rustc, "--print", "sysroot"]).strip()
    if not out or not os.path.isabs(out):
        raise ToolchainError(f"toolchain.rust: `{rustc} --print sysroot` gave {out!r}")
    return Path(out).resolve()


def probe_rust(spec: str) -> dict[str, Any]:
    """Return the raw probe of the Rust toolchain ``spec`` (with paths, stripped before hashing)."""
    root = _sysroot(spec)
    rustc = root / "bin" / "rustc"
    cargo = root / "bin" / "cargo"
    if not cargo.is_file() and spec == DEBIAN:  # never rustup's cargo with Debian's rustc
        raise ToolchainError('toolchain.rust = "debian": no /usr/bin/cargo (apt-get install cargo)')
    if not cargo.is_file():
        found = shutil.which("cargo")  # Debian installs cargo beside rustc in /usr/bin
        if found is None:
            raise ToolchainError(f"toolchain.rust: no cargo beside {rustc} nor on PATH")
        cargo = Path(found).resolve()
    verbose = run_probe([str(rustc), "-vV"]).strip()
    info = dict(line.split(": ", 1) for line in verbose.splitlines()[1:] if ": " in line)
    out: dict[str, Any] = {
        "root": {"path": str(root)},
        "rustc": {
            "path": str(rustc.resolve()),
            "version": verbose.splitlines()[0] if verbose else "",
            "release": info.get("release", ""),
            "commit": info.get("commit-hash", ""),
            "host": info.get("host", ""),
            "llvm": info.get("LLVM version", ""),
            "blake3": file_blake3(rustc.resolve()),
        },
        "cargo": {
            "path": str(cargo),
            "version": run_probe([str(cargo), "-V"]).strip(),
            "blake3": file_blake3(cargo),
        },
    }
    drivers = sorted((root / "lib").glob("librustc_driver-*.so"))
    if not drivers:  # Debian keeps it under lib/<triplet>/
        drivers = sorted((root / "lib").glob("*/librustc_driver-*.so"))
    if drivers:
        out["driver"] = {"path": str(drivers[0]), "blake3": file_blake3(drivers[0])}
    return out


def rust_runtime(probe: dict[str, Any]) -> tuple[dict[str, str], list[str], list[Path]]:
    """Return the build env, PATH dirs and read-only mounts for a probed Rust toolchain."""
    root = Path(probe["root"]["path"])
    dirs = [str(root / "bin"), str(Path(probe["cargo"]["path"]).parent)]
    env = {
        "CARGO": probe["cargo"]["path"],
        "RUSTC": probe["rustc"]["path"],
        "CARGO_NET_OFFLINE": "true",
        "CARGO_TERM_COLOR": "never",
        "CARGO_INCREMENTAL": "0",
    }
    mounts = [] if str(root).startswith("/usr") else [root]
    return env, list(dict.fromkeys(dirs)), mounts


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "path"}
    return value


def _guards(probe: dict[str, Any], which: str | None) -> list[str]:
    paths = [probe[k]["path"] for k in ("rustc", "cargo", "driver") if k in probe]
    if which:
        paths.append(which)
    rustup_home = os.environ.get("RUSTUP_HOME") or os.path.expanduser("~/.rustup")
    settings = os.path.join(rustup_home, "settings.toml")
    if os.path.exists(settings):  # `rustup default` changes which toolchain the proxy runs
        paths.append(settings)
    return paths


def with_rust(base: Toolchain, spec: str, *, cache_dir: Path) -> Toolchain:
    """Return ``base`` with the Rust toolchain ``spec`` added: fingerprint (``rust``), env, PATH,
    read-only mounts and stat guards. The probe is cached until a guarded file changes."""
    which = shutil.which("rustc") if spec == HOST else None
    cache = StatCache(cache_dir / "toolchain-rust.json")
    key = "|".join([str(PROBE_VERSION), spec, str(which), os.environ.get("RUSTUP_TOOLCHAIN", "")])
    probe = cache.get(key)
    if probe is None:
        probe = probe_rust(spec)
        cache.put(key, probe, _guards(probe, which))
    env, dirs, mounts = rust_runtime(probe)
    return dataclasses.replace(
        base,
        fingerprint={
            **base.fingerprint,
            "rust": _strip({k: v for k, v in probe.items() if k != "root"}),
        },
        env={**base.env, **env},
        path_dirs=tuple(dict.fromkeys([*dirs, *base.path_dirs])),
        mounts=tuple(dict.fromkeys([*base.mounts, *mounts])),
        guards=tuple(dict.fromkeys([*base.guards, *_guards(probe, which)])),
    )
