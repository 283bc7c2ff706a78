"""The recipe model: immutable values describing one build, built by :meth:`Recipe.from_dict`.

Loading the TOML text, following ``extends`` and finding line numbers lives in
:mod:`rocmforge.recipe_load`; this module only turns plain data into validated values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class PackageSpec:
    """``[package]``: the distribution name and the version the built wheel must carry."""

    name: str
    version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSpec:
    """``[source]``: where the code comes from. Paths are absolute once loaded."""

    kind: Literal["path", "git"]
    path: Path | None = None
    git: str | None = None
    rev: str | None = None
    submodules: bool = False
    patches: tuple[Path, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolchainSpec:
    """``[toolchain]``: the compilers and interpreter the build runs with."""

    kind: Literal["system"] = "system"
    python: str = "3.11"
    cc: str = "cc"
    cxx: str = "c++"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequirementsSpec:
    """``[requirements]``: exact ``name==version`` pins installed into the build venv."""

    build: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildSpec:
    """``[build]``: the steps (empty means PEP 517), passthrough env names and the timeout."""

    steps: tuple[str, ...] = ()
    passthrough: tuple[str, ...] = ()
    timeout: float = 4 * 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckSpec:
    """``[check]``: modules imported from the installed wheel in a fresh venv."""

    imports: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    """A loaded, validated recipe with ``extends`` already merged in."""

    schema: int
    file: Path
    package: PackageSpec
    source: SourceSpec
    toolchain: ToolchainSpec = field(default_factory=ToolchainSpec)
    requirements: RequirementsSpec = field(default_factory=RequirementsSpec)
    env: Mapping[str, str] = field(default_factory=dict)
    build: BuildSpec = field(default_factory=BuildSpec)
    check: CheckSpec = field(default_factory=CheckSpec)
    resolved: Mapping[str, Any] = field(default_factory=dict)
    extends_chain: tuple[Path, ...] = ()
