"""gc of 1,000 dead entries, each with a wheel, a build log, a derivation and meta.json.

Target (issue 4): <= 300 ms on a 2-core machine. Prints the median over --runs fresh stores of
(a) the whole command, ``rocmforge gc --store DIR`` in a subprocess (start-up included), and
(b) the in-process core, :func:`rocmforge.store.gc.collect_garbage` (plan + delete under lock),
(c) the core's planning alone (a dry run on the same store just before), and for reference
(d) ``rm -rf`` of the same ``entries/`` (after ``chmod -R u+w``): the filesystem's own floor.
Usage: python bench/bench_gc.py [--entries 1000] [--runs 5] [--wheel-kb 64]
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

import zstandard

from rocmforge.sources.refs import entry_refs
from rocmforge.store.gc import Policies, collect_garbage
from rocmforge.store.store import open_store
from rocmforge.util.hashing import blake3_hex

REPO = Path(__file__).resolve().parent.parent


def make_store(root: Path, n: int, wheel_kb: int) -> None:
    """Write ``n`` sealed entries as publish leaves them (without its fsyncs) and index them."""
    store = open_store(root)
    log = zstandard.ZstdCompressor().compress(b"rocmforge: step 1/1\nbuilt\n" * 50)
    payload = os.urandom(wheel_kb * 1024)
    now = time.time()
    for i in range(n):
        h = blake3_hex(f"bench {i}".encode())[:32]
        name, version = f"pkg{i % 20}", f"1.{i}"
        d = store.entries_dir / f"{h}-{name}-{version}"
        d.mkdir()
        wheel = f"{name}-{version}-py3-none-any.whl"
        (d / wheel).write_bytes(payload[: len(payload) - (i % 100)])
        (d / "build.log.zst").write_bytes(log)
        drv = {"package": {"name": name, "version": version}, "env": {"I": str(i)}}
        (d / "derivation.json").write_text(json.dumps(drv))
        meta = {
            "hash": h,
            "name": name,
            "version": version,
            "created": now - i,
            "size": 0,
            "sources": [],
            "wheels": [{"file": wheel, "sha256": h * 2, "blake3": h * 2}],
        }
        (d / "meta.json").write_text(json.dumps(meta))
        for f in d.iterdir():
            os.chmod(f, 0o444)
        os.chmod(d, 0o555)
    store.rebuild_index()
    store.close()


def main() -> int:
    # measure an installed package: byte-compiled, as pip leaves it (see scripts/setup.sh)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--wheel-kb", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="smoke run: 100 entries, 2 runs")
    args = ap.parse_args()
    if args.quick:
        args.entries, args.runs, args.wheel_kb = 100, 2, 8
    tmp = Path(tempfile.mkdtemp(prefix="rf-bench-gc-"))
    template = tmp / "template"
    make_store(template, args.entries, args.wheel_kb)
    exe = shutil.which("rocmforge", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "rocmforge"]
    cli: list[float] = []
    core: list[float] = []
    plan_only: list[float] = []
    rm: list[float] = []
    try:
        for run in range(args.runs):
            for kind, times in (("cli", cli), ("core", core), ("rm", rm)):
                root = tmp / f"{kind}-{run}"
                shutil.copytree(template, root, symlinks=True)
                subprocess.run(["sync"], check=False)
                t = time.perf_counter()
                if kind == "rm":
                    subprocess.run(["chmod", "-R", "u+w", str(root)], check=True)
                    subprocess.run(["sync"], check=False)
                    t = time.perf_counter()
                    subprocess.run(["rm", "-rf", str(root / "entries")], check=True)
                    elapsed = time.perf_counter() - t
                    (root / "entries").mkdir()
                elif kind == "cli":
                    proc = subprocess.run(
                        [*cmd, "gc", "--store", str(root)], capture_output=True, text=True
                    )
                    elapsed = time.perf_counter() - t
                    if proc.returncode != 0:
                        print(proc.stderr, file=sys.stderr)
                        return 1
                else:
                    store = open_store(root)
                    dry = collect_garbage(store, Policies(), entry_refs=entry_refs, dry_run=True)
                    plan_only.append(time.perf_counter() - t)
                    assert len(dry.plan.delete) == args.entries
                    t = time.perf_counter()
                    report = collect_garbage(store, Policies(), entry_refs=entry_refs)
                    elapsed = time.perf_counter() - t
                    store.close()
                    assert len(report.plan.delete) == args.entries
                left = os.listdir(root / "entries")
                assert not left, f"{len(left)} entries left"
                times.append(elapsed)
    finally:
        for dirpath, dirnames, _ in os.walk(tmp):
            for d in dirnames:
                os.chmod(os.path.join(dirpath, d), 0o755)
        shutil.rmtree(tmp, ignore_errors=True)
    n = args.entries
    rows = (
        ("rocmforge gc (whole command)", cli),
        ("collect_garbage (core)", core),
        ("  of which planning (dry run)", plan_only),
        ("reference: rm -rf entries/", rm),
    )
    for label, times in rows:
        med = statistics.median(times)
        print(
            f"{label:<30} {n} dead entries: median {med * 1000:7.1f} ms "
            f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}, runs {len(times)})"
            f"  target <= 300 ms: {'met' if med <= 0.300 else 'MISSED'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
