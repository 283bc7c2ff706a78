"""``rocmforge bisect``: real git repositories made here, real C extensions built by the real
realize in the sandbox, a fresh venv per commit.

The projects: a C extension whose behaviour breaks at one commit (``twice`` starts tripling), one
whose speed drops at one commit (the metric), one whose build breaks in the middle (skip, or
bad with ``--build-failure bad``); a bisect interrupted by SIGINT and resumed; ``-j 2`` building
two points at once; a second bisect over an overlapping range building nothing; and the bad input
that stops before anything is built (or, for a command not good at the good end, after the good
end alone).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import commit_all, git, pip_args, rf, rf_in

NATIVE_C = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "config.h"

static PyObject *twice(PyObject *self, PyObject *args) {
  long x;
  if (!PyArg_ParseTuple(args, "l", &x)) return NULL;
  return PyLong_FromLong(FACTOR * x);
}

static PyObject *work(PyObject *self, PyObject *args) {
  volatile unsigned long s = 0;
  for (long i = 0; i < LOOPS; i++) s += (unsigned long)i ^ (s >> 3);
  return PyLong_FromUnsignedLong(s);
}

static PyMethodDef methods[] = {
  {"twice", twice, METH_VARARGS, "x times FACTOR"},
  {"work", work, METH_NOARGS, "LOOPS iterations"},
  {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};
PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
"""

BUILD_SH = """\
set -e
inc=$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
ext=$(python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
cc -O1 -shared -fPIC -I"$inc" native.c -o "tiny/_native$ext"
python mkwheel.py "$OUT" tiny 0.1
"""

RECIPE = """\
schema = 1

[package]
name = "tiny"
version = "0.1"

[source]
git = "{repo}"
rev = "{rev}"

[build]
steps = ["{pre}sh build.sh"]

[check]
import = "tiny"
"""

RUN = "python -c 'import sys, tiny; sys.exit(0 if tiny.twice(21) == 42 else 1)'"

BENCH = """\
import time
import tiny

best = min(
    (lambda t: (tiny.work(), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(7)
)
print(f"{1.0 / best:.3f}")
"""


def make_repo(
    base: Path,
    count: int,
    *,
    factor_from: int | None = None,
    slow_from: int | None = None,
    broken: tuple[int, ...] = (),
) -> list[str]:
    """A git repository of ``count`` commits of the C extension under ``base/repo``; commit
    ``factor_from`` on triples instead of doubling, ``slow_from`` on loops 20 times more, the
    commits in ``broken`` do not compile. Return the commits, oldest first."""
    from conftest import DATA

    repo = base / "repo"
    (repo / "tiny").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "mkwheel.py").write_bytes((DATA / "mkwheel.py").read_bytes())
    (repo / "build.sh").write_text(BUILD_SH)
    (repo / "tiny" / "__init__.py").write_text("from tiny._native import twice, work\n")
    commits = []
    for i in range(count):
        factor = 3 if factor_from is not None and i >= factor_from else 2
        loops = 4_000_000 if slow_from is not None and i >= slow_from else 200_000
        (repo / "config.h").write_text(
            f"#define FACTOR {factor}\n#define LOOPS {loops}L\n#define REVISION {i}\n"
        )
        source = NATIVE_C + ("this does not compile;\n" if i in broken else "")
        (repo / "native.c").write_text(source)
        commits.append(commit_all(repo, f"change {i}"))
    return commits


def make_recipe(base: Path, commits: list[str], *, pre: str = "") -> Path:
    """The recipe of ``base/repo`` at its last commit (``pre``: a shell prefix of its step)."""
    recipe = base / "tiny.toml"
    recipe.write_text(RECIPE.format(repo=base / "repo", rev=commits[-1], pre=pre))
    return recipe


def bisect(*args: str | Path, store: Path) -> subprocess.CompletedProcess[str]:
    """Run ``rocmforge bisect`` in a process (the builds' children matter)."""
    return rf("bisect", *args, "--store", store)


def log_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr[-4000:]
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def entries(store: Path) -> list[Path]:
    where = store / "entries"
    return sorted(where.iterdir()) if where.is_dir() else []


@pytest.fixture
def cc() -> None:
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")


# -- behaviour, with the text report, the entries and a second overlapping bisect ------------------


@pytest.mark.slow
def test_finds_the_commit_that_breaks_behaviour(cc: None, tmp_path: Path) -> None:
    commits = make_repo(tmp_path, 8, factor_from=5)
    recipe = make_recipe(tmp_path, commits)
    store = tmp_path / "store"
    proc = bisect(recipe, "--good", commits[0][:10], "--bad", "main", "--run", RUN, store=store)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert f"first bad commit: {commits[5]} change 5" in out, out
    assert f"last good commit: {commits[4]} change 4" in out, out
    good_build = next(line for line in out.splitlines() if line.startswith("last good build:"))
    bad_build = next(line for line in out.splitlines() if line.startswith("first bad build:"))
    good_entry, bad_entry = Path(good_build.split()[-1]), Path(bad_build.split()[-1])
    assert good_entry.is_dir() and bad_entry.is_dir() and good_entry != bad_entry
    # One table row per step: the good end, the bad end, then a binary search of 6 commits.
    data = json.loads((store / "cache" / "bisect").glob("*/log.json").__next__().read_text())
    assert data["done"] and data["first_bad"]["commit"] == commits[5]
    steps = data["steps"]
    assert [s["index"] for s in steps[:2]] == [0, 7] and len(steps) <= 5
    assert {s["verdict"] for s in steps if s["index"] >= 5} == {"bad"}
    assert {s["verdict"] for s in steps if s["index"] < 5} == {"good"}
    assert len(entries(store)) == len(steps) and all(s["built"] for s in steps)
    for s in steps:
        assert f"{s['commit'][:12]}  {s['verdict']}" in out
    # The commit's entry is the recipe's own at that commit: the same input hash.
    at5 = recipe.with_name("at5.toml")
    at5.write_text(recipe.read_text().replace(commits[-1], commits[5]))
    plan = rf_in("plan", at5, "--store", store, "--json")
    assert json.loads(plan.stdout)["hash"] == data["first_bad"]["hash"], plan.stderr
    explain = rf_in("explain", good_entry, bad_entry, "--store", store)
    assert explain.returncode == 0 and "source" in explain.stdout, explain.stdout + explain.stderr
    # A second bisect over an overlapping range builds nothing: every point is in the store.
    assert [s["index"] for s in steps] == [0, 7, 4, 6, 5]
    again = log_of(bisect(recipe, "--good", commits[4], "--bad", commits[7], "--run", RUN,
                          "--json", store=store))  # fmt: skip
    assert again["first_bad"]["commit"] == commits[5]
    assert not any(s["built"] for s in again["steps"]), again["steps"]
    assert len(entries(store)) == len(steps)


# -- the metric ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_metric_finds_the_commit_that_slows_it(cc: None, tmp_path: Path) -> None:
    commits = make_repo(tmp_path, 7, slow_from=4)
    recipe = make_recipe(tmp_path, commits)
    bench = tmp_path / "bench.py"
    bench.write_text(BENCH)
    store = tmp_path / "store"
    proc = bisect(recipe, "--good", commits[0], "--bad", commits[-1], "--metric",
                  f"python {bench}", "--relative", "0.5", store=store)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"first bad commit: {commits[4]} change 4" in proc.stdout, proc.stdout
    assert "baseline (good end): " in proc.stdout and "figure" in proc.stdout
    data = json.loads(next((store / "cache" / "bisect").glob("*/log.json")).read_text())
    baseline = data["baseline"]
    assert data["limit"] == pytest.approx(0.5 * baseline)
    for s in data["steps"]:
        assert isinstance(s["figure"], float), s
        assert (s["figure"] < data["limit"]) == (s["index"] >= 4), s
        assert f"{s['figure']:.6g}" in proc.stdout
    # An absolute threshold the good end does not meet is bad input (exit 2), found there.
    high = bisect(recipe, "--good", commits[0], "--bad", commits[-1], "--metric",
                  f"python {bench}", "--threshold", str(baseline * 100), store=store)  # fmt: skip
    assert high.returncode == 2, high.stderr
    assert "the good end must be good" in high.stderr and commits[0][:12] in high.stderr


# -- a build that breaks in the middle -------------------------------------------------------------


@pytest.mark.slow
def test_a_broken_build_is_skipped_or_bad(cc: None, tmp_path: Path) -> None:
    commits = make_repo(tmp_path, 9, factor_from=6, broken=(4,))
    recipe = make_recipe(tmp_path, commits)
    store = tmp_path / "store"
    data = log_of(bisect(recipe, "--good", commits[0], "--bad", commits[-1], "--run", RUN,
                         "--json", store=store))  # fmt: skip
    by_index = {s["index"]: s for s in data["steps"]}
    assert by_index[4]["verdict"] == "skip" and "build failed" in by_index[4]["reason"]
    assert by_index[4]["hash"] is None
    assert data["first_bad"]["commit"] == commits[6] and data["candidates"] == []
    assert data["last_good"]["commit"] == commits[5]
    # --build-failure bad: the broken build is the first bad commit (c3 builds and is good).
    bad = log_of(bisect(recipe, "--good", commits[0], "--bad", commits[-1], "--run", RUN,
                        "--build-failure", "bad", "--json", store=store))  # fmt: skip
    assert bad["first_bad"]["commit"] == commits[4], bad["steps"]
    assert bad["last_good"]["commit"] == commits[3]


# -- SIGINT and --resume ---------------------------------------------------------------------------


@pytest.mark.slow
def test_interrupted_by_sigint_and_resumed(cc: None, tmp_path: Path) -> None:
    commits = make_repo(tmp_path, 9, factor_from=3)
    recipe = make_recipe(tmp_path, commits)
    store = tmp_path / "store"
    ran = tmp_path / "ran.txt"
    run = f'echo "$ROCMFORGE_BISECT_COMMIT" >> {ran} && sleep 0.5 && {RUN}'
    argv = ["bisect", recipe, "--good", commits[0], "--bad", commits[-1], "--run", run,
            "--store", store]  # fmt: skip
    env = dict(os.environ, ROCMFORGE_PIP_ARGS=pip_args())
    env.pop("ROCMFORGE_STORE", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "rocmforge", *map(str, argv)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    recorded: list[dict[str, Any]] = []
    while time.monotonic() < deadline and child.poll() is None:
        logs = list((store / "cache" / "bisect").glob("*/log.json"))
        if logs:
            recorded = json.loads(logs[0].read_text())["steps"]
            if len(recorded) >= 2:  # the good end and the bad end are recorded
                break
        time.sleep(0.05)
    assert child.poll() is None, child.communicate()
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130, err[-3000:]
    log = json.loads(next((store / "cache" / "bisect").glob("*/log.json")).read_text())
    assert not log["done"] and len(log["steps"]) >= 2
    before = {s["commit"] for s in log["steps"]}
    built = {p.name: p.stat().st_mtime_ns for p in entries(store)}
    ran.write_text("")
    proc = rf(*argv, "--resume", "--json")
    data = log_of(proc)
    assert data["first_bad"]["commit"] == commits[3]
    resumed = [s for s in data["steps"] if s["resumed"]]
    assert {s["commit"] for s in resumed} == before
    # Nothing recorded was run or built again; the entries it had are untouched.
    assert not before & set(ran.read_text().split()), ran.read_text()
    assert all(built[p.name] == p.stat().st_mtime_ns for p in entries(store) if p.name in built)
    new = [s for s in data["steps"] if not s["resumed"]]
    assert new and all(s["commit"] not in before for s in new)
    assert len(entries(store)) == len(built) + sum(1 for s in new if s["built"] and s["hash"])
    # --resume alone finds the bisect (done now: nothing left to resume).
    alone = rf_in("bisect", "--resume", "--store", store)
    assert alone.returncode == 2 and "no unfinished bisect" in alone.stderr


# -- -j 2 ------------------------------------------------------------------------------------------


def _build_span(entry: str) -> tuple[float, float]:
    meta = json.loads((Path(entry) / "meta.json").read_text())
    start = min(s["started"] for s in meta["steps"])
    return start, max(s["started"] + s["seconds"] for s in meta["steps"])


@pytest.mark.slow
def test_j2_builds_two_points_at_once(cc: None, tmp_path: Path) -> None:
    commits = make_repo(tmp_path, 9, factor_from=6)
    recipe = make_recipe(tmp_path, commits, pre="sleep 1.5 && ")
    store = tmp_path / "store"
    data = log_of(bisect(recipe, "--good", commits[0], "--bad", commits[-1], "--run", RUN,
                         "-j", "2", "--json", store=store))  # fmt: skip
    assert data["first_bad"]["commit"] == commits[6]
    steps = data["steps"]
    # The good end alone, then the bad end with one point, then two points a round (k = 2).
    assert steps[0]["index"] == 0 and {steps[1]["index"], steps[2]["index"]} == {8, 4}
    pairs = [(steps[i], steps[i + 1]) for i in range(1, len(steps) - 1, 2)]
    assert len(pairs) >= 2, steps
    for a, b in pairs:
        (a0, a1), (b0, b1) = _build_span(a["path"]), _build_span(b["path"])
        assert a0 < b1 and b0 < a1, (a, b)  # their builds overlapped in time
    assert len(steps) < 1 + 8  # fewer than testing every commit


# -- bad input -------------------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, list[str]]:
    commits = make_repo(tmp_path, 3, factor_from=2)
    return make_recipe(tmp_path, commits), commits


def test_good_not_an_ancestor_of_bad(small: tuple[Path, list[str]], tmp_path: Path) -> None:
    recipe, commits = small
    store = tmp_path / "store"
    proc = rf_in("bisect", recipe, "--good", commits[2], "--bad", commits[0], "--run", "true",
                 "--store", store)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "is not an ancestor of --bad" in line and commits[2][:12] in line
    git(tmp_path / "repo", "checkout", "-q", "-b", "side", commits[0])
    (tmp_path / "repo" / "side.txt").write_text("side\n")
    side = commit_all(tmp_path / "repo", "side")
    proc = rf_in("bisect", recipe, "--good", side, "--bad", commits[2], "--run", "true",
                 "--store", store)  # fmt: skip
    assert proc.returncode == 2 and "is not an ancestor" in proc.stderr, proc.stderr
    proc = rf_in("bisect", recipe, "--good", "nosuchrev", "--bad", commits[2], "--run", "true",
                 "--store", store)  # fmt: skip
    assert proc.returncode == 2 and "--good nosuchrev: no such commit" in proc.stderr
    assert not entries(store)


def test_recipe_without_git_source(tiny_recipe: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = rf_in("bisect", tiny_recipe, "--good", "a", "--bad", "b", "--run", "true",
                 "--store", store)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "has no git source" in line and str(tiny_recipe) in line
    assert "Traceback" not in proc.stderr and not entries(store)


def test_usage_errors(small: tuple[Path, list[str]], tmp_path: Path) -> None:
    recipe, commits = small
    store = tmp_path / "store"
    ends = ["--good", commits[0], "--bad", commits[2]]
    for extra, message in (
        ([], "needs --run COMMAND or --metric"),
        (["--metric", "echo 1"], "--metric needs --threshold X or --relative R"),
        (["--run", "true", "--threshold", "3"], "judge a --metric"),
    ):
        proc = rf_in("bisect", recipe, *ends, *extra, "--store", store)
        assert proc.returncode == 2 and message in proc.stderr, (extra, proc.stderr)
    proc = rf_in("bisect", recipe, "--bad", commits[2], "--run", "true", "--store", store)
    assert proc.returncode == 2 and "both --good REV and --bad REV" in proc.stderr
    assert not entries(store)


@pytest.mark.slow
def test_command_bad_at_the_good_end(
    cc: None, small: tuple[Path, list[str]], tmp_path: Path
) -> None:
    recipe, commits = small
    store = tmp_path / "store"
    proc = bisect(recipe, "--good", commits[0], "--bad", commits[2], "--run", "exit 1",
                  store=store)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "the good end must be good, and it is bad (run: exit 1)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(entries(store)) == 1  # the good end alone was built


# -- a stack: the companion rebuilt against each commit ------------------------------------------

COMPANION = """\
schema = 1

[package]
name = "comp"
version = "0.1"

[source]
path = "{src}"

[requirements]
recipes = ["tiny.toml"]

[build]
steps = ["python freeze.py && python mkwheel.py $OUT comp 0.1"]

[check]
import = "comp"
"""

FREEZE = """\
import tiny

with open("comp/__init__.py", "w") as f:
    f.write(f"AT_BUILD = {tiny.twice(21)}\\n")
"""


@pytest.mark.slow
def test_stack_companion_is_rebuilt_against_each_commit(cc: None, tmp_path: Path) -> None:
    from conftest import DATA

    commits = make_repo(tmp_path, 6, factor_from=3)
    make_recipe(tmp_path, commits)
    src = tmp_path / "comp-src"
    (src / "comp").mkdir(parents=True)
    (src / "mkwheel.py").write_bytes((DATA / "mkwheel.py").read_bytes())
    (src / "freeze.py").write_text(FREEZE)
    (src / "comp" / "__init__.py").write_text("AT_BUILD = None\n")  # written again by the build
    (tmp_path / "comp.toml").write_text(COMPANION.format(src=src))
    stack = tmp_path / "stack.toml"
    stack.write_text('schema = 1\n[stack]\nname = "s"\nrecipes = ["tiny.toml", "comp.toml"]\n')
    store = tmp_path / "store"
    # Only the companion is asked: what it froze at build time is tiny's at that commit.
    run = "python -c 'import sys, comp; sys.exit(0 if comp.AT_BUILD == 42 else 1)'"
    data = log_of(bisect(stack, "--good", commits[0], "--bad", commits[-1], "--run", run,
                         "--json", store=store))  # fmt: skip
    assert data["first_bad"]["commit"] == commits[3], data["steps"]
    for step in data["steps"]:
        assert len(step["entries"]) == 2, step  # tiny and comp at that commit
        assert step["hash"] in step["entries"]
    names = [p.name.split("-", 1)[1] for p in entries(store)]
    assert names.count("comp-0.1") == names.count("tiny-0.1") == len(data["steps"])
    proc = rf_in("bisect", stack, "--good", commits[0], "--bad", commits[-1], "--run", "true",
                 "--package", "nosuch", "--store", store)  # fmt: skip
    assert proc.returncode == 2 and "--package nosuch: no recipe" in proc.stderr
