"""``realize --executor slurm`` against a real single-node Slurm (issue 17).

The module starts its own slurmctld, slurmd and munged (``scripts/slurm-up.sh``, Debian's
slurm-wlm and munge) on free loopback ports with all state in a temp dir, and stops them at the
end (``scripts/slurm-down.sh``: jobs cancelled first, daemons by pid file; tests/e2e/
slurm_cluster.py, shared with test_slurm_comm.py). Recipes are
compiler-free (a step writes the wheel), so each job costs the scheduler pass and a realize.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, pip_args, rf
from slurm_cluster import private_slurm

sys.path.insert(0, str(REPO / "bench"))
from bench_graph import recipe


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A private Slurm for this module; yields the environment a client and a job need."""
    with private_slurm(tmp_path_factory) as env:
        yield env


def _args(tmp_path: Path, *extra: str | Path) -> list[str | Path]:
    return [
        "--store", tmp_path / "store", "--executor", "slurm", "--cache", f"file://{tmp_path}/cache",
        "--job-dir", tmp_path / "jobs", "--scratch-store", tmp_path / "scratch", *extra,
    ]  # fmt: skip


def _popen(slurm: dict[str, str], *args: str | Path) -> subprocess.Popen[str]:
    env = {**os.environ, "ROCMFORGE_PIP_ARGS": pip_args(), **slurm}
    env.pop("ROCMFORGE_STORE", None)
    return subprocess.Popen(
        [sys.executable, "-m", "rocmforge", *map(str, args)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint,
    )  # fmt: skip


def _default_sigint() -> None:
    """SIGINT as a terminal would deliver it: a suite run in the background (``cmd &`` in a
    script, nohup) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _squeue(slurm: dict[str, str], job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"],
                         env={**os.environ, **slurm}, capture_output=True, text=True,
                         check=False)  # fmt: skip
    return out.stdout.strip()


def _record_files(tmp_path: Path, hash: str | None = None) -> list[Path]:
    """The job records written so far (a record being written is a ``.*.tmp`` file beside)."""
    jobs = tmp_path / "jobs" / "jobs"
    return sorted(jobs.glob(f"{hash or ''}*.json")) if jobs.is_dir() else []


def _record(tmp_path: Path, hash: str | None = None) -> dict:
    files = _record_files(tmp_path, hash)
    assert len(files) == 1, files
    return dict(json.loads(files[0].read_text()))


def _text(path: Path) -> str:
    """The text of a log a job writes, "" until Slurm has created it (when the job starts)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _wait(pred, timeout: float = 60.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _phases(log: Path) -> dict[str, float]:
    out = {}
    for line in log.read_text().splitlines():
        if line.startswith("rocmforge: phase "):
            name, when = line.split()[2:4]
            out[name] = float(when)
    return out


@pytest.mark.slow
def test_graph_of_three_runs_as_dependent_jobs_queued_at_once(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    recipe(root, "a", [])
    recipe(root, "b", ["a.toml"])
    c = recipe(root, "c", ["b.toml"])
    proc = rf("realize", c, *_args(tmp_path), "--all", "--json", "--heartbeat", "1", env=slurm,
              timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # Off a terminal, a heartbeat line says how many jobs are where.
    assert re.search(r"\[slurm\] \d+ s: .*\d (done|pending|running)", proc.stderr), proc.stderr
    reports = {r["name"]: r for r in json.loads(proc.stdout)}
    assert sorted(reports) == ["a", "b", "c"]
    assert all(r["substituted"] == f"file://{tmp_path}/cache" for r in reports.values())
    assert "3 jobs submitted, 0 attached" in proc.stderr
    # Everything was queued before the first job ran: b and c waited on their dependency.
    assert "b 1.0" in proc.stderr and "pending (Dependency)" in proc.stderr
    records = {r["name"]: r for r in map(json.loads, map(Path.read_text,
               (tmp_path / "jobs" / "jobs").glob("*.json")))}  # fmt: skip
    ids = [int(records[n]["job_id"]) for n in "abc"]
    assert ids == sorted(ids) and len(set(ids)) == 3
    for n in "abc":
        assert f"job {records[n]['job_id']}" in proc.stderr and records[n]["log"] in proc.stderr
    a, b, cc = (_phases(Path(records[n]["log"])) for n in "abc")
    assert a["pushed"] <= b["start"] and b["pushed"] <= cc["start"]  # afterok order
    # The log of a remote build is read from the job directory.
    log = rf("log", records["b"]["hash"][:10], "--store", tmp_path / "scratch",
             "--job-dir", tmp_path / "jobs", env=slurm)  # fmt: skip
    assert log.returncode == 0 and "mkwheel: wrote b 1.0" in log.stdout, log.stderr
    # Once substituted, the build log came with the entry through the cache.
    stored = rf("log", c, "--store", tmp_path / "store", env=slurm)
    assert stored.returncode == 0 and "mkwheel: wrote c 1.0" in stored.stdout, stored.stderr
    # Again: all in the store, nothing submitted.
    again = rf("realize", c, *_args(tmp_path), env=slurm)
    assert again.returncode == 0, again.stderr
    assert "submitted" not in again.stderr and "c 1.0" in again.stderr


@pytest.mark.slow
def test_failed_job_shows_its_log_and_diagnosis_and_dependents_are_not_built(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    recipe(root, "bad", [], 'echo "x.c:1: fatal error: hip_runtime.h: No such file or directory"'
           " >&2; exit 4")  # fmt: skip
    after = recipe(root, "after", ["bad.toml"])
    proc = rf("realize", after, *_args(tmp_path), env=slurm, timeout=300)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert "bad 1.0" in err and "failed (build failed (exit" in err
    assert "fatal error: hip_runtime.h" in err  # the last lines of the job's log
    assert "cause:" in err and "HIP" in err  # diagnosed like a local build
    assert "after (after.toml): not built: a dependency failed (bad)" in err
    assert "full log: " + str(tmp_path / "jobs" / "logs") in err


@pytest.mark.slow
def test_job_over_its_memory_limit_is_named(slurm: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    hog = recipe(root, "hog", [], "python -c \"b = b'x' * (700 << 20); import time; "
                 'time.sleep(10)"')  # fmt: skip
    text = hog.read_text().replace("[build]\n", '[build]\nresources = {memory = "300M"}\n')
    hog.write_text(text)
    proc = rf("realize", hog, *_args(tmp_path), env=slurm, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "killed for memory" in proc.stderr and "--mem=300M" in proc.stderr
    script = (tmp_path / "jobs" / "scripts").glob("*.sh")
    assert next(script).is_file()


@pytest.mark.slow
def test_interrupt_cancels_crash_leaves_and_rerun_attaches(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    slow = recipe(root, "slow", [], "echo slow-build-running; sleep 8")
    args = ["realize", slow, *_args(tmp_path)]

    def running() -> dict:
        _wait(lambda: _record_files(tmp_path), what="a job record")
        rec = _record(tmp_path)
        _wait(lambda: _squeue(slurm, rec["job_id"]) == "RUNNING", what="RUNNING")
        return rec

    # SIGTERM: its job is cancelled.
    p = _popen(slurm, *args)
    first = running()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert f"SIGTERM: cancelled 1 jobs ({first['job_id']})" in err
    _wait(lambda: _squeue(slurm, first["job_id"]) == "CANCELLED", what="CANCELLED")
    # A crash (SIGKILL) leaves the job queued; the log is readable while it runs.
    p = _popen(slurm, *args)
    _wait(lambda: _record(tmp_path)["job_id"] != first["job_id"], what="a new job")
    second = running()
    p.kill()
    p.communicate(timeout=60)
    assert _squeue(slurm, second["job_id"]) == "RUNNING"
    # RUNNING in squeue comes before slurmd has created the job's log, and the build's own log
    # gets the step's header ("step 1/2: echo slow-build-running; ...") before the echo's
    # output: `rocmforge log` is read until it shows the output line (each read must succeed).
    _wait(lambda: "slow-build-running" in _text(Path(second["log"])), what="the job's log")
    jobs = ["--store", tmp_path / "store", "--job-dir", tmp_path / "jobs"]
    shown: list[subprocess.CompletedProcess[str]] = []

    def echoed() -> bool:
        shown.append(rf("log", slow, *jobs, env=slurm))
        assert shown[-1].returncode == 0, shown[-1].stderr
        return "| slow-build-running" in shown[-1].stdout

    _wait(echoed, what="the build's output in `rocmforge log`")
    # Held (SIGSTOP) until the rerun below: on a slow machine its 8 s must not run out before
    # --detach has attached to it.
    control = ["scontrol", "suspend", second["job_id"]]
    subprocess.run(control, env={**os.environ, **slurm}, check=True, capture_output=True)
    _wait(lambda: _squeue(slurm, second["job_id"]) == "SUSPENDED", what="SUSPENDED")
    # --detach: SIGINT leaves the job it attached to.
    p = _popen(slurm, *args, "--detach")
    assert p.stderr is not None
    while f"job {second['job_id']}" not in p.stderr.readline():  # attached
        assert p.poll() is None
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "1 jobs stay queued (--detach)" in err, err
    assert _squeue(slurm, second["job_id"]) == "SUSPENDED"  # not cancelled
    control[1] = "resume"
    subprocess.run(control, env={**os.environ, **slurm}, check=True, capture_output=True)
    # The same command again attaches to it and waits for it.
    proc = rf("realize", *args[1:], env=slurm, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "0 jobs submitted, 1 attached" in proc.stderr
    assert f"job {second['job_id']}" in proc.stderr
    assert _record(tmp_path)["job_id"] == second["job_id"]


@pytest.mark.slow
def test_node_failure_is_retried(slurm: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    recipe(root, "flaky", [], "sleep 3")
    dependent = recipe(root, "dependent", ["flaky.toml"])
    p = _popen(slurm, "realize", dependent, *_args(tmp_path), "--retries", "1")
    env = {**os.environ, **slurm}
    _wait(lambda: len(_record_files(tmp_path)) == 2, what="two job records")
    rec = next(json.loads(f.read_text()) for f in _record_files(tmp_path)
               if json.loads(f.read_text())["name"] == "flaky")  # fmt: skip
    _wait(lambda: _squeue(slurm, rec["job_id"]) == "RUNNING", what="RUNNING")
    down = ["scontrol", "update", "nodename=localhost", "state=down", "reason=rocmforge-test"]
    subprocess.run(down, env=env, check=True, capture_output=True)
    time.sleep(1)
    subprocess.run(["scontrol", "update", "nodename=localhost", "state=resume"], env=env,
                   check=False, capture_output=True)  # fmt: skip
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert "flaky 1.0" in err and "resubmitted after node-fail" in err
    assert "(attempt 2)" in err
    # Its dependent (cancelled by Slurm with the failed job) was queued again behind it.
    assert "dependent 1.0" in err and "pending (resubmitted)" in err, err
    assert "2 jobs submitted" not in err and "4 jobs submitted, 0 attached" in err


@pytest.mark.slow
def test_matrix_cells_are_queued_at_once_and_tabled(slurm: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    r = recipe(root, "cells", [], 'test -n "$FLAVOR"')
    proc = rf("realize", r, *_args(tmp_path), "--matrix", "FLAVOR=x,y", "--json", env=slurm,
              timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [row["cell"] for row in rows] == [{"FLAVOR": "x"}, {"FLAVOR": "y"}]
    assert len({row["hash"] for row in rows}) == 2 and all(row["wheel"] for row in rows)
    assert all(row["status"].startswith("built (job ") for row in rows)
    assert "2 jobs submitted" in proc.stderr
    table = rf("realize", r, *_args(tmp_path), "--matrix", "FLAVOR=x,y", env=slurm)
    assert table.returncode == 0, table.stderr
    head, *lines = table.stdout.splitlines()
    assert head.split() == ["recipe", "cell", "hash", "status", "wheel"]
    assert [ln.split()[1] for ln in lines] == ["FLAVOR=x", "FLAVOR=y"]
    assert all(ln.split()[3] == "cached" for ln in lines)


@pytest.mark.slow
def test_job_cancelled_from_outside_is_named(slurm: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    victim = recipe(root, "victim", [], "sleep 20")
    p = _popen(slurm, "realize", victim, *_args(tmp_path))
    _wait(lambda: _record_files(tmp_path), what="a job record")
    job = _record(tmp_path)["job_id"]
    _wait(lambda: _squeue(slurm, job) == "RUNNING", what="RUNNING")
    subprocess.run(["scancel", job], env={**os.environ, **slurm}, check=True)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1, err
    assert f"victim 1.0 ({_record(tmp_path)['hash']}): Slurm job {job} cancelled (scancel" in err


@pytest.mark.slow
def test_a_node_that_hashes_differently_pushes_nothing(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    recipe(root, "first", [], "echo first-running; sleep 3")
    second = recipe(root, "second", ["first.toml"])
    p = _popen(slurm, "realize", second, *_args(tmp_path))
    log = tmp_path / "jobs" / "logs"
    _wait(lambda: log.is_dir() and any("first-running" in _text(f) for f in log.iterdir()),
          what="the first job running")  # fmt: skip
    # The second job waits on the first (Dependency): recorded, but Slurm has not made its log.
    _wait(lambda: len(_record_files(tmp_path)) == 2, what="two job records")
    [waiting] = [r for r in map(json.loads, map(Path.read_text, _record_files(tmp_path)))
                 if r["name"] == "second"]  # fmt: skip
    if _squeue(slurm, waiting["job_id"]) == "PENDING" and not Path(waiting["log"]).exists():
        jobs = ["--store", tmp_path / "scratch", "--job-dir", tmp_path / "jobs"]
        shown = rf("log", waiting["hash"][:12], *jobs, env=slurm)
        assert shown.returncode == 0, shown.stderr
        assert f"Slurm job {waiting['job_id']} has not started yet" in shown.stderr
        assert shown.stdout == ""
    # The source changes while the second job waits: its node computes another input hash.
    (root / "second-src" / "second" / "__init__.py").write_text("NAME = 'changed'\n")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1, err
    assert "hashed" in err and "differently from the submitter" in err and "exit 3" in err
    cached = [m.name for m in (tmp_path / "cache" / "entries").iterdir()]
    assert len(cached) == 1  # only the first one


# -- no Slurm needed ------------------------------------------------------------------------


@pytest.mark.slow
def test_log_of_a_job_recorded_but_not_started_says_so(tmp_path: Path) -> None:
    """The record is written at submission; Slurm creates the log only when the job starts."""
    from rocmforge.executor.submit import job_record_path
    from rocmforge.store.store import open_store
    from rocmforge.util.fsutil import json_bytes, write_atomic

    open_store(tmp_path / "store")  # the submitter's store (realize made it): empty here

    hash = "9cf450ea72bb051cc41b40a8e8a4d2fc"
    jobs = tmp_path / "jobs"
    log = jobs / "logs" / f"{hash}-slow-1.0.log"
    record = {"job_id": "41", "name": "slow", "version": "1.0", "hash": hash, "log": str(log),
              "recipe": str(tmp_path / "slow.toml"), "attempt": 1, "submitted": 0.0,
              "cache": f"file://{tmp_path}/cache"}  # fmt: skip
    job_record_path(jobs, hash).parent.mkdir(parents=True)
    write_atomic(job_record_path(jobs, hash), json_bytes(record))
    args = ("log", hash[:10], "--store", tmp_path / "store", "--job-dir", jobs)
    waiting = rf(*args)
    assert waiting.returncode == 0, waiting.stderr
    assert waiting.stdout == ""
    assert f"{hash[:10]}: Slurm job 41 has not started yet (its log will be {log})" in (
        waiting.stderr
    )
    answer = json.loads(rf(*args, "--json").stdout)
    assert answer == {"target": hash[:10], "source": "job", "log": str(log), "cache": None,
                      "job_id": "41", "started": False, "text": ""}  # fmt: skip
    log.parent.mkdir()
    log.write_text("slow-build-running\n")  # the job started
    running = rf(*args)
    assert running.returncode == 0 and running.stdout == "slow-build-running\n", running.stderr
    answer = json.loads(rf(*args, "--json").stdout)
    assert answer["started"] is True and answer["text"] == "slow-build-running\n"


@pytest.mark.slow
def test_resources_are_not_hashed(tmp_path: Path, tiny_recipe: Path) -> None:
    plain = rf("plan", tiny_recipe, "--store", tmp_path / "store", "--json")
    assert plain.returncode == 0, plain.stderr
    text = tiny_recipe.read_text().replace(
        "[build]\n", '[build]\nresources = {cpus = 8, memory = "64G", time = "6h", gpus = 1}\n'
    )
    tiny_recipe.write_text(text)
    more = rf("plan", tiny_recipe, "--store", tmp_path / "store", "--json")
    assert more.returncode == 0, more.stderr
    assert json.loads(more.stdout)["hash"] == json.loads(plain.stdout)["hash"]
    assert "resources" not in json.loads(more.stdout)["derivation"]["build"]


def test_slurm_options_and_job_ends_are_named() -> None:
    from rocmforge.errors import UsageError
    from rocmforge.executor.slurm import JobInfo, JobRequest, SlurmOptions, outcome, sbatch_argv

    table = {"job-dir": "/shared/jobs", "partition": "mi300x", "account": "proj1", "qos": "high",
             "time": "1h30m", "sbatch-args": ["--exclusive"], "retries": 2}  # fmt: skip
    opts = SlurmOptions.from_mapping(table)
    job = JobRequest(script=Path("/s.sh"), name="rf-x", output=Path("/o"), after=("7", "8"),
                     cpus=4, memory_mb=2048, gpus=1)  # fmt: skip
    argv = sbatch_argv(opts, job)
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-2:] == ["--exclusive", "/s.sh"]
    for want in ("--dependency=afterok:7:8", "--kill-on-invalid-dep=yes", "--no-requeue",
                 "--partition=mi300x", "--account=proj1", "--qos=high", "--time=90",
                 "--cpus-per-task=4", "--mem=2048M", "--gres=gpu:1"):  # fmt: skip
        assert want in argv
    assert opts.scratch_max_size == 40 << 30  # the default: a few tens of GB
    assert SlurmOptions.from_mapping({"job-dir": "/j", "scratch-max-size": "2G"}).scratch_max_size \
        == 2 << 30
    with pytest.raises(UsageError, match=r"^\[slurm\]: scratch-max-size: invalid size 'lots'"):
        SlurmOptions.from_mapping({"job-dir": "/j", "scratch-max-size": "lots"})
    for bad in ({"partition": "x"}, {"job-dir": "/j", "retries": -1}, {"job-dir": "/j", "nope": 1},
                {"job-dir": "/j", "time": "soon"}, {"job-dir": "/j", "scratch-max-size": -1},
                {"job-dir": "/j", "scratch-max-size": True}):  # fmt: skip
        with pytest.raises(UsageError):
            SlurmOptions.from_mapping(bad)
    # The state table of ../shared/DIST.md (no slurmdbd): each end named.
    cases = {
        ("COMPLETED", "None", "0:0", ""): "done",
        ("FAILED", "NonZeroExitCode", "3:0", ""): "failed",
        ("FAILED", "JobLaunchFailure", "0:9", "StepId=5.batch exceeded memory limit"): "oom",
        ("OUT_OF_MEMORY", "OutOfMemory", "0:125", ""): "oom",
        ("TIMEOUT", "TimeLimit", "0:15", ""): "timeout",
        ("NODE_FAIL", "NodeDown", "0:15", ""): "node-fail",
        ("CANCELLED", "None", "0:15", ""): "cancelled",
        ("CANCELLED", "DependencyNeverSatisfied", "0:0", ""): "dependency",
    }
    for (state, reason, code, log), kind in cases.items():
        info = JobInfo(id="5", state=state, reason=reason, exit_code=code)
        assert outcome(info, log).kind == kind, (state, reason)


@pytest.mark.slow
def test_slurm_executor_needs_a_cache_and_a_job_dir(tmp_path: Path, tiny_recipe: Path) -> None:
    store = tmp_path / "store"
    no_cache = rf("realize", tiny_recipe, "--store", store, "--executor", "slurm",
                  "--job-dir", tmp_path / "jobs", env={"ROCMFORGE_CACHES": ""})  # fmt: skip
    assert no_cache.returncode == 2 and "needs a cache every node reaches" in no_cache.stderr
    no_dir = rf("realize", tiny_recipe, "--store", store, "--executor", "slurm",
                "--cache", f"file://{tmp_path}/c", env={"ROCMFORGE_JOB_DIR": ""})  # fmt: skip
    assert no_dir.returncode == 2 and "needs --job-dir DIR" in no_dir.stderr
    assert len(no_dir.stderr.strip().splitlines()) == 1 and not (tmp_path / "c").exists()
    # The cache and the [slurm] table may come from a configuration file; a bad key in it is
    # named with the file (the job dir and partition flags would override it).
    config = tmp_path / "rocmforge.toml"
    config.write_text(
        f'caches = ["file://{tmp_path}/c"]\n[slurm]\njob-dir = "{tmp_path}/jobs"\nbogus = 1\n'
    )
    bad = rf("realize", tiny_recipe, "--store", store, "--executor", "slurm",
             "--config", config, env={"ROCMFORGE_JOB_DIR": ""})  # fmt: skip
    assert bad.returncode == 2 and "unknown key 'bogus'" in bad.stderr, bad.stderr
    assert str(config) in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_matrix_with_the_local_executor(tmp_path: Path) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    r = recipe(root, "loc", [], 'test "$MODE" = fast -o "$MODE" = safe')
    proc = rf("realize", r, "--store", tmp_path / "store", "--matrix", "MODE=fast,safe", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(row["cell"], row["status"]) for row in rows] == [
        ({"MODE": "fast"}, "built"), ({"MODE": "safe"}, "built")]  # fmt: skip
    assert len({row["hash"] for row in rows}) == 2
    cells = sorted(p.name for p in (tmp_path / "store" / "cache" / "matrix").iterdir())
    assert cells == ["loc@MODE=fast.toml", "loc@MODE=safe.toml"]
    bad = rf("realize", r, "--store", tmp_path / "store", "--matrix", "MODE")
    assert bad.returncode == 2 and "expected KEY=v1,v2" in bad.stderr


@pytest.mark.slow
def test_a_stack_matrix_table_realizes_each_recipe_per_cell(tmp_path: Path) -> None:
    root = tmp_path / "recipes"
    root.mkdir()
    recipe(root, "one", [], 'test -n "$ARCH"')
    (root / "st.toml").write_text(
        'schema = 1\n[stack]\nname = "st"\nrecipes = ["one.toml"]\n'
        '[stack.matrix]\nARCH = ["gfx90a", "gfx942"]\n'
    )
    proc = rf("realize", root / "st.toml", "--store", tmp_path / "store", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [row["cell"] for row in json.loads(proc.stdout)] == [{"ARCH": "gfx90a"},
                                                                {"ARCH": "gfx942"}]  # fmt: skip
    # --matrix overrides the stack's values for the same variable
    proc = rf("realize", root / "st.toml", "--store", tmp_path / "store", "--json",
              "--matrix", "ARCH=gfx1100")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [row["cell"] for row in json.loads(proc.stdout)] == [{"ARCH": "gfx1100"}]
    (root / "bad.toml").write_text(
        'schema = 1\n[stack]\nname = "b"\nrecipes = ["one.toml"]\nmatrix = {ARCH = []}\n'
    )
    bad = rf("realize", root / "bad.toml", "--store", tmp_path / "store")
    assert bad.returncode == 2 and "stack.matrix.ARCH" in bad.stderr, bad.stderr


def _fresh_key(config: Path, *extra: str) -> str:
    """Generate a new signing key in ``config`` (replacing the one there); its public key."""
    gen = rf("key", "generate", "--force", "--json", "--name", "farm", *extra,
             env={"XDG_CONFIG_HOME": str(config), "ROCMFORGE_TRUSTED_KEYS": ""})  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    return str(json.loads(gen.stdout)["public_key"])


@pytest.mark.slow
def test_three_farm_runs_with_three_fresh_trusted_keys_in_a_row(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    """Issue 34: each run a new key (same name), trusted alone, a fresh cache and store; the
    node's scratch store keeps the entries the first run built under the first key."""
    root = tmp_path / "recipes"
    root.mkdir()
    recipe(root, "bar_a", [])
    recipe(root, "bar_b", ["bar_a.toml"])
    top = recipe(root, "bar_c", ["bar_b.toml"])
    config = tmp_path / "config"
    for run in range(3):
        env = {**slurm, "XDG_CONFIG_HOME": str(config),
               "ROCMFORGE_TRUSTED_KEYS": _fresh_key(config)}  # fmt: skip
        proc = rf("realize", top, "--store", tmp_path / f"store{run}", "--executor", "slurm",
                  "--cache", f"file://{tmp_path}/cache{run}", "--job-dir", tmp_path / "jobs",
                  "--scratch-store", tmp_path / "scratch", "--json", env=env,
                  timeout=300)  # fmt: skip
        assert proc.returncode == 0, f"run {run + 1}: {proc.stderr}"
        assert "refused" not in proc.stderr, proc.stderr
        names = sorted(r["name"] for r in json.loads(proc.stdout))
        assert names == ["bar_c"], proc.stdout
        if run:  # found in the scratch store and signed there by the node's (the new) key
            logs = (tmp_path / "jobs" / "logs").glob("*.log")
            assert any("signed with farm" in p.read_text() for p in logs)


def _entries_size(store: Path) -> int:
    """The bytes of every file under ``store``'s entries (what scratch-max-size bounds)."""
    return sum(f.stat().st_size for f in (store / "entries").rglob("*") if f.is_file())


@pytest.mark.slow
def test_scratch_store_stays_under_its_limit_over_five_farm_runs(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    """Each job gc's its node's scratch store after its push to scratch-max-size (its own entry
    kept): five runs of five recipes (about 210 KiB an entry) under a 500 KiB limit."""
    root = tmp_path / "recipes"
    root.mkdir()
    limit = 500 << 10
    scratch = tmp_path / "scratch"
    sizes = []
    for run in range(5):
        r = recipe(root, f"part{run}", [])
        proc = rf("realize", r, *_args(tmp_path), "--scratch-max-size", "500K", env=slurm,
                  timeout=300)  # fmt: skip
        assert proc.returncode == 0, f"run {run + 1}: {proc.stderr}"
        sizes.append(_entries_size(scratch))
        names = sorted(p.name.split("-", 1)[1] for p in (scratch / "entries").iterdir())
        assert f"part{run}-1.0" in names, names  # the job's own entry is kept
        assert sizes[-1] <= limit, (run, sizes, names)
    assert len(list((tmp_path / "cache" / "entries").iterdir())) == 5  # all were pushed
    logs = "".join(p.read_text() for p in (tmp_path / "jobs" / "logs").glob("*.log"))
    assert "deleted " in logs and "rocmforge: phase gc " in logs


def _key(config: Path) -> dict[str, str]:
    """Generate a new signing key named farm in ``config``; its ``key generate --json``."""
    gen = rf("key", "generate", "--force", "--json", "--name", "farm",
             env={"XDG_CONFIG_HOME": str(config), "ROCMFORGE_TRUSTED_KEYS": ""})  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    return dict(json.loads(gen.stdout))


@pytest.mark.slow
@pytest.mark.parametrize("node_key", [True, False], ids=["node-signs", "keyless-node-rebuilds"])
def test_a_scratch_entry_under_an_untrusted_key_is_signed_or_rebuilt(
    slurm: dict[str, str], tmp_path: Path, node_key: bool
) -> None:
    """Issue 34 point 4: the node's scratch store holds the entry, signed by a key (named farm)
    the submitter no longer trusts. A node with a trusted key signs it there; a node with no key
    removes it, builds it again unsigned and records its provenance digest in the job directory,
    and the submitter signs the pushed copy with its own key. Either way the submitter
    substitutes it (nothing refused) and the cache's copy is signed by the trusted key."""
    root = tmp_path / "recipes"
    root.mkdir()
    top = recipe(root, "solo", [])
    old, new = _key(tmp_path / "old"), _key(tmp_path / "new")
    seed = rf("realize", top, "--store", tmp_path / "scratch",
              env={**slurm, "XDG_CONFIG_HOME": str(tmp_path / "old"),
                   "ROCMFORGE_TRUSTED_KEYS": old["public_key"]})  # fmt: skip
    assert seed.returncode == 0, seed.stderr
    env = {**slurm, "XDG_CONFIG_HOME": str(tmp_path / "new"),
           "ROCMFORGE_TRUSTED_KEYS": new["public_key"]}  # fmt: skip
    # sbatch's --export=ALL,VAR= : the job runs with signing off, the submitter keeps its key.
    extra = [] if node_key else ["--sbatch-arg=--export=ALL,ROCMFORGE_SIGNING_KEY="]
    proc = rf("realize", top, *_args(tmp_path), "--json", *extra, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "refused" not in proc.stderr, proc.stderr
    [report] = json.loads(proc.stdout)
    assert report["substituted"] == f"file://{tmp_path}/cache", report
    logs = "".join(p.read_text() for p in (tmp_path / "jobs" / "logs").glob("*.log"))
    if node_key:
        assert "signed with farm" in logs and "building it again" not in logs, logs
    else:
        assert "this node has no signing key: removed from the scratch store" in logs, logs
        assert "the submitter signs the pushed copy" in logs, logs
        assert "built on a node without a signing key, signed in" in proc.stderr, proc.stderr
    ls = rf("cache", "ls", f"file://{tmp_path}/cache", "--json", env=env)
    assert ls.returncode == 0, ls.stderr
    [entry] = json.loads(ls.stdout)["entries"]
    fingerprints = {s["fingerprint"] for s in entry["signers"]}
    assert new["fingerprint"] in fingerprints, entry
    # Signed in place keeps the old signature beside the new; a rebuild has only the new one.
    assert (old["fingerprint"] in fingerprints) == node_key, entry


def test_a_job_holds_a_gc_root_for_its_entry_until_it_ends(tmp_path: Path) -> None:
    """Two jobs share a node's scratch store: one job's gc after its push must not remove the
    entry of another job between that job's realize and its push. The job script's root lines
    (real bash, flock(1)) hold a live root there; gc --max-size 0 keeps the entry while the job
    runs and removes it once the job has ended (killed, here)."""
    from rocmforge.executor.submit import hold_root

    root = tmp_path / "recipes"
    root.mkdir()
    store = tmp_path / "scratch"
    built = rf("realize", recipe(root, "held", []), "--store", store, "--json")
    assert built.returncode == 0, built.stderr
    hash = json.loads(built.stdout)[0]["hash"]
    job = subprocess.Popen(["bash", "-c", f"store={store}\n{hold_root(hash)}\necho held\n"
                            "exec sleep 60"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert job.stdout is not None and job.stdout.readline() == "held\n"
        gc = rf("gc", "--store", store, "--max-size", "0")
        assert gc.returncode == 0, gc.stderr
        assert len(list((store / "entries").iterdir())) == 1, gc.stdout
    finally:
        job.kill()
        job.wait()
    gc = rf("gc", "--store", store, "--max-size", "0")
    assert gc.returncode == 0, gc.stderr
    assert list((store / "entries").iterdir()) == [], gc.stdout
