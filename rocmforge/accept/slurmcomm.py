"""The comm tier across nodes: one Slurm job, one task per GPU, the rendezvous at its first node.

``rocmforge test --python PATH --tier comm --executor slurm --nodes N --gpus-per-node G``
submits ONE batch job (``--nodes N --ntasks-per-node G``, and ``--gres=gpu:G`` unless the
cluster has no GPU gres) whose script, on the job's first node (where Slurm runs a batch
script), sets the rendezvous and starts every rank with ``srun``:

- ``MASTER_ADDR``: the job's first node, ``scontrol show hostnames "$SLURM_JOB_NODELIST" |
  head -n1`` (the node's name must resolve on every node);
- ``MASTER_PORT``: chosen per job, a port the Python under test finds free there (else
  ``20000 + job id % 40000``);
- ``WORLD_SIZE``: ``$SLURM_NTASKS``;
- ``srun --kill-on-bad-exit=1 RUN/rank.sh PYTHON comm_script.py rank CONFIG``: a rank that
  fails takes the others down at once instead of leaving them in a collective.

``rank.sh`` is the per-task wrapper (one per task, started by ``srun``): ``RANK`` from
``SLURM_PROCID``, ``LOCAL_RANK`` (the device ``comm_script.py`` selects with
``set_device``) from ``SLURM_LOCALID`` unless Slurm bound the task to a GPU of its own (the
task sees one device through ``HIP_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES``/
``CUDA_VISIBLE_DEVICES``: then device 0), and the environment the local sandbox gives
(:func:`~rocmforge.accept.run.check_env`) plus the task's own device-selecting and
NCCL/RCCL variables (those Slurm set for the task win over the submitter's). Visibility is
never narrowed: every task sees the node's GPUs, as the local comm tier's ranks do, and NCCL
finds its peers' devices for P2P.

The sandbox, per task: ``--sandbox none`` runs the rank under ``env -i`` (a clean
environment, no isolation); ``--sandbox bwrap`` (the default) runs it in bubblewrap as the
local tier does, but sharing the host's network (``--share-net``: the ranks meet across
nodes; the node's ``/etc/hosts`` and ``/etc/resolv.conf`` are bound for the names) and binding
the GPU device nodes that node has (found when the task starts, so a login node without GPUs
may submit). Either way the interpreter under test, its directories and the
job directory must be at the same paths on every node (a shared filesystem); bwrap (and
unprivileged user namespaces) on every compute node at the submitter's path.

rocmforge follows the job's output file as it grows (rank 0 prints the checks' lines, the
other ranks only their errors), feeds each line to a :class:`~rocmforge.accept.run.CheckClock`
and ``scancel``\\ s the job when a check's deadline passes; the job's end state (``FAILED``,
``CANCELLED``, ``TIMEOUT``, ``NODE_FAIL``...) becomes a failed check naming it and the telling
line. Nothing here prints.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from rocmforge.accept.report import FAILED, AcceptanceReport, Check
from rocmforge.accept.run import (
    DEFAULT_TIMEOUTS,
    PASSED_PREFIXES,
    SCRIPTS,
    AcceptanceRun,
    CheckClock,
    TargetPython,
    check_env,
    judge_bandwidth,
    probe_python,
    python_mounts,
    telling_line,
)
from rocmforge.accept.thresholds import Thresholds
from rocmforge.build.sandbox import BwrapRunner, Mount, Runner
from rocmforge.errors import UsageError
from rocmforge.executor.slurm import (
    JobInfo,
    JobRequest,
    SlurmError,
    SlurmOptions,
    cancel,
    ended,
    query,
    submit,
)
from rocmforge.executor.submit import Interrupted

#: the runs' directories, under the job directory: ``comm/<UTC stamp>-<random>/``
COMM_DIR = "comm"
#: where the run's directory (``comm_script.py``) is seen inside a task's bubblewrap
INSIDE = "/accept"
#: until rank 0 announces its first check, the budget of a started job (srun, Python start)
LAUNCH_TIMEOUT = 120.0
#: the batch script's line naming the nodes and the rendezvous (read back for the report)
NODES_LINE = re.compile(r"^rocmforge-comm: job \S+ on (\S*): world size (\d+), "
                        r"rendezvous at (\S+)$")  # fmt: skip
#: a line Slurm itself writes into the job's output (srun's and slurmstepd's notes)
SLURM_NOTE = re.compile(r"^(srun|slurmstepd(-\S+?)?|sbatch|salloc): ")
#: the device nodes a task's bubblewrap binds, where its node has them
DEVICE_GLOBS = ("/dev/kfd", "/dev/dri/renderD*", "/dev/nvidia*", "/dev/nvidia-caps/*")
#: what a task's bubblewrap binds of the node's name resolution (MASTER_ADDR is a node name)
RESOLVER_FILES = ("/etc/hosts", "/etc/resolv.conf", "/etc/host.conf", "/etc/gai.conf")


@dataclass(frozen=True, slots=True, kw_only=True)
class CommJob:
    """The job's shape: ``nodes`` nodes, one task per GPU (``gpus_per_node`` each), and
    whether to ask for the GPUs as gres (``--gres=gpu:G``; off where the cluster has none)."""

    nodes: int = 1
    gpus_per_node: int
    gres: bool = True

    @property
    def world_size(self) -> int:
        """One rank per GPU of every node."""
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True, slots=True, kw_only=True)
class CommFiles:
    """What a run writes into the job directory: the batch script, the per-task wrapper,
    ``comm_script.py`` (copied, so the nodes need not see rocmforge) and the job's output."""

    directory: Path
    batch: Path
    rank: Path
    script: Path
    output: Path


def batch_script(python: str, rank_sh: Path, script: str, config: str) -> str:
    """The batch script: the rendezvous at the job's first node, then one task per GPU."""
    q = shlex.quote
    port = 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
    return f"""#!/bin/bash
# rocmforge test --tier comm --executor slurm: one task per GPU, the rendezvous at the job's
# first node (where Slurm runs this script). Written by rocmforge/accept/slurmcomm.py.
set -eu
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
# a port free on this node (the first), chosen per job
MASTER_PORT=$({q(python)} -c {q(port)} 2>/dev/null) || MASTER_PORT=$((20000 + SLURM_JOB_ID % 40000))
WORLD_SIZE=$SLURM_NTASKS
export MASTER_ADDR MASTER_PORT WORLD_SIZE
echo "rocmforge-comm: job $SLURM_JOB_ID on $(scontrol show hostnames "$SLURM_JOB_NODELIST" \\
  | paste -sd, -): world size $WORLD_SIZE, rendezvous at $MASTER_ADDR:$MASTER_PORT"
srun --kill-on-bad-exit=1 {q(str(rank_sh))} {q(python)} {q(script)} rank {q(config)}
"""


def _rank_preamble() -> str:
    """The part of ``rank.sh`` both sandboxes share: the device and the passed variables."""
    names = "|".join(f"{p}*" for p in PASSED_PREFIXES)
    return f"""#!/bin/bash
# One task of the comm tier (srun starts one per GPU): its rank from Slurm's variables, a
# clean environment, then the command ("$@"). Written by rocmforge/accept/slurmcomm.py.
set -eu
# The device of this task (comm_script.py calls set_device(LOCAL_RANK)): number SLURM_LOCALID
# of those the node shows, unless Slurm bound the task to one GPU of its own (one visible).
local_rank=$SLURM_LOCALID
for name in HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES; do
  if [ -n "${{!name+set}}" ]; then
    case "${{!name}}" in *,*|'') ;; *) local_rank=0 ;; esac
    break
  fi
done
# The task's device-selecting and NCCL/RCCL/ROCm/CUDA variables (as the local tier passes them)
passed=()
while IFS= read -r name; do
  case "$name" in {names}) passed+=("$name") ;; esac
done < <(compgen -e)
"""


def rank_script_none(env: Mapping[str, str]) -> str:
    """``rank.sh`` for ``--sandbox none``: the rank under ``env -i`` with ``env`` and the
    task's variables."""
    fixed = _wrap(["/usr/bin/env", "-i", *(shlex.quote(f"{k}={v}") for k, v in env.items()),
                   '"${vars[@]}"', 'RANK="$SLURM_PROCID"', 'LOCAL_RANK="$local_rank"',
                   'WORLD_SIZE="$SLURM_NTASKS"', 'MASTER_ADDR="$MASTER_ADDR"',
                   'MASTER_PORT="$MASTER_PORT"', '"$@"'])  # fmt: skip
    return _rank_preamble() + f"""vars=()
for name in "${{passed[@]}}"; do vars+=("$name=${{!name}}"); done
exec {fixed}
"""


def _wrap(words: list[str], width: int = 96) -> str:
    """Shell words joined by spaces, continued on the next line (``\\``) before ``width``."""
    lines, line = [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = "  " + w
        else:
            line = f"{line} {w}" if line else w
    return " \\\n".join([*lines, line])


def rank_script_bwrap(runner: BwrapRunner, env: Mapping[str, str], mounts: list[Mount]) -> str:
    """``rank.sh`` for ``--sandbox bwrap``: the local tier's bubblewrap command, sharing the
    network, with the task's variables and the device nodes its node has."""
    marker = "\0args"
    cmd = runner.command([marker], cwd="/tmp", env=env, mounts=mounts)
    cmd.insert(cmd.index("--unshare-all") + 1, "--share-net")
    at = cmd.index("--remount-ro")
    words = [shlex.quote(w) for w in cmd[:at]]
    words += ['"${sets[@]}"', '"${devs[@]}"']
    words += [shlex.quote(w) for w in cmd[at:-1]] + ['"$@"']
    globs = " ".join(DEVICE_GLOBS)
    return _rank_preamble() + f"""sets=(--setenv RANK "$SLURM_PROCID"
      --setenv LOCAL_RANK "$local_rank" --setenv WORLD_SIZE "$SLURM_NTASKS"
      --setenv MASTER_ADDR "$MASTER_ADDR" --setenv MASTER_PORT "$MASTER_PORT")
for name in "${{passed[@]}}"; do sets+=(--setenv "$name" "${{!name}}"); done
# The GPU device nodes of this node, bound with their device access, and /sys read-only
devs=()
for d in {globs}; do
  if [ -e "$d" ] && [ ! -d "$d" ]; then devs+=(--dev-bind "$d" "$d"); fi
done
if [ "${{#devs[@]}}" -gt 0 ]; then devs+=(--ro-bind /sys /sys); fi
# The network is the host's: its name resolution too (the rendezvous is by node name)
for f in {" ".join(RESOLVER_FILES)}; do
  if [ -e "$f" ]; then devs+=(--ro-bind "$f" "$f"); fi
done
exec {_wrap(words)}
"""


def write_job(
    python: TargetPython, *, runner: Runner, directory: Path, config: Mapping[str, Any]
) -> CommFiles:
    """Write the run's files into ``directory`` (a new directory of the job directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "comm_script.py"
    shutil.copyfile(SCRIPTS / "comm_script.py", script)
    rank_sh = directory / "rank.sh"
    env = check_env(python, {})  # the task's own variables are added when it starts
    if isinstance(runner, BwrapRunner):
        mounts = [Mount(host=directory, inside=INSIDE), *python_mounts(python)]
        rank_sh.write_text(rank_script_bwrap(runner, env, mounts))
        inside = f"{INSIDE}/{script.name}"
    elif runner.level == "none":
        rank_sh.write_text(rank_script_none(env))
        inside = str(script)
    else:
        raise UsageError(f"--executor slurm: sandbox {runner.level!r} is not supported "
                         "(bwrap or none)")  # fmt: skip
    rank_sh.chmod(0o755)
    batch = directory / "comm.sbatch"
    batch.write_text(batch_script(python.executable, rank_sh, inside,
                                  json.dumps(config, sort_keys=True)))  # fmt: skip
    batch.chmod(0o755)
    return CommFiles(directory=directory, batch=batch, rank=rank_sh, script=script,
                     output=directory / "comm.out")  # fmt: skip


class _Follower:
    """Reads a growing output file from where it stopped, in whole lines (reopened each time:
    on NFS a fresh open sees what other nodes wrote)."""

    def __init__(self, path: Path, log: BinaryIO, on_line: Callable[[str], None]) -> None:
        self.path = path
        self.log = log
        self.on_line = on_line
        self.offset = 0
        self.pending = b""

    def read(self) -> None:
        """Take what was written since the last read."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return  # Slurm creates it when the job starts
        if not chunk:
            return
        self.offset += len(chunk)
        self.log.write(chunk)
        self.log.flush()
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            self.on_line(line.decode("utf-8", "replace").rstrip("\r"))

    def finish(self) -> None:
        """Read the rest, and a last line without its newline."""
        self.read()
        if self.pending:
            self.on_line(self.pending.decode("utf-8", "replace"))
            self.pending = b""


def _state(job_id: str) -> JobInfo | None:
    info = query([job_id]).get(job_id)
    if info is None or not info.active:
        return ended(job_id) or info
    return info


def run_comm_slurm(
    python: TargetPython,
    *,
    opts: SlurmOptions,
    job: CommJob,
    runner: Runner,
    log: BinaryIO,
    timeouts: Mapping[str, float] | None = None,
    thresholds: Thresholds | None = None,
    max_bytes: int = 8 << 30,
    on_state: Callable[[JobInfo, CommFiles], None] | None = None,
    time_limit: float | None = None,
    tick: float = 0.2,
) -> AcceptanceReport:
    """Run the comm tier of ``python`` as one Slurm job shaped by ``job``; return the report.

    The job's output goes to ``log`` as it is read. ``on_state`` is called with the job's
    state each time it changes (pending, running, its end). A check past its timeout, an
    interrupt (Ctrl-C or SIGTERM: :class:`~rocmforge.executor.submit.Interrupted`, exit 130)
    or any error while watching cancels the job. A job Slurm cannot start (pending for
    ``PartitionConfig``, say) is waited for like any pending job.

    The job's time limit is ``time_limit`` seconds, else the checks' timeouts summed plus
    :data:`LAUNCH_TIMEOUT` and 5 minutes (never ``opts.time``: a ``[slurm]`` table's time is
    sized for builds), so Slurm ends the job even if rocmforge dies.
    """
    if job.nodes < 1 or job.gpus_per_node < 1:
        raise UsageError(f"--nodes {job.nodes} --gpus-per-node {job.gpus_per_node}: both "
                         "must be at least 1")  # fmt: skip
    limits = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
    config = {"timeouts": limits, "world_size": job.world_size, "max_bytes": max_bytes}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    runs = opts.job_dir / COMM_DIR
    runs.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    directory = Path(tempfile.mkdtemp(prefix=f"{stamp}-", dir=runs))
    files = write_job(python, runner=runner, config=config, directory=directory)
    shaped = replace(opts, sbatch_args=(f"--nodes={job.nodes}",
                                        f"--ntasks-per-node={job.gpus_per_node}",
                                        *opts.sbatch_args))  # fmt: skip
    whole = sum(limits.values()) + LAUNCH_TIMEOUT + 300
    request = JobRequest(script=files.batch, name="rocmforge-comm", output=files.output,
                         gpus=job.gpus_per_node if job.gres else None,
                         time=time_limit if time_limit is not None else whole)  # fmt: skip
    t = time.monotonic()
    try:
        job_id = submit(shaped, request)
    except SlurmError as exc:
        if job.gres and "gres" in str(exc).lower():
            raise SlurmError(f"{exc} (a cluster without GPU gres: --no-gres)") from exc
        raise
    clock = _Clock(limits)
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _on_term) if main else None
    try:
        info, timed_out = _watch(job_id, files, clock, log, opts=opts, launch=limits.get(
            "launch", LAUNCH_TIMEOUT), on_state=on_state, tick=tick)  # fmt: skip
    except KeyboardInterrupt:
        cancel([job_id])
        raise Interrupted(f"interrupted: cancelled Slurm job {job_id}") from None
    except BaseException:
        cancel([job_id])
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, old)
    seconds = time.monotonic() - t
    checks = list(clock.done)
    state = info.state if info is not None else "UNKNOWN"
    if timed_out and clock.current is not None:
        checks.append(Check(clock.current, FAILED, clock.current_timeout, {
            "slurm_job": job_id, "slurm_state": state},
            f"timed out after {clock.current_timeout:g} s: Slurm job {job_id} cancelled "
            f"(scancel); its output is in {files.output}"))  # fmt: skip
    elif clock.current is not None or (state != "COMPLETED" and not any(
            c.status == FAILED for c in checks)):  # fmt: skip
        checks.append(Check(clock.current or "job", FAILED, 0.0, {
            "slurm_job": job_id, "slurm_state": state,
            "exit_code": info.exit_code if info is not None else ""},
            f"{_ended(job_id, info)}: {_telling(clock.tail)[:400]}"))  # fmt: skip
    elif not checks:
        checks.append(Check("job", FAILED, 0.0, {"slurm_job": job_id, "slurm_state": state},
                            f"Slurm job {job_id} ended {state} but rank 0 reported no check"))
    if thresholds is not None:
        checks.append(judge_bandwidth(checks, thresholds))
    node = node_facts(checks, clock.nodes_line, python, job, job_id, info)
    return AcceptanceReport(tier="comm", python=python.executable, checks=tuple(checks),
                            node=node, started=started, seconds=seconds,
                            sandbox=runner.level)  # fmt: skip


def _on_term(signum: int, frame: Any) -> None:
    """SIGTERM of the submitter: like Ctrl-C, the job is cancelled."""
    raise KeyboardInterrupt


class _Clock(CheckClock):
    """A :class:`CheckClock` that also keeps the batch script's own line (the nodes)."""

    def __init__(self, timeouts: Mapping[str, float]) -> None:
        super().__init__(timeouts)
        self.nodes_line: str = ""

    def feed(self, line: str) -> None:
        """Take one line of the job's output."""
        if NODES_LINE.match(line):
            self.nodes_line = line
        super().feed(line)


def _watch(
    job_id: str,
    files: CommFiles,
    clock: _Clock,
    log: BinaryIO,
    *,
    opts: SlurmOptions,
    launch: float,
    on_state: Callable[[JobInfo, CommFiles], None] | None,
    tick: float,
) -> tuple[JobInfo | None, bool]:
    """Follow the job until it ends, or until a check's deadline passes (then cancel it);
    return its last state and whether it was cancelled for a timeout."""
    follower = _Follower(files.output, log, clock.feed)
    started = time.monotonic()
    next_poll = started
    seen: tuple[str, str] | None = None
    info: JobInfo | None = None
    while True:
        follower.read()
        now = time.monotonic()
        until = clock.deadline()
        if until is not None and now >= until:
            cancel([job_id])
            info = _wait_end(job_id, follower, timeout=30.0)
            follower.finish()
            return info, True
        if now >= next_poll:
            info = _state(job_id)
            shown = (info.state, info.reason) if info is not None else ("GONE", "")
            if shown != seen and info is not None and on_state is not None:
                on_state(info, files)
            seen = shown
            if info is None or not info.active:
                follower.finish()
                return info, False
            if info.state == "RUNNING" and clock.current is None and not clock.done:
                # srun and the interpreter's start: until rank 0 announces its first check
                clock.current, clock.current_timeout = "launch", launch
                clock.until = now + launch
            next_poll = now + min(opts.poll, 0.5 + (now - started) / 30)
        time.sleep(tick)


def _wait_end(job_id: str, follower: _Follower, *, timeout: float) -> JobInfo | None:
    """After ``scancel``: wait (reading the output) until Slurm says the job ended."""
    end = time.monotonic() + timeout
    info = _state(job_id)
    while info is not None and info.active and time.monotonic() < end:
        time.sleep(0.3)
        follower.read()
        info = _state(job_id)
    return info


def _ended(job_id: str, info: JobInfo | None) -> str:
    if info is None:
        return f"Slurm job {job_id}: Slurm no longer knows it"
    why = f" ({info.reason})" if info.reason and info.reason != "None" else ""
    code = f", exit code {info.exit_code}" if info.exit_code else ""
    return f"Slurm job {job_id} ended {info.state}{why}{code}"


def _telling(tail: list[str]) -> str:
    """The telling line of the ranks' output, Slurm's own notes (``srun: error: ... task 1:
    Exited with exit code 1``, ``slurmstepd-NODE: error: *** STEP 5.0 ... CANCELLED``) left
    out unless nothing else was said."""
    own = [ln for ln in tail if not SLURM_NOTE.match(ln) and not NODES_LINE.match(ln)]
    return telling_line(own) if any(ln.strip() for ln in own) else telling_line(tail)


def node_facts(
    checks: list[Check],
    nodes_line: str,
    python: TargetPython,
    job: CommJob,
    job_id: str,
    info: JobInfo | None,
) -> dict[str, Any]:
    """The run's facts: the job and its nodes (the first is where the ranks met), the GPU
    model rank 0's ``init`` check saw, ``gpu_count`` the world size."""
    by = {c.name: c for c in checks}
    m = NODES_LINE.match(nodes_line)
    if m and m.group(1):
        hosts = m.group(1).split(",")
    else:
        hosts = [info.node] if info is not None and info.node else []
    facts: dict[str, Any] = {"executor": "slurm", "slurm_job": job_id, "nodes": hosts,
                             "node_count": job.nodes, "gpus_per_node": job.gpus_per_node,
                             "hostname": hosts[0] if hosts else "",
                             "python": python.version}  # fmt: skip
    if m:
        facts["rendezvous"] = m.group(3)
    init = by.get("init")
    facts["gpu_model"] = init.figures.get("device") if init is not None else None
    world = init.figures.get("world_size") if init is not None else None
    facts["gpu_count"] = int(world) if isinstance(world, int) else job.world_size
    if "import" in by:
        facts["torch"] = by["import"].figures.get("torch")
    return facts


def accept_python_slurm(
    executable: str,
    *,
    opts: SlurmOptions,
    job: CommJob,
    runner: Runner,
    workdir: Path,
    timeouts: Mapping[str, float] | None = None,
    thresholds: Thresholds | None = None,
    max_bytes: int = 8 << 30,
    on_state: Callable[[JobInfo, CommFiles], None] | None = None,
    time_limit: float | None = None,
) -> AcceptanceRun:
    """``rocmforge test --python PATH --tier comm --executor slurm``: probe the interpreter
    here (it must be at the same path on the nodes), run the tier as one job, and make the
    statement about its installed torch (and triton), as
    :func:`~rocmforge.accept.run.accept_python` does for one node."""
    from rocmforge.accept.attest import statement, subjects_of

    python = probe_python(executable)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "comm.log"
    with log_path.open("wb") as log:
        report = run_comm_slurm(python, opts=opts, job=job, runner=runner, log=log,
                                timeouts=timeouts, thresholds=thresholds or Thresholds(),
                                max_bytes=max_bytes, on_state=on_state,
                                time_limit=time_limit)  # fmt: skip
    files = [(f"{n}=={v} ({executable})", Path(r)) for n, v, r in python.installed
             if r and os.path.isfile(r)]  # fmt: skip
    return AcceptanceRun(report, statement(report, subjects_of(files)), log_path)
