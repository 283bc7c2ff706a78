"""Which source caches an entry uses, so that gc keeps exactly those while the entry stays.

:func:`used_sources` lists, when a build publishes, every cache under the store's ``sources/`` the
build read, relative to it: the build and ``[check]`` requirement wheels, the git mirrors of the
source and of every submodule (recursively), the tree stat cache of a path source and of every
directory input, and the download and unpacked tree of every archive input. ``build`` records the
list as ``sources`` in the entry's ``meta.json``.

:func:`entry_refs` reads that back, together with what the entry's derivation names (requirement
wheels, the source commit), as the :class:`~rocmforge.store.gc.SourceRefs` of one entry. The
``gc`` command passes it to :func:`~rocmforge.store.gc.collect_garbage`: the store lists the
caches and the kept entries, but only this module knows which caches an entry used.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rocmforge.store import layout
from rocmforge.store.entry import DerivationDoc, EntryMeta
from rocmforge.store.gc import SourceRefs

if TYPE_CHECKING:  # gc reads entries only: it need not import what builds use
    from rocmforge.recipe.model import Recipe
    from rocmforge.sources.identity import SourceIdentity
    from rocmforge.sources.inputs import ResolvedInput
    from rocmforge.sources.requirements import ResolvedRequirement


class BuildInputs(Protocol):
    """What a build read: the recipe and its resolved source, requirements and inputs."""

    @property
    def recipe(self) -> Recipe:
        """The recipe that was built."""
        ...

    @property
    def source(self) -> SourceIdentity:
        """The identified source."""
        ...

    @property
    def requirements(self) -> tuple[ResolvedRequirement, ...]:
        """The build requirements, resolved to wheels."""
        ...

    @property
    def inputs(self) -> tuple[ResolvedInput, ...]:
        """The extra inputs (``[inputs.NAME]``), resolved."""
        ...


def _wheel_ref(wheel: Path) -> str:
    return f"{layout.SOURCES_WHEELS}/{wheel.name}"


def _under(path: Path, sources_dir: Path) -> str | None:
    """Return ``path`` relative to ``sources_dir`` (POSIX form), or None if it lies elsewhere."""
    try:
        return Path(path).relative_to(sources_dir).as_posix()
    except ValueError:
        return None


def _git_refs(build: BuildInputs, sources_dir: Path) -> list[str]:
    """The mirrors of a git source and, with submodules, of every submodule (recursively)."""
    from rocmforge.sources.git import mirror_path, submodules_at

    spec, ident = build.recipe.source, build.source
    if spec.kind != "git" or not spec.git or not ident.commit:
        return []
    refs: list[str] = []
    stack = [(spec.git, ident.commit)]
    seen: set[tuple[str, str]] = set()
    while stack:
        url, commit = stack.pop()
        mirror = mirror_path(url, sources_dir)
        refs.append(f"{layout.SOURCES_GIT}/{mirror.name}")
        if not spec.submodules or (url, commit) in seen or not mirror.is_dir():
            continue
        seen.add((url, commit))
        stack.extend((s.url, s.commit) for s in submodules_at(mirror, commit, url))
    return refs


def _tree_ref(root: Path, sources_dir: Path) -> str | None:
    from rocmforge.sources.treecache import record_stem

    return _under(record_stem(root, sources_dir), sources_dir)


def _input_refs(build: BuildInputs, sources_dir: Path) -> list[str]:
    """The stat cache of a directory input; the download and unpacked tree of an archive."""
    from rocmforge.sources.inputs import download_path

    refs: list[str | None] = []
    for inp in build.inputs:
        if inp.kind == "tree":
            refs.append(_tree_ref(inp.host, sources_dir))
            continue
        refs.append(_under(inp.host, sources_dir))
        spec = build.recipe.inputs.get(inp.name)
        if spec is not None and spec.url is not None and spec.sha256 is not None:
            refs.append(_under(download_path(spec, sources_dir), sources_dir))
    return [r for r in refs if r is not None]


def used_sources(
    build: BuildInputs, sources_dir: Path, *, check_wheels: Sequence[Path] = ()
) -> list[str]:
    """Return every source cache a build of ``build`` used, relative to ``sources_dir``, sorted.

    ``check_wheels`` are the wheels of ``[check] requirements`` (not part of the derivation, so
    only this list keeps them).
    """
    refs = [_wheel_ref(r.wheel) for r in build.requirements]
    refs.extend(_wheel_ref(w) for w in check_wheels)
    refs.extend(_git_refs(build, sources_dir))
    spec = build.recipe.source
    if spec.kind == "path" and spec.path is not None:
        tree = _tree_ref(spec.path, sources_dir)
        if tree is not None:
            refs.append(tree)
    refs.extend(_input_refs(build, sources_dir))
    return sorted(set(refs))


def entry_refs(meta: EntryMeta, derivation: DerivationDoc) -> SourceRefs:
    """Return what one entry references, from its ``meta.json`` and ``derivation.json``.

    The ``sources`` list of ``meta.json`` names every cache; the derivation adds its requirement
    wheels and its source commit (which keeps the git resolve caches of that commit). An entry
    without a ``sources`` list predates source tracking: its refs are not ``complete``.
    """
    refs: set[str] = set()
    commits: set[str] = set()
    listed = meta.sources
    if listed is not None:
        refs.update(listed)
    for req in derivation.requirements or []:
        if isinstance(req, dict) and isinstance(req.get("wheel"), str):
            refs.add(f"{layout.SOURCES_WHEELS}/{req['wheel']}")
    sdk = (derivation.toolchain or {}).get("rocm-sdk")
    for w in sdk if isinstance(sdk, list) else []:  # a ROCm SDK made of wheels
        if isinstance(w, dict) and isinstance(w.get("wheel"), str):
            refs.add(f"{layout.SOURCES_WHEELS}/{w['wheel']}")
    commit = (derivation.source or {}).get("commit")
    if isinstance(commit, str):
        commits.add(commit)
    return SourceRefs(
        refs=frozenset(refs), commits=frozenset(commits), complete=listed is not None
    )
