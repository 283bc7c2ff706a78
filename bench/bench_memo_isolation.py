"""Cache hits that stay fast: a big tree input in one recipe must not slow other recipes' hits,
and a git-source hit must be as fast as a path-source hit.

Builds, in a temporary directory outside any git work tree: a path-source recipe (A), a
git-source recipe (G) and a recipe with a FILES-file tree input (B), all in one store. Prints the
median no-op realize of A before and after B was realized (the pair and the ratio), and of G
against A. Target (issue 19): each <= 50 ms on a 2-core machine; A after/before ~ 1.
Usage: python bench/bench_memo_isolation.py [--runs 20] [--files 50000] [--quick]
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
RECIPE = """\
schema = 1
[package]
name = "{name}"
version = "0.1"
[source]
{source}
[build]
steps = ["python mkwheel.py $OUT tiny 0.1"]
[check]
import = "tiny"
"""
GIT_ENV = {
    "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid", "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.invalid", "GIT_CONFIG_GLOBAL": "/dev/null",
}  # fmt: skip


def timed(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def median_ms(argv: list[str], env: dict[str, str], runs: int) -> float:
    return statistics.median(timed(argv, env) for _ in range(runs)) * 1000


def main() -> int:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 3 runs, 5,000 files")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.files = 3, 5_000
    tmp = Path(tempfile.mkdtemp(prefix="rf-bench-memo-"))
    try:
        src = tmp / "tiny"
        (src / "tiny").mkdir(parents=True)
        (src / "tiny" / "__init__.py").write_text("VALUE = 1\n")
        shutil.copy(REPO / "tests" / "data" / "mkwheel.py", src / "mkwheel.py")
        repo = tmp / "tiny-git"
        shutil.copytree(src, repo)
        env = {**os.environ, **GIT_ENV}
        for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
            subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, env=env, check=True, capture_output=True,
            text=True,
        ).stdout.strip()  # fmt: skip
        big = tmp / "big"
        for i in range(args.files):
            d = big / f"d{i // 1000:03d}"
            if i % 1000 == 0:
                d.mkdir(parents=True)
            (d / f"f{i}.txt").write_text(f"{i}\n")
        a, g, b = tmp / "a.toml", tmp / "g.toml", tmp / "b.toml"
        a.write_text(RECIPE.format(name="tiny", source=f'path = "{src}"'))
        g.write_text(RECIPE.format(name="tiny", source=f'git = "{repo}"\nrev = "{rev}"'))
        b.write_text(
            RECIPE.format(name="tiny", source=f'path = "{src}"')
            + f'[inputs.big]\npath = "{big}"\nenv = "BIG"\n'
        )
        store = tmp / "store"
        exe = shutil.which("rocmforge", path=str(Path(sys.executable).parent)) or "rocmforge"

        def argv(recipe: Path) -> list[str]:
            return [exe, "realize", str(recipe), "--store", str(store)]

        env = dict(os.environ)
        for r in (a, g):
            timed(argv(r), env)
        before = median_ms(argv(a), env, args.runs)
        t = time.perf_counter()
        timed(argv(b), env)
        build_b = time.perf_counter() - t
        after = median_ms(argv(a), env, args.runs)
        big_hit = median_ms(argv(b), env, args.runs)
        git_hit = median_ms(argv(g), env, args.runs)
        memo_dir = next((store / "cache").glob("realize-memo-*"))
        sizes = sorted(p.stat().st_size for p in memo_dir.iterdir())
        print(f"tree input: {args.files} files, realized in {build_b:.1f} s")
        print(f"memo files: {len(sizes)}, sizes {sizes} bytes")
        print(f"path-source hit before/after the big input: {before:7.1f} / {after:7.1f} ms  "
              f"ratio {after / before:.2f}")  # fmt: skip
        print(f"git-source hit vs path-source hit:          {git_hit:7.1f} / {after:7.1f} ms  "
              f"ratio {git_hit / after:.2f}")  # fmt: skip
        print(f"hit of the recipe with the big input:       {big_hit:7.1f} ms")
        worst = max(after, git_hit)
        print(f"target <= 50 ms for path and git hits: {'met' if worst <= 50 else 'MISSED'}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
