"""Reproducible by default: what rocmforge adds to every build so two builds give the same bytes.

Modelled on Debian's reproducible-builds practice. The sandbox already fixes the paths
(``/build/src``, ``/build/venv``, ``/tmp``), ``SOURCE_DATE_EPOCH``, ``TZ``, the locale and
``PYTHONHASHSEED``; this module adds what real backends still get wrong:

- **a fixed build directory** for backends that make a random one (meson-python's
  ``.mesonpy-XXXXXXXX``, scikit-build-core's temporary directory), passed as the backend's own
  ``build-dir`` config setting unless the recipe sets one;
- **compiler prefix maps** for the in-sandbox build paths, through the variables compilers and
  build systems read (``CFLAGS``, ``CXXFLAGS``, ``FFLAGS``, ``FCFLAGS``: ``-ffile-prefix-map``,
  which implies ``-fdebug-prefix-map`` and ``-fmacro-prefix-map``; ``RUSTFLAGS``:
  ``--remap-path-prefix``; ``BUILD_PATH_PREFIX_MAP`` for tools that follow that spec), so
  neither ``__FILE__``, debug info nor Rust panic messages carry a build path.

All of it is the builder protocol :data:`PROTOCOL`, recorded in the derivation (``build.
reproducible``), so a change here changes every input hash. ``[build] reproducible = false``
turns it off for one recipe (also hashed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocmforge.recipe.model import BuildSpec

PROTOCOL = "rocmforge-repro/1"
"""The version of what this module adds; part of every reproducible derivation."""

BUILD_DIR = "build/rocmforge"
"""The fixed build directory (relative to the source root) given to backends with random ones."""

BACKEND_BUILD_DIR: Mapping[str, str] = {
    "mesonpy": "build-dir",
    "scikit_build_core.build": "build-dir",
}
"""Backend module -> its config setting naming the build directory."""

FLAG_VARS = ("CFLAGS", "CXXFLAGS", "FFLAGS", "FCFLAGS")
"""The compiler flag variables the prefix maps are appended to."""


def describe(spec: BuildSpec) -> dict[str, Any] | bool:
    """Return what the derivation records under ``build.reproducible`` (False when off)."""
    if not spec.reproducible:
        return False
    return {
        "protocol": PROTOCOL,
        "build-dir": {k: f"{v}={BUILD_DIR}" for k, v in sorted(BACKEND_BUILD_DIR.items())},
        "prefix-map": {"src": ".", "tmp": "/tmp", "venv": "/build/venv"},
    }


def prefix_maps(paths: Mapping[str, str]) -> list[tuple[str, str]]:
    """Return ``(build path, neutral name)`` pairs for the sandbox paths of one build."""
    return [(paths["src"], "."), (paths["tmp"], "/tmp"), (paths["venv"], "/build/venv")]


def repro_env(spec: BuildSpec, env: Mapping[str, str], paths: Mapping[str, str]) -> dict[str, str]:
    """Return the variables to set on top of ``env`` for a reproducible build (none when off).

    Flags are appended to what the recipe or toolchain already set, never replacing them.
    """
    if not spec.reproducible:
        return {}
    maps = prefix_maps(paths)
    cflags = " ".join(f"-ffile-prefix-map={a}={b}" for a, b in maps)
    rflags = " ".join(f"--remap-path-prefix={a}={b}" for a, b in maps)
    out = {v: f"{env[v]} {cflags}" if env.get(v) else cflags for v in FLAG_VARS}
    out["RUSTFLAGS"] = f"{env['RUSTFLAGS']} {rflags}" if env.get("RUSTFLAGS") else rflags
    # The reproducible-builds spec: right-most wins, so the first map is listed last.
    out["BUILD_PATH_PREFIX_MAP"] = ":".join(f"{b}={a}" for a, b in reversed(maps))
    return out


def frontend_config(spec: BuildSpec) -> dict[str, Any]:
    """Return the JSON handed to the PEP 517 frontend: the recipe's config settings and, when
    reproducible, the build-directory setting per backend (used only if the recipe has none)."""
    settings = {k: list(v) if isinstance(v, tuple) else v for k, v in spec.config_settings.items()}
    build_dir = (
        {k: [v, BUILD_DIR] for k, v in BACKEND_BUILD_DIR.items()} if spec.reproducible else {}
    )
    return {"settings": settings, "build-dir": build_dir}
