"""``rocmforge realize TARGET...``: build (or reuse) a recipe graph and print the wheel paths."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    add_substitute_options,
    count,
    emit_json,
    open_store,
    substitution_of,
)
from rocmforge.cli.commands._progress import ConsoleReporter
from rocmforge.pipeline.options import HEARTBEAT_SECONDS, RealizeOptions


def register(sub: Any) -> None:
    """Add the ``realize`` command."""
    p = sub.add_parser("realize", help=COMMANDS["realize"])
    p.add_argument("recipes", nargs="+", metavar="RECIPE")
    add_store_option(p)
    p.add_argument("-o", "--out-link", metavar="LINK", help="make LINK point at the store entry")
    p.add_argument(
        "--keep-failed", action="store_true", help="keep the build dir of a failed build"
    )
    p.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "none"),
        default=None,
        help="sandbox level (default auto: bwrap, or an error; 'none' only when asked for)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="re-hash a cached entry's wheels before returning them (default: size and mtime)",
    )
    p.add_argument(
        "--no-compiler-cache",
        action="store_true",
        help="build without the compiler cache (ccache); the hash and the wheel are the same",
    )
    add_substitute_options(p)
    p.add_argument(
        "--push",
        metavar="CACHE",
        help="after a successful realize, push every entry realized (the targets and their "
        "closure, built or substituted) to CACHE; only what it lacks goes up",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="echo build output (non-TTY)")
    p.add_argument(
        "--test", action="store_true",
        help="then test the targets as `rocmforge test` does: the recipe's [test] tiers and "
        "script (smoke when torch is built and a GPU is here); exit 1 if a check fails",
    )  # fmt: skip
    p.add_argument(
        "--check",
        action="store_true",
        help="rebuild the cached build in a fresh sandbox and compare the wheels byte for byte "
        "(exit 1 if they differ, listing the files inside the wheel that differ)",
    )
    p.add_argument(
        "--heartbeat",
        type=float,
        default=HEARTBEAT_SECONDS,
        metavar="SECONDS",
        help=f"off a terminal, print a progress line every SECONDS (default {HEARTBEAT_SECONDS:.0f}"
        "; 0: never)",
    )
    p.add_argument(
        "--stall-after", type=_duration, default=None, metavar="D",
        help="warn when no build edge finished for D (e.g. 90s, 20m; default 5x the previous "
        "build's longest edge, at least 10m), naming the commands still running",
    )  # fmt: skip
    p.add_argument(
        "--stall-timeout", type=_duration, default=None, metavar="D",
        help="fail the build when no build edge finished for D (the log is kept)",
    )  # fmt: skip
    p.add_argument(
        "-j", "--jobs", type=count, default=1, metavar="N",
        help="build up to N independent recipes of the graph at once (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--keep-going", action="store_true",
        help="after a failure, still build what does not depend on it",
    )  # fmt: skip
    p.add_argument("--all", action="store_true", help="print the wheels of every dependency too")
    p.add_argument(
        "--matrix", action="append", metavar="KEY=v1,v2",
        help="realize each target once per value (an [env] override; repeatable: every "
        "combination), each cell its own derivation; prints a table of cells",
    )  # fmt: skip
    from rocmforge.cli.commands._cluster import add_cluster_options

    add_cluster_options(p)
    add_json_option(p)
    p.set_defaults(func=run)


def options_of(args: argparse.Namespace) -> RealizeOptions:
    """The one :class:`~rocmforge.pipeline.options.RealizeOptions` of a parsed ``realize``
    command line and the configuration (the substitution settings resolved here, once; a
    ``--check`` asks no cache, so it resolves none)."""
    flags = RealizeOptions(
        sandbox=args.sandbox,
        keep_failed=args.keep_failed,
        verify=args.verify,
        compiler_cache=not args.no_compiler_cache,
        verbose=args.verbose,
        heartbeat=args.heartbeat,
        push=args.push,
        check=args.check,
        out_link=args.out_link,
        jobs=max(1, args.jobs),
        keep_going=args.keep_going,
        stall_after=args.stall_after,
        stall_timeout=args.stall_timeout,
    )
    if args.check:
        return flags
    settings, caches, trusted = substitution_of(args)
    return replace(
        flags,
        config=str(settings.project_file or ""),
        substitute=settings.substitute,
        caches=tuple(caches),
        require_substitute=settings.require_substitute,
        trusted=trusted,
    )


def run(args: argparse.Namespace) -> int:
    """``rocmforge realize TARGET...``: build (or fetch from the store) and print wheel paths.

    Each TARGET is a recipe or a stack file; every recipe they are built against
    (``[requirements] recipes``) is realized first, in topological order.
    """
    from rocmforge.pipeline.realize import check_link, check_locked, lint
    from rocmforge.plan.graph import lint_facts_for

    if args.test and (args.check or args.executor == "slurm" or getattr(args, "matrix", None)):
        from rocmforge.errors import UsageError

        error = UsageError("--test runs here after a local realize of its recipes: not with "
                           "--check, --matrix or --executor slurm")  # fmt: skip
        error.about_recipe = False
        raise error
    if args.check and args.push:
        from rocmforge.errors import UsageError

        error = UsageError("--push does not go with --check (a check publishes nothing)")
        error.about_recipe = False
        raise error
    graph, cells = _load(args)
    # Error lints of any recipe stop all of them; realize reports the warnings, without linting
    # (or probing the machine) again.
    lints = {
        f: lint(graph.recipes[f], lint_facts_for(graph, f)) for f in graph.closure_of_targets()
    }
    for f in graph.closure_of_targets():  # nothing unlocked anywhere, else stop before any build
        check_locked(graph.recipes[f])
    links: dict[Path, Path] = {}
    if args.out_link:
        links = {f: _link(args.out_link, i) for i, f in enumerate(graph.targets)}
    for out in links.values():  # a bad -o LINK stops before any build, not after
        check_link(out)
    store = open_store(args, create=True)
    if args.executor == "slurm" and not args.check and args.substitute is False:
        from rocmforge.errors import UsageError

        raise UsageError("--executor slurm substitutes every result from the cache: "
                         "drop --no-substitute/--offline")  # fmt: skip
    options = options_of(args)  # the one value every realize of this command is given

    def runner_factory() -> Any:
        from rocmforge.build.sandbox import detect_runner
        from rocmforge.store import layout
        from rocmforge.store.locate import host_cache

        return detect_runner(options.sandbox, probe_cache=Path(host_cache()) / layout.CACHE_BWRAP)

    if options.check:
        from rocmforge.sources.requirements import PipFetcher

        return _check(options, args.json, graph, store, PipFetcher(), runner_factory)
    if args.executor == "slurm":
        from rocmforge.cli.commands._cluster import run_slurm

        return run_slurm(args, options, graph, store, lints, runner_factory, cells, links)
    return _run_local(args, options, graph, store, lints, runner_factory, cells, links)


def _load(args: argparse.Namespace) -> tuple[Any, list[Any] | None]:
    """The graph of the targets (every recipe checked before any build) and the matrix cells,
    if the command has any."""
    from rocmforge.cli.commands._cluster import wants_matrix
    from rocmforge.plan.graph import load_graph

    if wants_matrix(args):
        from rocmforge.cli.commands._cluster import matrix_cells

        cells = matrix_cells(args)
        return load_graph([c.file for c in cells]), cells
    return load_graph(args.recipes), None


def _run_local(
    args: argparse.Namespace,
    options: RealizeOptions,
    graph: Any,
    store: Any,
    lints: Mapping[Path, Any],
    runner_factory: Any,
    cells: list[Any] | None,
    links: Mapping[Path, Path],
) -> int:
    """Realize the graph here (``-j N``: children here) and print what it made."""
    from rocmforge.pipeline.graph import realize_graph
    from rocmforge.pipeline.realize import realize
    from rocmforge.sources.requirements import PipFetcher

    def reporter_factory(recipe: Any) -> ConsoleReporter:
        return ConsoleReporter(
            sys.stderr, label=recipe.package.name, verbose=options.verbose,
            heartbeat=options.heartbeat,
        )  # fmt: skip

    def on_done(report: Any) -> None:
        if not args.json:
            how = (
                "cached" if report.cached else f"built in {report.seconds:.1f} s ({report.sandbox})"
            )
            if report.substituted:
                how = f"substituted from {report.substituted} in {report.seconds:.1f} s"
            how += _cache_note(report)
            sys.stderr.write(f"rocmforge: {report.name} {report.version} {report.hash} {how}\n")

    from rocmforge.store.roots import TempRoots

    push = None
    if options.push:
        from rocmforge.cache.urls import open_backend

        push = open_backend(options.push)  # a bad URL stops before any build
    # Every entry printed stays rooted until the output is out (the flock dies with us anyway).
    temp_roots = TempRoots(store)
    result = realize_graph(
        graph,
        realize=realize,
        store=store,
        fetcher=PipFetcher(),
        runner_factory=runner_factory,
        reporter_factory=reporter_factory,
        lints=lints,
        temp_roots=temp_roots,
        options=options,
        links=links,
        on_done=on_done,
    )
    if not result.ok:
        _raise_failed(graph, result)
    if graph.stacks:
        from rocmforge.pipeline import memo

        for stack in graph.stacks:
            memo.record_stack(str(store.root), str(stack.file), [str(r) for r in stack.recipes])
    tested = 0
    if args.test and cells is None:  # before the push: the runs go up with the entries
        from rocmforge.cli.commands.test import accept_and_print

        tested = accept_and_print(
            args, store, [store.load(result.reports[f].path) for f in graph.targets],
            [graph.recipes[f] for f in graph.targets], tiers=None, out=sys.stderr,
            no_gpu_ok=True,
        )  # fmt: skip
    pushed = None
    if push is not None:
        pushed = _push(push, store, [result.reports[f] for f in result.order])
    if cells is not None:
        from rocmforge.cli.commands._cluster import print_cells

        return print_cells(args, cells, result.reports, {}, temp_roots)
    shown = list(graph.targets)
    if args.all:
        shown = [f for f in result.order if f not in graph.targets] + shown
    reports = [result.reports[f] for f in shown]
    if pushed is not None:
        print(pushed, file=sys.stderr)
    if args.json:
        emit_json([r.to_json() for r in reports])
    else:
        for r in reports:
            for w in r.wheels:
                print(w)
    sys.stdout.flush()
    temp_roots.close()
    return tested


def _raise_failed(graph: Any, result: Any) -> None:
    """Print why each node was not realized and raise the first build error (or a summary)."""
    for f in result.order:
        why = result.failed.get(f) or result.skipped.get(f)
        if why is not None:
            name = graph.recipes[f].package.name
            print(f"rocmforge: {name} ({f.name}): {why}", file=sys.stderr)
    if result.errors:
        raise result.errors[0]
    from rocmforge.errors import BuildError

    raise BuildError(f"{len(result.failed)} of {len(result.order)} recipes failed to build")


def _push(backend: Any, store: Any, reports: list[Any]) -> str:
    """Push the entries of ``reports`` (a realized closure) to ``backend``; return a summary."""
    from rocmforge.cache.push import push_entries, unsigned_warning
    from rocmforge.trust.signing import store_signing_key

    with store.shared_lock():
        entries = [store.load(r.path) for r in reports]
        key = store_signing_key(store.root)
        reporter = ConsoleReporter(sys.stderr, label="push")
        try:
            pushed = push_entries(backend, entries, reporter=reporter, key=key)
        finally:
            reporter.close()
    warning = unsigned_warning(pushed, has_key=key is not None)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    sent = [p for p in pushed if not p.present]
    return (
        f"rocmforge: pushed {len(sent)} of {len(pushed)} entries to {backend.url} "
        f"({sum(p.bytes for p in sent)} bytes; the others were there)"
    )


def _cache_note(report: Any) -> str:
    """``, ccache 120/121 hits (99%), ...`` for a build that used the compiler cache, and
    ``, peak RSS 1.2 GB, CPU 41.0 s, compile jobs peaked at ...`` for one with telemetry."""
    if report.cached or report.substituted:
        return ""
    from rocmforge.store.entry import read_meta

    meta = read_meta(report.path)
    if meta is None:
        return ""
    note = ""
    if meta.compiler_cache is not None:
        from rocmforge.build.ccache import stats_from_json

        note += ", " + stats_from_json(meta.compiler_cache).summary()
    if meta.telemetry is not None:
        from rocmforge.observe.record import usage_line

        note += ", " + usage_line(meta.telemetry)
    return note


def _duration(text: str) -> float:
    """``--stall-after``/``--stall-timeout``: ``90s``, ``20m``, ``1h30m`` (> 0)."""
    from rocmforge.recipe.model import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0s")
    return seconds


def _link(out_link: str, i: int) -> Path:
    """The result link of the ``i``-th recipe: LINK, LINK-2, LINK-3 ..."""
    return Path(out_link if i == 0 else f"{out_link}-{i + 1}")


def _check(
    options: RealizeOptions, json: bool, graph: Any, store: Any, fetcher: Any,
    runner_factory: Any,
) -> int:
    """``realize --check``: rebuild each cached target, compare, exit 1 on any difference.

    A target built against other recipes is rebuilt against their stored entries.
    """
    from rocmforge.pipeline.graph import built_dependencies
    from rocmforge.pipeline.realize import check_rebuild

    reports = []
    for file in graph.targets:
        recipe = graph.recipes[file]
        dependencies = built_dependencies(graph, file, store=store, fetcher=fetcher)
        reporter = ConsoleReporter(sys.stderr, label=recipe.package.name, verbose=options.verbose)
        try:
            report = check_rebuild(
                recipe,
                store=store,
                fetcher=fetcher,
                runner_factory=runner_factory,
                reporter=reporter,
                dependencies=dependencies,
            )
        finally:
            reporter.close()
        reports.append(report)
        if json:
            continue
        head = f"rocmforge: {report.name} {report.version} {report.hash}"
        if report.identical:
            print(f"{head} rebuilt in {report.seconds:.1f} s: byte-identical", file=sys.stderr)
            continue
        print(
            f"{head} rebuilt in {report.seconds:.1f} s: DIFFERS from the stored build",
            file=sys.stderr,
        )
        for wheel, members in report.differences.items():
            print(f"  {wheel}")
            for member in members:
                print(f"    {member}")
    if json:
        emit_json([r.to_json() for r in reports])
    sys.stdout.flush()
    return 0 if all(r.identical for r in reports) else 1
