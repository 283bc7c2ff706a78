"""Pass/fail lines of the comm tier: in-place all-reduce bus bandwidth at the sweep's largest size.

The built-in table is AMD's system acceptance figures (8 GB in-place busbw, 8 GPUs of a kind:
``../shared/GPU-ACCEPTANCE.md``); a recipe's ``[test.comm.thresholds]`` or a ``--thresholds``
file adds or overrides rows, keyed ``"MODEL xN"`` (the device name as torch reports it, or a
part of it, and the GPU count), each a bus bandwidth in GB/s. The last accepted run of the same
node kind is the second line: a run whose busbw falls more than ``tolerance`` (a fraction,
default 0.1) below it fails too. The size-averaged figure is never used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rocmforge.errors import Problem, RecipeError

#: model (a part of the device name) -> GPU count -> in-place busbw (GB/s) at 8 GB
BUILTIN: dict[str, dict[int, float]] = {
    "MI300X": {8: 304.0},
    "MI350X": {8: 350.0},
    "MI355X": {8: 350.0},
}
DEFAULT_TOLERANCE = 0.1


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The busbw lines by model and count, and the tolerance against last-known-good."""

    table: Mapping[str, Mapping[int, float]] = field(default_factory=lambda: BUILTIN)
    tolerance: float = DEFAULT_TOLERANCE

    def line_for(self, device: str, count: int) -> tuple[str, float] | None:
        """The row that applies to ``count`` GPUs named ``device`` (the longest model that the
        name contains, case-insensitively), as ("MODEL xN", GB/s); None if there is none."""
        name = device.lower()
        models = sorted((m for m in self.table if m.lower() in name), key=len, reverse=True)
        for model in models:
            if count in self.table[model]:
                return f"{model} x{count}", self.table[model][count]
        return None


def parse_thresholds(data: object, *, file: Path, key: str) -> Thresholds:
    """Read a thresholds table (``{"MODEL xN": GB/s, ..., "tolerance": F}``) over the built-in
    one; raise :class:`~rocmforge.errors.RecipeError` naming ``file`` and the key path."""
    problems: list[Problem] = []
    if not isinstance(data, Mapping):
        raise RecipeError([Problem(file=file, key=key, message="must be a table")])
    table = {m: dict(rows) for m, rows in BUILTIN.items()}
    tolerance = DEFAULT_TOLERANCE
    for name, value in data.items():
        path = f"{key}.{name}" if " " not in name else f'{key}."{name}"'
        if name == "tolerance":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                0 <= value < 1
            ):
                problems.append(Problem(file=file, key=path,
                                        message=f"must be a fraction in [0, 1), not {value!r}"))
            else:
                tolerance = float(value)
            continue
        model, sep, count = name.rpartition(" x")
        if not sep or not model.strip() or not count.isdigit() or int(count) < 1:
            problems.append(Problem(file=file, key=path, message=(
                'keys are "MODEL xN" (e.g. "MI300X x8": the device name or a part of it, the '
                'GPU count) or "tolerance"')))
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            problems.append(Problem(file=file, key=path, message=(
                f"must be a bus bandwidth in GB/s (a positive number), not {value!r}")))
            continue
        table.setdefault(model.strip(), {})[int(count)] = float(value)
    if problems:
        raise RecipeError(problems)
    return Thresholds(table=table, tolerance=tolerance)
