"""``rocmforge list`` of a big store, whole command (issue 14, goal 5).

Builds a synthetic index of N entries (as bench/bench_query.py does) and times, interleaved run by
run, the whole ``rocmforge list --store S`` (text output, stdout to /dev/null), ``--json``, and
``python -c pass`` of the same interpreter; with nix on PATH, ``nix path-info --all`` as the
anchor (it lists every path of its own, much smaller, store). Wall and CPU (user+sys) medians.
Target: list of 10,000 entries <= 100 ms. Warm page cache, warm index.
Usage: python bench/bench_list.py [--entries 10000] [--runs 9] [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def timed(argv: list[str]) -> tuple[float, float]:
    """Run ``argv`` (stdout to /dev/null); return (wall, user+sys) seconds of the child."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return wall, ru.ru_utime + ru.ru_stime


def main() -> int:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="smoke run: 500 entries, 2 runs")
    args = ap.parse_args()
    if args.quick:
        args.entries, args.runs = 500, 2
    from bench_query import synthetic

    from rocmforge.store.store import open_store

    tmp = Path(tempfile.mkdtemp(prefix="rf-bench-list-"))
    try:
        store = open_store(tmp / "store")
        n = store.index.rebuild(synthetic(store, args.entries, random.Random(1)))
        store.close()
        exe = shutil.which("rocmforge", path=str(Path(sys.executable).parent)) or "rocmforge"
        cmds = {
            "rocmforge list": [exe, "list", "--store", str(tmp / "store")],
            "rocmforge list --json": [exe, "list", "--json", "--store", str(tmp / "store")],
            "python -c pass": [sys.executable, "-c", "pass"],
        }
        if shutil.which("nix"):
            cmds["nix path-info --all"] = ["nix", "path-info", "--all"]
        else:
            print("nix anchor skipped: nix not on PATH (apt-get install nix-bin)")
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
        for argv in cmds.values():
            timed(argv)  # warm-up
        for _ in range(args.runs):
            for k, argv in cmds.items():
                got[k].append(timed(argv))

        def med(k: str, i: int) -> float:
            return statistics.median(x[i] for x in got[k]) * 1000

        print(f"{n} entries; {args.runs} interleaved runs, medians; warm page cache")
        for k in cmds:
            print(f"{k:<24} {med(k, 0):8.1f} ms wall {med(k, 1):8.1f} ms cpu")
        verdict = "met" if med("rocmforge list", 0) <= 100 else "NOT met"
        print(f"list target <= 100 ms wall: {verdict}; "
              f"list / python -c pass: {med('rocmforge list', 0) / med('python -c pass', 0):.1f}x")
        if "nix path-info --all" in got:
            print(f"list / nix path-info --all: "
                  f"{med('rocmforge list', 0) / med('nix path-info --all', 0):.2f}x wall")
    finally:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
