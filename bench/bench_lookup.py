"""Store lookup: the per-call cost of ``Store.lookup`` on a hit, against a bare ``os.stat``.

The lookup is on every realize's path (it decides hit or build), so it must stay a few file reads:
budget 3 ms per call (it was a test's assertion; timings belong here, not in the test suite).
Prints the pair (lookup, stat), their ratio and whether the budget is met.
Usage: python bench/bench_lookup.py [--calls 2000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rocmforge.store.store import open_store  # noqa: E402

HASH = "0123456789abcdef0123456789abcdef"
BUDGET = 0.003


def per_call(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Return the median over ``repeats`` of the mean seconds per call of ``fn()``."""
    means = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - start) / calls)
    return statistics.median(means)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="200 calls, 3 repeats")
    args = ap.parse_args()
    if args.quick:
        args.calls, args.repeats = 200, 3
    tmp = Path(tempfile.mkdtemp(prefix="rf-bench-"))
    try:
        store = open_store(tmp / "store")
        with store.new_build_dir(HASH) as bd:
            staged = bd.path / "out"
            staged.mkdir()
            (staged / "demo-1.0-py3-none-any.whl").write_bytes(b"PK wheel bytes")
            (staged / "derivation.json").write_text(json.dumps({"env": {}}))
            (staged / "build.log.zst").write_bytes(b"log")
            entry = store.publish(staged, hash=HASH, name="demo", version="1.0", meta={})
        meta = str(entry.path / "meta.json")

        def lookup() -> None:
            assert store.lookup(HASH, "demo", "1.0") is not None

        looked = per_call(lookup, args.calls, args.repeats)
        stat = per_call(lambda: os.stat(meta), args.calls, args.repeats)
        print(f"lookup (hit), per call:  {looked * 1e6:9.1f} us")
        print(f"os.stat, per call:       {stat * 1e6:9.1f} us")
        print(f"ratio lookup / stat:     {looked / stat:9.1f}")
        verdict = "met" if looked <= BUDGET else "MISSED"
        print(f"budget {BUDGET * 1000:.0f} ms per lookup: {verdict}")
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
