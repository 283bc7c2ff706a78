"""``rocmforge bisect`` over 64 commits of a C++ project: the compiler cache on vs every step cold.

The project is examples/cxx-many (CMake + Ninja, template-heavy translation units, -O3) in a git
repository made here: commit 0 holds the generated sources, each later commit changes one
translation unit (a new function in ``tu_<i mod H>.cpp``, so that unit really recompiles; ``H``
is ``--hot``, the units the range works on: 2 of 16 by default, an eighth of the project, where
64 commits of PyTorch touch far less of it), and commit ``--breaks`` (default 41) makes
``cxxmany.count()`` wrong. The same bisect runs twice,
each into a new store: once with ``--no-compiler-cache`` (every step a cold build) and once with
the compiler cache on, starting empty (the good end is cold; every later step shares all but a
few units with a commit built before). Both take the same steps; the figure is the ratio of their
wall times (target <= 0.3x).

Usage: python bench/bench_bisect.py [--commits 64] [--tus 16] [--hot 2] [--breaks 41]
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent

GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with a fixed identity; return stdout."""
    proc = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args], cwd=repo, check=True,
        capture_output=True, text=True, env=dict(os.environ, **GIT_ENV),
    )  # fmt: skip
    return proc.stdout.strip()


def make_repo(tmp: Path, commits: int, tus: int, hot: int, breaks: int) -> list[str]:
    """The C++ project's history: ``commits`` commits, ``breaks`` the first bad one."""
    repo = tmp / "cxx-repo"
    shutil.copytree(
        REPO / "examples" / "cxx-many", repo, ignore=shutil.ignore_patterns("build", "src")
    )
    subprocess.run([sys.executable, "gen.py", "src", str(tus)], cwd=repo, check=True)
    git(repo, "init", "-q")
    out = []
    for i in range(commits):
        if i > 0:
            tu = repo / "src" / f"tu_{(i - 1) % hot:03d}.cpp"
            tu.write_text(
                tu.read_text() + f'extern "C" long cxxmany_rev_{i}(void) {{ return {i}; }}\n'
            )
        if i == breaks:
            main = repo / "src" / "main.cpp"
            main.write_text(main.read_text().replace(f"return {tus}; }}", f"return {tus + 1}; }}"))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"change {i}" + (" (breaks count)" if i == breaks else ""))
        out.append(git(repo, "rev-parse", "HEAD"))
    return out


def recipe(tmp: Path, repo: Path, rev: str) -> Path:
    """recipes/cxx-many.toml with the repository as its git source."""
    text = (REPO / "recipes" / "cxx-many.toml").read_text()
    text = text.replace('path = "../examples/cxx-many"', f'git = "{repo}"\nrev = "{rev}"')
    path = tmp / "cxx-bisect.toml"
    path.write_text(text)
    return path


def bisect(recipe: Path, store: Path, good: str, bad: str, tus: int, *extra: str,
           env: dict[str, str]) -> tuple[float, dict[str, Any]]:  # fmt: skip
    """Run the bisect; return (wall seconds, its log)."""
    run = f"python -c 'import sys, cxxmany; sys.exit(0 if cxxmany.count() == {tus} else 1)'"
    argv = [sys.executable, "-m", "rocmforge", "bisect", str(recipe), "--good", good, "--bad",
            bad, "--run", run, "--store", str(store), "--json", *extra]  # fmt: skip
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"bisect failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    log: dict[str, Any] = json.loads(proc.stdout)
    return wall, log


def main() -> int:
    """Run both bisects and print their steps, timings and the ratio."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--commits", type=int, default=64)
    ap.add_argument("--tus", type=int, default=16)
    ap.add_argument("--hot", type=int, default=2, help="translation units the commits change")
    ap.add_argument("--breaks", type=int, default=41)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rf-bisect-"))
    try:
        commits = make_repo(tmp, args.commits, args.tus, min(args.hot, args.tus), args.breaks)
        r = recipe(tmp, tmp / "cxx-repo", commits[-1])
        env = dict(os.environ, MAX_JOBS="2", ROCMFORGE_COMPILER_CACHE_DIR=str(tmp / "ccache"))
        env.pop("ROCMFORGE_STORE", None)
        print(f"cxx-many: {args.commits} commits, {args.tus} TUs + main.cpp ({args.hot} changed by "
              f"the commits), CMake + Ninja, -O3, MAX_JOBS=2; commit {args.breaks} breaks "
              "count()")  # fmt: skip
        cold, cold_log = bisect(r, tmp / "store-cold", commits[0], commits[-1], args.tus,
                                "--no-compiler-cache", env=env)  # fmt: skip
        warm, warm_log = bisect(r, tmp / "store-warm", commits[0], commits[-1], args.tus,
                                env=env)  # fmt: skip
        for name, log in (("cold", cold_log), ("cache", warm_log)):
            found = log["first_bad"]["commit"]
            ok = "ok" if found == commits[args.breaks] else f"WRONG (expected {args.breaks})"
            steps = " ".join(
                f"{s['index']}:{s['verdict']}:{s['seconds']:.0f}s" for s in log["steps"]
            )
            print(f"  {name}: {len(log['steps'])} steps [{steps}]; first bad "
                  f"{log['first_bad']['index']} {found[:12]} ({ok})")  # fmt: skip
        same = [s["index"] for s in cold_log["steps"]] == [s["index"] for s in warm_log["steps"]]
        ratio = warm / cold
        print(f"bisect cold (no compiler cache): {cold:.1f} s; with the compiler cache: "
              f"{warm:.1f} s; ratio {ratio:.2f}x (target <= 0.3x: "
              f"{'ok' if ratio <= 0.3 else 'MISSED'}; same steps: {same})")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
