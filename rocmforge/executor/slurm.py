"""The Slurm client: plain ``sbatch``/``squeue``/``scontrol``/``scancel`` calls, job end states.

Why not submitit (measured, ../shared/DIST.md): without accounting (``sacct``) its job state is
always UNKNOWN, every poll logs a warning, and a job killed from outside (``scancel``, a time
limit, an OOM kill) leaves ``result()`` waiting forever. Slurm's own commands answer everything
needed: ``squeue -t all`` the state, reason, node and run time of every job slurmctld still
knows (one call per poll for all jobs), ``scontrol show job -o`` the exit code, and the
``jobcomp/filetxt`` file the end state of a job already purged. No ``sacct``: clusters
without slurmdbd refuse it.

:class:`SlurmOptions` is the one place the executor's settings live: built from CLI flags now,
from a ``[slurm]`` table of a config file later (:meth:`SlurmOptions.from_mapping` takes either).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmforge.errors import RocmforgeError, UsageError

#: Job states in which a job may still run (everything else is an end state).
ACTIVE_STATES = frozenset(
    {
        "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
        "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
    }
)  # fmt: skip

#: The default ``scratch-max-size``: entries a job's gc leaves in its node's scratch store.
DEFAULT_SCRATCH_MAX_SIZE = 40 << 30

#: What ``OverMemoryKill`` (jobacct_gather/linux) writes into a job's output when it kills it.
MEMORY_KILL_TEXT = "exceeded memory limit"


class SlurmError(RocmforgeError):
    """A Slurm command failed (refused a submission, slurmctld unreachable); exit 1."""

    exit_code = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmOptions:
    """How jobs are submitted: sbatch options, the shared job directory, retries, polling.

    ``time`` is the default time limit in seconds (a recipe's ``[build] resources`` time wins);
    ``scratch_store`` the store a job builds into on its node (None: ``$TMPDIR`` per user);
    ``scratch_max_size`` the bytes of entries each job leaves in it after its push (gc keeps
    the job's entry and its closure, then the most recently used; ``scratch-max-size``);
    ``rocmforge`` the command that runs rocmforge on a compute node; ``poll`` the longest wait
    between two polls (the wait starts at 0.2 s and grows with the run's age: short graphs are
    seen at once, long ones cost slurmctld one ``squeue`` per ``poll`` seconds per submitter).
    """

    job_dir: Path
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: float | None = None
    sbatch_args: tuple[str, ...] = ()
    scratch_store: str | None = None
    scratch_max_size: int = DEFAULT_SCRATCH_MAX_SIZE
    retries: int = 0
    detach: bool = False
    poll: float = 5.0
    rocmforge: tuple[str, ...] = field(default_factory=tuple)

    #: the keys :meth:`from_mapping` accepts (a config file's ``[slurm]`` table, CLI flags)
    KEYS = ("job-dir", "partition", "account", "qos", "time", "sbatch-args", "scratch-store",
            "scratch-max-size", "retries", "detach", "poll", "rocmforge")  # fmt: skip

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any], *, where: str = "[slurm]") -> SlurmOptions:
        """Build options from ``table`` (keys as in :attr:`KEYS`; None values are unset).

        Raises :class:`~rocmforge.errors.UsageError` naming ``where`` and the key on bad input.
        """
        from rocmforge.recipe.model import parse_duration

        unknown = sorted(set(table) - set(cls.KEYS))
        if unknown:
            raise UsageError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(cls.KEYS)})")
        t = {k: v for k, v in table.items() if v is not None}
        if "job-dir" not in t:
            raise UsageError(f"{where}: job-dir is required (a directory every node shares)")

        def text(key: str) -> str | None:
            v = t.get(key)
            if v is not None and (not isinstance(v, str) or not v):
                raise UsageError(f"{where}: {key} must be a non-empty string, not {v!r}")
            return v

        limit = None
        if "time" in t:
            try:
                limit = parse_duration(str(t["time"]))
            except ValueError as exc:
                raise UsageError(f"{where}: time: {exc}") from None
        retries = t.get("retries", 0)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise UsageError(f"{where}: retries must be a non-negative integer, not {retries!r}")
        args = t.get("sbatch-args", ())
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise UsageError(f"{where}: sbatch-args must be a list of strings")
        max_size = DEFAULT_SCRATCH_MAX_SIZE
        if "scratch-max-size" in t:
            from rocmforge.store.gc import parse_size

            raw = t["scratch-max-size"]
            try:
                if isinstance(raw, bool) or not isinstance(raw, (int, str)):
                    raise ValueError(f"expected a size such as '40G', not {raw!r}")
                max_size = raw if isinstance(raw, int) else parse_size(raw)
                if max_size < 0:
                    raise ValueError(f"a size is not negative, not {raw!r}")
            except ValueError as exc:
                raise UsageError(f"{where}: scratch-max-size: {exc}") from None
        command = t.get("rocmforge", ())
        if isinstance(command, str):
            import shlex

            command = tuple(shlex.split(command))
        return cls(
            job_dir=Path(os.path.abspath(str(text("job-dir")))),
            partition=text("partition"),
            account=text("account"),
            qos=text("qos"),
            time=limit,
            sbatch_args=tuple(args),
            scratch_store=text("scratch-store"),
            scratch_max_size=max_size,
            retries=retries,
            detach=bool(t.get("detach", False)),
            poll=float(t.get("poll", 5.0)),
            rocmforge=tuple(command),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRequest:
    """One job to submit: its script, name, output file, dependencies and resources."""

    script: Path
    name: str
    output: Path
    after: tuple[str, ...] = ()
    cpus: int | None = None
    memory_mb: int | None = None
    time: float | None = None
    gpus: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobInfo:
    """What Slurm says about a job: state, reason, node, run time; ``exit_code`` once known."""

    id: str
    state: str
    reason: str = ""
    node: str = ""
    elapsed: str = ""
    exit_code: str = ""

    @property
    def active(self) -> bool:
        """Whether the job may still run."""
        return self.state in ACTIVE_STATES


def minutes(seconds: float) -> int:
    """Slurm time limits are whole minutes: round up, at least 1."""
    return max(1, math.ceil(seconds / 60))


def sbatch_argv(opts: SlurmOptions, job: JobRequest) -> list[str]:
    """The ``sbatch`` command line for ``job``: never requeued by Slurm (retries are ours), its
    dependents cancelled if it fails (``--kill-on-invalid-dep``: otherwise they pend forever)."""
    argv = ["sbatch", "--parsable", f"--job-name={job.name}", f"--output={job.output}",
            "--no-requeue", "--kill-on-invalid-dep=yes", f"--chdir={opts.job_dir}"]  # fmt: skip
    if job.after:
        argv.append("--dependency=afterok:" + ":".join(job.after))
    for flag, value in (("partition", opts.partition), ("account", opts.account),
                        ("qos", opts.qos)):  # fmt: skip
        if value:
            argv.append(f"--{flag}={value}")
    limit = job.time if job.time is not None else opts.time
    if limit is not None:
        argv.append(f"--time={minutes(limit)}")
    if job.cpus:
        argv.append(f"--cpus-per-task={job.cpus}")
    if job.memory_mb:
        argv.append(f"--mem={job.memory_mb}M")
    if job.gpus:
        argv.append(f"--gres=gpu:{job.gpus}")
    argv += opts.sbatch_args
    argv.append(str(job.script))
    return argv


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise UsageError(
            f"{argv[0]} not found: --executor slurm needs Slurm's client commands on PATH "
            "(and SLURM_CONF if the cluster's config is not in /etc/slurm)"
        )
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=120)
    if check and proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise SlurmError(f"{argv[0]} failed: {why}")
    return proc


def submit(opts: SlurmOptions, job: JobRequest) -> str:
    """Submit ``job``; return its job id. Raises :class:`SlurmError` if sbatch refuses it."""
    out = _run(sbatch_argv(opts, job)).stdout.strip()
    job_id = out.split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch answered {out!r}, not a job id")
    return job_id


_SQUEUE_FORMAT = "%i|%T|%r|%N|%M"


def query(ids: Iterable[str]) -> dict[str, JobInfo]:
    """The jobs of ``ids`` slurmctld still knows (pending, running and recently ended), by id.

    One ``squeue -t all`` call; ids it no longer knows are absent (see :func:`ended`).
    """
    wanted = sorted(set(ids), key=int)
    if not wanted:
        return {}
    proc = _run(["squeue", "-h", "-t", "all", "-j", ",".join(wanted), "-o", _SQUEUE_FORMAT],
                check=False)  # fmt: skip
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return {}  # every id purged
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise SlurmError(f"squeue failed: {why}")
    found = {}
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) != 5 or parts[0] not in wanted:
            continue  # array/het job lines and noise
        found[parts[0]] = JobInfo(
            id=parts[0], state=parts[1].split()[0], reason=parts[2], node=parts[3],
            elapsed=parts[4],
        )  # fmt: skip
    return found


def _fields(line: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def show_job(job_id: str) -> JobInfo | None:
    """``scontrol show job -o``: the job with its exit code, or None once it is purged."""
    proc = _run(["scontrol", "show", "job", "-o", job_id], check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    f = _fields(proc.stdout.splitlines()[0])
    return JobInfo(
        id=job_id, state=f.get("JobState", "UNKNOWN"), reason=f.get("Reason", ""),
        node=f.get("NodeList", "").replace("(null)", ""), elapsed=f.get("RunTime", ""),
        exit_code=f.get("ExitCode", ""),
    )  # fmt: skip


def _jobcomp_file() -> Path | None:
    proc = _run(["scontrol", "show", "config"], check=False)
    conf = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        conf[key.strip()] = value.strip()
    if conf.get("JobCompType") != "jobcomp/filetxt" or not conf.get("JobCompLoc"):
        return None
    return Path(conf["JobCompLoc"])


def ended(job_id: str) -> JobInfo | None:
    """The end state of a job ``squeue`` no longer lists: ``scontrol``, else the jobcomp file.

    None if neither knows it (purged, and no ``jobcomp/filetxt``). The jobcomp file's JobState is
    trusted, its ExitCode not (a cancelled or timed-out job shows 0:0 there).
    """
    info = show_job(job_id)
    if info is not None:
        return info
    path = _jobcomp_file()
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(f"JobId={job_id} ")]
    except OSError:
        return None
    if not lines:
        return None
    fields = _fields(lines[-1])
    return JobInfo(
        id=job_id, state=fields.get("JobState", "UNKNOWN"), node=fields.get("NodeList", ""),
    )  # fmt: skip


def cancel(ids: Iterable[str]) -> None:
    """``scancel`` every job of ``ids`` (pending or running); errors are ignored."""
    wanted = sorted(set(ids), key=int)
    if wanted:
        _run(["scancel", *wanted], check=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """A job's end, named: ``kind`` is done, failed, oom, timeout, node-fail, cancelled,
    dependency (cancelled because a job it needed failed) or another Slurm state in lower case."""

    kind: str
    message: str

    @property
    def ok(self) -> bool:
        """Whether the job built and pushed its derivation."""
        return self.kind == "done"


def outcome(info: JobInfo, log_text: str = "", *, memory_mb: int | None = None) -> Outcome:
    """Name the end of a job from its state, reason, exit code and output.

    An OverMemoryKill kill ends FAILED with the misleading reason JobLaunchFailure: the output's
    ``exceeded memory limit`` line tells it apart. ``memory_mb`` is the limit asked (for the
    message).
    """
    state, code = info.state, info.exit_code
    limit = f" (--mem={memory_mb}M)" if memory_mb else ""
    if state == "COMPLETED":
        return Outcome(kind="done", message="done")
    if state == "OUT_OF_MEMORY" or (state == "FAILED" and MEMORY_KILL_TEXT in log_text):
        return Outcome(
            kind="oom",
            message=f"killed for memory: the build went over its memory limit{limit}; raise "
            "[build] resources memory",
        )
    if state == "TIMEOUT":
        return Outcome(
            kind="timeout",
            message="killed at its time limit; raise [build] resources time (or --time)",
        )
    if state == "NODE_FAIL":
        return Outcome(
            kind="node-fail",
            message=f"its node {info.node or '?'} failed (NODE_FAIL); --retries N resubmits",
        )
    if state == "CANCELLED":
        if info.reason == "DependencyNeverSatisfied":
            return Outcome(kind="dependency", message="cancelled: a job it needs failed")
        return Outcome(kind="cancelled", message="cancelled (scancel, by a user or an admin)")
    if state == "FAILED":
        status = code.split(":", 1)[0] if code else "?"
        return Outcome(kind="failed", message=f"build failed (exit {status})")
    return Outcome(kind=state.lower(), message=f"ended {state} ({info.reason or 'no reason'})")
