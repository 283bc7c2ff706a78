"""No-op ``realize`` against store size: flat from 10 to 100,000 entries (issue 14, goal 5).

Builds ``recipes/demo.toml`` once, then copies that store once per size and fills each copy with
N synthetic entries (an index row, an ``entries/`` directory with its ``meta.json``, and a
``used/`` mark each; as bench/bench_query.py makes them). Then, run by run and interleaved across
the sizes (10, 1,000, 10,000, 100,000, ...; A B C D, A B C D, ...), times the whole command:
  memo    ``rocmforge realize demo.toml --store S`` (answered by the realize memo);
  full    the same with ``--sandbox bwrap`` (an option, so the full pipeline answers: load,
          resolve, hash, look the entry up in the store and the index).
Wall and CPU (user+sys) medians, warm page cache; each size's median against the smallest's.
Target: flat, i.e. the largest store within 1.2x of the smallest.
Usage: python bench/bench_noop_scale.py [--sizes 10,1000,10000,100000] [--runs 9] [--quick]
"""

from __future__ import annotations

import argparse
import json
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


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``argv`` (output discarded); return (wall, user+sys) seconds of the child."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return wall, ru.ru_utime + ru.ru_stime


def fill(root: Path, n: int) -> None:
    """Add ``n`` synthetic entries to the store at ``root`` (index rows, dirs, used marks)."""
    from itertools import chain

    from bench_query import synthetic

    from rocmforge.store.store import open_store, read_derivation

    store = open_store(root)
    real = [(e, read_derivation(e.path)) for e in store.sound_entries()]
    made = list(synthetic(store, n, random.Random(n)))
    used = root / "used"
    used.mkdir(exist_ok=True)
    for entry, _ in made:
        entry.path.mkdir()
        meta = {k: v for k, v in entry.meta.to_json().items() if v is not None}
        (entry.path / "meta.json").write_text(json.dumps(meta))
        (used / entry.hash).touch()
    store.index.rebuild(chain(real, made))
    store.close()


def main() -> int:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10,1000,10000,100000")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="smoke run: sizes 10 and 300, 2 runs")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.quick:
        sizes, args.runs = [10, 300], 2
    env = dict(os.environ)
    wheelhouse = REPO / ".ci" / "wheelhouse"
    if "ROCMFORGE_PIP_ARGS" not in env and wheelhouse.is_dir():
        env["ROCMFORGE_PIP_ARGS"] = f"--no-index --find-links {wheelhouse}"
    exe = shutil.which("rocmforge", path=str(Path(sys.executable).parent)) or "rocmforge"
    tmp = Path(tempfile.mkdtemp(prefix="rf-bench-scale-"))
    try:
        # A copy outside this checkout: a tree inside a git worktree (whose .git is a file) is
        # never remembered by the memo.
        (tmp / "recipes").mkdir()
        for name in ("demo.toml", "demo.lock"):
            shutil.copy(REPO / "recipes" / name, tmp / "recipes" / name)
        shutil.copytree(REPO / "examples" / "demo", tmp / "examples" / "demo")
        recipe = tmp / "recipes" / "demo.toml"
        base = tmp / "base"
        t = time.perf_counter()
        timed([exe, "realize", str(recipe), "--store", str(base)], env)
        print(f"demo built in {time.perf_counter() - t:.1f} s")
        stores = {}
        for n in sizes:
            t = time.perf_counter()
            s = tmp / f"s{n}"
            shutil.copytree(base, s, symlinks=True)
            fill(s, n)
            for _ in range(2):  # a copy is another store: the first hit records its memo
                timed([exe, "realize", str(recipe), "--store", str(s)], env)
            stores[n] = s
            print(f"store of {n + 1} entries made in {time.perf_counter() - t:.1f} s")
        kinds = {"memo": [], "full": ["--sandbox", "bwrap"]}
        got: dict[tuple[str, int], list[tuple[float, float]]] = {
            (k, n): [] for k in kinds for n in sizes
        }
        for _ in range(args.runs):
            for k, extra in kinds.items():
                for n in sizes:
                    argv = [exe, "realize", str(recipe), "--store", str(stores[n]), *extra]
                    got[k, n].append(timed(argv, env))

        def med(k: str, n: int, i: int) -> float:
            return statistics.median(x[i] for x in got[k, n]) * 1000

        print(f"{args.runs} interleaved runs, medians; warm page cache")
        for k in kinds:
            low = med(k, sizes[0], 0)
            for n in sizes:
                cpu = med(k, n, 1) / med(k, sizes[0], 1)
                print(f"no-op realize ({k}), {n + 1:>7} entries: {med(k, n, 0):7.1f} ms wall "
                      f"{med(k, n, 1):7.1f} ms cpu  ratio to {sizes[0] + 1}: "
                      f"{med(k, n, 0) / low:.2f}x wall, {cpu:.2f}x cpu")
            r = med(k, sizes[-1], 0) / low
            print(f"  {k}: largest / smallest {r:.2f}x (target flat, <= 1.2x: "
                  f"{'met' if r <= 1.2 else 'NOT met'})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
