"""The resolve stage: recipe -> identified source, probed toolchain, pinned wheels -> derivation.

Everything here is cheap on a warm machine (stat caches only), which is what makes a cache hit fast.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmforge.derivation import Derivation, make_derivation
from rocmforge.recipe import Recipe
from rocmforge.requirements import Fetcher, ResolvedRequirement, resolve_requirements
from rocmforge.sources import SourceIdentity, identify_source
from rocmforge.store import Store
from rocmforge.toolchain import Toolchain, resolve_toolchain


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """A recipe with every input pinned down, and the derivation built from them."""

    recipe: Recipe
    source: SourceIdentity
    toolchain: Toolchain
    requirements: tuple[ResolvedRequirement, ...]
    derivation: Derivation


def resolve(recipe: Recipe, *, store: Store, fetcher: Fetcher | None) -> Resolved:
    """Resolve every input of ``recipe``; fetch what is missing through ``fetcher``."""
    toolchain = resolve_toolchain(recipe.toolchain, cache_dir=store.cache_dir)
    source = identify_source(recipe.source, cache=store.sources_dir)
    requirements = resolve_requirements(
        recipe.requirements.build,
        python_version=toolchain.python_version,
        wheel_dir=store.sources_dir / "wheels",
        cache_dir=store.cache_dir,
        fetcher=fetcher,
    )
    derivation = make_derivation(
        recipe, source=source, toolchain=toolchain.fingerprint, requirements=requirements
    )
    return Resolved(
        recipe=recipe,
        source=source,
        toolchain=toolchain,
        requirements=requirements,
        derivation=derivation,
    )
