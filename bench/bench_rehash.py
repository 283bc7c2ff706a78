"""Re-hash of a big path source after touching one file, against ``git status`` (issue 14, goal 4).

Builds a tree of N small files (default 60,000 in 3,000 directories) twice: as a plain directory
and as a committed git work tree. Then, run by run and interleaved (A, B, A, B, ...): one file is
rewritten (new content, new mtime) and
  A  ``tree_digest`` (rocmforge's path-source hash, warm stat cache) re-hashes the tree;
  B  ``git status --porcelain`` of the git tree, after the same kind of change.
Both trees get A. Also measured, interleaved with ``git status`` of the (unchanged) git copy and
``python -c pass``: a no-op ``rocmforge realize`` of a recipe whose source is the plain tree (the
memo answers it after listing every directory and stat'ing every file, in two processes; target
<= 150 ms). Wall and CPU (user+sys, forked workers included) medians. Warm page cache, warm
stat caches. Targets: A <= 1.5x B; the no-op realize <= 150 ms.
Usage: python bench/bench_rehash.py [--files 60000] [--runs 7] [--quick] [--no-realize]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RECIPE = """\
schema = 1
[package]
name = "bigtree"
version = "0.1"
[source]
path = "{src}"
[build]
steps = ["python mkwheel.py $OUT bigtree 0.1"]
"""


def cpu() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    c, t = cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - t, cpu() - c


def make_tree(root: Path, files: int) -> list[Path]:
    out = []
    for i in range(files):
        d = root / f"d{i // 1000:03d}" / f"s{(i // 20) % 50:02d}"
        if i % 20 == 0:
            d.mkdir(parents=True, exist_ok=True)
        p = d / f"f{i}.c"
        p.write_bytes(b"int x%d = %d;\n" % (i, i) * 8)
        out.append(p)
    return out


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def main() -> int:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=60_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="smoke run: 2,000 files, 2 runs")
    ap.add_argument("--no-realize", action="store_true", help="skip the no-op realize")
    args = ap.parse_args()
    if args.quick:
        args.files, args.runs = 2000, 2
    from rocmforge.sources.tree import tree_digest

    tmp = Path(tempfile.mkdtemp(prefix="rf-rehash-"))
    try:
        plain, gitt = tmp / "plain", tmp / "git"
        t = time.perf_counter()
        pfiles = make_tree(plain, args.files)
        shutil.copytree(plain, gitt)
        gfiles = [gitt / p.relative_to(plain) for p in pfiles]
        git(gitt, "init", "-q")
        git(gitt, "add", "-A")
        git(gitt, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "tree")
        print(f"{args.files} files, trees made in {time.perf_counter() - t:.1f} s")
        caches = {"plain": tmp / "cache-plain", "git": tmp / "cache-git"}
        roots = {"plain": plain, "git": gitt}
        for k in roots:
            tree_digest(roots[k], cache=caches[k])  # cold hash, fills the stat cache
        time.sleep(2.1)  # past the racy-timestamp window: the cache entries become trusted
        for k in roots:
            tree_digest(roots[k], cache=caches[k])
        series: dict[str, list[tuple[float, float]]] = {"plain": [], "git": [], "status": []}
        for i in range(args.runs):
            for k, files in (("plain", pfiles), ("git", gfiles)):
                files[(i * 7919) % len(files)].write_bytes(b"changed %d\n" % i)
                series[k].append(timed(lambda k=k: tree_digest(roots[k], cache=caches[k])))
            gfiles[(i * 104729) % len(gfiles)].write_bytes(b"status %d\n" % i)
            series["status"].append(
                timed(lambda: git(gitt, "status", "--porcelain", "--untracked-files=all"))
            )

        def med(k: str, j: int) -> float:
            return statistics.median(x[j] for x in series[k]) * 1000

        print(f"{args.runs} interleaved runs, medians; one file rewritten before each run;")
        print("warm page cache, warm stat cache (the previous run's)")
        for k, label in (("plain", "re-hash, plain tree"), ("git", "re-hash, git work tree"),
                         ("status", "git status --porcelain")):  # fmt: skip
            print(f"{label:<26} {med(k, 0):8.1f} ms wall {med(k, 1):8.1f} ms cpu")
        for k in ("plain", "git"):
            r = med(k, 0) / med("status", 0)
            print(f"ratio {k} / git status: {r:.2f}x wall, {med(k, 1) / med('status', 1):.2f}x "
                  f"cpu (target <= 1.5x: {'met' if r <= 1.5 else 'NOT met'})")
        if not args.no_realize:
            noop(tmp, plain, gitt, args.runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def noop(tmp: Path, src: Path, gitt: Path, runs: int) -> None:
    """Time the memo's no-op realize of a recipe whose source is ``src``, interleaved with
    ``git status`` of the git copy of the same tree and ``python -c pass``."""
    shutil.copy(REPO / "tests" / "data" / "mkwheel.py", src)
    (src / "bigtree").mkdir(exist_ok=True)
    (src / "bigtree" / "__init__.py").write_text("")
    recipe = tmp / "big.toml"
    recipe.write_text(RECIPE.format(src=src))
    exe = shutil.which("rocmforge", path=str(Path(sys.executable).parent)) or "rocmforge"
    argv = [exe, "realize", str(recipe), "--store", str(tmp / "store")]
    for _ in range(2):  # the build, then a full-pipeline hit that records the memo
        subprocess.run(argv, check=True, capture_output=True)
    status = ["git", "status", "--porcelain", "--untracked-files=all"]
    series: dict[str, list[tuple[float, float]]] = {"realize": [], "status": [], "pass": []}
    for _ in range(runs):
        series["realize"].append(timed(lambda: subprocess.run(argv, check=True,
                                                              capture_output=True)))
        series["status"].append(timed(lambda: git(gitt, *status[1:])))
        series["pass"].append(timed(lambda: subprocess.run([sys.executable, "-c", "pass"],
                                                           check=True)))

    def med(k: str, j: int) -> float:
        return statistics.median(x[j] for x in series[k]) * 1000

    w = med("realize", 0)
    print(f"{runs} interleaved runs, medians, nothing changed:")
    for k, label in (("realize", "no-op realize (memo)"), ("status", "git status, git copy"),
                     ("pass", "python -c pass")):  # fmt: skip
        print(f"{label:<26} {med(k, 0):8.1f} ms wall {med(k, 1):8.1f} ms cpu")
    print(f"ratio no-op realize / git status: {w / med('status', 0):.2f}x wall, "
          f"{med('realize', 1) / med('status', 1):.2f}x cpu; no-op realize {w:.1f} ms "
          f"(target <= 150 ms: {'met' if w <= 150 else 'NOT met'})")


if __name__ == "__main__":
    sys.exit(main())
