"""Toolchain probing: find the compilers and interpreter, fingerprint them, cache by stat.

A fingerprint holds what can change the output bytes: probed versions, the Python ABI and the
blake3 digests of the executables that really run (the ``cc`` driver *and* ``cc1``, since the
driver alone says little). Paths are runtime data, not fingerprint: the same compiler installed at
another prefix yields the same hash. Probes run only when a guarding file's stat signature changed,
so a cache hit costs a few ``stat`` calls. Other kinds (``rocm``) add their own probe beside
:func:`probe_system`.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocmforge.errors import ToolchainError
from rocmforge.recipe.model import ToolchainSpec
from rocmforge.store import layout
from rocmforge.toolchain.probe import PROBE_VERSION, Toolchain, run_probe
from rocmforge.util.hashing import file_blake3
from rocmforge.util.statcache import StatCache

_PY_PROBE = (
    "import sys, sysconfig, platform;"
    "print(getattr(sys, '_base_executable', '') or sys.executable); print(sys.base_prefix);"
    "print(platform.python_version()); print(sys.implementation.name);"
    "print(sysconfig.get_config_var('SOABI') or '');"
    "print(sysconfig.get_platform());"
    "print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
)


def _which(name: str, key: str) -> Path:
    found = shutil.which(name)
    if found is None:
        raise ToolchainError(f"toolchain.{key}: `{name}` not found on PATH")
    return Path(found)


def _python_command(spec: ToolchainSpec) -> Path:
    if os.path.isabs(spec.python):
        p = Path(spec.python)
        if not os.access(p, os.X_OK):
            raise ToolchainError(f"toolchain.python: {p} is not an executable")
        return p
    from rocmforge.toolchain.pythons import find_python, found_summary

    found = find_python(spec.python)
    if found is None:
        raise ToolchainError(
            f"toolchain.python: the recipe asks for Python {spec.python} but no "
            f"python{spec.python} is on PATH, in pyenv's versions or in /usr/bin, /usr/local/bin "
            f"({found_summary()}); install it or set [toolchain] python to one of those"
        )
    return found


def _find_python(short: str) -> str | None:
    from rocmforge.toolchain.pythons import find_python

    found = find_python(short)
    return str(found) if found else None


def _compiler(name: str, key: str) -> dict[str, Any]:
    exe = _which(name, key).resolve()
    version = run_probe([str(exe), "--version"]).splitlines()[0].strip()
    info: dict[str, Any] = {"path": str(exe), "version": version, "blake3": file_blake3(exe)}
    # The driver execs the real compiler proper (cc1 / cc1plus for gcc); digest that too.
    proper = "cc1plus" if key == "cxx" else "cc1"
    out = run_probe([str(exe), f"-print-prog-name={proper}"]).strip()
    if os.path.isabs(out) and os.path.exists(out):
        info[proper] = {
            "path": str(Path(out).resolve()),
            "blake3": file_blake3(Path(out).resolve()),
        }
    return info


def probe_system(spec: ToolchainSpec) -> dict[str, Any]:
    """Run the probes for a ``kind = "system"`` toolchain; returns raw probe data (with paths)."""
    pycmd = _python_command(spec)
    lines = run_probe([str(pycmd), "-c", _PY_PROBE]).splitlines()
    if len(lines) < 7:
        raise ToolchainError(f"toolchain.python: unexpected probe output from {pycmd}")
    exe, prefix, version, impl, soabi, plat, short = lines[:7]
    if not os.path.isabs(spec.python) and spec.python != "3" and short != spec.python:
        raise ToolchainError(
            f"toolchain.python: declared {spec.python!r} but {pycmd} is Python {version}"
        )
    # A venv's python (a symlink, or a copy with --copies) stands for its base interpreter, the
    # one the probe prints: a copy under the venv is not in the sandbox, and build venvs are
    # made from the base anyway.
    real_exe = Path(exe).resolve()
    return {
        "kind": "system",
        "machine": platform.machine(),
        "python": {
            "path": str(real_exe),
            "prefix": prefix,
            "version": version,
            "short": short,
            "implementation": impl,
            "soabi": soabi,
            "platform": plat,
            "blake3": file_blake3(real_exe),
        },
        "cc": _compiler(spec.cc, "cc"),
        "cxx": _compiler(spec.cxx, "cxx"),
    }


def _strip_paths(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_paths(v) for k, v in value.items() if k not in ("path", "prefix")}
    return value


def _guards(probe: Mapping[str, Any]) -> list[str]:
    paths: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, sub in v.items():
                if k == "path":
                    paths.append(str(sub))
                else:
                    walk(sub)

    walk(probe)
    return paths


def _toolchain_from_probe(probe: Mapping[str, Any], guards: tuple[str, ...]) -> Toolchain:
    py = probe["python"]
    prefix = Path(py["prefix"])
    mounts: tuple[Path, ...] = ()
    if not str(prefix).startswith("/usr/") or str(prefix).startswith("/usr/local"):
        mounts = (prefix,)
    dirs: list[str] = []
    for key in ("cc", "cxx"):
        d = str(Path(probe[key]["path"]).parent)
        if d not in dirs:
            dirs.append(d)
    py_dir = str(Path(py["path"]).parent)
    if py_dir not in dirs:
        dirs.append(py_dir)
    return Toolchain(
        fingerprint=_strip_paths(probe),
        python=Path(py["path"]),
        python_prefix=prefix,
        python_version=py["short"],
        env={"CC": probe["cc"]["path"], "CXX": probe["cxx"]["path"]},
        path_dirs=tuple(dirs),
        mounts=mounts,
        guards=guards,
    )


def resolve_toolchain(spec: ToolchainSpec, *, cache_dir: Path) -> Toolchain:
    """Return the toolchain for ``spec``, probing only when the executables changed on disk."""
    if spec.rust is not None:  # the C/Python toolchain first, then the Rust one on top
        from rocmforge.toolchain.rust import with_rust

        base = resolve_toolchain(dataclasses.replace(spec, rust=None), cache_dir=cache_dir)
        return with_rust(base, spec.rust, cache_dir=cache_dir)
    if spec.kind == "rocm-sdk":  # the host side only: the SDK wheels are added by resolve
        host = resolve_toolchain(
            dataclasses.replace(spec, kind="system", sdk_version=None, families=(), index=None,
                                sdk_wheels={}),
            cache_dir=cache_dir,
        )  # fmt: skip
        return dataclasses.replace(host, fingerprint={**host.fingerprint, "kind": "rocm-sdk"})
    if spec.kind == "rocm":
        from rocmforge.toolchain.rocm import missing_root_message, resolve_rocm

        if spec.root is None or not spec.root.is_dir():
            raise ToolchainError(missing_root_message(spec))
        host = resolve_toolchain(
            dataclasses.replace(spec, kind="system", rocm=None, root=None, packages=None),
            cache_dir=cache_dir,
        )
        return with_view(resolve_rocm(spec, cache_dir=cache_dir, host=host), spec, cache_dir)
    cache = StatCache(cache_dir / layout.CACHE_TOOLCHAIN)
    which = [shutil.which(spec.cc) or spec.cc, shutil.which(spec.cxx) or spec.cxx]
    py = spec.python if os.path.isabs(spec.python) else _find_python(spec.python)
    key = "|".join([str(PROBE_VERSION), spec.kind, spec.python, str(py), *map(str, which)])
    probe = cache.get(key)
    fresh = probe is None
    if probe is None:
        probe = probe_system(spec)
    guards = tuple(dict.fromkeys([*_guards(probe), *(str(p) for p in [py, *which] if p)]))
    if fresh:
        cache.put(key, probe, guards)
    tc = with_manifest(_toolchain_from_probe(probe, guards), cache_dir=cache_dir)
    return with_view(with_python_prefix(tc, cache_dir=cache_dir), spec, cache_dir)


def with_view(tc: Toolchain, spec: ToolchainSpec, cache_dir: Path) -> Toolchain:
    """Narrow ``tc`` to the declared packages' view when ``spec.packages`` is set."""
    if spec.packages is None:
        return tc
    from rocmforge.toolchain.manifest import detect_database, system_manifest

    db = detect_database()
    if db.kind != "dpkg":
        what = "rpm's database" if db.kind == "rpm" else f"no package database ({db.note})"
        raise ToolchainError(
            "toolchain.packages: a declared view of /usr is built from dpkg's database (its "
            f"file lists and Depends); this machine's system manifest reads {what}: drop the "
            "key to hash the whole system manifest instead"
        )
    from rocmforge.toolchain.view import (
        alternatives_links,
        linked_libraries,
        view_fingerprint,
        view_packages,
    )

    files = [g for g in tc.guards if os.path.isfile(g)]
    elf = list(files)
    if tc.python_prefix in tc.mounts:  # a pyenv Python: the libraries its modules load
        dynload = tc.python_prefix / "lib" / f"python{tc.python_version}" / "lib-dynload"
        elf += [str(p) for p in dynload.glob("*.so")]
    packages, links = view_packages(
        spec.packages,
        files=files,
        linked=lambda: linked_libraries(elf),
        alternatives=alternatives_links(system_manifest(cache_dir=cache_dir).unowned),
        cache_dir=cache_dir,
    )
    fingerprint = {
        k: v
        for k, v in tc.fingerprint.items()
        if k not in ("database", "packages", "masked", "unowned")
    }
    return dataclasses.replace(
        tc,
        fingerprint={**fingerprint, **view_fingerprint(packages, links)},
        masks=tuple(m for m in tc.masks if not m.startswith("/usr/")),
        view={"packages": packages, "links": links},
    )


def with_python_prefix(tc: Toolchain, *, cache_dir: Path) -> Toolchain:
    """Content-hash the toolchain Python's prefix when it is mounted (no package owns it)."""
    if tc.python_prefix not in tc.mounts:
        return tc
    from rocmforge.toolchain.pyprefix import prefix_coverage

    parts, guards, masks = prefix_coverage(
        tc.python_prefix, tc.python_version, cache_dir=cache_dir
    )
    python = {**tc.fingerprint["python"], "prefix_files": dict(parts)}
    return dataclasses.replace(
        tc,
        fingerprint={**tc.fingerprint, "python": python},
        guards=tuple(dict.fromkeys([*tc.guards, *guards])),
        masks=(*tc.masks, *masks),
    )


def with_manifest(tc: Toolchain, *, cache_dir: Path) -> Toolchain:
    """Add the system manifest (visible package versions, masked and unowned paths) to ``tc``."""
    from rocmforge.toolchain.manifest import memo_guards, system_manifest

    manifest = system_manifest(cache_dir=cache_dir)
    return dataclasses.replace(
        tc,
        fingerprint={**tc.fingerprint, **manifest.fingerprint()},
        guards=tuple(dict.fromkeys([*tc.guards, *memo_guards(manifest)])),
        masks=manifest.masked,
    )
