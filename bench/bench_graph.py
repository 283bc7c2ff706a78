"""Graph figures (issue 12), each printed as the pair measured, the ratio and the target:

1. `plan --graph` of a 50-node synthetic graph, all cached: median <= 150 ms.
2. no-op `realize` of a cached 3-node stack (memo): median <= 60 ms.
3. `realize -j 2` of two independent 10 s builds: wall time <= 1.3x one build.

Builds are compiler-free (a step that writes a wheel); the store lives in a temp dir outside any
git work tree (the memo does not record path sources inside a worktree).
Usage: python bench/bench_graph.py [--quick] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MKWHEEL = REPO / "tests" / "data" / "mkwheel.py"


def recipe(root: Path, name: str, deps: list[str], step: str = "") -> Path:
    """Write a tiny recipe for package ``name`` built against ``deps`` (recipe file names)."""
    src = root / f"{name}-src"
    (src / name).mkdir(parents=True, exist_ok=True)
    shutil.copy(MKWHEEL, src / "mkwheel.py")
    (src / name / "__init__.py").write_text(f"NAME = {name!r}\n")
    steps = [s for s in (step, f"python mkwheel.py $OUT {name} 1.0") if s]
    text = (
        f'schema = 1\n[package]\nname = "{name}"\nversion = "1.0"\n[source]\npath = "{src}"\n'
        f"[build]\nsteps = {json.dumps(steps)}\n[check]\nimport = \"{name}\"\n"
    )
    if deps:
        text += f"[requirements]\nrecipes = {json.dumps(deps)}\n"
    path = root / f"{name}.toml"
    path.write_text(text)
    return path


def stack(root: Path, name: str, members: list[Path]) -> Path:
    path = root / f"{name}.toml"
    names = json.dumps([m.name for m in members])
    path.write_text(f'schema = 1\n[stack]\nname = "{name}"\nrecipes = {names}\n')
    return path


CPU: list[float] = []  # user+sys seconds of each run (the machine may be shared: wall is noisy)


def run(argv: list[str]) -> float:
    """Run ``argv``; return its wall time and note its CPU time in :data:`CPU`."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    CPU.append(usage.ru_utime + usage.ru_stime)
    return wall


def cpu_median(n: int) -> float:
    """The median CPU time of the last ``n`` runs."""
    return statistics.median(CPU[-n:])


def main() -> int:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="10 nodes, 2 s builds, 3 runs")
    args = ap.parse_args()
    nodes, sleep = (50, 10) if not args.quick else (10, 2)
    runs = args.runs if not args.quick else 3
    exe = shutil.which("rocmforge", path=str(Path(sys.executable).parent)) or "rocmforge"
    tmp = Path(tempfile.mkdtemp(prefix="rf-bench-graph-"))
    store = str(tmp / "store")
    try:
        # 1. a layered DAG: node i is built against i-1 and i-7 (when they exist)
        g = tmp / "g"
        g.mkdir()
        files = []
        for i in range(nodes):
            deps = [f"n{j}.toml" for j in (i - 1, i - 7) if j >= 0]
            files.append(recipe(g, f"n{i}", sorted(set(deps))))
        top = files[-1]
        print(f"building the {nodes}-node graph once ...", file=sys.stderr)
        run([exe, "realize", str(top), "--store", store])
        plan = [exe, "plan", "--graph", str(top), "--store", store, "--json"]
        out = subprocess.run(plan, check=True, capture_output=True, text=True).stdout
        assert all(n["cached"] for n in json.loads(out)["nodes"]), "graph not all cached"
        base = statistics.median(run([sys.executable, "-c", "pass"]) for _ in range(runs))
        med = statistics.median(run(plan) for _ in range(runs))
        cpu = cpu_median(runs)
        target = 0.150
        print(
            f"plan --graph, {nodes} nodes cached: {med * 1000:.1f} ms wall, {cpu * 1000:.1f} ms "
            f"CPU (python -c pass {base * 1000:.1f} ms); target <= {target * 1000:.0f} ms: "
            f"ratio {med / target:.2f} {'met' if med <= target else 'MISSED'}"
        )

        # 2. a cached 3-node stack: a -> b -> c, realized once, then no-op
        s = tmp / "s"
        s.mkdir()
        a = recipe(s, "sa", [])
        b = recipe(s, "sb", ["sa.toml"])
        c = recipe(s, "sc", ["sb.toml"])
        st = stack(s, "three", [a, b, c])
        run([exe, "realize", str(st), "--store", store])
        noop = [exe, "realize", str(st), "--store", store]
        med = statistics.median(run(noop) for _ in range(runs))
        cpu = cpu_median(runs)
        target = 0.060
        print(
            f"no-op realize of a cached 3-node stack: {med * 1000:.1f} ms wall, "
            f"{cpu * 1000:.1f} ms CPU; target <= "
            f"{target * 1000:.0f} ms: ratio {med / target:.2f} "
            f"{'met' if med <= target else 'MISSED'}"
        )

        # 3. two independent builds of `sleep` seconds: one alone, then both with -j 2
        p = tmp / "p"
        p.mkdir()
        one = recipe(p, "pone", [], f"sleep {sleep}")
        two = recipe(p, "ptwo", [], f"sleep {sleep}")
        solo_store = str(tmp / "solo")
        solo = run([exe, "realize", str(one), "--store", solo_store])
        both = run([exe, "realize", str(stack(p, "pair", [one, two])), "--store", store, "-j", "2"])
        ratio = both / solo
        print(
            f"-j 2, two independent {sleep} s builds: {both:.2f} s vs one build {solo:.2f} s: "
            f"ratio {ratio:.2f}; target <= 1.30: {'met' if ratio <= 1.3 else 'MISSED'}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
