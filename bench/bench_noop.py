"""No-op realize: median wall time of `rocmforge realize recipes/demo.toml` on a warm store.

Target (issue 2): median of 20 runs <= 50 ms on a 2-core machine. Prints the figures.
Usage: python bench/bench_noop.py [--runs 20] [--store DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> int:
    # measure an installed package: byte-compiled, as pip leaves it (see scripts/setup.sh)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--store", type=Path, default=None)
    ap.add_argument("--recipe", type=Path, default=REPO / "recipes" / "demo.toml")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 3 runs")
    args = ap.parse_args()
    if args.quick:
        args.runs = 3
    tmp = Path(tempfile.mkdtemp(prefix="rf-bench-"))
    store = args.store or tmp / "store"
    env = dict(os.environ)
    wheelhouse = REPO / ".ci" / "wheelhouse"
    if "ROCMFORGE_PIP_ARGS" not in env and wheelhouse.is_dir():
        env["ROCMFORGE_PIP_ARGS"] = f"--no-index --find-links {wheelhouse}"
    exe = shutil.which("rocmforge", path=str(Path(sys.executable).parent)) or "rocmforge"
    argv = [exe, "realize", str(args.recipe), "--store", str(store)]
    first = timed(argv, env)  # builds (or is already cached in --store)
    base = [timed([sys.executable, "-c", "pass"], env) for _ in range(args.runs)]
    runs = [timed(argv, env) for _ in range(args.runs)]
    med = statistics.median(runs)
    print(f"first realize (build):      {first * 1000:8.1f} ms")
    print(f"python -c pass (median):    {statistics.median(base) * 1000:8.1f} ms")
    print(
        f"no-op realize median of {args.runs}: {med * 1000:8.1f} ms  (min {min(runs) * 1000:.1f}, "
        f"max {max(runs) * 1000:.1f})  target <= 50 ms: {'met' if med <= 0.050 else 'MISSED'}"
    )
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
