"""`rocmforge lock` figures: locking the PyTorch base recipe with a warm download cache (target
<= 5 s, with uv and, for the record, with pip's resolver) and a no-op `lock --check` (<= 300 ms).

The base recipe is copied without its lock file, so every run resolves the ~30-package closure
for real (uv/pip talk to the index; their HTTP caches are warm after the first run) while the
wheels are already in the bench store (the warm download cache). Prints each figure against its
target and the ratio. `--quick`: fewer runs. Needs the index (PyPI or ROCMFORGE_PIP_ARGS).
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
RF = [sys.executable, "-m", "rocmforge"]


def run(*args: str | Path, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [*RF, *map(str, args)], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"rocmforge {' '.join(map(str, args))} failed:\n{proc.stdout}{proc.stderr}")
    return took


def report(what: str, seconds: float, target: float) -> None:
    print(f"{what}: {seconds * 1000:.0f} ms (target <= {target * 1000:.0f} ms, "
          f"ratio {seconds / target:.2f})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="1 timed lock, 5 checks")
    ap.add_argument("--store", type=Path, default=REPO / ".ci" / "bench-lock-store")
    ap.add_argument("--pip", action="store_true", help="also time pip's resolver")
    args = ap.parse_args()
    locks, checks = (1, 5) if args.quick else (3, 20)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp, "rocm-6.2.toml")
        shutil.copy(REPO / "recipes" / "legacy" / "rocm-6.2.toml", base)
        run("lock", base, "--store", args.store)  # warms the store's wheels and uv's cache
        resolvers = ["uv", "pip"] if args.pip else ["uv"]
        for resolver in resolvers:
            times = []
            for _ in range(locks):
                Path(tmp, "rocm-6.2.lock").unlink()
                times.append(run("lock", base, "--store", args.store,
                                 env={"ROCMFORGE_RESOLVER": resolver}))  # fmt: skip
            report(f"lock of the PyTorch base recipe, warm ({resolver}, median of {locks})",
                   statistics.median(times), 5.0)  # fmt: skip
        shipped = REPO / "recipes" / "legacy" / "mi300x.toml"
        times = [run("lock", "--check", shipped, "--store", args.store) for _ in range(checks)]
        report(f"no-op lock --check of mi300x.toml (median of {checks})",
               statistics.median(times), 0.3)  # fmt: skip


if __name__ == "__main__":
    main()
