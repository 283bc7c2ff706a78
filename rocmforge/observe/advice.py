"""MAX_JOBS advice: how many compile jobs this machine's memory fits, from a build's peak.

The commonest failure of a torch build on a many-core host is the OOM killer taking a compiler:
ninja starts one job per core and each template-heavy TU takes GBs. From the peak RSS one
compile job reached in the previous build (:attr:`Telemetry.job_peak_rss`) and this machine's
RAM, the advice is the number of such jobs that fit in :data:`USABLE` of the RAM, at most the
cores and at least 1: "compile jobs peaked at 3.7 GB; this machine (24 GB) fits 6 at once:
MAX_JOBS=6". ``doctor RECIPE`` repeats it; ``realize`` sets it when the recipe leaves MAX_JOBS
to rocmforge (neither ``[env]`` nor the caller's environment sets it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocmforge.observe.record import human_bytes

#: The share of the RAM the compile jobs may take (the rest: the OS, ninja, the linker's peak).
USABLE = 0.8


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsAdvice:
    """How many compile jobs fit here, and the sentence that says why."""

    jobs: int
    job_peak_rss: int
    ram_bytes: int
    cores: int
    source: str

    def text(self) -> str:
        """``compile jobs peaked at 3.7 GB; this machine (24 GB) fits 6 at once: MAX_JOBS=6``."""
        bound = "" if self.jobs < self.cores else f" (all {self.cores} cores)"
        return (
            f"compile jobs peaked at {human_bytes(self.job_peak_rss)}; this machine "
            f"({human_bytes(self.ram_bytes)}) fits {self.jobs} at once{bound}: "
            f"MAX_JOBS={self.jobs}"
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "jobs": self.jobs,
            "job_peak_rss": self.job_peak_rss,
            "ram_bytes": self.ram_bytes,
            "cores": self.cores,
            "source": self.source,
            "text": self.text(),
        }


def advise_jobs(
    job_peak_rss: int, *, ram_bytes: int | None, cores: int | None, source: str = ""
) -> JobsAdvice | None:
    """The advice for a job peak of ``job_peak_rss`` bytes here; None when nothing is known."""
    if job_peak_rss <= 0 or not ram_bytes or not cores:
        return None
    fits = int(ram_bytes * USABLE // job_peak_rss)
    return JobsAdvice(
        jobs=max(1, min(cores, fits)),
        job_peak_rss=job_peak_rss,
        ram_bytes=ram_bytes,
        cores=cores,
        source=source,
    )


def advice_from_meta(meta: Mapping[str, Any], *, source: str = "") -> JobsAdvice | None:
    """The advice from an entry's ``meta.json`` ``telemetry`` table, for this machine."""
    from rocmforge.toolchain.machine import cpu_count, ram_bytes

    summary = meta.get("telemetry")
    if not isinstance(summary, Mapping):
        return None
    peak = summary.get("job_peak_rss")
    if not isinstance(peak, int) or isinstance(peak, bool):
        return None
    return advise_jobs(peak, ram_bytes=ram_bytes(), cores=cpu_count(), source=source)


def previous_advice(entries_dir: Any, name: str) -> JobsAdvice | None:
    """The advice from the newest entry named ``name`` that has telemetry; None if none."""
    from rocmforge.observe.record import previous_record
    from rocmforge.toolchain.machine import cpu_count, ram_bytes

    found = previous_record(entries_dir, name)
    if found is None:
        return None
    path, record = found
    return advise_jobs(
        record.job_peak_rss, ram_bytes=ram_bytes(), cores=cpu_count(), source=str(path)
    )
