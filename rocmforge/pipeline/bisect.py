"""``rocmforge bisect``: find the commit that broke or slowed a build, every step a store entry.

The recipe's git source is bisected between a good and a bad commit along the first-parent
history (``git rev-list --first-parent --ancestry-path GOOD..BAD``). Each commit tested is a
small recipe file that ``extends`` the original and sets only ``[source] rev`` (the file's name
and place never enter the input hash, so the entry is the one the recipe itself would make at
that commit); in a stack, every recipe built against the bisected one gets such a file too, its
``[requirements] recipes`` pointed at the commit's file, so the companions are rebuilt against
each commit. The files are realized by the ordinary graph machinery
(:func:`rocmforge.pipeline.graph.realize_graph`, ``jobs`` points at once), the targets' closure
is installed into a fresh venv and the commands run there:

- ``run``: exit 0 good, 125 skip, 1-127 bad (as ``git bisect run``); 128 or more stops;
- ``metric``: the last stdout line is a number, bad beyond ``threshold`` (or ``relative`` times
  the good end's figure), in the direction of :attr:`BisectSpec.lower_is_better`.

A build that fails is ``skip`` (``build_failure = "bad"``: bad). The good end is built and tested
first (a command that is not good there is bad input), then the bad end (it must be bad), then
the interval is cut into ``jobs + 1`` parts until one commit is left.

The state of a bisect lives under the store, ``cache/bisect/<key>/`` (the key: recipe, good, bad
and the commands): ``log.json`` (every step: commit, entry hash, verdict, figure), replaced
atomically after each step, and ``recipes/`` (the commit files). ``resume`` takes the recorded
steps as they are (nothing rebuilt or run again) and goes on from there.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rocmforge.errors import EXIT_BAD_INPUT, EXIT_BUILD_FAILED, RocmforgeError
from rocmforge.pipeline.graph import realize_graph
from rocmforge.pipeline.options import RealizeOptions
from rocmforge.plan.graph import Graph, expand_targets, load_graph
from rocmforge.recipe.model import Recipe
from rocmforge.sources.git import ensure_mirror, git_ok, run_git
from rocmforge.sources.requirements import Fetcher
from rocmforge.store import layout
from rocmforge.store.roots import TempRoots
from rocmforge.store.store import Store
from rocmforge.util.fsutil import json_bytes, read_json_object, write_atomic, write_if_changed
from rocmforge.util.hashing import blake3_hex
from rocmforge.util.progress import NullReporter, Reporter

#: The version of ``log.json``.
LOG_VERSION = 1
#: ``cache/bisect/``: one directory per bisect (its log and its commit recipe files).
CACHE_BISECT = "bisect"
LOG_FILE = "log.json"
RECIPES_DIR = "recipes"
#: The exit status of a command that asks for its commit to be skipped (``git bisect run``'s).
EXIT_SKIP = 125

Verdict = Literal["good", "bad", "skip"]


class BisectError(RocmforgeError):
    """The bisect cannot start or go on as asked (bad input: exit 2): a good commit that is not
    an ancestor of the bad one, a recipe without a git source, a command not good at the good
    end or not bad at the bad end."""

    exit_code = EXIT_BAD_INPUT


class BisectStopped(RocmforgeError):
    """A command ended with exit 128 or more (as ``git bisect run``, that stops the bisect); the
    log is kept for ``--resume``."""

    exit_code = EXIT_BUILD_FAILED


@dataclass(frozen=True, slots=True, kw_only=True)
class BisectSpec:
    """What to bisect and how to judge a commit (the key of the bisect's state is made of it)."""

    #: The recipe or stack file given.
    target: Path
    good: str
    bad: str
    #: The shell command whose exit status is the verdict (None: the metric alone).
    run: str | None = None
    #: The shell command whose last stdout line is the figure (None: ``run`` alone).
    metric: str | None = None
    #: A figure beyond this is bad.
    threshold: float | None = None
    #: A figure beyond this times the good end's figure is bad.
    relative: float | None = None
    #: A figure above the limit is bad (e.g. seconds); default: one below it (e.g. ops/s).
    lower_is_better: bool = False
    #: What a failed build counts as: ``skip`` (default) or ``bad``.
    build_failure: Literal["skip", "bad"] = "skip"
    #: In a stack, the package whose git source is bisected (None: the only git recipe).
    package: str | None = None
    #: Points of the interval built at once (k-ary bisection).
    jobs: int = 1
    #: Seconds each command may run (None: no limit); over it, the commit is bad.
    timeout: float | None = None

    def key_data(self) -> dict[str, Any]:
        """What identifies the bisect (not ``jobs``: a resume may build more or fewer at once)."""
        return {
            "target": str(Path(os.path.abspath(self.target))),
            "run": self.run,
            "metric": self.metric,
            "threshold": self.threshold,
            "relative": self.relative,
            "lower_is_better": self.lower_is_better,
            "build_failure": self.build_failure,
            "package": self.package,
            "timeout": self.timeout,
        }

    def to_json(self) -> dict[str, Any]:
        """Return the spec as JSON-ready data."""
        return {**self.key_data(), "good": self.good, "bad": self.bad, "jobs": self.jobs}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BisectSpec:
        """The spec of a recorded ``log.json``."""
        return cls(
            target=Path(str(data["target"])),
            good=str(data["good"]),
            bad=str(data["bad"]),
            run=data.get("run"),
            metric=data.get("metric"),
            threshold=data.get("threshold"),
            relative=data.get("relative"),
            lower_is_better=bool(data.get("lower_is_better", False)),
            build_failure="bad" if data.get("build_failure") == "bad" else "skip",
            package=data.get("package"),
            jobs=int(data.get("jobs", 1)),
            timeout=data.get("timeout"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One commit tested: its place in the history, the entry built, the verdict and figure."""

    #: Position in the bisected history: 0 is the good end, the last index the bad end.
    index: int
    commit: str
    subject: str
    verdict: Verdict
    #: Why: ``exit 0``, ``exit 1: <last line>``, ``build failed: ...``, ``12.5 < 20``.
    reason: str
    #: The input hash and entry directory of the bisected recipe at this commit (None: the build
    #: failed).
    hash: str | None = None
    path: str | None = None
    #: Every target's entry at this commit (a stack: the companions too), hash -> path.
    entries: Mapping[str, str] = field(default_factory=dict)
    #: The metric's figure (None: no metric, or it gave none).
    figure: float | None = None
    #: Whether this bisect built it (False: the store had it).
    built: bool = False
    #: Seconds to realize, install and run.
    seconds: float = 0.0
    #: True when taken from the log of an earlier run (``--resume``): nothing was done again.
    resumed: bool = False

    def to_json(self) -> dict[str, Any]:
        """Return the step as JSON-ready data."""
        return {
            "index": self.index,
            "commit": self.commit,
            "subject": self.subject,
            "verdict": self.verdict,
            "reason": self.reason,
            "hash": self.hash,
            "path": self.path,
            "entries": dict(self.entries),
            "figure": self.figure,
            "built": self.built,
            "seconds": round(self.seconds, 3),
            "resumed": self.resumed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Step:
        """A step of a recorded ``log.json``."""
        verdict = str(data["verdict"])
        if verdict not in ("good", "bad", "skip"):
            raise ValueError(f"verdict {verdict!r}")
        figure = data.get("figure")
        return cls(
            index=int(data["index"]),
            commit=str(data["commit"]),
            subject=str(data.get("subject", "")),
            verdict=verdict,  # type: ignore[arg-type]
            reason=str(data.get("reason", "")),
            hash=data.get("hash"),
            path=data.get("path"),
            entries={str(k): str(v) for k, v in dict(data.get("entries") or {}).items()},
            figure=float(figure) if figure is not None else None,
            built=bool(data.get("built", False)),
            seconds=float(data.get("seconds", 0.0)),
            resumed=bool(data.get("resumed", False)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BisectReport:
    """The outcome: every step in the order it was taken, the last good and first bad steps."""

    spec: BisectSpec
    state_dir: Path
    url: str
    recipe: Path
    #: The full good and bad commits.
    good: str
    bad: str
    #: Commits in the bisected history, the good end included.
    commits: int
    steps: tuple[Step, ...]
    last_good: Step
    first_bad: Step
    #: Skipped commits between the last good and the first bad one: any of them (or the first
    #: bad) may be the first bad commit; empty when the first bad commit is certain.
    candidates: tuple[str, ...] = ()
    #: The good end's figure (with a metric) and the limit a figure is judged against.
    baseline: float | None = None
    limit: float | None = None

    @property
    def certain(self) -> bool:
        """Whether the first bad commit is known (no skipped commit could be it)."""
        return not self.candidates

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data (what ``log.json`` holds when done)."""
        return {
            "version": LOG_VERSION,
            "spec": self.spec.to_json(),
            "state_dir": str(self.state_dir),
            "url": self.url,
            "recipe": str(self.recipe),
            "good": self.good,
            "bad": self.bad,
            "commits": self.commits,
            "baseline": self.baseline,
            "limit": self.limit,
            "steps": [s.to_json() for s in self.steps],
            "done": True,
            "last_good": self.last_good.to_json(),
            "first_bad": self.first_bad.to_json(),
            "candidates": list(self.candidates),
        }


# -- the history -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """The commits bisected, the good end first and the bad end last, with their subjects."""

    url: str
    mirror: Path
    commits: tuple[str, ...]
    subjects: tuple[str, ...]


def _rev_parse(mirror: Path, rev: str) -> str | None:
    if rev.startswith("-"):
        return None
    try:
        out = run_git(
            ["--git-dir", mirror, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"]
        )
    except RocmforgeError:
        return None
    return out.decode().strip() or None


def history(recipe: Recipe, good: str, bad: str, *, store: Store) -> History:
    """The first-parent history from ``good`` to ``bad`` in the recipe's git source.

    ``good`` and ``bad`` may be any revision the repository knows (commit, prefix, tag, branch).
    Raises :class:`BisectError` naming the recipe and the revision: a source that is not git, a
    revision the repository lacks, a good commit that is not an ancestor of the bad one.
    """
    spec = recipe.source
    if spec.kind != "git" or spec.git is None or spec.rev is None:
        raise BisectError(
            f"{recipe.file}: [source] is a path, not a git repository: bisect needs "
            '[source] git = "..." and rev = "..." (it rebuilds the recipe at other commits)'
        )
    url = spec.git
    mirror = ensure_mirror(url, spec.rev, store.sources_dir)
    found: dict[str, str] = {}
    fetched = False
    for flag, rev in (("--good", good), ("--bad", bad)):
        # A branch or tag name is read after a fetch (the mirror's may be older than the
        # repository's); a commit (prefix) only when the mirror lacks it.
        named = not all(c in "0123456789abcdef" for c in rev.lower()) or len(rev) < 7
        commit = None if named and not fetched else _rev_parse(mirror, rev)
        if commit is None and not fetched:
            git_ok(["--git-dir", mirror, "fetch", "--quiet", "--prune", "--tags", "origin"])
            fetched = True
            commit = _rev_parse(mirror, rev)
        if commit is None:
            raise BisectError(f"{flag} {rev}: no such commit in {url} ({recipe.file})")
        found[flag] = commit
    g, b = found["--good"], found["--bad"]
    if g == b:
        raise BisectError(f"--good {good} and --bad {bad} are the same commit {g[:12]} in {url}")
    if not git_ok(["--git-dir", mirror, "merge-base", "--is-ancestor", g, b]):
        raise BisectError(
            f"--good {good} ({g[:12]}) is not an ancestor of --bad {bad} ({b[:12]}) in {url}: "
            "bisect looks for the first bad commit after a good one"
        )
    out = run_git(
        ["--git-dir", mirror, "log", "--first-parent", "--ancestry-path", "--reverse",
         "--format=%H %s", f"{g}..{b}"],
        what=f"cannot list the commits of {url}",
    ).decode(errors="replace")  # fmt: skip
    head = run_git(["--git-dir", mirror, "log", "-1", "--format=%H %s", g]).decode(errors="replace")
    commits: list[str] = []
    subjects: list[str] = []
    for line in [head.strip(), *out.splitlines()]:
        commit, _, subject = line.partition(" ")
        if commit and commit not in commits:
            commits.append(commit)
            subjects.append(subject.strip())
    if commits[-1] != b:  # --ancestry-path always ends at the bad commit; be sure of it
        raise BisectError(f"--bad {bad} ({b[:12]}): not on a first-parent path from --good {good}")
    return History(url=url, mirror=mirror, commits=tuple(commits), subjects=tuple(subjects))


# -- the recipe files of a commit --------------------------------------------------------------


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text)


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Which recipe is bisected, and which recipes of the targets are rebuilt against it."""

    graph: Graph
    #: The bisected recipe's file.
    subject: Path
    #: Every recipe of the closure that is built against ``subject`` (transitively), in order.
    dependents: tuple[Path, ...]


def plan_layout(target: Path, package: str | None) -> Layout:
    """Load ``target`` (a recipe or a stack) and choose the recipe whose source is bisected:
    the one named ``package``, else the only recipe with a git source. Raises
    :class:`BisectError` when there is none or the choice is not clear."""
    graph = load_graph([target])
    closure = graph.closure_of_targets()
    if package is not None:
        wanted = layout.normal_name(package)
        named = [f for f in closure if layout.normal_name(graph.recipes[f].package.name) == wanted]
        if not named:
            names = ", ".join(sorted(graph.recipes[f].package.name for f in closure))
            raise BisectError(f"--package {package}: no recipe of {target} builds it ({names})")
        subject = named[0]
    else:
        gits = [f for f in closure if graph.recipes[f].source.kind == "git"]
        if not gits:
            what = "recipe" if len(closure) == 1 else "stack"
            raise BisectError(
                f"{target}: the {what} has no git source ([source] is a path): bisect needs "
                '[source] git = "..." and rev = "..." (it rebuilds the recipe at other commits)'
            )
        if len(gits) > 1:
            names = ", ".join(graph.recipes[f].package.name for f in gits)
            raise BisectError(
                f"{target}: several recipes have a git source ({names}): name the one to "
                "bisect with --package NAME"
            )
        subject = gits[0]
    dependents = tuple(f for f in closure if subject in graph.closure(f))
    return Layout(graph=graph, subject=subject, dependents=dependents)


def write_commit_recipes(plan: Layout, commit: str, directory: Path) -> dict[Path, Path]:
    """Write the recipe files of ``commit``: the bisected recipe with ``[source] rev`` set, and
    each dependent with ``[requirements] recipes`` pointed at this commit's files. Return
    original file -> file to realize (a recipe that does not change maps to itself)."""
    files: dict[Path, Path] = {}
    tag = commit[:12]
    for original in (plan.subject, *plan.dependents):
        recipe = plan.graph.recipes[original]
        lines = [
            f"# {recipe.package.name} at commit {commit}: written by rocmforge bisect",
            f"extends = {_toml_string(str(original))}",
        ]
        if original == plan.subject:
            lines += ["[source]", f"rev = {_toml_string(commit)}"]
        else:
            deps = [str(files.get(Path(d), Path(d))) for d in recipe.requirements.recipes]
            lines += ["[requirements]", f"recipes = [{', '.join(map(_toml_string, deps))}]"]
        file = directory / f"{original.stem}@{tag}.toml"
        text = "\n".join(lines) + "\n"
        write_if_changed(file, text)
        files[original] = file
    return files


# -- the state ---------------------------------------------------------------------------------


def state_dir(store: Store, spec: BisectSpec, good: str, bad: str) -> Path:
    """The directory of one bisect's state: ``cache/bisect/<key>`` (recipe, ends, commands)."""
    key = blake3_hex(json_bytes({**spec.key_data(), "good": good, "bad": bad}))[:20]
    return store.cache_dir / CACHE_BISECT / key


def read_log(directory: Path) -> dict[str, Any] | None:
    """The recorded ``log.json`` of a bisect (None: none yet)."""
    try:
        return read_json_object(directory / LOG_FILE, what="bisect log")
    except RocmforgeError:
        return None  # a damaged log: start again (every build it names is in the store)


def latest_unfinished(store: Store) -> BisectSpec | None:
    """The spec of the most recently written bisect log of ``store`` that is not done."""
    base = store.cache_dir / CACHE_BISECT
    try:
        logs = sorted(base.glob(f"*/{LOG_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for path in logs:
        data = read_log(path.parent)
        if data is not None and not data.get("done") and isinstance(data.get("spec"), dict):
            try:
                return BisectSpec.from_json(data["spec"])
            except (KeyError, TypeError, ValueError):
                continue
    return None


# -- judging one commit ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Judged:
    verdict: Verdict
    reason: str
    figure: float | None = None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _run_command(
    command: str, env: Mapping[str, str], timeout: float | None, reporter: Reporter
) -> tuple[int | None, str, str]:
    """Run ``command`` with ``bash -c``; return (exit status or None on timeout, stdout,
    the last line of stderr). Every output line goes to the reporter."""
    try:
        proc = subprocess.run(
            ["bash", "-c", command], env=dict(env), capture_output=True, text=True,
            errors="replace", timeout=timeout, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        return None, out, f"timed out after {timeout:g} s"
    for line in (proc.stdout + proc.stderr).splitlines():
        reporter.log_line(line)
    return proc.returncode, proc.stdout, _last_line(proc.stderr)


def _stopped(command: str, code: int, commit: str) -> BisectStopped:
    return BisectStopped(
        f"{command!r} ended with exit {code} at {commit[:12]} (128 or more stops the bisect, "
        "as git bisect run does); the steps so far are kept: rocmforge bisect --resume"
    )


def judge(
    spec: BisectSpec,
    env: Mapping[str, str],
    commit: str,
    *,
    limit: float | None,
    reporter: Reporter,
) -> _Judged:
    """Run ``spec.run`` then ``spec.metric`` in ``env`` and give the verdict. ``limit`` is the
    figure a metric is judged against (None at the good end of ``--relative``: measured only)."""
    if spec.run is not None:
        code, _, last = _run_command(spec.run, env, spec.timeout, reporter)
        if code is None:
            return _Judged(verdict="bad", reason=f"run: {last}")
        if code == EXIT_SKIP:
            return _Judged(verdict="skip", reason=f"run: exit {EXIT_SKIP} (skip)")
        if code < 0 or code >= 128:
            raise _stopped(spec.run, code if code >= 0 else 128 - code, commit)
        if code != 0:
            return _Judged(
                verdict="bad", reason=f"run: exit {code}" + (f": {last}" if last else "")
            )
    if spec.metric is None:
        return _Judged(verdict="good", reason="run: exit 0")
    code, out, last = _run_command(spec.metric, env, spec.timeout, reporter)
    if code is None:
        return _Judged(verdict="bad", reason=f"metric: {last}")
    if code < 0 or code >= 128:
        raise _stopped(spec.metric, code if code >= 0 else 128 - code, commit)
    if code != 0:
        return _Judged(
            verdict="skip", reason=f"metric: exit {code}" + (f": {last}" if last else "")
        )
    word = _last_line(out)
    try:
        figure = float(word)
    except ValueError:
        return _Judged(
            verdict="skip", reason=f"metric: last stdout line {word[:60]!r} is no number"
        )
    if not math.isfinite(figure):
        return _Judged(verdict="skip", reason=f"metric: {word!r} is no finite number")
    if limit is None:
        return _Judged(verdict="good", reason=f"metric {figure:g} (baseline)", figure=figure)
    bad = figure > limit if spec.lower_is_better else figure < limit
    sign = (">" if bad else "<=") if spec.lower_is_better else ("<" if bad else ">=")
    return _Judged(verdict="bad" if bad else "good", reason=f"metric {figure:g} {sign} {limit:g}",
                   figure=figure)  # fmt: skip


def _venv_env(venv: Path, commit: str, entry: Path, state: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    env["ROCMFORGE_BISECT_COMMIT"] = commit
    env["ROCMFORGE_BISECT_ENTRY"] = str(entry)
    env["ROCMFORGE_BISECT_DIR"] = str(state)
    return env


def _install(store: Store, entry_paths: Sequence[Path], venv: Path) -> None:
    """The closure of the entries in a fresh venv at ``venv`` (pypa/installer, offline)."""
    from rocmforge.accept.target import base_python, closure_of, install_closure

    entries = [store.load(p) for p in entry_paths]
    python, version = base_python(entries)
    install_closure(closure_of(store, entries), venv, python=python, version=version,
                    sources_dir=store.sources_dir, linked=False)  # fmt: skip


# -- choosing points ---------------------------------------------------------------------------


def next_points(lo: int, hi: int, skipped: set[int], k: int) -> list[int]:
    """The ``k`` commits strictly between ``lo`` (good) and ``hi`` (bad), skipped ones left out,
    that cut what is left into ``k + 1`` equal parts: with ``k = 1`` the middle one."""
    left = [i for i in range(lo + 1, hi) if i not in skipped]
    if len(left) <= k:
        return left
    picks = [left[(j + 1) * len(left) // (k + 1)] for j in range(k)]
    return sorted(dict.fromkeys(picks))


# -- the bisect --------------------------------------------------------------------------------


@dataclass(slots=True)
class _State:
    """What is known so far: the steps, the interval, the limit; written to ``log.json``."""

    spec: BisectSpec
    directory: Path
    history: History
    recipe: Path
    steps: list[Step] = field(default_factory=list)
    baseline: float | None = None
    limit: float | None = None

    def save(self, *, report: BisectReport | None = None) -> None:
        data: dict[str, Any] = {
            "version": LOG_VERSION,
            "spec": self.spec.to_json(),
            "state_dir": str(self.directory),
            "url": self.history.url,
            "recipe": str(self.recipe),
            "good": self.history.commits[0],
            "bad": self.history.commits[-1],
            "commits": len(self.history.commits),
            "baseline": self.baseline,
            "limit": self.limit,
            "steps": [s.to_json() for s in self.steps],
            "done": False,
        }
        if report is not None:
            data = report.to_json()
        write_atomic(self.directory / LOG_FILE, json_bytes(data))  # temp, fsync, rename


def bisect(
    spec: BisectSpec,
    *,
    store: Store,
    fetcher: Fetcher,
    runner_factory: Callable[[], Any],
    reporter_factory: Callable[[Recipe], Reporter],
    options: RealizeOptions,
    reporter: Reporter | None = None,
    resume: bool = False,
    on_step: Callable[[Step], None] | None = None,
) -> BisectReport:
    """Bisect ``spec`` in ``store``; return the last good and first bad steps and every step.

    ``options`` are how each commit's recipes are realized (their ``jobs`` is ``spec.jobs``);
    ``reporter_factory`` gives each realize its progress reporter, ``reporter`` gets the
    bisect's own phases and the commands' output lines, ``on_step`` each step once recorded.
    With ``resume``, the steps of the recorded log are taken as they are. Everything wrong with
    the input is raised (:class:`BisectError`) before a build, except what needs the ends built:
    a command not good at the good end, not bad at the bad end.
    """
    reporter = reporter or NullReporter()
    plan = plan_layout(spec.target, spec.package)
    subject_recipe = plan.graph.recipes[plan.subject]
    hist = history(subject_recipe, spec.good, spec.bad, store=store)
    directory = state_dir(store, spec, hist.commits[0], hist.commits[-1])
    state = _State(spec=spec, directory=directory, history=hist, recipe=plan.subject)
    recorded: dict[str, Step] = {}
    if resume:
        data = read_log(directory)
        if data is None:
            reporter.warning(f"no recorded bisect in {directory}: starting from the beginning")
        else:
            for item in data.get("steps") or []:
                try:
                    step = Step.from_json(item)
                except (KeyError, TypeError, ValueError):
                    continue
                if step.commit in hist.commits:
                    index = hist.commits.index(step.commit)
                    recorded[step.commit] = replace(step, index=index, resumed=True)
    directory.mkdir(parents=True, exist_ok=True)
    state.save()
    targets, _ = expand_targets([spec.target])
    roots = TempRoots(store)
    try:
        return _bisect(state, plan, targets, recorded, store=store, fetcher=fetcher,
                       runner_factory=runner_factory, reporter_factory=reporter_factory,
                       options=replace(options, jobs=max(1, spec.jobs), keep_going=True,
                                       out_link=None, push=None, check=False),
                       reporter=reporter, roots=roots, on_step=on_step)  # fmt: skip
    finally:
        roots.close()


def _bisect(
    state: _State,
    plan: Layout,
    targets: Sequence[Path],
    recorded: dict[str, Step],
    *,
    store: Store,
    fetcher: Fetcher,
    runner_factory: Callable[[], Any],
    reporter_factory: Callable[[Recipe], Reporter],
    options: RealizeOptions,
    reporter: Reporter,
    roots: TempRoots,
    on_step: Callable[[Step], None] | None,
) -> BisectReport:
    spec, hist = state.spec, state.history
    last = len(hist.commits) - 1
    recipes_dir = state.directory / RECIPES_DIR
    done: dict[int, Step] = {}

    def record(step: Step) -> None:
        done[step.index] = step
        state.steps.append(step)
        state.save()
        if on_step is not None:
            on_step(step)

    def evaluate(indices: Sequence[int], limit_of: Callable[[int], float | None]) -> None:
        """Realize the commits of ``indices`` (at once, up to ``jobs``), then judge each."""
        fresh = [i for i in indices if i not in done and hist.commits[i] not in recorded]
        for i in indices:
            if i not in done and hist.commits[i] in recorded:
                record(recorded[hist.commits[i]])
        if not fresh:
            return
        files = {i: write_commit_recipes(plan, hist.commits[i], recipes_dir) for i in fresh}
        wanted = [files[i].get(t, t) for i in fresh for t in targets]
        shown = ", ".join(hist.commits[i][:12] for i in fresh)
        reporter.phase(f"bisect: building {shown}")
        graph = load_graph(list(dict.fromkeys(wanted)))
        started, started_wall = time.monotonic(), time.time()
        result = realize_graph(
            graph, realize=_realize(), store=store, fetcher=fetcher,
            runner_factory=runner_factory, reporter_factory=reporter_factory, lints={},
            temp_roots=roots, options=replace(options, jobs=min(options.jobs, len(fresh))),
        )  # fmt: skip
        build_seconds = (time.monotonic() - started) / len(fresh)
        for i in fresh:
            commit = hist.commits[i]
            mine = [files[i].get(t, t) for t in targets]
            own = files[i][plan.subject]
            t0 = time.monotonic()
            why = next(
                (result.failed.get(f) or result.skipped.get(f) for f in (own, *mine)
                 if f in result.failed or f in result.skipped), None,
            )  # fmt: skip
            if why is not None:
                verdict: Verdict = "bad" if spec.build_failure == "bad" else "skip"
                record(Step(index=i, commit=commit, subject=hist.subjects[i], verdict=verdict,
                            reason=f"build failed: {why}", built=True,
                            seconds=build_seconds))  # fmt: skip
                continue
            reports = [result.reports[f] for f in mine]
            subject_report = result.reports[own]
            built = any(_built_since(store, r.path, started_wall) for r in
                        (subject_report, *reports))  # fmt: skip
            reporter.phase(f"bisect: testing {commit[:12]} ({subject_report.hash[:12]})")
            venv_dir = Path(tempfile.mkdtemp(prefix="rocmforge-bisect-"))
            try:
                venv = venv_dir / "venv"
                _install(store, [r.path for r in reports], venv)
                env = _venv_env(venv, commit, subject_report.path, state.directory)
                judged = judge(spec, env, commit, limit=limit_of(i), reporter=reporter)
            finally:
                shutil.rmtree(venv_dir, ignore_errors=True)
            record(Step(
                index=i, commit=commit, subject=hist.subjects[i], verdict=judged.verdict,
                reason=judged.reason, hash=subject_report.hash, path=str(subject_report.path),
                entries={r.hash: str(r.path) for r in reports}, figure=judged.figure,
                built=built, seconds=build_seconds + time.monotonic() - t0,
            ))  # fmt: skip

    def limit_of(i: int) -> float | None:
        return state.limit

    # The good end first, alone: a command that is not good there stops before anything else.
    def good_limit(i: int) -> float | None:
        return None if spec.relative is not None else spec.threshold

    evaluate([0], good_limit)
    good = done[0]
    if good.verdict != "good":
        what = "builds" if good.reason.startswith("build failed") else "is good"
        raise BisectError(
            f"--good {spec.good} ({good.commit[:12]}): the good end must be good, and it is "
            f"{good.verdict} ({good.reason}); nothing else was built. Check that it {what}, "
            "or give another --good"
        )
    if spec.metric is not None:
        state.baseline = good.figure
        if spec.relative is not None and good.figure is not None:
            state.limit = spec.relative * good.figure
        else:
            state.limit = spec.threshold
        state.save()
    # The bad end, with the first points of the interval when several are built at once.
    first = [last, *next_points(0, last, set(), options.jobs - 1)] if options.jobs > 1 else [last]
    evaluate(first, limit_of)
    bad = done[last]
    if bad.verdict != "bad":
        hint = (" (a build that fails is skip; --build-failure bad counts it as bad)"
                if bad.reason.startswith("build failed") else "")  # fmt: skip
        raise BisectError(
            f"--bad {spec.bad} ({bad.commit[:12]}): the bad end must be bad, and it is "
            f"{bad.verdict} ({bad.reason}){hint}"
        )
    lo, hi, skipped = 0, last, set[int]()

    def narrow() -> tuple[int, int, set[int]]:
        bads = [i for i, s in done.items() if s.verdict == "bad"]
        h = min(bads)
        goods = [i for i, s in done.items() if s.verdict == "good" and i < h]
        return max(goods), h, {i for i, s in done.items() if s.verdict == "skip"}

    for step in list(recorded.values()):  # what an earlier run knew, wherever it is
        if step.index not in done and 0 < step.index < last:
            record(step)
    lo, hi, skipped = narrow()
    while True:
        points = next_points(lo, hi, skipped, options.jobs)
        if not points:
            break
        left = hi - lo - 1 - sum(1 for i in skipped if lo < i < hi)
        reporter.phase(f"bisect: {left} commits left, about {_steps_left(left, options.jobs)} "
                       "steps")  # fmt: skip
        evaluate(points, limit_of)
        lo, hi, skipped = narrow()
    candidates = tuple(hist.commits[i] for i in range(lo + 1, hi) if i in skipped)
    report = BisectReport(
        spec=spec, state_dir=state.directory, url=hist.url, recipe=plan.subject,
        good=hist.commits[0], bad=hist.commits[-1], commits=len(hist.commits),
        steps=tuple(state.steps), last_good=done[lo], first_bad=done[hi],
        candidates=(*candidates, hist.commits[hi]) if candidates else (),
        baseline=state.baseline, limit=state.limit,
    )  # fmt: skip
    state.save(report=report)
    return report


def _built_since(store: Store, path: Path, since: float) -> bool:
    """Whether the entry at ``path`` was published at ``since`` or later (by this bisect, or a
    child realize of its ``-j N``)."""
    try:
        return store.load(path).meta.created >= since
    except RocmforgeError:
        return False


def _steps_left(left: int, jobs: int) -> int:
    """Rounds of ``jobs`` points that find one commit among ``left``: log base ``jobs + 1``."""
    if left <= 0:
        return 0
    return max(1, math.ceil(math.log(left + 1, jobs + 1) - 1e-9))


def _realize() -> Callable[..., Any]:
    from rocmforge.pipeline.realize import realize

    return realize
