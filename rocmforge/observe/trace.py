"""A build's timeline as Chrome trace-event JSON (Perfetto, ``chrome://tracing``).

Process 1 is rocmforge: its phases (prepare, build, check, publish) on one track and the
recipe's steps on another; each ninja log is a process of its own with every edge on the slot
it ran in (slots assigned as ninja's own ``-t`` tools do: the first slot free at the edge's
start); memory (the tree's RSS, the largest compile job) and the compile jobs running are
counter tracks. Times are microseconds since the build began.
"""

from __future__ import annotations

from typing import Any

from rocmforge.observe.ninjalog import NinjaEdge
from rocmforge.observe.record import Telemetry, ninja_logs

_MB = 1024 * 1024


def slots(edges: list[NinjaEdge]) -> list[tuple[int, NinjaEdge]]:
    """Each edge with the slot it ran in: the lowest slot free at its start."""
    ends: list[int] = []
    out = []
    for e in sorted(edges, key=lambda e: (e.start_ms, e.end_ms)):
        for i, end in enumerate(ends):
            if end <= e.start_ms:
                ends[i] = e.end_ms
                out.append((i, e))
                break
        else:
            ends.append(e.end_ms)
            out.append((len(ends) - 1, e))
    return out


def ninja_offsets(record: Telemetry) -> dict[str, float]:
    """Seconds after the build began at which each ninja log's run began: when the watch first
    saw that ninja, else the start of the step that wrote it."""
    step_start = {s.label: s.started - record.started for s in record.steps}
    return {
        n.path: record.ninja_started.get(n.path, step_start.get(n.step, 0.0)) for n in record.ninja
    }


def trace_events(record: Telemetry, *, name: str) -> dict[str, Any]:
    """The trace-event document of ``record`` (``name``: the entry, shown as the process)."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": f"rocmforge: {name}"}},
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "phases"}},
        {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "steps"}},
    ]
    for phase, start, end in record.phases:
        dur = round(max(0.0, end - start) * 1e6)
        ev.append({"ph": "X", "pid": 1, "tid": 1, "name": phase, "cat": "phase",
                   "ts": round(start * 1e6), "dur": dur})  # fmt: skip
    for s in record.steps:
        ev.append({
            "ph": "X", "pid": 1, "tid": 2, "name": s.label, "cat": "step",
            "ts": round((s.started - record.started) * 1e6), "dur": round(s.seconds * 1e6),
            "args": {"cpu_seconds": s.cpu_seconds, "peak_rss_mb": round(s.peak_rss / _MB, 1),
                     "jobs_peak": s.jobs_peak},
        })  # fmt: skip
    offsets = ninja_offsets(record)
    for i, (nf, log) in enumerate(ninja_logs(record), start=2):
        ev.append({"ph": "M", "pid": i, "name": "process_name",
                   "args": {"name": f"ninja {nf.path} (v{log.version})"}})  # fmt: skip
        base = offsets.get(nf.path, 0.0) * 1e6
        used: set[int] = set()
        for slot, e in slots(log.runs()):
            if slot not in used:
                used.add(slot)
                ev.append({"ph": "M", "pid": i, "tid": slot + 1, "name": "thread_name",
                           "args": {"name": f"slot {slot + 1}"}})  # fmt: skip
            ev.append({"ph": "X", "pid": i, "tid": slot + 1, "name": e.output, "cat": "edge",
                       "ts": round(base + e.start_ms * 1000), "dur": e.ms * 1000})  # fmt: skip
    for t, rss, jobs, biggest in record.samples:
        ts = round(t * 1e6)
        ev.append({"ph": "C", "pid": 1, "name": "memory (MB)", "ts": ts,
                   "args": {"tree RSS": round(rss / _MB, 1),
                            "largest compile job": round(biggest / _MB, 1)}})  # fmt: skip
        ev.append({"ph": "C", "pid": 1, "name": "compile jobs", "ts": ts, "args": {"jobs": jobs}})
    return {"traceEvents": ev, "displayTimeUnit": "ms", "otherData": {"entry": name}}
