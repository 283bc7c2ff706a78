"""``doctor RECIPE``: one MAX_JOBS line, the previous build's telemetry advice when there is one,
else the estimate from the RAM and cores, each saying which it is."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import rf_in

from rocmforge.observe.record import StepUsage, Telemetry, write_record
from rocmforge.store import layout


def _max_jobs_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if "MAX_JOBS" in ln]


@pytest.mark.slow  # a real run of seconds: the quick tier stays under a minute
def test_without_a_previous_build_the_one_line_is_the_ram_and_cores_estimate(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    proc = rf_in("doctor", tiny_recipe, "--store", tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    (line,) = _max_jobs_lines(proc.stdout)
    assert line.startswith("  MAX_JOBS:  ") and "estimated from the RAM and cores" in line
    assert "no build of tiny with telemetry in the store yet" in line
    assert "afforded:" not in proc.stdout


@pytest.mark.slow  # a real run of seconds: the quick tier stays under a minute
def test_with_a_previous_build_the_one_line_is_its_telemetry_advice(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    entry = store / layout.ENTRIES / f"{'a' * layout.HASH_LEN}-tiny-0.1"
    entry.mkdir(parents=True)
    (store / layout.MARKER).write_text("")
    step = StepUsage(label="build", started=0.0, seconds=10.0, cpu_seconds=10.0,
                     peak_rss=2 << 30, job_peak_rss=1 << 30, jobs_peak=2)  # fmt: skip
    record = Telemetry(started=0.0, interval=0.5, steps=(step,), phases=(), samples=())
    write_record(record, entry / layout.TELEMETRY)
    proc = rf_in("doctor", tiny_recipe, "--store", store)
    assert proc.returncode == 0, proc.stderr
    (line,) = _max_jobs_lines(proc.stdout)
    assert line.startswith("  MAX_JOBS:  ") and "from the telemetry of the previous build" in line
    assert entry.name in line and "compile jobs peaked at" in line
    assert "estimated from the RAM" not in proc.stdout
