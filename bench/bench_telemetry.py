"""Telemetry's cost (issue 30, point 6): a real CMake + Ninja build of a few hundred small C++
translation units, realized with telemetry on and off in turn (on, off, on, off, ...), each
build a real one (a new ``[env] RUN`` value: a new input hash; no compiler cache).

Prints every pair, the medians and the ratio on/off (target: <= 1.02), then the same pair for
a cache hit (the memo answers; telemetry must add nothing there).

Last, the ETA's error on a second build: the project built twice more with ``--heartbeat 1``;
for each heartbeat of the second build at 25/50/75 % of its edges, the end it predicts
(elapsed + ETA, "from the previous build") against the end of the build phase.

Usage: python bench/bench_telemetry.py [--tus 300] [--rounds 3] [--jobs 2] [--pypi-tools]
       python bench/bench_telemetry.py one on|off DIR   (one build in a prepared DIR; prints s)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TU = """\
// translation unit {k}
#include <string>
#include <vector>
#include <numeric>

namespace tu{k} {{
static std::vector<long> fill(int n) {{
  std::vector<long> v(n);
  std::iota(v.begin(), v.end(), {k});
  return v;
}}
}}  // namespace tu{k}

long tu_{k}(int n) {{
  auto v = tu{k}::fill(n);
  std::string s = std::to_string(std::accumulate(v.begin(), v.end(), 0L));
  return static_cast<long>(s.size()) + v.back();
}}
"""

CMAKE = """\
cmake_minimum_required(VERSION 3.16)
project(benchtel CXX)
file(GLOB SRC ${CMAKE_SOURCE_DIR}/src/*.cpp)
add_library(benchtel SHARED ${SRC})
"""

PACK = """\
import base64, hashlib, os, sys, zipfile

DIST = "benchtel-1.0.dist-info"
TAG = "py3-none-linux_x86_64"
files = {
    "benchtel/__init__.py": b"",
    "benchtel/libbenchtel.so": open("build/libbenchtel.so", "rb").read(),
    DIST + "/METADATA": b"Metadata-Version: 2.1\\nName: benchtel\\nVersion: 1.0\\n",
    DIST + "/WHEEL": ("Wheel-Version: 1.0\\nGenerator: bench\\nRoot-Is-Purelib: false\\n"
                      "Tag: " + TAG + "\\n").encode(),
}
rec = []
with zipfile.ZipFile(os.path.join(sys.argv[1], "benchtel-1.0-" + TAG + ".whl"), "w") as z:
    for n, data in files.items():
        z.writestr(zipfile.ZipInfo(n, (2020, 1, 1, 0, 0, 0)), data)
        d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rec.append(n + ",sha256=" + d + "," + str(len(data)))
    rec.append(DIST + "/RECORD,,")
    z.writestr(zipfile.ZipInfo(DIST + "/RECORD", (2020, 1, 1, 0, 0, 0)), "\\n".join(rec) + "\\n")
"""

RECIPE = """\
schema = 1

[package]
name = "benchtel"
version = "1.0"

[source]
path = "{src}"

[toolchain]
kind = "system"
python = "{python}"

[env]
RUN = "{run}"
{requirements}
[build]
timeout = "60m"
steps = [
  "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release",
  "cmake --build build -j {jobs}",
  "python3 pack.py $OUT",
]
"""


#: ``--pypi-tools``: CMake and Ninja from PyPI wheels (a host without them, like the GPU machine)
REQUIREMENTS = ""


def prepare(root: Path, tus: int) -> None:
    """Write the project (``tus`` translation units) under ``root/src``."""
    src = root / "src"
    (src / "src").mkdir(parents=True, exist_ok=True)
    for k in range(tus):
        (src / "src" / f"tu_{k:03d}.cpp").write_text(TU.format(k=k))
    (src / "CMakeLists.txt").write_text(CMAKE)
    (src / "pack.py").write_text(PACK)


def build(
    root: Path, telemetry: str, jobs: int, run: str | None = None, *extra: str
) -> tuple[float, str]:
    """One realize (a new input hash unless ``run`` repeats one); its wall seconds, stderr."""
    if run is None:
        counter = root / "runs"
        n = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(n))
        run = str(n)
    recipe = root / "benchtel.toml"
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"  # the running one: a wheel's tags
    text = RECIPE.format(src=root / "src", run=run, jobs=jobs, requirements=REQUIREMENTS,
                         python=python)  # fmt: skip
    if not recipe.exists() or recipe.read_text() != text:  # a rewrite would move the memo's guard
        recipe.write_text(text)
        if REQUIREMENTS:  # not timed: lock pins the PyPI cmake and ninja for the new recipe
            subprocess.run([sys.executable, "-m", "rocmforge", "lock", str(recipe)],
                           capture_output=True, check=True, cwd=REPO)  # fmt: skip
    env = dict(os.environ, ROCMFORGE_TELEMETRY=telemetry)
    env.pop("ROCMFORGE_STORE", None)
    env.pop("MAX_JOBS", None)
    cmd = [sys.executable, "-m", "rocmforge", "realize", str(recipe), "--store",
           str(root / "store"), "--no-compiler-cache", "--json", *extra]  # fmt: skip
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, check=False, cwd=REPO)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"realize failed:\n{proc.stderr.decode()[-3000:]}")
    json.loads(proc.stdout)
    return wall, proc.stderr.decode()


_BEAT = re.compile(r"build still running \(\+(\d+):(\d\d):(\d\d)\); \[(\d+)/(\d+)\] \d+% "
                   r"ETA (?:(\d+):)?(\d+):(\d\d) \(from the previous build\)")  # fmt: skip
_CHECK = re.compile(r": check \(\+(\d+):(\d\d):(\d\d)\)")


def eta_error(root: Path, jobs: int) -> None:
    """Print the ETA's error at 25/50/75 % of a second build's edges (see the description)."""
    build(root, "on", jobs)
    _, err = build(root, "on", jobs, None, "--heartbeat", "1")
    end_m = _CHECK.search(err)
    beats = list(_BEAT.finditer(err))
    if end_m is None or not beats:
        print("ETA error: no heartbeat with an ETA from the previous build")
        return
    end = int(end_m[1]) * 3600 + int(end_m[2]) * 60 + int(end_m[3])
    for want in (25, 50, 75):
        m = min(beats, key=lambda b: abs(100 * int(b[4]) / int(b[5]) - want))
        at = int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])
        eta = int(m[6] or 0) * 3600 + int(m[7]) * 60 + int(m[8])
        left = end - at
        print(f"ETA at [{m[4]}/{m[5]}] (+{at} s): {eta} s predicted, {left} s actual "
              f"(error {eta - left:+d} s, {100 * (eta - left) / max(left, 1):+.0f} %)")  # fmt: skip


def _pairs(name: str, on: list[float], off: list[float]) -> None:
    for i, (a, b) in enumerate(zip(on, off, strict=True), 1):
        print(f"  {name} pair {i}: on {a:7.2f} s  off {b:7.2f} s  ratio {a / b:.3f}")
    ratios = [a / b for a, b in zip(on, off, strict=True)]
    print(f"{name}: on median {statistics.median(on):.2f} s, off median "
          f"{statistics.median(off):.2f} s, ratio on/off (median of pairs) "
          f"{statistics.median(ratios):.3f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module's description)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tus", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--pypi-tools", action="store_true",
                    help="cmake and ninja as build requirements (ROCMFORGE_PIP_ARGS finds them)")
    ap.add_argument("one", nargs="*", help="one on|off DIR: one build in a prepared DIR")
    args = ap.parse_args(argv)
    global REQUIREMENTS
    if args.pypi_tools:
        REQUIREMENTS = '\n[requirements]\nbuild = ["cmake==3.31.6", "ninja==1.11.1.4"]\n'
    if args.one:
        _, mode, where = args.one
        print(f"{build(Path(where), mode, args.jobs)[0]:.2f}")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-telemetry-") as tmp:
        root = Path(tmp)
        prepare(root, args.tus)
        print(f"{args.tus} translation units, cmake --build -j {args.jobs}, "
              f"{args.rounds} pairs (on first, then off)")  # fmt: skip
        build(root, "on", args.jobs)  # warm-up: page cache, the toolchain's facts
        on: list[float] = []
        off: list[float] = []
        for _ in range(args.rounds):
            on.append(build(root, "on", args.jobs)[0])
            off.append(build(root, "off", args.jobs)[0])
        _pairs("build", on, off)
        hit_on: list[float] = []
        hit_off: list[float] = []
        build(root, "on", args.jobs, "1")  # the warm-up's recipe again: the memo records it
        for _ in range(args.rounds):  # answered from the store
            hit_on.append(build(root, "on", args.jobs, "1")[0])
            hit_off.append(build(root, "off", args.jobs, "1")[0])
        _pairs("cache hit", hit_on, hit_off)
        eta_error(root, args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
