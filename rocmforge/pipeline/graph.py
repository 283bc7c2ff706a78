"""Realizing a derivation graph: what is missing, built in topological order, up to ``jobs``
independent nodes at once (each as its own ``rocmforge realize``); the graph itself is loaded and
planned by :mod:`rocmforge.plan.graph`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import BuildError, RocmforgeError, UsageError
from rocmforge.pipeline.options import RealizeOptions
from rocmforge.plan.derivation import Dependency
from rocmforge.plan.graph import Graph, dependency
from rocmforge.plan.resolve import resolve
from rocmforge.recipe.model import Recipe
from rocmforge.sources.requirements import Fetcher, resolve_requirements
from rocmforge.store import layout
from rocmforge.store.store import Store
from rocmforge.toolchain.probe import Toolchain

if TYPE_CHECKING:
    RealizeReport = Any  # rocmforge.pipeline.realize.RealizeReport (never imported here)
    from rocmforge.build.sandbox import Runner
    from rocmforge.recipe.lints import Finding
    from rocmforge.store.roots import TempRoots
    from rocmforge.util.progress import Reporter



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
    return dependency(recipe, hash, provisional=False, wheels=wheels, check_wheels=check_wheels)


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
    options: RealizeOptions,
    links: Mapping[Path, Path] | None = None,
    on_done: Callable[[RealizeReport], None] | None = None,
) -> GraphReport:
    """Realize the targets of ``graph`` and everything they need, dependencies first.

    ``realize`` is :func:`rocmforge.pipeline.realize.realize` (passed in: this module sits beside
    it); each node is realized with ``options``.

    With ``options.jobs`` > 1, up to that many independent nodes are built at once, each by a
    child ``rocmforge realize`` of that one recipe (its dependencies are cached by then) with the
    arguments :meth:`RealizeOptions.to_argv` of :meth:`RealizeOptions.for_child`, and
    ``MAX_JOBS`` defaulting to its share of the cores. A failed node stops its dependents; the
    others stop being started unless ``options.keep_going``. Build errors are collected in the
    report; any other error (bad input, environment) is raised.
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
                options=options,
                link=links.get(file),
                lints=lints.get(file),
                temp_roots=temp_roots,
                dependencies=tuple(done[f] for f in graph.closure(file)),
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

    keep_going = options.keep_going
    pending = list(order)
    if options.jobs <= 1:
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
        graph, order, store=store, jobs=options.jobs, keep_going=keep_going,
        child_args=child_command(options), one=one, finished=finished,
        blocked=blocked, failed=failed, skipped=skipped, reports=reports,
    )  # fmt: skip


def child_command(options: RealizeOptions) -> list[str]:
    """The option arguments of every child realize of one node (a local one of ``-j N`` or a
    Slurm job): :meth:`RealizeOptions.to_argv` of :meth:`RealizeOptions.for_child`."""
    return options.for_child().to_argv()


def _realize_parallel(
    graph: Graph,
    order: tuple[Path, ...],
    *,
    store: Store,
    jobs: int,
    keep_going: bool,
    child_args: Sequence[str],
    one: Callable[[Path], RealizeReport],
    finished: Callable[[Path, RealizeReport], None],
    blocked: Callable[[Path], str | None],
    failed: dict[Path, str],
    skipped: dict[Path, str],
    reports: dict[Path, RealizeReport],
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
                    str(store.root), "-j", "1", *child_args]  # fmt: skip
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
