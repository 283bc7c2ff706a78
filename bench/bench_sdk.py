"""A ROCm SDK made of wheels: unpacking it into the store cold, against a warm realize reusing it
(issue 20, point 1).

Stand-in SDK wheels are made from Debian's ROCm files (tests/standin_sdk.py; ``scripts/setup.sh
--with-hip``), the core wheel padded with incompressible bytes to about ``--size`` in all
(default 2 GB). Pair, interleaved run by run:
  A  warm: what a cache-miss realize does for the SDK when its tree is already in the store (the
     tree looked up, ``ROCM_PATH`` & co. read from it, the host's ROCm packages listed to hide
     them, the runtime packages picked for the check venv), timed in-process as the build runs it;
  B  cold: the same with an empty ``sources/rocm-sdk`` (every wheel unpacked, the devel tarball
     expanded, device files linked, the tree sealed).
Reports wall medians and the ratio A/B. Target: A (what a warm reuse adds) <= 50 ms.
Usage: python bench/bench_sdk.py [--runs 3] [--size 2G] [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].isalpha() else int(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", default="2G", help="the SDK's total wheel size (default 2G)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: no padding, 1 run")
    ap.add_argument("--dir", type=Path, help="work directory (default: a temp dir, removed)")
    args = ap.parse_args()
    sys.path[:0] = [str(REPO), str(REPO / "tests")]
    import standin_sdk

    from rocmforge.lock.sdkwheels import runtime_dirs
    from rocmforge.toolchain.rocmsdk import (
        SDK_MOUNT,
        SdkWheel,
        ensure_tree,
        host_rocm_files,
        sdk_env,
        tree_path,
    )
    from rocmforge.util.fsutil import remove_tree

    why = standin_sdk.available()
    if why is not None:
        print(f"skipped: the stand-in SDK needs {why} (scripts/test.sh)")
        return 0
    runs = 1 if args.quick else args.runs
    work = Path(tempfile.mkdtemp(prefix="bench-sdk-", dir=args.dir))
    try:
        index, sources = work / "index", work / "sources"
        families = ["gfx94X-dcgpu", "gfx90a"]
        plain = standin_sdk.build_sdk(index / "plain", "7.14.0", families)
        base = sum(w.stat().st_size for w in plain)
        pad = 0 if args.quick else max(0, _size(args.size) - base)
        wheels = plain if not pad else standin_sdk.build_sdk(index / "big", "7.14.0", families,
                                                             pad=pad)  # fmt: skip
        total = sum(w.stat().st_size for w in wheels)
        sdk = []
        for w in wheels:
            name = w.name.split("-", 1)[0].replace("_", "-").lower()
            sha = hashlib.sha256(w.read_bytes()).hexdigest()
            sdk.append(SdkWheel(name=name, version="7.14.0", wheel=w, sha256=sha))
        built = [work / "built.whl"]
        standin_sdk._Wheel(work, "hipsdkdemo", "0.1.0").close(["rocm-sdk-core==7.14.0"]).rename(
            built[0]
        )

        def cold() -> float:
            remove_tree(tree_path(sources, sdk))
            t = time.perf_counter()
            ensure_tree(sources, sdk)
            return time.perf_counter() - t

        def warm() -> float:
            t = time.perf_counter()
            tree, fresh = ensure_tree(sources, sdk)
            sdk_env(tree, SDK_MOUNT)
            host_rocm_files(work / "cache")
            runtime_dirs(built, sdk, sources)
            took = time.perf_counter() - t
            assert not fresh
            return took

        cold()  # warm-up: page cache, imports
        a: list[float] = []
        b: list[float] = []
        for _ in range(runs):
            b.append(cold())
            for _ in range(5):
                a.append(warm())
        ma, mb = statistics.median(a), statistics.median(b)
        files = sum(1 for p in tree_path(sources, sdk).rglob("*") if p.is_file())
        print(f"SDK: {len(sdk)} stand-in wheels, {total / 1e9:.2f} GB, tree of {files} files")
        print(f"A warm reuse (tree in the store): median {ma * 1000:.1f} ms "
              f"(min {min(a) * 1000:.1f}, max {max(a) * 1000:.1f}, {len(a)} runs)")  # fmt: skip
        print(f"B cold unpack into the store:     median {mb:.2f} s "
              f"(min {min(b):.2f}, max {max(b):.2f}, {len(b)} runs)")  # fmt: skip
        print(f"A/B = {ma / mb:.5f}; target: A <= 50 ms -> {'met' if ma <= 0.05 else 'NOT met'}")
    finally:
        remove_tree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
