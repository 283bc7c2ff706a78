"""The derivation graph: recipes built against other recipes' wheels, and stacks of recipes.

``[requirements] recipes`` names the recipes whose wheels a build needs. :func:`load_graph` loads
the targets (recipes or stack files) and every recipe they reach, refusing cycles and missing
files with the chain that leads to them; :func:`plan_graph` hashes every node without building
(a dependency enters its dependents' derivations by input hash); :func:`realize_graph` builds
what is missing in topological order, up to ``jobs`` independent nodes at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.derivation import Dependency
from rocmforge.errors import BuildError, Problem, RecipeError, RocmforgeError, UsageError
from rocmforge.recipe.load import load_recipe
from rocmforge.recipe.model import Recipe
from rocmforge.recipe.stack import Stack, load_stack
from rocmforge.resolve import resolve
from rocmforge.sources.requirements import Fetcher, resolve_requirements
from rocmforge.store import layout
from rocmforge.store.store import Store
from rocmforge.toolchain.probe import Toolchain

if TYPE_CHECKING:
    RealizeReport = Any  # rocmforge.realize.RealizeReport (a sibling this module never imports)
    from rocmforge.recipe.lints import Finding, LintFacts
    from rocmforge.sandbox import Runner
    from rocmforge.store.roots import TempRoots
    from rocmforge.util.progress import Reporter


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


def _dependency(recipe: Recipe, hash: str, *, provisional: bool, wheels: Sequence[Path] = (),
                check_wheels: Sequence[Path] = ()) -> Dependency:  # fmt: skip
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
            deps[file] = _dependency(
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
        _dependency(graph.recipes[f], plans[f].hash, provisional=bool(plans[f].provisional))
        for f in graph.closure(file)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphReport:
    """The outcome of realizing a graph: each node's report, and what failed or was skipped."""

    reports: Mapping[Path, RealizeReport]
    failed: Mapping[Path, str]
    skipped: Mapping[Path, str]
    order: tuple[Path, ...]
    #: the errors of the failed in-process builds, first first (the CLI raises the first)
    errors: tuple[BuildError, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every node was realized."""
        return not self.failed and not self.skipped


def _check_wheels(recipe: Recipe, *, store: Store, fetcher: Fetcher) -> tuple[Path, ...]:
    reqs = resolve_requirements(
        recipe.check.requirements,
        python_version=recipe.toolchain.python,
        wheel_dir=store.sources_dir / layout.SOURCES_WHEELS,
        cache_dir=store.cache_dir,
        fetcher=fetcher,
    )
    return tuple(q.wheel for q in reqs)


def _built(
    recipe: Recipe, hash: str, wheels: Sequence[Path], *, store: Store, fetcher: Fetcher
) -> Dependency:
    """A built dependency: its wheels and the wheels of its own ``[check] requirements``."""
    check_wheels = _check_wheels(recipe, store=store, fetcher=fetcher)
    return _dependency(recipe, hash, provisional=False, wheels=wheels, check_wheels=check_wheels)


def built_dependencies(
    graph: Graph, file: Path, *, store: Store, fetcher: Fetcher
) -> tuple[Dependency, ...]:
    """The built entries ``file`` is built against (for ``realize --check``), in build order.

    Every dependency must already be in the store: a rebuild is checked against the exact
    dependency wheels of the stored build, never against new ones.
    """
    done: dict[Path, Dependency] = {}
    toolchains: dict[str, Toolchain] = {}
    for f in graph.closure(file):
        recipe = graph.recipes[f]
        r = resolve(
            recipe,
            store=store,
            fetcher=fetcher,
            dependencies=tuple(done[g] for g in graph.closure(f)),
            toolchains=toolchains,
        )
        drv = r.derivation
        with store.shared_lock():
            entry = store.lookup(drv.hash, drv.name, drv.version)
        if entry is None:
            raise UsageError(
                f"{file}: its dependency {drv.name} {drv.version} ({drv.hash}, from "
                f"{os.path.basename(f)}) is not in the store; `realize --check` rebuilds a cached "
                "build: run `rocmforge realize` first"
            )
        done[f] = _built(recipe, drv.hash, entry.wheels, store=store, fetcher=fetcher)
    return tuple(done[f] for f in graph.closure(file))


def realize_graph(
    graph: Graph,
    *,
    realize: Callable[..., RealizeReport],
    store: Store,
    fetcher: Fetcher,
    runner_factory: Callable[[], Runner],
    reporter_factory: Callable[[Recipe], Reporter],
    lints: Mapping[Path, tuple[Finding, ...]],
    temp_roots: TempRoots,
    jobs: int = 1,
    keep_going: bool = False,
    keep_failed: bool = False,
    links: Mapping[Path, Path] | None = None,
    sandbox: str = "bwrap",
    sandbox_option: str | None = None,
    on_done: Callable[[RealizeReport], None] | None = None,
    options: Mapping[str, Any] | None = None,
    child_args: Sequence[str] = (),
) -> GraphReport:
    """Realize the targets of ``graph`` and everything they need, dependencies first.

    ``realize`` is :func:`rocmforge.realize.realize` (passed in: this module sits beside it).

    With ``jobs`` > 1, up to that many independent nodes are built at once, each by a child
    ``rocmforge realize`` of that one recipe (its dependencies are cached by then), with
    ``MAX_JOBS`` defaulting to its share of the cores. A failed node stops its dependents; the
    others stop being started unless ``keep_going``. Build errors are collected in the report;
    any other error (bad input, environment) is raised. ``options`` are more keyword arguments
    for ``realize`` (verify, compiler_cache); ``child_args`` the same for a child realize.
    """
    order = graph.closure_of_targets()
    links = links or {}
    done: dict[Path, Dependency] = {}
    reports: dict[Path, RealizeReport] = {}
    failed: dict[Path, str] = {}
    skipped: dict[Path, str] = {}
    errors: list[BuildError] = []

    def one(file: Path) -> RealizeReport:
        recipe = graph.recipes[file]
        reporter = reporter_factory(recipe)
        try:
            return realize(
                recipe,
                store=store,
                fetcher=fetcher,
                runner_factory=runner_factory,
                reporter=reporter,
                keep_failed=keep_failed,
                link=links.get(file),
                lints=lints.get(file),
                temp_roots=temp_roots,
                sandbox=sandbox,
                dependencies=tuple(done[f] for f in graph.closure(file)),
                **(options or {}),
            )
        except RocmforgeError as exc:
            if exc.recipe_file is None:
                exc.recipe_file = recipe.file
            raise
        finally:
            close = getattr(reporter, "close", None)
            if close is not None:
                close()

    def finished(file: Path, report: RealizeReport) -> None:
        recipe = graph.recipes[file]
        reports[file] = report
        done[file] = _built(recipe, report.hash, report.wheels, store=store, fetcher=fetcher)
        if on_done is not None:
            on_done(report)

    def blocked(file: Path) -> str | None:
        for f in graph.closure(file):
            if f in failed or f in skipped:
                name = graph.recipes[f].package.name
                return f"not built: its dependency {name} ({os.path.basename(f)}) was not built"
        return None

    pending = list(order)
    if jobs <= 1:
        for file in pending:
            why = blocked(file)
            if why is not None:
                skipped[file] = why
                continue
            if failed and not keep_going:
                skipped[file] = "not built: an earlier build failed (use --keep-going)"
                continue
            try:
                finished(file, one(file))
            except BuildError as exc:
                failed[file] = (str(exc).splitlines() or [type(exc).__name__])[0]
                errors.append(exc)
        return GraphReport(
            reports=reports, failed=failed, skipped=skipped, order=order, errors=tuple(errors)
        )
    return _realize_parallel(
        graph, order, store=store, jobs=jobs, keep_going=keep_going, keep_failed=keep_failed,
        links=links, sandbox_option=sandbox_option, one=one, finished=finished,
        blocked=blocked, failed=failed, skipped=skipped, reports=reports, child_args=child_args,
    )  # fmt: skip


def _realize_parallel(
    graph: Graph,
    order: tuple[Path, ...],
    *,
    store: Store,
    jobs: int,
    keep_going: bool,
    keep_failed: bool,
    links: Mapping[Path, Path],
    sandbox_option: str | None,
    one: Callable[[Path], RealizeReport],
    finished: Callable[[Path, RealizeReport], None],
    blocked: Callable[[Path], str | None],
    failed: dict[Path, str],
    skipped: dict[Path, str],
    reports: dict[Path, RealizeReport],
    child_args: Sequence[str] = (),
) -> GraphReport:
    """Build up to ``jobs`` ready nodes at once as child processes, then collect each result."""
    share = max(1, (os.cpu_count() or 1) // jobs)
    env = dict(os.environ)
    env.setdefault("ROCMFORGE_MAX_JOBS", str(share))
    running: dict[Path, subprocess.Popen[bytes]] = {}
    pending = list(order)
    while pending or running:
        for file in list(pending):
            if len(running) >= jobs:
                break
            why = blocked(file)
            if why is not None:
                skipped[file] = why
                pending.remove(file)
                continue
            if failed and not keep_going:
                skipped[file] = "not built: an earlier build failed (use --keep-going)"
                pending.remove(file)
                continue
            if any(f not in reports for f in graph.closure(file)):
                continue  # a dependency is still building
            pending.remove(file)
            argv = [sys.executable, "-m", "rocmforge", "realize", str(file), "--store",
                    str(store.root), "-j", "1"]  # fmt: skip
            if sandbox_option:
                argv += ["--sandbox", sandbox_option]
            if keep_failed:
                argv.append("--keep-failed")
            argv += child_args
            running[file] = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
        if not running:
            continue
        time.sleep(0.05)
        for file, proc in list(running.items()):
            code = proc.poll()
            if code is None:
                continue
            del running[file]
            if code == 0:
                finished(file, one(file))  # cached now: this only looks it up (and links)
            elif code == 1:
                failed[file] = f"build failed (exit {code}; its error is above)"
            else:
                for p in running.values():
                    p.wait()
                raise BuildError(f"{file}: realize stopped with exit {code} (its error is above)")
    return GraphReport(reports=reports, failed=failed, skipped=skipped, order=order)
