"""The full branch of ``rocmforge log`` (:mod:`rocmforge.cli.commands.log`): a recipe, a failed
build, a Slurm job's log, a binary cache's copy, ``--json``, and every error."""

from __future__ import annotations

import argparse
import glob
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.cli.commands._common import (
    emit_json,
    open_store,
    settings_of,
)
from rocmforge.errors import UsageError


@dataclass(frozen=True, slots=True)
class FoundLog:
    """Where the log of a target is: ``source`` is ``store``, ``failed`` (a failed local
    build), ``job`` (a Slurm job's, in the job directory) or ``cache``. A job's log that Slurm
    has not created yet (the job has not started) has ``started`` False."""

    path: Path
    source: str
    job_id: str | None = None
    started: bool = True


def run_full(args: argparse.Namespace) -> int:
    """``rocmforge log TARGET`` for every target and option: print the build log of an entry
    or of the last failed build (or say the job has not started yet)."""
    import io

    from rocmforge.util.zstdread import copy_log

    target = args.target
    if os.path.exists(target) and not (os.path.isfile(target) or os.path.isdir(target)):
        raise UsageError(f"{target}: not a regular file, a recipe or a store entry")
    store = open_store(args, create=bool(args.cache))  # a cache's log needs no build here
    job_dir = args.job_dir or os.environ.get("ROCMFORGE_JOB_DIR")
    try:
        found = _find_log(store, target, Path(job_dir) if job_dir else None)
        fetched = None
    except UsageError as missing:
        path, fetched = _from_cache(args, store, target, missing)
        found = FoundLog(path, "cache")
    as_json = getattr(args, "json", False)
    if not found.started:
        if as_json:
            emit_json(_log_json(target, found, "", fetched))
        else:
            print(f"rocmforge: {target}: Slurm job {found.job_id} has not started yet (its log "
                  f"will be {found.path})", file=sys.stderr)  # fmt: skip
        return 0
    try:
        if as_json:
            buf = io.BytesIO()
            copy_log(os.fspath(found.path), buf)
            emit_json(_log_json(target, found, buf.getvalue().decode(errors="replace"), fetched))
        else:
            out = sys.stdout.buffer
            copy_log(os.fspath(found.path), out)  # as rocmforge.store.readers.log_bytes reads it
            out.flush()
    finally:
        if fetched is not None:
            found.path.unlink(missing_ok=True)
    return 0


def _log_json(target: str, found: FoundLog, text: str, url: str | None) -> dict[str, Any]:
    """The ``--json`` answer: where the log is, whether it exists yet, and its text."""
    return {
        "target": target,
        "source": found.source,
        "log": None if url is not None else str(found.path),  # a cache's copy is deleted
        "cache": url,
        "job_id": found.job_id,
        "started": found.started,
        "text": text,
    }


def _from_cache(
    args: argparse.Namespace, store: Any, target: str, missing: UsageError
) -> tuple[Path, str]:
    """The log of ``target`` copied from the first cache that has it; else ``missing`` again."""
    import re

    urls = list(settings_of(args, caches=args.cache or []).caches)
    if not urls:
        raise missing
    if re.fullmatch(r"[0-9a-f]{32}", target):
        hash = target
    elif target.endswith(".toml"):
        from rocmforge.errors import RequirementError

        try:
            hash = _recipe_hash(store, target)
        except RequirementError:
            raise missing from None
    else:
        raise missing
    from rocmforge.cache.logs import fetch_log
    from rocmforge.store import layout

    dest = Path(store.tmp_dir) / f"log-{hash}-{os.getpid()}.{layout.BUILD_LOG}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    url = fetch_log(urls, hash, dest)
    if url is None:
        raise UsageError(f"{missing}; no cache of {', '.join(urls)} has it either")
    print(f"rocmforge: the build log of {hash} from {url} (checked against the cache's "
          "manifest; logs are not signed)", file=sys.stderr)  # fmt: skip
    return dest, url


def _recipe_hash(store: Any, target: str) -> str:
    from rocmforge.pipeline.realize import plan
    from rocmforge.plan.graph import load_graph, plan_dependencies

    graph = load_graph([target])
    file = graph.targets[0]
    deps = plan_dependencies(graph, file, store=store, fetcher=None)
    return str(plan(graph.recipes[file], store=store, fetcher=None, dependencies=deps).hash)


def _job_log(job_dir: Path | None, hash: str) -> FoundLog | None:
    """The log of the recorded Slurm job building ``hash`` (a prefix), started or not."""
    if job_dir is None:
        return None
    from rocmforge.executor.submit import find_job_record

    record = find_job_record(job_dir, hash)
    if record is None:
        return None
    log = Path(record["log"])
    return FoundLog(log, "job", job_id=str(record["job_id"]), started=log.exists())


def _find_log(store: Any, target: str, job_dir: Path | None = None) -> FoundLog:
    from rocmforge.errors import RequirementError
    from rocmforge.store import layout

    if target.endswith(".toml") or os.path.isfile(target):
        from rocmforge.pipeline.realize import plan
        from rocmforge.plan.graph import load_graph, plan_dependencies

        try:
            graph = load_graph([target])  # a recipe built against recipes hashes with them
            file = graph.targets[0]
            deps = plan_dependencies(graph, file, store=store, fetcher=None)
            report = plan(graph.recipes[file], store=store, fetcher=None, dependencies=deps)
        except RequirementError as exc:
            raise UsageError(f"{target}: never built here ({exc})") from exc
        h, name, version = report.hash, report.name, report.version
        if report.path is not None:
            return FoundLog(Path(report.path) / layout.BUILD_LOG, "store")
        job_log = _job_log(job_dir, h)
        if job_log is not None:
            return job_log  # the job recorded for it is newer than a failed local build
        failed = Path(store.failed_log_path(h, name, version))
        if failed.exists():
            return FoundLog(failed, "failed")
        raise UsageError(f"{target}: no build log (hash {h} was never built in {store.root})")
    try:
        entry = store.resolve(target)
        return FoundLog(Path(entry.path) / layout.BUILD_LOG, "store")
    except UsageError:
        if not target or os.sep in target or "\0" in target:
            raise  # a path, not a hash prefix: there is no failed log to match
        pattern = f"{glob.escape(target)}*{layout.FAILED_LOG_SUFFIX}"
        failed_logs = sorted(Path(store.failed_dir).glob(pattern))
        job_log = _job_log(job_dir, target)
        if job_log is not None:
            return job_log
        if len(failed_logs) == 1:
            return FoundLog(failed_logs[0], "failed")
        raise
