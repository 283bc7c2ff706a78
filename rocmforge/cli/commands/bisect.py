"""``rocmforge bisect RECIPE --good REV --bad REV --run CMD``: the first bad commit of a recipe's
git source, every commit tested a store entry (:mod:`rocmforge.pipeline.bisect`)."""

from __future__ import annotations

import argparse
import sys
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
)
from rocmforge.cli.commands._progress import ConsoleReporter
from rocmforge.errors import UsageError
from rocmforge.pipeline.options import HEARTBEAT_SECONDS

EPILOG = """\
A commit is tested by realizing the recipe at that commit (the recipe otherwise unchanged; in a
stack, every recipe built against it is rebuilt against each commit), installing the result into
a fresh venv and running the commands there (PATH and VIRTUAL_ENV point at it;
ROCMFORGE_BISECT_COMMIT and ROCMFORGE_BISECT_ENTRY name the commit and its store entry).
--run: exit 0 good, 125 skip, 1-127 bad, 128 or more stops (as git bisect run).
--metric: the last stdout line is a number; below --threshold X (or --relative R times the good
end's figure) is bad, above it with --lower-is-better. A failed build is skip (--build-failure
bad: bad). The log of steps is kept under the store (cache/bisect/); --resume goes on from it.
"""


def register(sub: Any) -> None:
    """Add the ``bisect`` command."""
    from rocmforge.cli.parser import RawDescriptionHelpFormatter

    p = sub.add_parser("bisect", help=COMMANDS["bisect"], epilog=EPILOG,
                       formatter_class=RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("recipe", nargs="?", metavar="RECIPE", help="a recipe or a stack file")
    p.add_argument("--good", metavar="REV", help="a commit (tag, branch) that is good")
    p.add_argument("--bad", metavar="REV", help="a later commit that is bad")
    p.add_argument("--run", metavar="COMMAND", help="judge a commit by this command's exit")
    p.add_argument(
        "--metric", metavar="COMMAND",
        help="judge a commit by the number this command prints last on stdout",
    )  # fmt: skip
    g = p.add_mutually_exclusive_group()
    g.add_argument("--threshold", type=float, metavar="X", help="a figure beyond X is bad")
    g.add_argument(
        "--relative", type=_positive, metavar="R",
        help="a figure beyond R times the good end's figure is bad (e.g. 0.9: 10%% slower)",
    )  # fmt: skip
    p.add_argument(
        "--lower-is-better", action="store_true",
        help="the metric is a cost (seconds): a figure above the limit is bad",
    )  # fmt: skip
    p.add_argument(
        "--build-failure", choices=("skip", "bad"), default="skip",
        help="what a commit that does not build counts as (default skip)",
    )  # fmt: skip
    p.add_argument(
        "--package", metavar="NAME",
        help="in a stack, the package whose git source is bisected (default: the only one)",
    )  # fmt: skip
    p.add_argument(
        "-j", "--jobs", type=count, default=1, metavar="N",
        help="build N points of the interval at once (k-ary bisection; default 1)",
    )  # fmt: skip
    p.add_argument(
        "--timeout", type=_positive, metavar="SECONDS",
        help="a command running longer makes the commit bad",
    )  # fmt: skip
    p.add_argument(
        "--resume", action="store_true",
        help="go on from the recorded steps of this bisect (without RECIPE: the last one "
        "not finished in the store)",
    )  # fmt: skip
    add_store_option(p)
    p.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default=None,
                   help="sandbox level of the builds (as realize)")  # fmt: skip
    p.add_argument("--no-compiler-cache", action="store_true",
                   help="build without the compiler cache (ccache)")  # fmt: skip
    p.add_argument("--keep-failed", action="store_true", help="keep the build dir of a failure")
    add_substitute_options(p)
    p.add_argument("-v", "--verbose", action="store_true",
                   help="echo build output and the commands' output (non-TTY)")  # fmt: skip
    add_json_option(p)
    p.set_defaults(func=run)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0")
    return value


def _usage(message: str) -> UsageError:
    error = UsageError(message)
    error.about_recipe = False
    return error


def spec_of(args: argparse.Namespace, store: Any) -> Any:
    """The :class:`~rocmforge.pipeline.bisect.BisectSpec` of the command line; with
    ``--resume`` and no RECIPE, the last unfinished bisect of the store."""
    from rocmforge.pipeline.bisect import BisectSpec, latest_unfinished

    if args.recipe is None:
        if not args.resume:
            raise _usage("bisect needs RECIPE --good REV --bad REV (or --resume)")
        found = latest_unfinished(store)
        if found is None:
            raise _usage(f"--resume: no unfinished bisect in the store {store.root}")
        return found
    if not args.good or not args.bad:
        raise _usage("bisect needs both --good REV and --bad REV")
    if args.run is None and args.metric is None:
        raise _usage("bisect needs --run COMMAND or --metric COMMAND (or both)")
    if args.metric is not None and args.threshold is None and args.relative is None:
        raise _usage("--metric needs --threshold X or --relative R (what figure is bad)")
    if args.metric is None and (args.threshold is not None or args.relative is not None):
        raise _usage("--threshold and --relative judge a --metric: give one")
    if args.relative is not None and args.relative == 1:
        raise _usage("--relative 1 makes every figure that is not the good end's bad")
    return BisectSpec(
        target=Path(args.recipe).absolute(), good=args.good, bad=args.bad, run=args.run,
        metric=args.metric, threshold=args.threshold, relative=args.relative,
        lower_is_better=args.lower_is_better, build_failure=args.build_failure,
        package=args.package, jobs=max(1, args.jobs), timeout=args.timeout,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """``rocmforge bisect``: bisect, print a table of the steps and the first bad commit."""
    from dataclasses import replace

    from rocmforge.pipeline.bisect import bisect
    from rocmforge.pipeline.options import RealizeOptions
    from rocmforge.sources.requirements import PipFetcher

    if args.recipe is not None and not Path(args.recipe).is_file():
        raise _usage(f"{args.recipe}: no such recipe file")
    store = open_store(args, create=True)
    spec = spec_of(args, store)
    if args.recipe is None and args.jobs:
        spec = replace(spec, jobs=max(1, args.jobs))
    from rocmforge.cli.commands._common import substitution_of

    settings, caches, trusted = substitution_of(args)
    options = RealizeOptions(
        sandbox=args.sandbox, keep_failed=args.keep_failed,
        compiler_cache=not args.no_compiler_cache, verbose=args.verbose,
        heartbeat=HEARTBEAT_SECONDS, jobs=spec.jobs, keep_going=True,
        config=str(settings.project_file or ""), substitute=settings.substitute,
        caches=tuple(caches), require_substitute=settings.require_substitute, trusted=trusted,
    )  # fmt: skip

    def runner_factory() -> Any:
        from rocmforge.build.sandbox import detect_runner
        from rocmforge.store import layout
        from rocmforge.store.locate import host_cache

        return detect_runner(options.sandbox, probe_cache=Path(host_cache()) / layout.CACHE_BWRAP)

    def reporter_factory(recipe: Any) -> ConsoleReporter:
        return ConsoleReporter(sys.stderr, label=recipe.package.name, verbose=args.verbose)

    reporter = ConsoleReporter(sys.stderr, label="bisect", verbose=args.verbose)

    def on_step(step: Any) -> None:
        reporter.clear()
        print(f"rocmforge: bisect: {_row(step)}", file=sys.stderr, flush=True)

    try:
        report = bisect(
            spec, store=store, fetcher=PipFetcher(), runner_factory=runner_factory,
            reporter_factory=reporter_factory, options=options, reporter=reporter,
            resume=args.resume, on_step=on_step,
        )  # fmt: skip
    finally:
        reporter.close()
    if args.json:
        emit_json(report.to_json())
    else:
        _render(report)
    sys.stdout.flush()
    return 0


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _row(step: Any) -> str:
    entry = step.hash[:12] if step.hash else "-"
    how = "log" if step.resumed else "built" if step.built else "cached"
    return (f"{step.index:>4}  {step.commit[:12]}  {step.verdict:<4}  {_figure(step.figure):>10}"
            f"  {entry:<12}  {how:<6}  {step.reason}")  # fmt: skip


def _render(report: Any) -> None:
    """The table of steps (in the order taken), then the first bad commit and both entries."""
    from rocmforge.util.shownpath import shown_path

    print(f"bisected {report.commits} commits of {report.url} ({len(report.steps)} tested)")
    if report.baseline is not None:
        print(f"baseline (good end): {_figure(report.baseline)}; limit: {_figure(report.limit)}")
    print(f"{'#':>4}  {'commit':<12}  {'verdict':<4}  {'figure':>10}  {'entry':<12}  "
          f"{'how':<6}  why")  # fmt: skip
    for step in report.steps:
        print(_row(step))
    bad, good = report.first_bad, report.last_good
    if report.certain:
        print(f"first bad commit: {bad.commit} {bad.subject}")
    else:
        print("the first bad commit is one of (the others were skipped):")
        for commit in report.candidates:
            print(f"  {commit}")
    print(f"last good commit: {good.commit} {good.subject}")
    print(f"last good build:  {good.path}")
    print(f"first bad build:  {bad.path or '(did not build)'}")
    if good.path and bad.path:
        print(
            f"compare: rocmforge explain {shown_path(Path(good.path))} {shown_path(Path(bad.path))}"
        )
    print(f"log: {Path(report.state_dir) / 'log.json'}")
