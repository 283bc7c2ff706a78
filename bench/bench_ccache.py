"""Compiler cache (ccache in the sandbox) on a real multi-file C++ project: examples/cxx-many with
120 template-heavy translation units (CMake + Ninja, -O3), built by `rocmforge realize`.

Figures (issue 15), each a pair and its ratio:
  1. rebuild after an env change the compile ignores (a new input hash, no compile changes)
     vs the cold build without the cache: target >= 5x faster, hit rate >= 95%;
  2. rebuild after a one-file source edit vs the cold build: target >= 4x faster;
  3. a cold build with the cache on (all misses) vs off: overhead target <= 10% (wall and CPU);
  4. the HIP demo rebuilt with a warm cache: hits reported for the HIP translation unit.
Usage: python bench/bench_ccache.py [--tus 120] [--rounds 1] [--quick]  (--quick: 24 TUs)
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


def realize(recipe: Path, store: Path, cache: Path, *extra: str) -> tuple[float, Any]:
    """Run one realize with ``cache`` as the shared cache directory; return (wall s, meta.json)."""
    env = dict(os.environ, ROCMFORGE_COMPILER_CACHE_DIR=str(cache), MAX_JOBS="2")
    env.pop("ROCMFORGE_STORE", None)
    cmd = [sys.executable, "-m", "rocmforge", "realize", str(recipe), "--store", str(store)]
    t = time.perf_counter()
    proc = subprocess.run([*cmd, *extra, "--json"], env=env, capture_output=True, check=False)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"realize failed:\n{proc.stderr.decode()[-3000:]}")
    [report] = json.loads(proc.stdout)
    return wall, json.loads((Path(report["path"]) / "meta.json").read_text())


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(recipe: Path, store: Path, cache: Path, *extra: str) -> tuple[float, float, Any]:
    """realize() with the CPU seconds of the whole process tree (RUSAGE_CHILDREN delta)."""
    before = _children_cpu()
    wall, meta = realize(recipe, store, cache, *extra)
    return wall, _children_cpu() - before, meta


def cxx_recipe(tmp: Path, src: Path, run: str) -> Path:
    """A copy of recipes/cxx-many.toml for the tree ``src`` with ``[env] RUN`` (hashed only)."""
    text = (REPO / "recipes" / "cxx-many.toml").read_text()
    text = text.replace('path = "../examples/cxx-many"', f'path = "{src}"')
    text = text.replace("[build]", f'[env]\nRUN = "{run}"\n\n[build]')
    path = tmp / f"cxx-{run}.toml"
    path.write_text(text)
    return path


def cc(meta: Any) -> str:
    c = meta.get("compiler_cache")
    if not c:
        return "cache off"
    done = c["hits"] + c["misses"]
    return f"{c['hits']}/{done} hits ({c['hits'] / done:.0%}), {c['uncacheable']} uncacheable"


def main() -> int:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tus", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=1, help="cold off/on pairs (interleaved)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 24 TUs")
    ap.add_argument("--no-hip", action="store_true", help="skip the HIP demo figure")
    args = ap.parse_args()
    if args.quick:
        args.tus = 24
    tmp = Path(tempfile.mkdtemp(prefix="rf-ccache-"))
    try:
        src = tmp / "src"
        shutil.copytree(
            REPO / "examples" / "cxx-many", src, ignore=shutil.ignore_patterns("build", "src")
        )
        subprocess.run([sys.executable, "gen.py", "src", str(args.tus)], cwd=src, check=True)
        print(f"cxx-many: {args.tus} TUs + main.cpp, CMake + Ninja, -O3, MAX_JOBS=2")
        offs, ons, cpu_off, cpu_on = [], [], [], []
        cache = tmp / "cache-0"
        store = tmp / "store-0"
        for i in range(args.rounds):
            w, c, _ = timed(cxx_recipe(tmp, src, f"off{i}"), tmp / f"off{i}", tmp / "unused",
                            "--no-compiler-cache")  # fmt: skip
            offs.append(w)
            cpu_off.append(c)
            cache, store = tmp / f"cache-{i}", tmp / f"store-{i}"
            w, c, meta = timed(cxx_recipe(tmp, src, f"cold{i}"), store, cache)
            ons.append(w)
            cpu_on.append(c)
            print(f"  round {i + 1}: cold off {offs[-1]:.1f} s ({cpu_off[-1]:.0f} CPU-s), "
                  f"cold on {ons[-1]:.1f} s ({cpu_on[-1]:.0f} CPU-s), {cc(meta)}")  # fmt: skip
        off, on = min(offs), min(ons)
        w_env, _, m_env = timed(cxx_recipe(tmp, src, "env"), store, cache)
        tu = src / "src" / "tu_005.cpp"
        tu.write_text(tu.read_text().replace("+ v.front()", "+ v.back()"))
        w_edit, _, m_edit = timed(cxx_recipe(tmp, src, "env"), store, cache)
        c_env = m_env["compiler_cache"]
        rate = c_env["hits"] / (c_env["hits"] + c_env["misses"])
        print(f"1. env change (new hash, same compiles): {w_env:.1f} s vs cold {off:.1f} s: "
              f"{off / w_env:.1f}x faster, {cc(m_env)} (target >= 5x, >= 95%: "
              f"{'ok' if off / w_env >= 5 and rate >= 0.95 else 'MISSED'})")  # fmt: skip
        ok = "ok" if off / w_edit >= 4 else "MISSED"
        print(f"2. one-file edit: {w_edit:.1f} s vs cold {off:.1f} s: {off / w_edit:.1f}x "
              f"faster, {cc(m_edit)} (target >= 4x: {ok})")  # fmt: skip
        over = on / off - 1
        over_cpu = min(cpu_on) / min(cpu_off) - 1
        print(f"3. cold build, cache on vs off: {on:.1f} s vs {off:.1f} s: {over:+.1%} wall, "
              f"{min(cpu_on):.0f} vs {min(cpu_off):.0f} CPU-s: {over_cpu:+.1%} CPU "
              f"(target <= 10%: {'ok' if over <= 0.10 else 'MISSED'}; best of "
              f"{args.rounds})")  # fmt: skip
        if not args.no_hip and shutil.which("hipcc"):
            hip = REPO / "recipes" / "hip-demo.toml"
            hc = tmp / "hip-cache"
            w_cold, _, m_cold = timed(hip, tmp / "hip-1", hc)
            w_warm, _, m_warm = timed(hip, tmp / "hip-2", hc)
            h = m_warm["compiler_cache"]
            print(f"4. HIP demo (kernel.hip: hipcc -> clang -x hip, gfx90a+gfx940; _hip.c: gcc): "
                  f"cold {w_cold:.1f} s {cc(m_cold)}; warm {w_warm:.1f} s {cc(m_warm)} "
                  f"({'ok' if h['hits'] >= 2 and h['misses'] == 0 else 'MISSED'})")  # fmt: skip
        elif not args.no_hip:
            print("4. HIP demo: skipped (no hipcc)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
