"""``realize --executor slurm`` and ``--matrix``: the options, the status lines and the tables.

The work is :func:`rocmforge.executor.submit.submit_graph` (jobs) and the ordinary
:func:`rocmforge.pipeline.graph.realize_graph` (substituting their results from the cache); this
module
parses and renders.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rocmforge.cli.commands._common import (
    count,
    emit_json,
    open_store,
    settings_of,
)
from rocmforge.errors import UsageError

#: ``$ROCMFORGE_JOB_DIR``: the default ``--job-dir`` (also read by ``rocmforge log``).
JOB_DIR_ENV = "ROCMFORGE_JOB_DIR"


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """Add ``--executor`` and the Slurm options (docs/cluster.md) to ``realize``."""
    g = p.add_argument_group("cluster (--executor slurm, docs/cluster.md)")
    g.add_argument(
        "--executor", choices=("local", "slurm"), default="local",
        help="local (default): build here; slurm: one batch job per missing node, results "
        "pushed to the first --cache and substituted here",
    )  # fmt: skip
    g.add_argument("--partition", metavar="NAME", help="sbatch --partition")
    g.add_argument("--account", metavar="NAME", help="sbatch --account")
    g.add_argument("--qos", metavar="NAME", help="sbatch --qos")
    g.add_argument(
        "--time", metavar="DURATION",
        help="default time limit per job ('30m', '2h'; a recipe's [build] resources time wins)",
    )  # fmt: skip
    g.add_argument(
        "--sbatch-arg", action="append", default=[], metavar="ARG",
        help="one more sbatch argument for every job (repeatable, e.g. --sbatch-arg=--exclusive)",
    )  # fmt: skip
    g.add_argument(
        "--job-dir", metavar="DIR",
        help=f"shared directory for job scripts, logs and job records (default ${JOB_DIR_ENV})",
    )  # fmt: skip
    g.add_argument(
        "--scratch-store", metavar="DIR",
        help="the store each job builds into on its node (default "
        "$ROCMFORGE_SCRATCH_STORE, else $TMPDIR/rocmforge-store-UID)",
    )  # fmt: skip
    g.add_argument(
        "--scratch-max-size", metavar="SIZE",
        help="after its push each job gc's its scratch store to SIZE of entries, its own and "
        "their closure kept (default 40G; 500M, 20G)",
    )  # fmt: skip
    g.add_argument(
        "--retries", type=count, default=0, metavar="N",
        help="resubmit a job up to N times after a node failure (NODE_FAIL)",
    )  # fmt: skip
    g.add_argument(
        "--detach", action="store_true",
        help="on SIGINT/SIGTERM leave the jobs queued (a re-run attaches to them)",
    )  # fmt: skip


def slurm_table(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as the keys of a config file's ``[slurm]`` table (unset ones None)."""
    return {
        "job-dir": args.job_dir or os.environ.get(JOB_DIR_ENV) or None,
        "partition": args.partition,
        "account": args.account,
        "qos": args.qos,
        "time": args.time,
        "sbatch-args": list(args.sbatch_arg) or None,
        "scratch-store": args.scratch_store,
        "scratch-max-size": args.scratch_max_size,
        "retries": args.retries or None,
        "detach": args.detach or None,
    }


def _configured_slurm(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The ``[slurm]`` table of the configuration files and where it came from (once per run)."""
    found = getattr(args, "_slurm_config", None)
    if found is None:
        settings = settings_of(args)
        files = [str(f) for f in (settings.project_file, settings.user_file) if f is not None]
        where = f"[slurm] of {' or '.join(files)}" if settings.slurm else ""
        found = args._slurm_config = (dict(settings.slurm), where)
    return found


def slurm_options(args: argparse.Namespace) -> Any:
    """:class:`~rocmforge.executor.slurm.SlurmOptions` from the command line over the
    configuration files' ``[slurm]`` table (docs/cluster.md)."""
    from rocmforge.executor.slurm import SlurmOptions

    config, where = _configured_slurm(args)
    flags = {k: v for k, v in slurm_table(args).items() if v is not None}
    table = {**config, **flags}
    if table.get("job-dir") is None:
        raise UsageError(
            f"--executor slurm needs --job-dir DIR (or ${JOB_DIR_ENV}, or job-dir in a config "
            "file's [slurm] table): a directory the compute nodes share, for job scripts and logs"
        )
    shown = "realize --executor slurm" + (f" (with {where})" if where else "")
    return SlurmOptions.from_mapping(table, where=shown)


def matrix_cells(args: argparse.Namespace) -> list[Any]:
    """Write the cell recipes of ``--matrix`` (shared job dir for Slurm, else the store cache)."""
    from rocmforge.executor.matrix import parse_axes, write_cells
    from rocmforge.plan.graph import expand_targets
    from rocmforge.store import layout

    flags = parse_axes(args.matrix or [])
    files, stacks = expand_targets(args.recipes)
    if args.executor == "slurm":
        directory = slurm_options(args).job_dir / layout.JOBDIR_CELLS
    else:
        directory = open_store(args, create=True).cache_dir / layout.CACHE_MATRIX
    stack_axes: dict[Path, tuple[tuple[str, tuple[str, ...]], ...]] = {}
    for stack in stacks:
        for r in stack.recipes:
            stack_axes.setdefault(r, stack.matrix)
    cells = []
    for f in files:  # a stack's [stack] matrix, then --matrix (which wins for the same key)
        named = {k for k, _ in flags}
        axes = [(k, v) for k, v in stack_axes.get(f, ()) if k not in named] + flags
        cells += write_cells([f], axes, directory)
    return cells


def wants_matrix(args: argparse.Namespace) -> bool:
    """Whether ``--matrix`` is given or a stack target has a ``[stack] matrix``."""
    from rocmforge.plan.graph import expand_targets

    if args.matrix:
        return True
    _, stacks = expand_targets(args.recipes)
    return any(s.matrix for s in stacks)


class StatusPrinter:
    """One stderr line per node whose state changes; off a terminal, also a heartbeat line
    (how many jobs are pending, running, done) every ``heartbeat`` seconds."""

    def __init__(self, heartbeat: float, *, quiet: bool = False) -> None:
        self.heartbeat = heartbeat
        self.quiet = quiet
        self.started = time.monotonic()
        self.last = self.started
        self.tty = sys.stderr.isatty()

    def __call__(self, statuses: Sequence[Any], changed: Sequence[Any]) -> None:
        for s in changed:
            print(f"rocmforge: [slurm] {s.line()}", file=sys.stderr, flush=True)
        now = time.monotonic()
        if self.tty or self.heartbeat <= 0 or now - self.last < self.heartbeat:
            return
        self.last = now
        counts: dict[str, int] = {}
        for s in statuses:
            counts[s.state] = counts.get(s.state, 0) + 1
        running = [s for s in statuses if s.state == "running"]
        text = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        detail = "; ".join(f"{s.name} {s.detail}" for s in running[:3])
        print(
            f"rocmforge: [slurm] {now - self.started:.0f} s: {text}"
            + (f"; {detail}" if detail else ""),
            file=sys.stderr,
            flush=True,
        )


def run_slurm(
    args: argparse.Namespace,
    options: Any,
    graph: Any,
    store: Any,
    lints: Mapping[Path, Any],
    runner_factory: Any,
    cells: list[Any] | None,
    links: Mapping[Path, Path] | None = None,
) -> int:
    """``realize --executor slurm``: queue the jobs, watch them, substitute what they pushed.

    ``options`` (:class:`~rocmforge.pipeline.options.RealizeOptions`) go to every job as the
    same child arguments a local ``-j N`` child gets; the ``--executor slurm`` caller refused
    ``--no-substitute`` already.
    """
    from dataclasses import replace

    from rocmforge.executor.submit import submit_graph
    from rocmforge.pipeline.graph import child_command, realize_graph
    from rocmforge.pipeline.realize import realize
    from rocmforge.plan.graph import Graph
    from rocmforge.sources.requirements import PipFetcher
    from rocmforge.store.roots import TempRoots
    from rocmforge.trust.signing import store_signing_key

    caches = options.caches
    if not caches:
        raise UsageError(
            "--executor slurm needs a cache every node reaches: --cache file://DIR (a shared "
            "filesystem) or oci://HOST/REPO (or $ROCMFORGE_CACHES)"
        )
    opts = slurm_options(args)
    # A job builds its node: what the submitter requires of its own realize (everything from the
    # cache) is not asked of the job.
    job_options = replace(options, require_substitute=False)
    fetcher = PipFetcher()
    report = submit_graph(
        graph, store=store, fetcher=fetcher, cache=caches[0], opts=opts, trusted=options.trusted,
        key=store_signing_key(store.root),
        realize_args=child_command(job_options), on_update=StatusPrinter(options.heartbeat),
    )  # fmt: skip
    if report.submitted or report.attached:
        print(
            f"rocmforge: [slurm] {report.submitted} jobs submitted, {report.attached} attached",
            file=sys.stderr,
        )
    ok = {f for f, s in report.statuses.items() if s.state in ("cached", "in cache", "done")}
    targets = tuple(t for t in graph.targets if t in ok)
    temp_roots = TempRoots(store)
    reports: dict[Path, Any] = {}
    if targets:
        sub = Graph(recipes=graph.recipes, edges=graph.edges, order=graph.order, targets=targets)

        def on_done(r: Any) -> None:
            if not args.json:
                how = "cached" if r.cached else f"substituted in {r.seconds:.1f} s"
                print(f"rocmforge: {r.name} {r.version} {r.hash} {how}", file=sys.stderr)

        from rocmforge.cli.commands._progress import ConsoleReporter

        # Here every node is substituted from the cache (at the default sandbox level), one
        # at a time: nothing is built.
        here = replace(options, sandbox=None, keep_failed=False, compiler_cache=True,
                       require_substitute=True, jobs=1, keep_going=False)  # fmt: skip
        local = realize_graph(
            sub, realize=realize, store=store, fetcher=fetcher, runner_factory=runner_factory,
            reporter_factory=lambda r: ConsoleReporter(sys.stderr, label=r.package.name,
                                                       heartbeat=options.heartbeat),
            lints=lints, temp_roots=temp_roots, on_done=on_done, links=links, options=here,
        )  # fmt: skip
        if local.errors:
            raise local.errors[0]
        reports = dict(local.reports)
    if cells is not None:
        code = print_cells(args, cells, reports, report.statuses, temp_roots)
        if report.errors:
            raise report.errors[0]
        return code
    if not report.ok:
        for s in report.statuses.values():
            if s.state in ("failed", "not built"):
                print(f"rocmforge: {s.name} ({s.recipe.name}): {s.state}: {s.detail}",
                      file=sys.stderr)  # fmt: skip
        if report.errors:
            raise report.errors[0]
        from rocmforge.errors import BuildError

        raise BuildError(f"{len(report.statuses) - len(ok)} of {len(report.statuses)} "
                         "recipes were not built")  # fmt: skip
    shown = [f for f in graph.targets if f in reports]
    if args.all:
        shown = [f for f in graph.order if f in reports and f not in graph.targets] + shown
    if args.json:
        emit_json([reports[f].to_json() for f in shown])
    else:
        for f in shown:
            for w in reports[f].wheels:
                print(w)
    sys.stdout.flush()
    temp_roots.close()
    return 0


def print_cells(
    args: argparse.Namespace,
    cells: Sequence[Any],
    reports: Mapping[Path, Any],
    statuses: Mapping[Path, Any],
    temp_roots: Any,
) -> int:
    """The matrix summary: one row per cell (cell, hash, status, wheel); exit 1 if any failed."""
    rows: list[dict[str, Any]] = []
    for c in cells:
        r = reports.get(c.file)
        s = statuses.get(c.file)
        status = s.state if s is not None else "built"
        if r is not None and (s is None or s.state in ("done", "in cache", "cached")):
            status = "cached" if r.cached else ("substituted" if r.substituted else "built")
            if s is not None and s.state == "done":
                status = f"built (job {s.job_id})"
        rows.append(
            {
                "recipe": str(c.recipe),
                "cell": dict(c.values),
                "hash": r.hash if r else (s.hash if s else None),
                "status": status if r or s is None else f"{s.state}: {s.detail}",
                "wheel": str(r.wheels[0]) if r and r.wheels else None,
            }
        )
    ok = all(row["wheel"] for row in rows)
    if args.json:
        emit_json(rows)
    else:
        head = ("recipe", "cell", "hash", "status", "wheel")
        table = [
            (Path(row["recipe"]).name, ",".join(f"{k}={v}" for k, v in row["cell"].items()),
             str(row["hash"] or "-")[:12], str(row["status"]), str(row["wheel"] or "-"))
            for row in rows
        ]  # fmt: skip
        widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(head)]
        for line in (head, *table):
            print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
    sys.stdout.flush()
    temp_roots.close()
    return 0 if ok else 1
