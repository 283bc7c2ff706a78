"""Fuzz soak: N seeded fuzzed recipes and command lines through the CLI (issue 10's figure).

The corpus is tests/fuzzcorpus.py (the CI test runs 1,000 cases of one seed). Each case must end
without exit 4, without a traceback, within --timeout seconds, and an exit 2 of a recipe must
name the recipe. Cases run in-process through rocmforge.cli.main.main (fast), every --every-th also
through the real `python -m rocmforge`. Prints the exit-code histogram, the slowest cases and
every failing case; exits 1 if any case failed.
Usage: python bench/soak_fuzz.py [--cases 5000] [--seed 1] [--every 50] [--keep DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import fuzzcorpus as fz  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=int, default=50, help="also run every Nth case as a process")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per case")
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep the cases")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="rf-soak-fuzz-"))
    root.mkdir(parents=True, exist_ok=True)
    src = root / "src"
    (src / "tiny").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "tests" / "data" / "mkwheel.py", src / "mkwheel.py")
    (src / "tiny" / "__init__.py").write_text("VALUE = 1\n")
    wheelhouse = REPO / ".ci" / "wheelhouse"
    if "ROCMFORGE_PIP_ARGS" not in os.environ and wheelhouse.is_dir():
        os.environ["ROCMFORGE_PIP_ARGS"] = f"--no-index --find-links {wheelhouse}"
    os.environ.pop("ROCMFORGE_STORE", None)
    os.environ.pop("ROCMFORGE_DEBUG", None)
    store = root / "store"
    codes: collections.Counter[int | None] = collections.Counter()
    failures: list[str] = []
    slowest: list[tuple[float, str]] = []
    started = time.monotonic()
    processes = 0
    for case in fz.generate(args.seed, args.cases):
        runs = [fz.run_in_process(case, root / case.name, src, store, timeout=args.timeout)]
        if args.every and case.index % args.every == 0:
            runs.append(
                fz.run_subprocess(
                    case, root / f"{case.name}-p", src, store, timeout=args.timeout
                )
            )
            processes += 1
        for o in runs:
            codes[o.code] += 1
            slowest.append((o.seconds, f"{case.name}: {' '.join(o.argv)[:100]}"))
            wrong = fz.judge(o)
            if wrong:
                failures.append(fz.describe(o, wrong))
        if not args.keep:
            shutil.rmtree(root / case.name, ignore_errors=True)
            shutil.rmtree(root / f"{case.name}-p", ignore_errors=True)
    elapsed = time.monotonic() - started
    print(
        f"{args.cases} cases (seed {args.seed}) + {processes} through the real CLI "
        f"in {elapsed:.1f} s"
    )
    print("exit codes:", ", ".join(f"{k}: {v}" for k, v in sorted(codes.items(), key=str)))
    print("slowest:")
    for seconds, what in sorted(slowest)[-5:]:
        print(f"  {seconds:6.2f} s  {what}")
    hangs = sum(1 for f in failures if "[hang" in f)
    print(f"failures: {len(failures)} (hangs {hangs})")
    for f in failures:
        print("  " + f)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
