"""Realize a derivation graph on Slurm: one job per missing node, the whole graph queued at once.

:func:`submit_graph` hashes every node (:func:`~rocmforge.plan.graph.plan_graph`); a node the local
store has is ``cached``, one the shared cache has is ``in cache``; every other node becomes an
sbatch job that runs ``rocmforge realize`` of exactly that recipe into a store on its compute
node (its dependencies substituted from the cache) and ``rocmforge push`` of exactly that input
hash to the cache. A node's job depends (``afterok``) on the jobs of its dependencies, so Slurm
runs the graph in order and cancels what a failure blocks. The job directory, shared by every
node, holds each job's script, its live log, and a record per input hash
(``jobs/<hash>.json``) through which a second run of the same command attaches to the jobs
still queued instead of submitting them again. The submitter then substitutes the results from
the cache like any other cached build (the caller runs that realize).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmforge.errors import BuildError, Diagnosis, RocmforgeError, UsageError
from rocmforge.executor import slurm
from rocmforge.executor.nodejob import REBUILD_EXIT
from rocmforge.executor.slurm import JobInfo, JobRequest, Outcome, SlurmOptions
from rocmforge.plan.graph import Graph, plan_graph
from rocmforge.sources.requirements import Fetcher
from rocmforge.store import layout
from rocmforge.store.store import Store
from rocmforge.trust.signing import TRUSTED_KEYS_ENV, PublicKey, SecretKey
from rocmforge.util.fsutil import json_bytes, write_atomic

#: Lines of a failed job's log shown with its failure.
TAIL_LINES = 20
#: The suffix of :func:`unsigned_record_path` (beside the job logs).
UNSIGNED_SUFFIX = ".unsigned.json"
#: The marker the job script writes (``rocmforge: phase NAME EPOCH``) at each step.
PHASE_MARK = "rocmforge: phase "


class Interrupted(RocmforgeError):
    """SIGINT or SIGTERM of the submitter (its jobs cancelled unless ``--detach``); exit 130."""

    exit_code = 130


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStatus:
    """One node as last seen: ``state`` is cached, in cache, pending, running, done, failed or
    not built; ``detail`` the pending reason, the node and run time, or the failure."""

    recipe: Path
    name: str
    version: str
    hash: str
    state: str
    detail: str = ""
    job_id: str | None = None
    log: Path | None = None
    attempt: int = 0
    kind: str = ""
    #: epoch seconds: ``submitted`` and ``seen`` (submitter), ``start``/``built``/``pushed``
    #: (written by the job on its node)
    phases: Mapping[str, float] = field(default_factory=dict)

    def line(self) -> str:
        """The status line: ``name version hash: state (detail), job N, log PATH``."""
        text = f"{self.name} {self.version} {self.hash[:12]}: {self.state}"
        if self.detail:
            text += f" ({self.detail})"
        if self.job_id:
            text += f", job {self.job_id}"
            if self.attempt > 1:
                text += f" (attempt {self.attempt})"
        if self.log and self.state in ("pending", "running", "failed"):
            text += f", log {self.log}"
        return text

    def to_json(self) -> dict[str, Any]:
        """Return the status as JSON-ready data."""
        return {
            "recipe": str(self.recipe),
            "name": self.name,
            "version": self.version,
            "hash": self.hash,
            "state": self.state,
            "detail": self.detail,
            "job_id": self.job_id,
            "log": str(self.log) if self.log else None,
            "attempt": self.attempt,
            "kind": self.kind,
            "phases": dict(self.phases),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterReport:
    """The end of a run: every node's status, the failures as build errors, job counts."""

    statuses: Mapping[Path, NodeStatus]
    errors: tuple[BuildError, ...]
    submitted: int
    attached: int

    @property
    def ok(self) -> bool:
        """Whether every node is in the local store or the cache."""
        return all(s.state in ("cached", "in cache", "done") for s in self.statuses.values())


@dataclass(slots=True, kw_only=True)
class _Node:
    """The mutable state of one node while the run lasts."""

    file: Path
    name: str
    version: str
    hash: str
    deps: tuple[Path, ...]
    memory_mb: int | None
    state: str = "pending"
    detail: str = ""
    job_id: str | None = None
    log: Path | None = None
    attempt: int = 0
    kind: str = ""
    phases: dict[str, float] = field(default_factory=dict)

    def status(self) -> NodeStatus:
        return NodeStatus(
            recipe=self.file, name=self.name, version=self.version, hash=self.hash,
            state=self.state, detail=self.detail, job_id=self.job_id, log=self.log,
            attempt=self.attempt, kind=self.kind, phases=dict(self.phases),
        )  # fmt: skip


def job_record_path(job_dir: Path, hash: str) -> Path:
    """``DIR/jobs/<hash>.json``: the job that builds ``hash`` (for attaching and ``log``)."""
    return job_dir / layout.JOBDIR_JOBS / f"{hash}{layout.JOB_RECORD_SUFFIX}"


def read_job_record(job_dir: Path, hash: str) -> dict[str, Any] | None:
    """The record of the job that builds ``hash``, or None."""
    try:
        data = json.loads(job_record_path(job_dir, hash).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("job_id"), str) else None


def find_job_record(job_dir: Path, target: str) -> dict[str, Any] | None:
    """The job record (with its ``log``) of the derivation whose input hash starts with
    ``target``, if one is recorded. Its log may not exist yet: Slurm creates it when the job
    starts, after the record is written.

    Raises :class:`~rocmforge.errors.UsageError` if the prefix names several.
    """
    if not layout.is_hex(target):
        return None
    jobs = job_dir / layout.JOBDIR_JOBS
    found = sorted(jobs.glob(f"{target}*{layout.JOB_RECORD_SUFFIX}")) if jobs.is_dir() else []
    if len(found) > 1:
        raise UsageError(f"{target}: ambiguous, {len(found)} jobs in {job_dir} start with it")
    if not found:
        return None
    record = read_job_record(job_dir, found[0].name[: -len(layout.JOB_RECORD_SUFFIX)])
    return record if record and isinstance(record.get("log"), str) and record["log"] else None


def _default_command() -> tuple[str, ...]:
    return (sys.executable, "-m", "rocmforge")


def job_script(
    node: _Node,
    *,
    opts: SlurmOptions,
    cache: str,
    realize_args: Sequence[str],
    trusted: Mapping[str, PublicKey] | None = None,
) -> str:
    """The batch script of ``node``: realize exactly its recipe on the compute node, check the
    node computed the same input hash, make sure the entry is signed by a key the submitter
    trusts (``trusted``: exported to the job, which substitutes and checks with them; ``rocmforge
    farm trust`` signs a copy an earlier job left in the scratch store, or removes it to be
    rebuilt, or stops the job before a push the submitter would refuse), push exactly that hash
    to the cache, then gc the scratch store to ``opts.scratch_max_size`` keeping the entry's
    closure (a failed gc only warns: the push is done).

    A node without a signing key builds the entry unsigned (removing a copy an earlier job left
    under an untrusted key) and ``farm trust --record`` writes the sha256 of its provenance.json
    to :func:`unsigned_record_path` in the job directory: the submitter checks the pushed copy
    against that digest and signs it with its own key (:func:`_sign_for_node`).

    The whole job holds a live gc root for its hash in the scratch store (a flock-held file
    under ``roots/live``, as a running realize holds one): another job's gc on the same node
    never removes this job's entry between its realize and its push."""
    rf = " ".join(shlex.quote(a) for a in (opts.rocmforge or _default_command()))
    store = (
        shlex.quote(opts.scratch_store)
        if opts.scratch_store
        else '"${ROCMFORGE_SCRATCH_STORE:-${TMPDIR:-/tmp}/rocmforge-store-$(id -u)}"'
    )
    q = shlex.quote
    entry = f"{layout.ENTRIES}/{layout.entry_name(node.hash, node.name, node.version)}"
    extra = " ".join(q(a) for a in realize_args)
    keys = ""
    if trusted is not None:
        texts = " ".join(sorted({k.text() for k in trusted.values()}))
        keys = f"export {TRUSTED_KEYS_ENV}={q(texts)}  # the submitter's trusted keys\n"
    realize = (
        f'{rf} realize {q(str(node.file))} --store "$store" --cache {q(cache)} -v {extra} '
        ">/dev/null 9<&- || exit $?"  # 9: the job's gc root (hold_root), not a build's to keep
    )
    record = unsigned_record_path(opts.job_dir, node.hash)
    trust = f'{rf} farm trust {node.hash} --store "$store" --record {q(str(record))}'
    return f"""#!/bin/bash
# rocmforge job: {node.name} {node.version} {node.hash}
# recipe {node.file}; written by `rocmforge realize --executor slurm`
set -uo pipefail
store={store}
{keys}phase() {{ echo "{PHASE_MARK}$1 $(date +%s.%N)"; }}
phase start
echo "rocmforge: job ${{SLURM_JOB_ID:-?}} on $(hostname): {node.name} {node.version} {node.hash} into $store"
{hold_root(node.hash)}
fresh=--rebuilt  # this job's realize makes the entry: never removed for a rebuild
[ -d "$store/{entry}" ] && fresh=
{realize}
phase built
if [ ! -d "$store/{entry}" ]; then
  echo "rocmforge: this node hashed {q(str(node.file))} differently from the submitter (expected {node.hash}): its toolchain or sources differ; compare 'rocmforge plan --json' on both" >&2
  exit 3
fi
{trust} $fresh; rc=$?
if [ "$rc" -eq {REBUILD_EXIT} ]; then
  {realize}
  {trust} --rebuilt || exit $?
elif [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
{rf} push {q(cache)} {node.hash} --store "$store" || exit $?
phase pushed
{rf} gc --store "$store" --max-size {opts.scratch_max_size} --keep {node.hash} \
  || echo "rocmforge: warning: gc of the scratch store $store failed (the push is done)" >&2
phase gc
"""  # noqa: E501


def unsigned_record_path(job_dir: Path, hash: str) -> Path:
    """Where the job of ``hash`` on a node without a signing key records the sha256 of the
    provenance.json it built and pushed unsigned (the submitter signs that copy)."""
    return job_dir / layout.JOBDIR_LOGS / f"{hash}{UNSIGNED_SUFFIX}"


def hold_root(hash: str) -> str:
    """Shell lines that hold a live gc root for ``hash`` in ``$store`` until the job's shell
    exits (killed jobs included: the flock goes with the process). The file is flocked before
    it is renamed into ``roots/live``, so a gc never sees it unheld (and removes it as stale).
    Without flock(1) the job warns and runs unprotected."""
    roots = f'"$store/{layout.ROOTS}"'
    live = f'"$store/{layout.ROOTS}/{layout.ROOTS_LIVE}"'
    name = "$$-slurm-job-${SLURM_JOB_ID:-0}"
    return f"""mkdir -p {live}
printf 'root %s\\n' {hash} >{roots}/.job-$$ && exec 9<{roots}/.job-$$ \\
  && flock -x 9 && mv {roots}/.job-$$ {live}/{name} \\
  || echo "rocmforge: warning: no gc root for {hash} in $store (flock missing?): a gc of another job may remove it before its push" >&2"""  # noqa: E501


def _phases(log: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(PHASE_MARK):
                    name, _, when = line[len(PHASE_MARK) :].strip().partition(" ")
                    with contextlib.suppress(ValueError):
                        out[name] = float(when)
    except OSError:
        pass
    return out


def _tail(log: Path | None) -> tuple[list[str], str]:
    if log is None:
        return [], ""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return [], ""
    lines = [ln for ln in text.splitlines() if not ln.startswith(PHASE_MARK)]
    return lines[-TAIL_LINES:], text


def submit_graph(
    graph: Graph,
    *,
    store: Store,
    fetcher: Fetcher,
    cache: str,
    opts: SlurmOptions,
    realize_args: Sequence[str] = (),
    trusted: Mapping[str, PublicKey] | None = None,
    key: SecretKey | None = None,
    on_update: Callable[[Sequence[NodeStatus], Sequence[NodeStatus]], None] | None = None,
) -> ClusterReport:
    """Queue every node of ``graph``'s targets that neither ``store`` nor ``cache`` has, watch the
    jobs to their end, and report. ``realize_args`` are passed to each job's realize: the
    option arguments a local child gets too (:func:`rocmforge.pipeline.graph.child_command`);
    ``trusted`` the submitter's trusted keys, which each job substitutes with and which what it
    pushes must be signed by (:func:`job_script`).

    ``on_update(all, changed)`` is called after each poll (``changed``: nodes whose state or
    detail moved). SIGINT or SIGTERM cancels every job this run submitted or attached to (unless
    ``opts.detach``) and raises :class:`Interrupted`. Raises
    :class:`~rocmforge.executor.slurm.SlurmError` when Slurm refuses a submission.
    """
    from rocmforge.cache.urls import open_backend

    backend = open_backend(cache)
    order = graph.closure_of_targets()
    plans = {p.recipe: p for p in plan_graph(graph, store=store, fetcher=fetcher)}
    nodes: dict[Path, _Node] = {}
    for f in order:
        p = plans[f]
        if p.provisional:
            raise UsageError(
                f"{f}: its input hash is provisional ({', '.join(p.provisional)}): fetch or lock "
                "its inputs on the submitting machine first (rocmforge plan shows what is missing)"
            )
        n = _Node(
            file=f, name=p.name, version=p.version, hash=p.hash, deps=graph.edges[f],
            memory_mb=graph.recipes[f].build.resources.memory_mb,
        )  # fmt: skip
        if p.cached:
            n.state = "cached"
        elif backend.get_manifest(p.hash) is not None:
            n.state = "in cache"
        nodes[f] = n
    for sub in (layout.JOBDIR_JOBS, layout.JOBDIR_LOGS, layout.JOBDIR_SCRIPTS):
        os.makedirs(opts.job_dir / sub, exist_ok=True)
    run = _Run(graph, nodes, opts=opts, cache=cache, realize_args=realize_args, trusted=trusted,
               key=key)  # fmt: skip
    interrupted: list[int] = []

    def on_term(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, on_term) if main else None
    try:
        run.start()
        run.watch(on_update)
    except KeyboardInterrupt:
        live = run.live_ids()
        what = "SIGTERM" if interrupted else "interrupted"
        if opts.detach:
            raise Interrupted(
                f"{what}: {len(live)} jobs stay queued (--detach); run the same command again "
                "to attach to them"
            ) from None
        slurm.cancel(live)
        raise Interrupted(
            f"{what}: cancelled {len(live)} jobs ({' '.join(sorted(live, key=int)) or 'none'})"
        ) from None
    finally:
        if main:
            signal.signal(signal.SIGTERM, old)
    return run.report()


class _Run:
    """Submission and polling of one graph's jobs."""

    def __init__(
        self,
        graph: Graph,
        nodes: dict[Path, _Node],
        *,
        opts: SlurmOptions,
        cache: str,
        realize_args: Sequence[str],
        trusted: Mapping[str, PublicKey] | None = None,
        key: SecretKey | None = None,
    ) -> None:
        self.graph = graph
        self.trusted = trusted
        self.key = key
        self.nodes = nodes
        self.opts = opts
        self.cache = cache
        self.realize_args = realize_args
        self.submitted = 0
        self.attached = 0
        self.errors: dict[Path, BuildError] = {}
        self.shown: dict[Path, tuple[str, str, str | None]] = {}

    def live_ids(self) -> list[str]:
        """Job ids of nodes whose jobs may still run."""
        return [n.job_id for n in self.nodes.values()
                if n.job_id and n.state in ("pending", "running")]  # fmt: skip

    def _dependents(self, file: Path) -> list[Path]:
        """Every node built against ``file``, transitively, in graph order."""
        return [f for f in self.nodes if file in self.graph.closure(f)]

    def _submit(self, n: _Node) -> None:
        """sbatch ``n`` after the live jobs of its dependencies; record it in the job dir."""
        job_dir = self.opts.job_dir
        script = job_dir / layout.JOBDIR_SCRIPTS / f"{n.hash}{layout.JOB_SCRIPT_SUFFIX}"
        entry = layout.entry_name(n.hash, n.name, n.version)
        log = job_dir / layout.JOBDIR_LOGS / f"{entry}{layout.JOB_LOG_SUFFIX}"
        text = job_script(n, opts=self.opts, cache=self.cache, realize_args=self.realize_args,
                          trusted=self.trusted)  # fmt: skip
        write_atomic(script, text.encode(), mode=0o755)
        after = tuple(
            d.job_id
            for d in (self.nodes[f] for f in n.deps if f in self.nodes)
            if d.job_id and d.state in ("pending", "running")
        )
        res = self.graph.recipes[n.file].build.resources
        with contextlib.suppress(FileNotFoundError):  # an earlier run's: not this job's word
            os.unlink(unsigned_record_path(job_dir, n.hash))
        if log.exists():  # the log of an earlier attempt: keep it beside the new one
            os.replace(log, log.with_name(log.name + ".prev"))
        job = JobRequest(
            script=script, name=f"rf-{n.name}-{n.hash[:8]}", output=log, after=after,
            cpus=res.cpus, memory_mb=res.memory_mb, time=res.time, gpus=res.gpus,
        )  # fmt: skip
        n.job_id = slurm.submit(self.opts, job)
        n.attempt += 1
        n.log, n.state, n.detail, n.kind = log, "pending", "submitted", ""
        n.phases = {"submitted": time.time()}
        self.submitted += 1
        record = {
            "job_id": n.job_id, "name": n.name, "version": n.version, "hash": n.hash,
            "recipe": str(n.file), "log": str(log), "attempt": n.attempt,
            "submitted": round(n.phases["submitted"], 3), "cache": self.cache,
        }  # fmt: skip
        write_atomic(job_record_path(job_dir, n.hash), json_bytes(record))

    def _attach(self, n: _Node) -> bool:
        """Take over the recorded job of ``n`` if Slurm still runs or queues it."""
        record = read_job_record(self.opts.job_dir, n.hash)
        if record is None:
            return False
        info = slurm.query([record["job_id"]]).get(record["job_id"])
        if info is None or not info.active:
            return False
        n.job_id, n.log = record["job_id"], Path(record["log"])
        n.attempt = int(record.get("attempt", 1))
        n.phases = {"submitted": float(record.get("submitted", time.time()))}
        self._seen(n, info)
        self.attached += 1
        return True

    def start(self) -> None:
        """Attach to or submit every node to build, dependencies first."""
        for n in self.nodes.values():
            if n.state in ("cached", "in cache"):
                continue
            if not self._attach(n):
                self._submit(n)

    def _seen(self, n: _Node, info: JobInfo) -> None:
        if info.state == "PENDING":
            reason = info.reason if info.reason not in ("", "None") else "queued"
            n.state, n.detail = "pending", reason
        elif info.active:
            n.state = "running"
            n.detail = f"on {info.node or '?'} for {info.elapsed}"

    def _ended(self, n: _Node, info: JobInfo) -> None:
        """A job ended: done, retried (NODE_FAIL with retries left) or failed with its log."""
        if info.state != "COMPLETED" and not info.exit_code:
            info = slurm.show_job(info.id) or info  # the exit code
        tail, text = _tail(n.log)
        end = slurm.outcome(info, text, memory_mb=n.memory_mb)
        n.phases.update(_phases(n.log) if n.log else {})
        n.phases["seen"] = time.time()
        if end.ok:
            problem = self._sign_for_node(n)
            if problem is None:
                n.state, n.detail, n.kind = "done", _took(n.phases), "done"
                return
            end = Outcome(kind="unsigned", message=problem)
        if end.kind == "node-fail" and n.attempt <= self.opts.retries:
            self._retry(n, end)
            return
        self._fail(n, end, tail, text)

    def _retry(self, n: _Node, end: Outcome) -> None:
        """Resubmit ``n`` and every dependent not yet done (Slurm cancels their old jobs)."""
        again = [n.file, *self._dependents(n.file)]
        stale = [self.nodes[f].job_id for f in again[1:]
                 if self.nodes[f].state in ("pending", "running")]  # fmt: skip
        slurm.cancel([j for j in stale if j])
        for f in again:
            d = self.nodes[f]
            if d.state in ("pending", "running", "not built") or f == n.file:
                self.errors.pop(f, None)
                self._submit(d)
                d.detail = f"resubmitted after {end.kind}" if f == n.file else "resubmitted"

    def _sign_for_node(self, n: _Node) -> str | None:
        """Sign the cache's copy of ``n`` with the submitter's key when its job ran on a node
        without one (the job recorded its provenance digest: :func:`unsigned_record_path`);
        return why that failed (None: done, or nothing to sign)."""
        from rocmforge.cache.backend import CacheError
        from rocmforge.cache.push import sign_cached
        from rocmforge.cache.urls import open_backend

        record = unsigned_record_path(self.opts.job_dir, n.hash)
        try:
            doc = json.loads(record.read_text())
            digest = str(doc["provenance_sha256"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"built on a node without a signing key, but its record {record} is bad ({exc})"
        if self.key is None:
            return (
                "built and pushed unsigned on a node without a signing key, and this machine "
                "has no signing key to sign it: give the nodes a key the submitter trusts "
                "($ROCMFORGE_SIGNING_KEY) or generate one here (rocmforge key generate) and "
                "trust it"
            )
        try:
            signers = sign_cached(open_backend(self.cache), n.hash, digest, self.key)
        except CacheError as exc:
            return f"built on a node without a signing key; {exc}"
        print(f"rocmforge: {n.name} {n.version}: built on a node without a signing key, "
              f"signed in {self.cache} by {self.key.public.describe()} "
              f"({len(signers)} signature(s))", file=sys.stderr)  # fmt: skip
        return None

    def _fail(self, n: _Node, end: Outcome, tail: list[str], text: str) -> None:
        from rocmforge.build.diagnose import diagnose_lines

        if end.kind == "dependency":
            n.state, n.kind = "not built", end.kind
            failed = [self.nodes[f].name for f in self.graph.closure(n.file)
                      if self.nodes[f].state in ("failed", "not built")]  # fmt: skip
            n.detail = f"a dependency failed ({', '.join(failed) or 'job cancelled'})"
            return
        n.state, n.kind, n.detail = "failed", end.kind, end.message
        diagnosis: tuple[Diagnosis, ...] = ()
        if end.kind == "failed":
            diagnosis = diagnose_lines(text.splitlines(), message=end.message)
        self.errors[n.file] = BuildError(
            f"{n.name} {n.version} ({n.hash}): Slurm job {n.job_id} {end.message}",
            log_tail=tail, log_path=n.log, diagnosis=diagnosis,
        )  # fmt: skip

    def watch(
        self, on_update: Callable[[Sequence[NodeStatus], Sequence[NodeStatus]], None] | None
    ) -> None:
        """Poll until no job may run any more, reporting every change."""
        self._report(on_update)
        started = time.monotonic()
        while True:
            live = {n.job_id: n for n in self.nodes.values()
                    if n.job_id and n.state in ("pending", "running")}  # fmt: skip
            if not live:
                break
            time.sleep(min(self.opts.poll, 0.2 + (time.monotonic() - started) / 30))
            infos = slurm.query(live)
            for n in list(self.nodes.values()):  # graph order: a parent's retry goes first
                if n.job_id not in live or live[n.job_id] is not n:
                    continue
                info = infos.get(n.job_id) or slurm.ended(n.job_id)
                if info is None:
                    info = JobInfo(id=n.job_id, state="UNKNOWN", reason="purged, no record")
                if info.active:
                    self._seen(n, info)
                else:
                    self._ended(n, info)
            self._report(on_update)

    def _report(
        self, on_update: Callable[[Sequence[NodeStatus], Sequence[NodeStatus]], None] | None
    ) -> None:
        if on_update is None:
            return
        changed = []
        for f, n in self.nodes.items():
            key = (n.state, n.detail if n.state != "running" else "", n.job_id)
            if self.shown.get(f) != key:
                self.shown[f] = key
                changed.append(n.status())
        on_update([n.status() for n in self.nodes.values()], changed)

    def report(self) -> ClusterReport:
        statuses = {f: n.status() for f, n in self.nodes.items()}
        errors = tuple(self.errors[f] for f in self.nodes if f in self.errors)
        return ClusterReport(
            statuses=statuses, errors=errors, submitted=self.submitted, attached=self.attached
        )


def _took(phases: Mapping[str, float]) -> str:
    if "submitted" in phases and "seen" in phases:
        return f"in the cache {phases['seen'] - phases['submitted']:.1f} s after submit"
    return "pushed to the cache"
