"""What a build's telemetry keeps: the record in the entry and its summary in ``meta.json``.

The record (:class:`Telemetry`) is ``telemetry.json.zst`` in the entry (zstandard-compressed
JSON, schema 1): when the build and each step started, each step's CPU time and peak memory,
the phases, every process-tree sample, every stall warning and the ``.ninja_log`` files of the
build as ninja wrote them (text, so a later reader parses them with what it knows). It is an
entry file like the build log: digested in ``meta.json``, named in the provenance, pushed and
substituted with the entry, so a build on one node gives the ETA on another.

:meth:`Telemetry.summary` is the ``telemetry`` table of ``meta.json``: the figures ``show``,
``doctor`` and the next build's MAX_JOBS advice read without opening the record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmforge.errors import RocmforgeError
from rocmforge.observe.ninjalog import NinjaLog, NinjaLogError, parse_ninja_log
from rocmforge.store import layout
from rocmforge.util.sizes import memory_size, usage_line

__all__ = ["human_bytes", "usage_line"]

SCHEMA = 1
#: A record larger than this (decompressed) is refused.
MAX_RECORD = 512 * 1024 * 1024


class TelemetryError(RocmforgeError):
    """An entry's telemetry is missing or unreadable (``trace``/``report`` exit 1 on it)."""

    exit_code = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class StepUsage:
    """One build step's resources: CPU seconds of its whole tree, the peak RSS of the tree,
    the peak RSS of one compile job and the most compile jobs at once."""

    label: str
    started: float
    seconds: float
    cpu_seconds: float | None
    peak_rss: int
    job_peak_rss: int
    jobs_peak: int

    def to_json(self) -> dict[str, Any]:
        """The record's form."""
        return {
            "label": self.label,
            "started": self.started,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "peak_rss": self.peak_rss,
            "job_peak_rss": self.job_peak_rss,
            "jobs_peak": self.jobs_peak,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class NinjaFile:
    """One ``.ninja_log`` of the build: where it was (relative to the source tree), the step
    that wrote it, and its text."""

    path: str
    step: str
    text: str

    def parsed(self) -> NinjaLog | None:
        """The parse of the text, None if it is foreign or truncated."""
        try:
            return parse_ninja_log(self.text, where=self.path)
        except NinjaLogError:
            return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Telemetry:
    """A build's telemetry record (see the module's description).

    ``samples`` are ``(seconds since started, tree RSS, compile jobs, largest job RSS)``;
    ``phases`` are ``(name, start, end)`` in seconds since ``started``; ``ninja_started`` is
    when each ninja log's run began (seconds since ``started``), by path.
    """

    started: float
    interval: float
    steps: tuple[StepUsage, ...]
    phases: tuple[tuple[str, float, float], ...]
    samples: tuple[tuple[float, int, int, int], ...]
    ninja: tuple[NinjaFile, ...] = ()
    ninja_started: Mapping[str, float] = field(default_factory=dict)
    stalls: tuple[str, ...] = ()
    ram_bytes: int | None = None
    cpu_count: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return {
            "schema": SCHEMA,
            "started": self.started,
            "interval": self.interval,
            "steps": [s.to_json() for s in self.steps],
            "phases": [list(p) for p in self.phases],
            "samples": [list(s) for s in self.samples],
            "ninja": [{"path": n.path, "step": n.step, "text": n.text} for n in self.ninja],
            "ninja_started": dict(self.ninja_started),
            "stalls": list(self.stalls),
            "ram_bytes": self.ram_bytes,
            "cpu_count": self.cpu_count,
        }

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> Telemetry:
        """Parse a record; :class:`TelemetryError` naming ``where`` when it is malformed."""
        try:
            if not isinstance(data, dict) or data.get("schema") != SCHEMA:
                raise TypeError("not a schema-1 telemetry record")
            return cls(
                started=float(data["started"]),
                interval=float(data["interval"]),
                steps=tuple(StepUsage(**s) for s in data["steps"]),
                phases=tuple((str(n), float(a), float(b)) for n, a, b in data["phases"]),
                samples=tuple((float(t), int(r), int(j), int(m)) for t, r, j, m in data["samples"]),
                ninja=tuple(
                    NinjaFile(path=str(n["path"]), step=str(n["step"]), text=str(n["text"]))
                    for n in data["ninja"]
                ),
                ninja_started={str(k): float(v) for k, v in data["ninja_started"].items()},
                stalls=tuple(str(s) for s in data["stalls"]),
                ram_bytes=data.get("ram_bytes"),
                cpu_count=data.get("cpu_count"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TelemetryError(f"{where}: malformed telemetry record ({exc})") from None

    @property
    def peak_rss(self) -> int:
        """The build's peak tree RSS."""
        return max((s.peak_rss for s in self.steps), default=0)

    @property
    def job_peak_rss(self) -> int:
        """The largest RSS one compile job reached."""
        return max((s.job_peak_rss for s in self.steps), default=0)

    @property
    def jobs_peak(self) -> int:
        """The most compile jobs seen at once."""
        return max((s.jobs_peak for s in self.steps), default=0)

    def summary(self) -> dict[str, Any]:
        """The ``telemetry`` table of ``meta.json``."""
        cpu = [s.cpu_seconds for s in self.steps if s.cpu_seconds is not None]
        edges = 0
        versions = []
        longest = 0
        for n in self.ninja:
            parsed = n.parsed()
            if parsed is not None:
                runs = parsed.runs()
                edges += len(runs)
                versions.append(parsed.version)
                longest = max([longest, *(e.ms for e in runs)])
        out: dict[str, Any] = {
            "peak_rss": self.peak_rss,
            "cpu_seconds": round(sum(cpu), 2) if cpu else None,
            "job_peak_rss": self.job_peak_rss,
            "jobs_peak": self.jobs_peak,
            "samples": len(self.samples),
            "steps": [
                {
                    "label": s.label,
                    "cpu_seconds": s.cpu_seconds,
                    "peak_rss": s.peak_rss,
                    "job_peak_rss": s.job_peak_rss,
                    "jobs_peak": s.jobs_peak,
                }
                for s in self.steps
            ],
        }
        if self.ninja:
            out["ninja"] = {"edges": edges, "versions": versions, "longest_ms": longest}
        if self.stalls:
            out["stalls"] = len(self.stalls)
        return out


def write_record(telemetry: Telemetry, dest: Path) -> None:
    """Write ``telemetry`` compressed to ``dest`` (atomically)."""
    import zstandard

    from rocmforge.util.fsutil import write_atomic

    raw = json.dumps(telemetry.to_json(), separators=(",", ":")).encode()
    write_atomic(dest, zstandard.ZstdCompressor(level=6).compress(raw), durable=False)


def read_record(entry_dir: Path) -> Telemetry:
    """Return the telemetry record of the entry at ``entry_dir``.

    :class:`TelemetryError` when the entry has none (built without telemetry, or before it
    existed) or it cannot be read.
    """
    path = entry_dir / layout.TELEMETRY
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise TelemetryError(
            f"{entry_dir}: this entry has no telemetry ({layout.TELEMETRY}): it was built "
            "without it (ROCMFORGE_TELEMETRY=off, or by an older rocmforge), or substituted "
            "from a cache that dropped it"
        ) from None
    except OSError as exc:
        raise TelemetryError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    import zstandard

    try:
        with os.fdopen(fd, "rb") as f:
            raw = zstandard.ZstdDecompressor().stream_reader(f).read(MAX_RECORD + 1)
        if len(raw) > MAX_RECORD:
            raise TelemetryError(f"{path}: larger than {MAX_RECORD} bytes decompressed")
        data = json.loads(raw)
    except (OSError, ValueError, zstandard.ZstdError) as exc:
        raise TelemetryError(f"{path}: not a telemetry record ({exc})") from None
    return Telemetry.from_json(data, where=str(path))


def previous_record(
    entries_dir: Path, name: str, *, exclude: str | None = None
) -> tuple[Path, Telemetry] | None:
    """The telemetry of the newest entry named ``name`` that has one (``exclude``: a hash to
    skip), with its entry's path; None when there is none. Unreadable records are skipped."""
    try:
        names = os.listdir(entries_dir)
    except OSError:
        return None
    want = layout.normal_name(name)
    found: list[tuple[float, Path]] = []
    for n in names:
        rest = n[layout.HASH_LEN + 1 :]
        cuts = [i for i, ch in enumerate(rest) if ch == "-"]
        if not layout.is_entry_name(n) or not any(
            layout.normal_name(rest[:i]) == want for i in cuts
        ):
            continue
        if exclude is not None and n.startswith(exclude):
            continue
        try:
            found.append((os.stat(entries_dir / n / layout.TELEMETRY).st_mtime, entries_dir / n))
        except OSError:
            continue
    for _, path in sorted(found, reverse=True):
        try:
            return path, read_record(path)
        except TelemetryError:
            continue
    return None


#: a memory size as the telemetry lines print it (``3.7 GB``)
human_bytes = memory_size


def ninja_logs(telemetry: Telemetry) -> Sequence[tuple[NinjaFile, NinjaLog]]:
    """The record's ninja logs that parse, with their parse."""
    out = []
    for n in telemetry.ninja:
        parsed = n.parsed()
        if parsed is not None:
            out.append((n, parsed))
    return out
