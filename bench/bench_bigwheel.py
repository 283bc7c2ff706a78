"""Benchmark post-processing a wheel of torch size against a plain ``cp`` of the same file.

Usage: python bench/bench_bigwheel.py [--quick] [--gib G] [--dir DIR]

Makes a stored wheel with one incompressible member (default 4.2 GiB in all; --quick: 0.5 GiB) and
3,000 small files (tests/test_bigwheel.py's maker), then times ``cp`` of it and realize's
post-processing (stamp, normalize, digests) in a child process whose peak RSS is reported.
Target (issue 20): post-processing <= 1.5x the copy, peak RSS <= 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_bigwheel import POSTPROCESS, SMALL, make_big_wheel  # noqa: E402


def main() -> int:
    """Run the benchmark and print the pair and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.5 GiB instead of 4.2 GiB")
    parser.add_argument("--gib", type=float, default=None, help="total wheel size in GiB")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the temp files")
    args = parser.parse_args()
    gib = args.gib if args.gib is not None else (0.5 if args.quick else 4.2)
    work = Path(tempfile.mkdtemp(prefix="rf-bigwheel-", dir=args.dir))
    try:
        wheel = make_big_wheel(work, big=int(gib * (1 << 30)), small=SMALL)
        size = wheel.stat().st_size
        copy = work / "copy.whl"
        t0 = time.perf_counter()
        subprocess.run(["cp", os.fspath(wheel), os.fspath(copy)], check=True)
        t_cp = time.perf_counter() - t0
        copy.unlink()
        # The post-processing fsyncs its result (atomic write); so does this second baseline.
        t0 = time.perf_counter()
        subprocess.run(["cp", os.fspath(wheel), os.fspath(copy)], check=True)
        subprocess.run(["sync", os.fspath(copy)], check=True)
        t_sync = time.perf_counter() - t0
        copy.unlink()
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", POSTPROCESS, os.fspath(wheel)],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.fspath(ROOT)},
        )
        t_post = time.perf_counter() - t0
        peak_mb = json.loads(done.stdout)["peak_kib"] / 1024
        print(f"wheel: {size / (1 << 30):.2f} GiB, {SMALL + 5} members")
        print(f"cp:              {t_cp:7.2f} s")
        print(f"cp + sync FILE:  {t_sync:7.2f} s")
        print(f"post-processing: {t_post:7.2f} s  (stamp + normalize + digests)")
        print(
            f"ratio: {t_post / t_cp:.2f}x cp, {t_post / t_sync:.2f}x cp+sync (target <= 1.5x); "
            f"peak RSS {peak_mb:.0f} MB (<= 300)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
