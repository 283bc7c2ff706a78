"""rocmforge's commands side by side with their Nix counterparts (issue 14, goals 1, 3 and 5).

Every row is a pair of whole commands, A (rocmforge) and B (the anchor), run interleaved
(A, B, A, B, ...) so that load on the machine cancels out; each is also paired with
``python -c pass`` of rocmforge's own interpreter, for reference (the former goal of read
commands <= 2x that is retired: issue 27). Goals, checked in the last column: every read
command <= 1.5x its Nix anchor (issue 27: one path per command, no second dispatcher), the
no-op ``realize`` <= 1.2x. Each run's
wall time and CPU time (user+sys of the finished child, from ``wait4``) are recorded; the table
prints medians and the ratios A/B. Conditions: warm page cache, warm store caches (the realize
memo, and the plan text a first ``plan`` records beside it), a store holding the entries this
script makes (a trivial recipe, built once).

Rows: no-op ``realize`` (memo hit) vs ``nix-build`` of a cached derivation; ``plan`` vs
``nix-instantiate``; ``audit``, ``query``, ``list``, ``show``, ``log``, ``pins``, ``du`` vs
``nix path-info`` / ``nix-store -q``; a cache-miss build of a trivial recipe (sandbox on) vs
``nix-build`` of a trivial derivation whose attribute changes per run (sandbox on).
Without nix on PATH the anchors are skipped with a line saying so (CI needs no nix).
Usage: python bench/bench_vs_nix.py [--runs 7] [--quick] [--only ROW]
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
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECIPE = """\
schema = 1
[package]
name = "tiny"
version = "0.1"
[source]
path = "src"
[env]
RUN = "{run}"
[build]
steps = ["python mkwheel.py $OUT tiny 0.1"]
[check]
import = "tiny"
"""
NIX_EXPR = """\
{ n ? "0" }: builtins.derivation {
  name = "t"; builder = "/bin/sh"; args = ["-c" "echo hi > $out"];
  system = builtins.currentSystem; N = n;
}
"""
NIX_SANDBOX = ["--option", "sandbox", "true", "--option", "extra-sandbox-paths",
               "/bin /usr /lib /lib64"]


def timed(argv: Sequence[str], *, cwd: Path | None = None) -> tuple[float, float]:
    """Run ``argv`` to completion; return (wall, user+sys) seconds. Raises on failure."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv)}\n{err.decode()[-800:]}")
    return wall, ru.ru_utime + ru.ru_stime


def med(xs: list[tuple[float, float]], k: int) -> float:
    return statistics.median(x[k] for x in xs) * 1000


def main() -> int:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rocmforge")], check=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 runs, no cache miss")
    ap.add_argument("--only", action="append", help="run only these rows (by name)")
    args = ap.parse_args()
    runs = 2 if args.quick else args.runs
    exe = shutil.which("rocmforge", path=str(Path(sys.executable).parent)) or "rocmforge"
    nix = shutil.which("nix-build") is not None
    tmp = Path(tempfile.mkdtemp(prefix="rf-vsnix-"))
    src = tmp / "src"
    (src / "tiny").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "data" / "mkwheel.py", src)
    (src / "tiny" / "__init__.py").write_text("V = 1\n")
    store = str(tmp / "store")
    recipe = tmp / "r.toml"
    recipe.write_text(RECIPE.format(run="base"))
    timed([exe, "realize", str(recipe), "--store", store, "-o", str(tmp / "result")])
    timed([exe, "realize", str(recipe), "--store", store])  # records the memo
    timed([exe, "plan", str(recipe), "--store", store])  # records what plan prints beside it
    entry = (tmp / "result").resolve()
    h = entry.name.split("-")[0]
    wheel = next(entry.glob("*.whl"))
    nexpr = tmp / "t.nix"
    nexpr.write_text(NIX_EXPR)
    out = drv = ""
    if nix:
        out = subprocess.run(
            ["nix-build", str(nexpr), "--no-out-link", *NIX_SANDBOX],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        drv = subprocess.run(
            ["nix-instantiate", str(nexpr)], check=True, capture_output=True, text=True
        ).stdout.strip()
    else:
        print("nix anchors skipped: nix-build not on PATH (apt-get install nix-bin)")
    rf = [exe]
    st = ["--store", store]
    counter = iter(range(10**6))

    def miss_recipe() -> list[str]:
        r = tmp / "miss.toml"
        r.write_text(RECIPE.format(run=f"m{next(counter)}"))
        return [*rf, "realize", str(r), *st]

    def miss_nix() -> list[str]:
        return ["nix-build", str(nexpr), "--no-out-link", "--argstr", "n",
                f"{time.time_ns()}", *NIX_SANDBOX]

    rows: list[tuple[str, Callable[[], list[str]], Callable[[], list[str]], bool]] = [
        ("no-op realize", lambda: [*rf, "realize", str(recipe), *st],
         lambda: ["nix-build", str(nexpr), "--no-out-link", *NIX_SANDBOX], True),
        ("plan", lambda: [*rf, "plan", str(recipe), *st],
         lambda: ["nix-instantiate", str(nexpr)], True),
        ("audit", lambda: [*rf, "audit", str(wheel), *st],
         lambda: ["nix", "path-info", out], True),
        ("query --name", lambda: [*rf, "query", "--name", "tiny", *st],
         lambda: ["nix", "path-info", out], True),
        ("list", lambda: [*rf, "list", *st], lambda: ["nix-store", "-q", "--references", out],
         True),
        ("show", lambda: [*rf, "show", h, *st], lambda: ["nix", "path-info", "--json", out],
         True),
        ("log", lambda: [*rf, "log", h, *st], lambda: ["nix-store", "-q", "--deriver", out],
         True),
        ("pins", lambda: [*rf, "pins", *st], lambda: ["nix-store", "--gc", "--print-roots"],
         True),
        ("du", lambda: [*rf, "du", *st], lambda: ["nix", "path-info", "-S", out], True),
        ("cache-miss build", miss_recipe, miss_nix, False),
    ]
    print(f"{runs} interleaved runs per row, medians; wall and CPU (user+sys) in ms;")
    print("warm page cache, warm store caches; tiny store (2 entries)")
    head = (f"{'row':<17} {'rocmforge':>17} {'anchor':>17} {'ratio':>13} {'py -c pass':>10} "
            f"{'x':>5}  goal")
    print(head)
    print(f"{'':<17} {'wall':>8} {'cpu':>8} {'wall':>8} {'cpu':>8} {'wall':>6} {'cpu':>6}")
    pass_argv = [sys.executable, "-c", "pass"]
    for name, a, b, read in rows:
        if args.only and name not in args.only:
            continue
        if args.quick and not read:
            print(f"{name:<17} skipped in --quick")
            continue
        sa: list[tuple[float, float]] = []
        sb: list[tuple[float, float]] = []
        sp: list[tuple[float, float]] = []
        for _ in range(runs):
            sa.append(timed(a()))
            if nix:
                sb.append(timed(b()))
            sp.append(timed(pass_argv))
        line = f"{name:<17} {med(sa, 0):8.1f} {med(sa, 1):8.1f} "
        if nix:
            line += f"{med(sb, 0):8.1f} {med(sb, 1):8.1f} "
            line += f"{med(sa, 0) / med(sb, 0):5.2f}x {med(sa, 1) / med(sb, 1):5.2f}x "
        else:
            line += f"{'-':>8} {'-':>8} {'-':>6} {'-':>6} "
        line += f"{med(sp, 0):8.1f} {med(sa, 0) / med(sp, 0):5.1f}x"
        goal = 1.2 if name == "no-op realize" else 1.5 if read else None
        if nix and goal is not None:
            met = med(sa, 0) / med(sb, 0) <= goal
            line += f"  <= {goal}x {'met' if met else 'NOT met'}"
        print(line)
    print(f"data: {drv or 'no nix'}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
