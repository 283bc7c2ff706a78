"""The derivation graph: recipes built against other recipes' wheels, and stacks of recipes.

``[requirements] recipes`` names the recipes whose wheels a build needs. :func:`load_graph` loads
the targets (recipes or stack files) and every recipe they reach, refusing cycles and missing
files with the chain that leads to them; :func:`plan_graph` hashes every node without building
(a dependency enters its dependents' derivations by input hash). Building what is missing is
:mod:`rocmforge.pipeline.graph`'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import Problem, RecipeError
from rocmforge.plan.derivation import Dependency
from rocmforge.plan.resolve import resolve
from rocmforge.recipe.load import load_recipe
from rocmforge.recipe.model import Recipe
from rocmforge.recipe.stack import Stack, load_stack
from rocmforge.sources.requirements import Fetcher
from rocmforge.store.store import Store
from rocmforge.toolchain.probe import Toolchain

if TYPE_CHECKING:
    from rocmforge.recipe.lints import LintFacts


@dataclass(frozen=True, slots=True, kw_only=True)
class Graph:
    """Loaded recipes and their edges; ``order`` lists every node after its dependencies."""

    recipes: Mapping[Path, Recipe]
    edges: Mapping[Path, tuple[Path, ...]]
    order: tuple[Path, ...]
    targets: tuple[Path, ...]
    stacks: tuple[Stack, ...] = ()
    #: closures computed so far (a graph is walked once per node by plan and realize)
    _closures: dict[Path, tuple[Path, ...]] = field(default_factory=dict, compare=False, repr=False)

    def closure(self, file: Path) -> tuple[Path, ...]:
        """Every recipe ``file`` is built against, transitively, in build order."""
        found = self._closures.get(file)
        if found is not None:
            return found
        seen: set[Path] = set()
        todo = list(self.edges[file])
        while todo:
            f = todo.pop()
            if f not in seen:
                seen.add(f)
                known = self._closures.get(f)
                if known is not None:
                    seen.update(known)
                else:
                    todo.extend(self.edges[f])
        found = self._closures[file] = tuple(f for f in self.order if f in seen)
        return found

    def closure_of_targets(self) -> tuple[Path, ...]:
        """The targets and everything they are built against, in build order."""
        wanted = set(self.targets)
        for t in self.targets:
            wanted.update(self.closure(t))
        return tuple(f for f in self.order if f in wanted)


def _chain(files: Sequence[Path]) -> str:
    return " -> ".join(os.path.basename(f) for f in files)


def expand_targets(targets: Sequence[str | Path]) -> tuple[list[Path], list[Stack]]:
    """Return the recipe files named by ``targets`` (stack files expanded) and the stacks."""
    files: list[Path] = []
    stacks: list[Stack] = []
    for t in targets:
        stack = load_stack(t)
        if stack is None:
            files.append(Path(os.path.abspath(t)))
        else:
            stacks.append(stack)
            files.extend(stack.recipes)
    return list(dict.fromkeys(files)), stacks


def load_graph(targets: Sequence[str | Path]) -> Graph:
    """Load ``targets`` (recipes or stack files) and every recipe they are built against.

    Raises :class:`~rocmforge.errors.RecipeError` for a bad recipe, a missing dependency file or
    a cycle, naming the chain of recipes that leads to it.
    """
    files, stacks = expand_targets(targets)
    recipes: dict[Path, Recipe] = {}
    edges: dict[Path, tuple[Path, ...]] = {}
    order: list[Path] = []
    state: dict[Path, int] = {}  # 1 on the current path, 2 done

    def visit(file: Path, path: list[Path]) -> None:
        if state.get(file) == 2:
            return
        if state.get(file) == 1:
            cycle = [*path[path.index(file) :], file]
            raise RecipeError(
                [
                    Problem(
                        file=path[-1],
                        key="requirements.recipes",
                        message=f"dependency cycle: {_chain(cycle)}",
                    )
                ]
            )
        state[file] = 1
        recipe = load_recipe(file)
        recipes[file] = recipe
        deps = tuple(Path(p) for p in recipe.requirements.recipes)
        for i, dep in enumerate(deps):
            if not os.path.isfile(dep):
                raise RecipeError(
                    [
                        Problem(
                            file=file,
                            key=f"requirements.recipes[{i}]",
                            message=f"no such recipe {dep} (chain: {_chain([*path, file, dep])})",
                        )
                    ]
                )
            visit(dep, [*path, file])
        edges[file] = deps
        state[file] = 2
        order.append(file)

    for f in files:
        visit(f, [])
    return Graph(
        recipes=recipes, edges=edges, order=tuple(order), targets=tuple(files), stacks=tuple(stacks)
    )


def closure_files(targets: Sequence[str | Path]) -> list[Path]:
    """The recipe files of ``targets`` (stacks expanded) and their closure, dependencies first.

    For ``lock``: a recipe that does not validate yet (an unpinned ``ref`` is what ``lock``
    fixes) is kept as a leaf, read without its lock file; cycles are left to ``load_graph``.
    """
    from rocmforge.recipe.load import load_recipe_unlocked

    files, _ = expand_targets(targets)
    order: list[Path] = []
    seen: set[Path] = set()

    def visit(file: Path) -> None:
        if file in seen:
            return
        seen.add(file)
        try:
            deps = load_recipe_unlocked(file).requirements.recipes
        except RecipeError:
            deps = ()
        for dep in deps:
            visit(Path(dep))
        order.append(file)

    for f in files:
        visit(f)
    return order


def lint_facts_for(graph: Graph, file: Path) -> LintFacts:
    """This machine's lint facts for ``file``, with the recipes it is built against."""
    from dataclasses import replace

    from rocmforge.toolchain.machine import lint_facts

    recipe = graph.recipes[file]
    deps = tuple(graph.recipes[f] for f in graph.closure(file))
    return replace(lint_facts(recipe), dependencies=deps)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePlan:
    """One node of ``plan --graph``: its hash, whether it is cached, what it is built against."""

    recipe: Path
    name: str
    version: str
    hash: str
    cached: bool
    path: Path | None
    provisional: tuple[str, ...]
    deps: tuple[str, ...]
    target: bool
    derivation: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the node as JSON-ready data (``deps`` are input hashes)."""
        return {
            "recipe": str(self.recipe),
            "name": self.name,
            "version": self.version,
            "hash": self.hash,
            "cached": self.cached,
            "path": str(self.path) if self.path else None,
            "provisional": list(self.provisional),
            "deps": list(self.deps),
            "target": self.target,
        }


def dependency(recipe: Recipe, hash: str, *, provisional: bool, wheels: Sequence[Path] = (),
                check_wheels: Sequence[Path] = ()) -> Dependency:  # fmt: skip
    """The :class:`Dependency` a dependent's derivation records for ``recipe`` built as ``hash``."""
    return Dependency(
        name=recipe.package.name,
        version=recipe.package.version,
        hash=hash,
        recipe=recipe.file,
        wheels=tuple(wheels),
        check_wheels=tuple(check_wheels),
        provisional=provisional,
    )


def plan_graph(graph: Graph, *, store: Store, fetcher: Fetcher | None) -> tuple[NodePlan, ...]:
    """Hash every node of ``graph`` without building, dependencies first (provisionally).

    A node whose dependency is provisional is provisional too. Lints are not run here; ``plan``
    of one recipe runs them.
    """
    nodes: dict[Path, NodePlan] = {}
    deps: dict[Path, Dependency] = {}
    targets = set(graph.targets)
    toolchains: dict[str, Toolchain] = {}
    with store.shared_lock():
        for file in graph.order:
            recipe = graph.recipes[file]
            closure = tuple(deps[f] for f in graph.closure(file))
            r = resolve(
                recipe,
                store=store,
                fetcher=fetcher,
                provisional=True,
                dependencies=closure,
                toolchains=toolchains,
            )
            drv = r.derivation
            entry = store.lookup(drv.hash, drv.name, drv.version)
            deps[file] = dependency(
                recipe,
                drv.hash,
                provisional=bool(r.provisional),
                wheels=entry.wheels if entry else (),
            )
            nodes[file] = NodePlan(
                recipe=file,
                name=drv.name,
                version=drv.version,
                hash=drv.hash,
                cached=entry is not None,
                path=entry.path if entry else None,
                provisional=r.provisional,
                deps=tuple(deps[f].hash for f in graph.edges[file]),
                target=file in targets,
                derivation=drv.data,
            )
    return tuple(nodes[f] for f in graph.order)


def plan_dependencies(
    graph: Graph, file: Path, *, store: Store, fetcher: Fetcher | None
) -> tuple[Dependency, ...]:
    """The (provisional where not resolvable) dependencies of ``file``, for ``plan``."""
    if not graph.edges[file]:
        return ()
    sub = Graph(
        recipes=graph.recipes,
        edges=graph.edges,
        order=graph.closure(file),
        targets=(),
    )
    plans = {n.recipe: n for n in plan_graph(sub, store=store, fetcher=fetcher)}
    return tuple(
        dependency(graph.recipes[f], plans[f].hash, provisional=bool(plans[f].provisional))
        for f in graph.closure(file)
    )
