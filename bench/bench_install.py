"""A build's requirement install against uv's (issue 14, goal 2).

Pair, interleaved run by run (A, B, A, B, ...) so that load on the machine cancels out:
  A  rocmforge: the build venv laid out + the requirement wheels hard-linked from their installed
     trees in the store (``rocmforge.wheel.wheelcache``; the trees are made by a first, untimed
     run),
     timed in-process as the build runs it;
  B  ``uv venv`` + ``uv pip install --offline --no-index`` of the same wheels from a warm uv cache
     (two commands, as a user would run them).
Also shown: the previous path (pypa/installer re-reading and re-hashing every member on every
build). Reports wall medians and CPU (user+sys) medians, and the ratios A/B. Target: A <= 1.2x B.
uv comes from PyPI (``pip install uv``); without it the anchor is skipped with a line saying so.
``uv pip install`` gets ``--no-deps``: both sides install exactly the wheels given.

``--test-closure`` times A as ``rocmforge test TARGET`` installs a closure into its test venv
(:func:`rocmforge.accept.target.install_closure`: the same trees, the test venv's shebang) —
issue 28's target, with a torch-sized closure: e.g. ``--wheel torch-*.whl --wheel
torchvision-*.whl --wheel numpy-*.whl --wheel pillow-*.whl``.
Usage: python bench/bench_install.py [--runs 15] [--quick] [--test-closure] [--wheel PATH ...]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WHEEL = REPO / ".ci" / "wheelhouse" / "setuptools-75.6.0-py3-none-any.whl"
SHEBANG = "/build/venv/bin/python"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 runs")
    ap.add_argument("--wheel", type=Path, action="append", help="wheels to install")
    ap.add_argument("--test-closure", action="store_true",
                    help="A: the closure install of `rocmforge test TARGET`")
    args = ap.parse_args()
    runs = 2 if args.quick else args.runs
    wheels = args.wheel or [DEFAULT_WHEEL]
    missing = [w for w in wheels if not w.is_file()]
    if missing:
        print(f"skipped: no wheel {missing[0]} (scripts/test.sh fetches it)")
        return 0
    sys.path.insert(0, str(REPO))
    from rocmforge.errors import RequirementError
    from rocmforge.wheel.install import install_wheels
    from rocmforge.wheel.venv import create_venv
    from rocmforge.wheel.wheelcache import install_linked

    uv = shutil.which("uv", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    tmp = Path(tempfile.mkdtemp(prefix="rf-install-"))
    version = platform.python_version()
    xy = ".".join(version.split(".")[:2])
    reqs = [(w, hashlib.sha256(w.read_bytes()).hexdigest()) for w in wheels]
    sources = tmp / "sources"
    python = Path(sys.executable)
    base = getattr(sys, "_base_executable", sys.executable)

    def rocmforge_linked(i: int) -> tuple[float, float]:
        venv = tmp / f"a{i}"
        c, t = _self_cpu(), time.perf_counter()
        if args.test_closure:
            from rocmforge.accept.target import Closure, install_closure

            install_closure(Closure((), (), tuple(reqs)), venv, python=str(python),
                            version=version, sources_dir=sources)  # fmt: skip
        else:
            create_venv(python, venv, version=version)
            install_linked(reqs, venv, sources_dir=sources, python_xy=xy, interpreter=SHEBANG)
        return time.perf_counter() - t, _self_cpu() - c

    def rocmforge_direct(i: int) -> tuple[float, float]:
        venv = tmp / f"d{i}"
        c, t = _self_cpu(), time.perf_counter()
        create_venv(python, venv, version=version)
        install_wheels(wheels, venv, interpreter=SHEBANG, error=RequirementError)
        return time.perf_counter() - t, _self_cpu() - c

    env = dict(os.environ, UV_CACHE_DIR=str(tmp / "uvcache"), UV_NO_CONFIG="1")
    links = [a for w in wheels for a in ("--find-links", str(w.parent))]
    names = [w.name.split("-")[0] + "==" + w.name.split("-")[1] for w in wheels]

    def uv_install(i: int) -> tuple[float, float]:
        assert uv is not None
        venv = tmp / f"u{i}"
        c, t = _children_cpu(), time.perf_counter()
        for argv in (
            [uv, "venv", "-q", "--python", base, str(venv)],
            [uv, "pip", "install", "-q", "--offline", "--no-index", "--no-deps", *links, "--python",
             str(venv / "bin" / "python"), *names],
        ):
            subprocess.run(argv, check=True, env=env, stdin=subprocess.DEVNULL)
        return time.perf_counter() - t, _children_cpu() - c

    rocmforge_linked(-1)  # the installed trees: made once, by the first build that needs them
    if uv:
        uv_install(-1)  # fills uv's cache
    series: dict[str, list[tuple[float, float]]] = {"linked": [], "direct": [], "uv": []}
    for i in range(runs):
        series["linked"].append(rocmforge_linked(i))
        if uv:
            series["uv"].append(uv_install(i))
        series["direct"].append(rocmforge_direct(i))

    def med(name: str, k: int) -> float:
        return statistics.median(x[k] for x in series[name]) * 1000

    print(f"wheels: {', '.join(w.name for w in wheels)}; {runs} interleaved runs, medians")
    print("warm page cache, warm caches (store trees / uv cache); wall and CPU (user+sys)")
    what = "test closure install" if args.test_closure else "linked install"
    print(f"rocmforge venv + {what + ':':<20}{med('linked', 0):8.1f} ms wall "
          f"{med('linked', 1):8.1f} ms cpu")
    print(f"rocmforge venv + installer (before): {med('direct', 0):8.1f} ms wall "
          f"{med('direct', 1):8.1f} ms cpu")
    if not uv:
        print("uv anchor skipped: uv not found (pip install uv)")
    else:
        print(f"uv venv + uv pip install --offline:  {med('uv', 0):8.1f} ms wall "
              f"{med('uv', 1):8.1f} ms cpu")
        rw, rc = med("linked", 0) / med("uv", 0), med("linked", 1) / med("uv", 1)
        verdict = "met" if rw <= 1.2 else "NOT met"
        print(f"ratio rocmforge/uv: {rw:.2f}x wall, {rc:.2f}x cpu  (target <= 1.2x: {verdict})")
        print(f"ratio before/uv:    {med('direct', 0) / med('uv', 0):.2f}x wall")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
