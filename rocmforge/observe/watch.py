"""Watching a build while it runs: ninja's ``[N/M]``, an ETA, stall alarms, process samples.

:class:`BuildWatch` sits between the sandbox runner and the reporter. Each output line passes
through :meth:`BuildWatch.on_line` (ninja's status ``[N/M] ...`` is read from it); once a step's
command runs, a sampler thread reads the sandbox's process tree every ``interval`` seconds
(:mod:`rocmforge.observe.proctree`): the tree's RSS, the compile jobs and their RSS, and the
working directory of each ``ninja``, whose ``.ninja_log`` it then follows as ninja appends to it
(:class:`~rocmforge.observe.ninjalog.LiveNinjaLog`).

The ETA. With the previous build of the same recipe name (its record's ninja log:
:class:`History`), the work left is the previous durations of the outputs not finished yet,
scaled by how fast this build runs the outputs both have finished (speed) and divided by the
parallelism the previous build reached: ``ETA = left_ms * speed / parallelism``; the status says
``(from the previous build)``. Without one, or before this build has finished an output the
previous one had, it is the rate so far: ``elapsed * (M - N) / N``, ``(from the rate so far)``.

The stall alarm. When no edge has finished (no ``[N/M]`` advance, no new line in a followed
log; for a build without ninja: no output line) for the threshold (``stall_after``; default 5x
the longest edge of the previous build, at least 10 minutes), one warning names the compile
jobs still running (else the leaves of the tree) with their run time and RSS; it is said again
only after an edge finishes and a new stall begins. With ``stall_timeout``, :meth:`deadline`
names the instant the runner kills the step at, and :attr:`stalled` says why.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from rocmforge.observe import proctree
from rocmforge.observe.ninjalog import LiveNinjaLog, NinjaEdge, NinjaLogError, read_ninja_log
from rocmforge.observe.record import (
    NinjaFile,
    StepUsage,
    Telemetry,
    human_bytes,
    ninja_logs,
)

_STATUS = re.compile(r"^\[(\d[\d,]*)/(\d[\d,]*)\]\s")
#: The default stall threshold's floor and its multiple of the previous build's longest edge.
STALL_FLOOR = 600.0
STALL_FACTOR = 5.0
#: Samples kept before they are thinned to every other one (and the interval doubled).
MAX_SAMPLES = 20000
#: How deep under the source tree a finished build's ``.ninja_log`` is looked for.
SEARCH_DEPTH = 4
NINJA_LOG = ".ninja_log"


def clock_text(seconds: float) -> str:
    """``0:41`` (minutes) or ``3:05:00``: an ETA or a run time as the status line prints it."""
    s = max(0, int(seconds + 0.5))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def span_text(seconds: float) -> str:
    """``45s``, ``12m03s`` or ``3h05m``: a duration in a warning."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s // 60 % 60:02d}m"


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """The previous build's ninja edges, for the ETA and the stall threshold."""

    durations: dict[str, int]
    work_ms: int
    span_ms: int
    longest_ms: int
    source: str

    @property
    def parallelism(self) -> float:
        """How many edges the previous build ran at once on average."""
        return self.work_ms / self.span_ms if self.span_ms > 0 else 1.0

    @classmethod
    def from_record(cls, record: Telemetry, source: str) -> History | None:
        """The history of a record: its largest ninja log; None when it has none."""
        logs = ninja_logs(record)
        if not logs:
            return None
        _, log = max(logs, key=lambda pair: len(pair[1].edges))
        runs = log.runs()
        if not runs:
            return None
        span = max(e.end_ms for e in runs) - min(e.start_ms for e in runs)
        return cls(
            durations=log.durations(),
            work_ms=sum(e.ms for e in runs),
            span_ms=span,
            longest_ms=max(e.ms for e in runs),
            source=source,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """An ETA in seconds and where it came from (``previous build`` or ``rate so far``)."""

    seconds: float
    basis: str


class BuildWatch:
    """One build's live telemetry (see the module's description)."""

    def __init__(
        self,
        *,
        reporter: Any,
        log: BinaryIO | None = None,
        history: History | None = None,
        stall_after: float | None = None,
        stall_timeout: float | None = None,
        host_src: Path | None = None,
        inside_src: str | None = None,
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reporter = reporter
        self.log = log
        self.history = history
        self.stall_timeout = stall_timeout
        if stall_after is not None:
            self._stall_why = "--stall-after"
        elif history is not None:
            longest = history.longest_ms / 1000
            stall_after = max(STALL_FLOOR, STALL_FACTOR * longest)
            self._stall_why = (
                f"{STALL_FACTOR:g}x the previous build's longest edge ({span_text(longest)}), "
                f"at least {span_text(STALL_FLOOR)}"
            )
        else:
            stall_after = STALL_FLOOR
            self._stall_why = "the default, no previous build to scale it"
        self.stall_after = stall_after
        self.host_src = host_src
        self.inside_src = inside_src
        self.interval = interval
        self.clock = clock
        self.started = time.time()
        self._t0 = clock()
        self._lock = threading.Lock()
        self._phases: list[tuple[str, float, float]] = []
        self._phase: tuple[str, float] | None = None
        self._samples: list[tuple[float, int, int, int]] = []
        self._steps: list[StepUsage] = []
        self._stalls: list[str] = []
        self._lives: dict[str, LiveNinjaLog] = {}
        self._live_started: dict[str, float] = {}
        self._found_logs: dict[str, str] = {}  # host path -> step label
        self._warned_logs: set[str] = set()
        self.stalled: str | None = None
        #: the MAX_JOBS advice from the previous build (rocmforge.observe.advice), if any
        self.advice: Any = None
        self._reset_step("")

    # -- steps ------------------------------------------------------------------------------

    def _reset_step(self, label: str) -> None:
        self._label = label
        self._step_t0 = self.clock()
        self._step_wall = time.time()
        self._done = 0
        self._total = 0
        self._first_status: float | None = None
        self._progress_at = self.clock()
        self._ninja_seen = False
        self._finished: dict[str, int] = {}  # output -> ms, this step's finished outputs
        self._stall_said = False
        self._peak_rss = 0
        self._job_peak = 0
        self._jobs_peak = 0
        self._latest: list[proctree.Proc] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu0 = _children_cpu()

    def start_step(self, label: str) -> None:
        """A build step is about to run."""
        with self._lock:
            self._reset_step(label)

    def end_step(self, seconds: float) -> StepUsage:
        """The step's command ended: stop sampling, return (and keep) its usage."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self._poll_logs()
            cpu = _children_cpu() - self._cpu0
            usage = StepUsage(
                label=self._label,
                started=self._step_wall,
                seconds=seconds,
                cpu_seconds=round(cpu, 2) if cpu >= 0 else None,
                peak_rss=self._peak_rss,
                job_peak_rss=self._job_peak,
                jobs_peak=self._jobs_peak,
            )
            self._steps.append(usage)
        return usage

    def attach(self, pid: int) -> None:
        """The step's command runs under ``pid``: start sampling its tree (never raises)."""
        try:
            self._thread = threading.Thread(target=self._sample_loop, args=(pid,), daemon=True)
            self._thread.start()
        except RuntimeError:
            self._thread = None

    def phase(self, name: str) -> None:
        """A pipeline phase (prepare, build, check, publish) started."""
        now = self.clock() - self._t0
        with self._lock:
            if self._phase is not None:
                self._phases.append((self._phase[0], self._phase[1], now))
            self._phase = (name, now)

    # -- output -----------------------------------------------------------------------------

    def on_line(self, line: str) -> None:
        """One output line of the step: pass it on; read ninja's ``[N/M]`` status from it."""
        m = _STATUS.match(line)
        now = self.clock()
        text = None
        with self._lock:
            if m is not None:
                done, total = int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))
                if self._first_status is None or done < self._done:
                    self._first_status = now  # a (new) ninja run began
                if done > self._done:
                    self._progress_at = now
                    self._stall_said = False
                self._ninja_seen = True
                self._done, self._total = done, total
                text = self._status(now)
            elif not self._ninja_seen:
                self._progress_at = now
                self._stall_said = False
        self.reporter.log_line(line)
        if text is not None:
            self._progress(text)

    def _progress(self, text: str) -> None:
        progress = getattr(self.reporter, "progress", None)
        if progress is not None:
            progress(text)

    def estimate(self, now: float | None = None) -> Estimate | None:
        """The ETA of the running ninja, or None before its first finished edge."""
        now = self.clock() if now is None else now
        done, total = self._done, self._total
        if done <= 0 or total <= 0 or self._first_status is None:
            return None
        h = self.history
        if h is not None and self._finished:
            both = [o for o in self._finished if o in h.durations]
            prev = sum(h.durations[o] for o in both)
            if both and prev > 0:
                speed = sum(self._finished[o] for o in both) / prev
                left = float(sum(ms for o, ms in h.durations.items() if o not in self._finished))
                # the outputs the previous build did not have: their mean duration each
                extra = max(0, total - done - (len(h.durations) - len(both)))
                left += extra * (h.work_ms / max(1, len(h.durations)))
                return Estimate(
                    seconds=left / 1000 * speed / max(h.parallelism, 1e-9),
                    basis="previous build",
                )
        elapsed = now - self._first_status
        return Estimate(seconds=elapsed * (total - done) / done, basis="rate so far")

    def _status(self, now: float) -> str:
        done, total = self._done, self._total
        pct = 100 * done // total if total else 0
        text = f"[{done:,}/{total:,}] {pct}%"
        est = self.estimate(now)
        if est is not None and done < total:
            text += f" ETA {clock_text(est.seconds)} (from the {est.basis})"
        return text

    def status(self) -> str | None:
        """The progress text now (``[12,345/18,020] 68% ETA 0:41 (from the ...)``), or None."""
        with self._lock:
            return self._status(self.clock()) if self._total else None

    def deadline(self) -> float | None:
        """The instant (``clock``) a stall kills the step at with ``stall_timeout``, else None."""
        if self.stall_timeout is None:
            return None
        return self._progress_at + self.stall_timeout

    # -- the sampler ------------------------------------------------------------------------

    def _sample_loop(self, pid: int) -> None:
        interval = float(self.interval)
        wait = min(interval, 0.1)  # the first sample soon: a short step gets one too
        while not self._stop.wait(wait):
            wait = interval
            try:
                procs = proctree.snapshot(pid)
            except OSError:
                continue
            jobs = proctree.jobs(procs)
            now = self.clock()
            new_cwds = []
            with self._lock:
                self._latest = procs
                rss = sum(p.rss for p in procs)
                biggest = max((j.rss for j in jobs), default=0)
                self._peak_rss = max(self._peak_rss, rss)
                self._job_peak = max(self._job_peak, biggest)
                self._jobs_peak = max(self._jobs_peak, len(jobs))
                self._samples.append((round(now - self._t0, 3), rss, len(jobs), biggest))
                if len(self._samples) > MAX_SAMPLES:
                    self._samples = self._samples[::2]
                    interval *= 2
                for p in procs:
                    if p.comm == "ninja":
                        new_cwds.append(p.pid)
            for npid in new_cwds:
                self._follow(npid)
            with self._lock:
                self._poll_logs()
                stall = self._check_stall(now)
                text = self._status(now) if self._total else None
            if stall is not None:
                self._say_stall(stall)
            if text is not None:
                self._progress(text)

    def _host_path(self, inside: str) -> str | None:
        """Where the sandbox's path ``inside`` is on the host (inside the source tree only)."""
        if self.host_src is None:
            return None
        src = self.inside_src or str(self.host_src)
        if inside == src or inside.startswith(src.rstrip("/") + "/"):
            return str(self.host_src) + inside[len(src.rstrip("/")) :]
        return None

    def _follow(self, pid: int) -> None:
        where = proctree.cwd(pid)
        if where is None or "/CMakeFiles/" in where + "/":
            return  # CMake's try_compile scratch builds
        host = self._host_path(where)
        if host is None:
            return
        path = os.path.join(host, NINJA_LOG)
        with self._lock:
            if path not in self._lives:
                self._lives[path] = LiveNinjaLog(path)
                self._live_started[path] = self.clock() - self._t0
                self._found_logs[path] = self._label

    def _poll_logs(self) -> None:
        for live in self._lives.values():
            edges: list[NinjaEdge] = live.poll()
            for e in edges:
                self._finished[e.output] = e.ms
            if edges:
                self._progress_at = max(self._progress_at, self.clock())
                self._stall_said = False

    def _check_stall(self, now: float) -> str | None:
        quiet = now - self._progress_at
        if self._stall_said or quiet < self.stall_after:
            return None
        self._stall_said = True
        what = "no build edge finished" if self._ninja_seen or self._lives else "no output"
        text = (
            f"{self._label or 'the build'}: {what} for {span_text(quiet)} (threshold "
            f"{span_text(self.stall_after)}: {self._stall_why}); still running: "
            f"{self.running_text()}"
        )
        self._stalls.append(text)
        return text

    def _say_stall(self, text: str) -> None:
        if self.log is not None:
            with contextlib.suppress(OSError, ValueError):
                self.log.write(f"rocmforge: warning: {text}\n".encode())
        self.reporter.warning(text)

    def running_text(self, limit: int = 5) -> str:
        """The compile jobs running now (else the leaves of the tree) with run time and RSS."""
        procs = self._latest
        jobs = proctree.jobs(procs)
        items: list[tuple[float, str, int]] = []
        if jobs:
            for j in jobs:
                cmd = proctree.cmdline(j.top.pid) or j.top.comm
                leaf = f" [{j.leaf.comm}]" if j.leaf.pid != j.top.pid else ""
                items.append((j.top.age, cmd + leaf, j.rss))
        else:
            parents = {p.ppid for p in procs}
            for p in procs:
                if p.pid not in parents:
                    items.append((p.age, proctree.cmdline(p.pid) or p.comm, p.rss))
        if not items:
            return "nothing (the tree is empty)"
        items.sort(key=lambda i: -i[0])
        shown = [f"{cmd} ({span_text(age)}, RSS {human_bytes(rss)})"
                 for age, cmd, rss in items[:limit]]  # fmt: skip
        more = f"; and {len(items) - limit} more" if len(items) > limit else ""
        return "; ".join(shown) + more

    def check_stall_now(self) -> None:
        """Check for a stall at once (the sampler does it every interval)."""
        with self._lock:
            stall = self._check_stall(self.clock())
        if stall is not None:
            self._say_stall(stall)

    def note_killed(self) -> str:
        """The step was killed at :meth:`deadline`: the reason, naming what still ran."""
        quiet = self.clock() - self._progress_at
        self.stalled = (
            f"{self._label} stalled: no build edge finished for {span_text(quiet)} "
            f"(--stall-timeout {span_text(self.stall_timeout or 0)}); killed: {self.running_text()}"
        )
        return self.stalled

    # -- the record -------------------------------------------------------------------------

    def finish(self, src: Path | None, *, warn: Callable[[str], None] | None = None) -> Telemetry:
        """Return the build's record; the ninja logs are read from where ninja ran, else looked
        for under ``src``. A foreign or truncated log is left out with one warning (``warn``)."""
        with self._lock:
            if self._phase is not None:
                self._phases.append((self._phase[0], self._phase[1], self.clock() - self._t0))
                self._phase = None
            found = dict(self._found_logs)
        if src is not None:
            for path in _search_logs(src):
                found.setdefault(path, self._steps[-1].label if self._steps else "")
        files = []
        started = {}
        for path, step in sorted(found.items()):
            if not os.path.lexists(path):
                continue
            try:
                text, _ = read_ninja_log(path)
            except NinjaLogError as exc:
                if warn is not None and path not in self._warned_logs:
                    self._warned_logs.add(path)
                    warn(f"ignoring {exc}")
                continue
            rel = os.path.relpath(path, src) if src is not None else path
            files.append(NinjaFile(path=rel, step=step, text=text))
            if path in self._live_started:
                started[rel] = self._live_started[path]
        from rocmforge.toolchain.machine import cpu_count, ram_bytes

        return Telemetry(
            started=self.started,
            interval=self.interval,
            steps=tuple(self._steps),
            phases=tuple(self._phases),
            samples=tuple(self._samples),
            ninja=tuple(files),
            ninja_started=started,
            stalls=tuple(self._stalls),
            ram_bytes=ram_bytes(),
            cpu_count=cpu_count(),
        )


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _search_logs(src: Path, depth: int = SEARCH_DEPTH) -> list[str]:
    """Every ``.ninja_log`` under ``src`` at most ``depth`` directories down (no links
    followed, CMake's scratch directories skipped)."""
    out = []
    stack = [(str(src), 0)]
    while stack:
        top, d = stack.pop()
        try:
            with os.scandir(top) as it:
                for item in it:
                    if item.name == NINJA_LOG and item.is_file(follow_symlinks=False):
                        out.append(item.path)
                    elif (
                        d < depth
                        and item.name not in ("CMakeFiles", ".git")
                        and item.is_dir(follow_symlinks=False)
                    ):
                        stack.append((item.path, d + 1))
        except OSError:
            continue
    return sorted(out)
