"""``rocmforge test TARGET... | --python PATH``: GPU acceptance checks of built wheels or of an
existing Python environment's torch, the proof kept with the store entries."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    add_substitute_options,
    emit_json,
)

EPILOG = """\
targets:
  a recipe or stack file (its entries from the store or a configured binary cache: never
  built here), an input hash or prefix, an entry directory, or a wheel (a file of an entry,
  or any wheel file whose digest an entry holds)
tiers:
  smoke    is_available, device count, each device's arch among the wheel's, fp32 and bf16
           matmul and a conv against float64 CPU references, SDPA (flash), torch.compile,
           the runtime facts
  comm     one process per GPU: init_process_group, new_group, all_reduce correctness, an
           in-place bandwidth sweep (algbw, busbw = algbw x 2(n-1)/n) judged at its largest
           size against the threshold table and the last accepted run on a node of its kind
  project  a recipe's [test] script (any package, GPU or not)
exit status: 0 passed (or warned), 1 a check failed or timed out, 2 bad input, 3 no GPU
"""


def register(sub: Any) -> None:
    """Add the ``test`` command."""
    from rocmforge.cli.parser import RawDescriptionHelpFormatter

    p = sub.add_parser("test", help=COMMANDS["test"], epilog=EPILOG,
                       formatter_class=RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="what to test: a recipe, stack, hash or wheel (see below)")
    p.add_argument("--python", metavar="PATH",
                   help="test this interpreter's environment instead (its torch, its GPUs)")
    p.add_argument("--over", metavar="PYTHON",
                   help="make the test venv over this environment (its torch under the "
                   "target's wheels)")
    p.add_argument("--tier", action="append", choices=("smoke", "comm"), default=None,
                   help="a torch tier to run (repeatable; default: the recipe's [test] tiers, "
                   "else smoke when torch is in the closure)")
    p.add_argument("--gpus", type=int, metavar="N",
                   help="GPUs expected (default: the recipe's [test] gpus, else the visible "
                   "devices)")
    p.add_argument("--timeout", action="append", default=[], metavar="CHECK=SECONDS",
                   help="a check's timeout (default 120 s; import 120, compile 300, sweep 600)")
    p.add_argument("--max-bytes", type=int, default=8 << 30, metavar="B",
                   help="the comm sweep's largest size (default 8 GiB)")
    p.add_argument("--thresholds", metavar="FILE",
                   help='a TOML table of busbw lines, "MODEL xN" = GB/s, and tolerance')
    p.add_argument("--sandbox", choices=("bwrap", "none"), default="bwrap")
    p.add_argument("--no-keep", action="store_true",
                   help="keep no statement with the entries (a trial run)")
    p.add_argument("--attestation", metavar="FILE",
                   help="also write the (last) run's in-toto statement here")
    add_store_option(p)
    add_substitute_options(p, require=False)
    add_json_option(p)
    _add_slurm_options(p)
    p.set_defaults(func=_run_or_refuse)


#: the options of ``--executor slurm`` (their ``dest``), refused with the local executor
_SLURM_DESTS = ("nodes", "gpus_per_node", "no_gres", "job_dir", "partition", "account", "qos",
                "time", "sbatch_arg")  # fmt: skip


def _add_slurm_options(p: Any) -> None:
    """``--executor slurm`` and its options: the comm tier of ``--python`` as one Slurm job
    (rocmforge/accept/slurmcomm.py; docs/cluster.md, "Across nodes (Slurm)")."""
    g = p.add_argument_group("across nodes (--executor slurm: --tier comm of --python only; "
                             "docs/cluster.md)")  # fmt: skip
    g.add_argument("--executor", choices=("local", "slurm"), default="local",
                   help="local (default): the GPUs of this node; slurm: one job, one task per "
                   "GPU, the rendezvous at the job's first node")  # fmt: skip
    g.add_argument("--nodes", type=int, metavar="N", help="nodes of the job (default 1)")
    g.add_argument("--gpus-per-node", type=int, metavar="G",
                   help="GPUs of each node: one task (rank) per GPU (required)")
    g.add_argument("--no-gres", action="store_true",
                   help="the cluster has no GPU gres: ask for no --gres=gpu:G")
    g.add_argument("--job-dir", metavar="DIR",
                   help="shared directory for the job's scripts and output (default "
                   "$ROCMFORGE_JOB_DIR, else job-dir of the [slurm] table)")  # fmt: skip
    g.add_argument("--partition", metavar="NAME", help="sbatch --partition")
    g.add_argument("--account", metavar="NAME", help="sbatch --account")
    g.add_argument("--qos", metavar="NAME", help="sbatch --qos")
    g.add_argument("--time", metavar="DURATION",
                   help="the job's time limit (default: the checks' timeouts summed plus "
                   "7 min; the [slurm] table's time is for builds)")  # fmt: skip
    g.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                   help="one more sbatch argument (repeatable, e.g. --sbatch-arg=--exclusive)")


def _run_or_refuse(args: argparse.Namespace) -> int:
    """Refuse the Slurm options where they do not apply (one line, exit 2), then :func:`run`."""
    from rocmforge.errors import UsageError

    given = [d for d in _SLURM_DESTS if getattr(args, d, None) not in (None, False, [])]
    if args.executor != "slurm":
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"{flag} is an option of --executor slurm")
        return run(args)
    if not args.python:
        raise UsageError("--executor slurm runs the comm tier of an environment: give "
                         "--python PATH (at the same path on every node), not TARGETs")
    if set(args.tier or ()) != {"comm"}:
        raise UsageError("--executor slurm runs the comm tier only: give --tier comm")
    if args.gpus_per_node is None:
        raise UsageError("--executor slurm needs --gpus-per-node G (one task per GPU)")
    if args.gpus_per_node < 1 or (args.nodes is not None and args.nodes < 1):
        raise UsageError("--nodes and --gpus-per-node must be at least 1")
    if args.gpus is not None:
        raise UsageError("--gpus: with --executor slurm the world size is --nodes x "
                         "--gpus-per-node")  # fmt: skip
    return run(args)


def _timeouts(items: list[str]) -> dict[str, float]:
    from rocmforge.errors import UsageError

    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or not name or seconds <= 0:
            raise UsageError(f"--timeout {item}: expected CHECK=SECONDS (e.g. compile=600)")
        out[name] = seconds
    return out


def _thresholds(path: str | None, recipes: Sequence[Any]) -> Any:
    """The table: the built-in rows, the recipes' ``[test.thresholds]``, then ``--thresholds``."""
    import tomllib

    from rocmforge.accept.thresholds import Thresholds, parse_thresholds
    from rocmforge.errors import UsageError

    merged: dict[str, Any] = {}
    table = Thresholds()
    for recipe in recipes:
        if recipe.test.thresholds:
            table = parse_thresholds(recipe.test.thresholds, file=recipe.file,
                                     key="test.thresholds")  # fmt: skip
            merged.update(recipe.test.thresholds)
    if path:
        file = Path(path)
        try:
            data = tomllib.loads(file.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"{file}: cannot read the thresholds: {exc}") from exc
        parse_thresholds(data, file=file, key="thresholds")  # its own problems name its file
        table = parse_thresholds({**merged, **data}, file=file, key="thresholds")
    return table


def _runner(sandbox: str | None) -> Any:
    from rocmforge.build.sandbox import detect_runner
    from rocmforge.store import layout
    from rocmforge.store.locate import host_cache

    return detect_runner(sandbox, probe_cache=Path(host_cache()) / layout.CACHE_BWRAP)


def run(args: argparse.Namespace) -> int:
    """Run the tiers; print each check, the verdict, and where the log and statements are."""
    from rocmforge.errors import UsageError

    if args.python and args.targets:
        raise UsageError("--python tests an environment: give it or TARGETs, not both")
    if not args.python and not args.targets:
        raise UsageError("nothing to test: name a TARGET (recipe, stack, hash, wheel) or "
                         "--python PATH")  # fmt: skip
    if args.python:
        return _run_python(args)
    from rocmforge.cli.commands._common import open_store

    store = open_store(args, create=any(t.endswith(".toml") for t in args.targets))
    entries, recipes = resolve_targets(args, store)
    return accept_and_print(args, store, entries, recipes, tiers=args.tier, out=sys.stdout)


def _run_python(args: argparse.Namespace) -> int:
    import os
    import tempfile

    from rocmforge.accept.devices import find_devices
    from rocmforge.accept.run import AcceptanceRun, accept_python
    from rocmforge.util.fsutil import json_bytes, write_atomic

    tier = (args.tier or ["smoke"])[-1]
    thresholds = _thresholds(args.thresholds, [])
    runner = _runner(args.sandbox)
    slurm = _slurm_options(args) if getattr(args, "executor", "local") == "slurm" else None
    workdir = Path(tempfile.mkdtemp(prefix="rocmforge-test-"))
    done: AcceptanceRun
    if slurm is not None:
        done = _accept_on_slurm(args, slurm, runner, workdir, thresholds)
    else:
        done = accept_python(args.python, tier=tier, runner=runner, workdir=workdir,
                             environ=os.environ, devices=find_devices(), gpus=args.gpus,
                             timeouts=_timeouts(args.timeout), thresholds=thresholds,
                             max_bytes=args.max_bytes)  # fmt: skip
    if args.attestation:
        write_atomic(Path(args.attestation), json_bytes(done.statement))
    report = done.report
    if args.json:
        emit_json({**report.to_json(), "log": str(done.log), "statement": done.statement})
        return report.exit_code
    if runner.warning:
        print(f"warning: {runner.warning}", file=sys.stderr)
    _print_report(report, sys.stdout)
    print(f"log: {done.log}")
    if args.attestation:
        print(f"attestation: {args.attestation}")
    return report.exit_code


def _slurm_options(args: argparse.Namespace) -> Any:
    """The Slurm options of ``--executor slurm``: the flags over the configuration files'
    ``[slurm]`` table, as realize reads it (docs/cluster.md)."""
    import os

    from rocmforge.cli.commands._cluster import JOB_DIR_ENV, _configured_slurm
    from rocmforge.errors import UsageError
    from rocmforge.executor.slurm import SlurmOptions

    config, where = _configured_slurm(args)
    flags = {"job-dir": args.job_dir or os.environ.get(JOB_DIR_ENV) or None,
             "partition": args.partition, "account": args.account, "qos": args.qos,
             "time": args.time, "sbatch-args": list(args.sbatch_arg) or None}  # fmt: skip
    table = {**config, **{k: v for k, v in flags.items() if v is not None}}
    if table.get("job-dir") is None:
        raise UsageError(f"--executor slurm needs --job-dir DIR (or ${JOB_DIR_ENV}, or job-dir "
                         "in a config file's [slurm] table): a directory every node shares")
    return SlurmOptions.from_mapping(table, where="test --executor slurm" + (
        f" (with {where})" if where else ""))  # fmt: skip


def _accept_on_slurm(args: argparse.Namespace, opts: Any, runner: Any, workdir: Path,
                     thresholds: Any) -> Any:  # fmt: skip
    """``--executor slurm``: the comm tier as one Slurm job; its state changes on stderr."""
    from rocmforge.accept.slurmcomm import CommJob, accept_python_slurm

    job = CommJob(nodes=args.nodes or 1, gpus_per_node=args.gpus_per_node,
                  gres=not args.no_gres)  # fmt: skip

    def on_state(info: Any, files: Any) -> None:
        where = f" on {info.node}" if info.node else ""
        pending = info.state == "PENDING" and info.reason not in ("", "None")
        why = f" ({info.reason})" if pending else ""
        print(f"rocmforge: [slurm] comm job {info.id}: {info.state.lower()}{why}{where}, "
              f"output {files.output}", file=sys.stderr, flush=True)

    return accept_python_slurm(args.python, opts=opts, job=job, runner=runner,
                               workdir=workdir, timeouts=_timeouts(args.timeout),
                               thresholds=thresholds, max_bytes=args.max_bytes,
                               on_state=on_state,
                               time_limit=opts.time if args.time else None)  # fmt: skip


def _print_report(report: Any, out: Any) -> None:
    for c in report.checks:
        print(f"{c.status:>8}  {c.name:<15} {c.seconds:7.2f} s  {c.detail}", file=out)
    node = report.node
    where = f" on {node['gpu_count']}x {node['gpu_model']}" if node.get("gpu_model") else ""
    print(f"{report.result}: {report.tier} tier{where}, {report.seconds:.1f} s", file=out)


def resolve_targets(args: argparse.Namespace, store: Any) -> tuple[list[Any], list[Any]]:
    """The entries the TARGETs name and the recipes among them (for their ``[test]`` tables):
    recipes and stacks through the store and the configured caches (never built), the rest
    by hash, entry path or wheel digest."""
    files = [t for t in args.targets if t.endswith(".toml")]
    entries: list[Any] = []
    recipes: list[Any] = []
    if files:
        found, recipes = _realized(args, store, files)
        entries.extend(found)
    for target in args.targets:
        if not target.endswith(".toml"):
            entries.append(_entry_of(store, target))
    seen: dict[str, Any] = {}
    for e in entries:
        seen.setdefault(e.hash, e)
    return list(seen.values()), recipes


def _entry_of(store: Any, target: str) -> Any:
    """The entry of a hash, an entry path, or a wheel file (inside the store or a copy)."""
    import os

    from rocmforge.errors import UsageError

    if target.endswith(".whl") and os.path.isfile(target):
        from rocmforge.util.hashing import file_blake3

        rows = store.index.by_wheel_digest(file_blake3(Path(target)))
        if not rows:
            raise UsageError(f"{target}: no entry of the store {store.root} holds this wheel "
                             "(test --python PATH tests an environment it is installed in)")
        return store.load(store.entries_dir / rows[0].dirname)
    return store.resolve(target)


def _realized(args: argparse.Namespace, store: Any, files: list[str]) -> tuple[list[Any],
                                                                               list[Any]]:
    """Realize the recipe and stack files from the store or a binary cache, building nothing."""
    from rocmforge.cli.commands._common import substitution_of
    from rocmforge.pipeline.graph import realize_graph
    from rocmforge.pipeline.options import RealizeOptions
    from rocmforge.pipeline.realize import realize
    from rocmforge.plan.graph import load_graph
    from rocmforge.sources.requirements import PipFetcher
    from rocmforge.store.roots import TempRoots

    graph = load_graph(files)
    settings, caches, trusted = substitution_of(args)
    options = RealizeOptions(config=str(settings.project_file or ""), substitute=bool(caches),
                             caches=tuple(caches), require_substitute=True,
                             trusted=trusted)  # fmt: skip
    from rocmforge.pipeline.realize import lint
    from rocmforge.plan.graph import lint_facts_for
    from rocmforge.util.progress import NullReporter

    lints = {f: lint(graph.recipes[f], lint_facts_for(graph, f))
             for f in graph.closure_of_targets()}  # fmt: skip
    from rocmforge.cache.substitute import SubstituteError
    from rocmforge.errors import UsageError

    try:
        result = realize_graph(graph, realize=realize, store=store, fetcher=PipFetcher(),
                               runner_factory=lambda: _runner(None),
                               reporter_factory=lambda _r: NullReporter(), lints=lints,
                               temp_roots=TempRoots(store), options=options)  # fmt: skip
    except SubstituteError as exc:
        raise UsageError(f"not in the store {store.root}, and no cache has it: {exc} "
                         "(realize --test builds and tests it)") from exc
    if not result.ok:
        for f in result.order:
            why = result.failed.get(f) or result.skipped.get(f)
            if why is not None:
                raise UsageError(f"{f}: not in the store {store.root} and no cache has it: "
                                 f"{why} (realize --test builds and tests it)")  # fmt: skip
    recipes = [graph.recipes[f] for f in graph.targets]
    return [store.load(result.reports[f].path) for f in graph.targets], recipes


def accept_and_print(
    args: argparse.Namespace,
    store: Any,
    entries: Sequence[Any],
    recipes: Sequence[Any],
    *,
    tiers: Sequence[str] | None,
    out: Any,
    no_gpu_ok: bool = False,
) -> int:
    """Test ``entries`` together (their closure in one venv) with the ``[test]`` tables of
    ``recipes``; print (to ``out``) or emit JSON; return the exit status. ``no_gpu_ok``
    (``realize --test``): without a GPU the torch tiers are skipped with a warning."""
    import os

    from rocmforge.accept.devices import find_devices
    from rocmforge.accept.run import probe_python
    from rocmforge.accept.target import ProjectScript, accept_closure, closure_of
    from rocmforge.util.fsutil import json_bytes, write_atomic

    extra = _requirement_wheels(store, recipes)
    closure = closure_of(store, entries, extra)
    chosen = list(tiers or [])
    if not chosen:
        for recipe in recipes:
            chosen += [t for t in recipe.test.tiers or () if t not in chosen]
        declared = any(r.test.tiers is not None for r in recipes)
        if not chosen and not declared and closure.has_torch:
            chosen = ["smoke"]
    scripts = [ProjectScript(r.test.script, r.test.args, r.test.timeout)
               for r in recipes if r.test.script is not None]  # fmt: skip
    devices = find_devices()
    skipped = None
    if no_gpu_ok and chosen and devices.kind is None:
        skipped, chosen = f"no GPU here: the {', '.join(chosen)} tier skipped", []
        if not scripts:
            print(f"warning: realize --test: {skipped}", file=sys.stderr)
            return 0
    gpus = getattr(args, "gpus", None)
    gpus = gpus if gpus is not None else next(
        (r.test.gpus for r in recipes if r.test.gpus is not None), None)  # fmt: skip
    over = probe_python(args.over) if getattr(args, "over", None) else None
    runner = _runner(getattr(args, "sandbox", None))
    # the venv is made under the store: its files are hard links to the installed trees there
    with store.new_build_dir(closure.targets[0].hash) as workdir:
        workdir.keep = bool(getattr(args, "no_keep", False))  # the log stays there then
        done = accept_closure(store, closure, tiers=chosen, runner=runner, devices=devices,
                              environ=os.environ, workdir=workdir.path, scripts=scripts,
                              over=over, gpus=gpus,
                              timeouts=_timeouts(getattr(args, "timeout", [])),
                              thresholds=_thresholds(getattr(args, "thresholds", None),
                                                     recipes),
                              max_bytes=getattr(args, "max_bytes", 8 << 30),
                              store_runs=not workdir.keep)  # fmt: skip
    if getattr(args, "attestation", None) and done.runs:
        write_atomic(Path(args.attestation), json_bytes(done.runs[-1].statement))
    if args.json and out is sys.stdout:
        emit_json(_to_json(done, skipped))
        return done.exit_code
    if skipped:
        print(f"warning: {skipped}", file=sys.stderr)
    if runner.warning:
        print(f"warning: {runner.warning}", file=sys.stderr)
    names = ", ".join(f"{e.name} {e.version}" for e in closure.targets)
    print(f"testing {names}: {len(closure.wheels) + len(closure.extra)} wheel(s) installed into "
          f"a fresh venv in {done.installed.seconds:.1f} s", file=out)  # fmt: skip
    for r in done.runs:
        _print_report(r.report, out)
        for path in r.kept:
            print(f"kept: {path}" + (f" (signed by {r.signed})" if r.signed else ""), file=out)
    print(f"log: {done.log}", file=out)
    return done.exit_code


def _to_json(done: Any, skipped: str | None) -> dict[str, Any]:
    """A finished test as JSON."""
    return {
        "targets": [{"hash": e.hash, "name": e.name, "version": e.version}
                    for e in done.closure.targets],
        "wheels": [str(w) for w, _ in (*done.closure.wheels, *done.closure.extra)],
        "install_seconds": round(done.installed.seconds, 3),
        "installed_files": done.installed.files,
        "runs": [{**r.report.to_json(), "kept": [str(p) for p in r.kept], "signed": r.signed}
                 for r in done.runs],
        "skipped": skipped,
        "log": str(done.log),
        "exit_code": done.exit_code,
    }  # fmt: skip


def _requirement_wheels(store: Any, recipes: Sequence[Any]) -> list[tuple[Path, str]]:
    """The pinned wheels of the recipes' ``[check]`` and ``[test]`` requirements, fetched
    into the store's wheel cache when missing."""
    from rocmforge.sources.requirements import PipFetcher, resolve_requirements
    from rocmforge.store import layout

    out: dict[str, tuple[Path, str]] = {}
    for recipe in recipes:
        pins = (*recipe.check.requirements, *recipe.test.requirements)
        if not pins:
            continue
        reqs = resolve_requirements(pins, python_version=recipe.toolchain.python,
                                    wheel_dir=store.sources_dir / layout.SOURCES_WHEELS,
                                    cache_dir=store.cache_dir, fetcher=PipFetcher())  # fmt: skip
        for q in reqs:
            out.setdefault(layout.normal_name(q.name), (q.wheel, q.sha256))
    return list(out.values())
