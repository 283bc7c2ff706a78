"""The derivation: one canonical document of everything that can change the wheel's bytes.

Its blake3 digest (first 32 hex characters, 128 bits) is the input hash that keys the store.
What is out, on purpose: the recipe's comments, layout, key order, file name and location; source
URLs and local paths; passthrough env; parallelism; timeouts; check steps.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.plan.repro import describe
from rocmforge.recipe.model import Recipe
from rocmforge.sources.identity import SourceIdentity
from rocmforge.sources.requirements import ResolvedRequirement
from rocmforge.store.entry import input_hash
from rocmforge.util.hashing import canonical_json

BUILDER = "rocmforge-build/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class Derivation:
    """A resolved derivation and its input hash."""

    name: str
    version: str
    data: Mapping[str, Any]
    hash: str

    def canonical(self) -> bytes:
        """Return the canonical JSON bytes that were hashed."""
        return canonical_json(self.data)


def _build(recipe: Recipe) -> dict[str, Any]:
    """The ``build`` part: steps or PEP 517 (with its config settings), and what rocmforge adds
    for reproducibility (the builder protocol of :mod:`rocmforge.plan.repro`, or False when off)."""
    spec = recipe.build
    out: dict[str, Any] = {"steps": list(spec.steps)} if spec.steps else {"pep517": True}
    if spec.config_settings:
        out["config-settings"] = {
            k: list(v) if isinstance(v, tuple) else v for k, v in spec.config_settings.items()
        }
    out["reproducible"] = describe(spec)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Dependency:
    """An entry of another recipe this build needs (``[requirements] recipes``, transitively).

    It enters the derivation by ``name``, ``version`` and input ``hash`` only; ``wheels`` (its
    built wheels, empty while provisional) and ``check_wheels`` (the wheels of its own ``[check]
    requirements``) are what the build and check venvs install. ``flags`` is the dependency's
    ``[env]``, kept for audit and explain.
    """

    name: str
    version: str
    hash: str
    recipe: Path
    wheels: tuple[Path, ...] = ()
    check_wheels: tuple[Path, ...] = ()
    provisional: bool = False

    def to_json(self) -> dict[str, str]:
        """Return the derivation record of this dependency: name, version, input hash."""
        return {"name": self.name, "version": self.version, "hash": self.hash}


def make_derivation(
    recipe: Recipe,
    *,
    source: SourceIdentity,
    toolchain: Mapping[str, Any],
    requirements: Sequence[ResolvedRequirement],
    inputs: Mapping[str, Any] | None = None,
    provisional: Sequence[str] = (),
    dependencies: Sequence[Dependency] = (),
) -> Derivation:
    """Assemble the derivation document for ``recipe`` from its resolved inputs and hash it.

    ``inputs`` (name -> identity of each ``[inputs.NAME]``) is present only when the recipe has
    some; ``dependencies`` (the recipes it is built against, by input hash) likewise under
    ``recipes``; ``provisional`` lists what ``plan`` could not resolve, which makes the hash
    provisional.
    """
    data: dict[str, Any] = {
        "builder": BUILDER,
        "system": f"{platform.machine()}-linux",
        "package": {"name": recipe.package.name, "version": recipe.package.version},
        "source": source.to_json(),
        "toolchain": dict(toolchain),
        "requirements": [r.to_json() for r in requirements],
        "env": dict(recipe.env),
        "build": _build(recipe),
    }
    if recipe.build.repair:  # absent otherwise, so recipes without it keep their hash
        build = recipe.build
        data["build"]["repair"] = {"tool": build.repair, "policy": build.repair_policy}
    if inputs:
        data["inputs"] = dict(inputs)
    if dependencies:
        data["recipes"] = sorted(
            (d.to_json() for d in dependencies), key=lambda d: (d["name"], d["hash"])
        )
    if provisional:
        data["provisional"] = list(provisional)
    return Derivation(
        name=recipe.package.name,
        version=recipe.package.version,
        data=data,
        hash=input_hash(data),
    )
