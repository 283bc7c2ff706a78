"""Slurm executor figures (issue 17), on a private single-node Slurm on loopback, each printed as
the pair measured, the ratio and the target:

1. Overhead per node: `realize --executor slurm` of one recipe whose build step sleeps 1 s, from
   sbatch to the wheel in the local store, broken down (plan+submit, queue, build on the node,
   push, notice+substitute); paired with a local `realize` of the same kind of recipe.
   Target: submit -> result <= 5 s.
2. A graph of 20 independent 1 s builds through Slurm (1 CPU per job on the 2-core node) vs the
   same 20 built locally with `realize -j 2` (what the 2 cores allow for the same work).
   Target: <= 1.5x.

Every run uses fresh recipes (new hashes), a fresh store and cache; the jobs' scratch store is
one per node and kept, as the default ($TMPDIR/rocmforge-store-UID) is. farm-bench times whole
commands; the breakdown needs the job's own timestamps, so this script times itself.
Needs root, slurm-wlm and munge (scripts/test.sh). Usage: python bench/bench_slurm.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from bench_graph import recipe  # noqa: E402

WHEELHOUSE = REPO / ".ci" / "wheelhouse"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rf(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "rocmforge", *map(str, args)], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"failed: rocmforge {' '.join(map(str, args))}\n{proc.stderr}")
    return proc


def phases(log: Path) -> dict[str, float]:
    out = {}
    for line in log.read_text().splitlines():
        if line.startswith("rocmforge: phase "):
            name, when = line.split()[2:4]
            out[name] = float(when)
    return out


def overhead(env: dict[str, str], work: Path, i: int) -> dict[str, float]:
    """One 1 s build through Slurm: the breakdown in seconds."""
    run = work / f"one-{i}"
    run.mkdir()
    r = recipe(run, f"one{i}", [], "sleep 1")
    t0 = time.time()
    rf(env, "realize", r, "--store", run / "store", "--executor", "slurm",
       "--cache", f"file://{run}/cache", "--job-dir", run / "jobs",
       "--scratch-store", work / "scratch")  # fmt: skip
    end = time.time()
    (record,) = [json.loads(p.read_text()) for p in (run / "jobs" / "jobs").glob("*.json")]
    p = phases(Path(record["log"]))
    sub = record["submitted"]
    return {
        "plan+submit": sub - t0,
        "queue": p["start"] - sub,
        "build on node": p["built"] - p["start"],
        "push": p["pushed"] - p["built"],
        "notice+substitute": end - p["pushed"],
        "submit->result": end - sub,
    }


def local_one(env: dict[str, str], work: Path, i: int) -> float:
    run = work / f"local-{i}"
    run.mkdir()
    r = recipe(run, f"loc{i}", [], "sleep 1")
    t = time.perf_counter()
    rf(env, "realize", r, "--store", run / "store")
    return time.perf_counter() - t


def wide(env: dict[str, str], work: Path, tag: str, n: int, slurm: bool) -> float:
    run = work / f"wide-{tag}"
    run.mkdir()
    files = [recipe(run, f"w{tag}{k}", [], "sleep 1") for k in range(n)]
    args: list[str | Path] = ["realize", *files, "--store", run / "store"]
    if slurm:
        args += ["--executor", "slurm", "--cache", f"file://{run}/cache", "--job-dir",
                 run / "jobs", "--scratch-store", work / "scratch"]  # fmt: skip
    else:
        args += ["-j", "2"]
    t = time.perf_counter()
    rf(env, *args)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="1 overhead run, 6 nodes")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    runs, nodes = (1, 6) if args.quick else (args.runs, 20)
    missing = [t for t in ("slurmctld", "slurmd", "munged", "sbatch") if not shutil.which(t)]
    if missing or os.geteuid() != 0:
        print(f"bench_slurm: skipped (needs root and Slurm; missing: {missing or 'root'})")
        return 0
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    work = Path(tempfile.mkdtemp(prefix="rf-bench-slurm-"))
    base = work / "slurm"
    env = {**os.environ, "SLURMCTLD_PORT": str(free_port()), "SLURMD_PORT": str(free_port())}
    subprocess.run([str(REPO / "scripts" / "slurm-up.sh"), str(base)], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        env = {**env, "SLURM_CONF": str(base / "slurm.conf"),
               "XDG_CONFIG_HOME": str(work / "config"), "ROCMFORGE_TRUSTED_KEYS": "",
               "ROCMFORGE_PIP_ARGS": f"--no-index --find-links {WHEELHOUSE}"}  # fmt: skip
        env.pop("ROCMFORGE_STORE", None)
        key = rf(env, "key", "generate", "--json", "--name", "bench-slurm")
        env["ROCMFORGE_TRUSTED_KEYS"] = json.loads(key.stdout)["public_key"]
        overhead(env, work, 99)  # warm-up: the first job after start waits for slurmd
        rows = [overhead(env, work, i) for i in range(runs)]
        local = [local_one(env, work, i) for i in range(runs)]
        print(f"1. one 1 s build, {runs} runs (median s):")
        for k in rows[0]:
            low, high = min(r[k] for r in rows), max(r[k] for r in rows)
            median = statistics.median(r[k] for r in rows)
            print(f"   {k:18} {median:6.2f}   (min {low:.2f}, max {high:.2f})")
        total = statistics.median(r["submit->result"] for r in rows)
        loc = statistics.median(local)
        print(f"   pair: slurm submit->result {total:.2f} s vs local realize {loc:.2f} s: "
              f"ratio {total / loc:.2f}x; target submit->result <= 5 s: "
              f"{'met' if total <= 5 else 'NOT met'}")  # fmt: skip
        s = wide(env, work, "s", nodes, True)
        j = wide(env, work, "j", nodes, False)
        print(f"2. {nodes} independent 1 s builds: slurm {s:.1f} s vs local -j 2 {j:.1f} s "
              f"(bound {nodes / 2:.0f} s of sleep): ratio {s / j:.2f}x; target <= 1.5x: "
              f"{'met' if s / j <= 1.5 else 'NOT met'}")  # fmt: skip
    finally:
        subprocess.run([str(REPO / "scripts" / "slurm-down.sh"), str(base)],
                       env={**os.environ, "SLURM_CONF": str(base / "slurm.conf")},
                       stdout=subprocess.DEVNULL, check=False)  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
