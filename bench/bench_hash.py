"""Benchmark path-source hashing: reading alone vs cold identify vs warm (stat cache) re-identify.

Usage: python bench/bench_hash.py [--full] [--files N] [--big N] [--big-mb M] [--no-git]
       [--drop-caches] [--keep DIR] [--repeat N]

Default: 6,000 files (~170 MB). --full: 60,000 files, ~1.7 GB (59,950 small files averaging ~12 KB
in 3,000 directories, 50 files of 20 MB). The tree is measured as a plain directory and, unless
--no-git, again as a committed git work tree (the common case: a source checkout).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rocmforge.sources import tree


def make_tree(root: Path, files: int, big: int, big_mb: int) -> int:
    rnd = random.Random(42)
    total = 0
    small = files - big
    per_dir = 20
    for i in range(small):
        d = root / f"d{i // (per_dir * 50):03d}" / f"s{(i // per_dir) % 50:02d}"
        if i % per_dir == 0:
            d.mkdir(parents=True, exist_ok=True)
        size = min(int(rnd.expovariate(1 / 12000)), 400_000)
        (d / f"f{i}.c").write_bytes(rnd.randbytes(size))
        total += size
    (root / "big").mkdir(exist_ok=True)
    for i in range(big):
        data = os.urandom(big_mb << 20)
        (root / "big" / f"blob{i}.bin").write_bytes(data)
        total += len(data)
    return total


def list_files(root: Path) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        if ".git" in dirnames:
            dirnames.remove(".git")
        out.extend(os.path.join(dirpath, f) for f in filenames)
    return out


def read_all(paths: list[str]) -> int:
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    n = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while k := f.readinto(view):
                n += k
    return n


def cat_all(root: Path) -> None:
    subprocess.run(
        f"find {root} -path '*/.git' -prune -o -type f -print0 | xargs -0 cat > /dev/null",
        shell=True,
        check=True,
    )


def stat_floor(root: Path) -> None:
    """One C process lstat'ing every file: what a warm re-identify cannot beat on one core."""
    subprocess.run(
        ["find", str(root), "-path", "*/.git", "-prune", "-o", "-printf", "%s %T@ %i %C@\n"],
        stdout=subprocess.DEVNULL,
        check=True,
    )


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children (forked workers, git)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], object], repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def bench(root: Path, cache: Path, label: str, args: argparse.Namespace) -> None:
    paths = list_files(root)
    if args.drop_caches:
        drop_caches()
        cold_read = timed(lambda: read_all(paths))
        print(f"[{label}] cold read (page cache dropped), python: {cold_read:8.3f} s")
    read_py = timed(lambda: read_all(paths), repeat=3)
    read_cat = timed(lambda: cat_all(root), repeat=2)
    floor = timed(lambda: stat_floor(root), repeat=3)
    cpu_read = cpu_seconds()
    read_all(paths)
    cpu_read = cpu_seconds() - cpu_read
    colds = []
    for _ in range(args.repeat):
        shutil.rmtree(cache, ignore_errors=True)
        cpu_cold = cpu_seconds()
        colds.append(timed(lambda: tree.tree_digest(root, cache=cache)))
        cpu_cold = cpu_seconds() - cpu_cold
    cold = min(colds)
    digest = tree.tree_digest(root, cache=cache)
    warm = timed(lambda: tree.tree_digest(root, cache=cache), repeat=5)
    print(f"[{label}] files: {len(paths)}")
    print(f"[{label}] read all (warm, python readinto):  {read_py:8.3f} s")
    print(f"[{label}] read all (warm, find|xargs cat):    {read_cat:8.3f} s")
    print(
        f"[{label}] cold identify (empty stat cache):   {cold:8.3f} s  "
        f"= {cold / read_py:.2f}x python read, {cold / read_cat:.2f}x cat"
    )
    print(
        f"[{label}] cold identify cpu, all processes:   {cpu_cold:8.3f} s  "
        f"(/{os.cpu_count()} cores = {cpu_cold / (os.cpu_count() or 1) / cpu_read:.2f}x "
        f"the read's cpu {cpu_read:.3f} s)"
    )
    print(f"[{label}] warm re-identify (unchanged tree):  {warm * 1000:8.1f} ms")
    print(f"[{label}] lstat floor (find -printf, 1 core): {floor * 1000:8.1f} ms")
    print(f"[{label}] tree blake3:{digest}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="60k files, ~1.7 GB")
    ap.add_argument("--files", type=int, default=6000)
    ap.add_argument("--big", type=int, default=5)
    ap.add_argument("--big-mb", type=int, default=20)
    ap.add_argument("--no-git", action="store_true", help="skip the git work tree variant")
    ap.add_argument("--drop-caches", action="store_true", help="also time a truly cold read (root)")
    ap.add_argument("--keep", type=Path, help="build the tree here and keep it")
    ap.add_argument("--repeat", type=int, default=2, help="cold runs (the best is shown)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 600 files, 1 cold run")
    args = ap.parse_args()
    if args.quick:
        args.files, args.big, args.big_mb, args.repeat = 600, 1, 2, 1
    if args.full:
        args.files, args.big = 60_000, 50
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-hash-"))
    try:
        root = base / "tree"
        if not root.exists():
            t = time.perf_counter()
            total = make_tree(root, args.files, args.big, args.big_mb)
            took = time.perf_counter() - t
            print(f"made {args.files} files, {total / 1e9:.2f} GB in {took:.1f} s")
        demo = base / "demo"
        for i in range(10):
            (demo / f"m{i % 3}").mkdir(parents=True, exist_ok=True)
            (demo / f"m{i % 3}" / f"f{i}.py").write_text(f"x = {i}\n" * 50)
        time.sleep(0.1)
        tree.tree_digest(demo, cache=base / "cache-demo")
        demo_warm = timed(lambda: tree.tree_digest(demo, cache=base / "cache-demo"), 20)
        print(f"[demo]  warm re-identify, 10 files:        {demo_warm * 1000:8.2f} ms")
        bench(root, base / "cache-plain", "plain", args)
        if not args.no_git:
            env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
            git = [
                "git",
                "-c",
                "core.compression=0",
                "-c",
                "core.looseCompression=0",
                "-c",
                "gc.auto=0",  # no background repack of 60k loose objects during the timing
                "-c",
                "user.name=b",
                "-c",
                "user.email=b@b",
            ]
            t = time.perf_counter()
            subprocess.run([*git, "init", "-q"], cwd=root, env=env, check=True)
            (root / ".gitignore").write_text("*.o\n")
            subprocess.run([*git, "add", "-A"], cwd=root, env=env, check=True)
            subprocess.run([*git, "commit", "-qm", "x"], cwd=root, env=env, check=True)
            print(f"git add+commit took {time.perf_counter() - t:.1f} s")
            time.sleep(0.1)
            bench(root, base / "cache-git", "git", args)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
