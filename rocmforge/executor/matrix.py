"""``--matrix KEY=v1,v2``: one derivation per cell, each an ``[env]`` override of a recipe.

A cell is a small recipe file that ``extends`` the original and sets the cell's variables in
``[env]`` (hashed: every cell is its own derivation). Cell files are real recipes, so a compute
node, ``plan``, ``log`` and the realize memo treat them like any other; they are written once
into a directory (the shared job directory for Slurm) and rewritten only when their text changes.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmforge.errors import UsageError
from rocmforge.util.fsutil import write_if_changed

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """One cell: the recipe it extends, its variables, and its recipe file."""

    recipe: Path
    values: Mapping[str, str]
    file: Path

    def label(self) -> str:
        """``KEY=v,KEY2=w``."""
        return ",".join(f"{k}={v}" for k, v in self.values.items())


def parse_axes(specs: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Parse ``KEY=v1,v2`` specs into (key, values) axes, in order; a bad one is a UsageError."""
    axes: list[tuple[str, tuple[str, ...]]] = []
    for spec in specs:
        key, sep, rest = spec.partition("=")
        values = tuple(dict.fromkeys(v.strip() for v in rest.split(",") if v.strip()))
        if not sep or not _KEY.match(key) or not values:
            raise UsageError(f"--matrix {spec}: expected KEY=v1,v2 (an [env] variable name)")
        if any(key == k for k, _ in axes):
            raise UsageError(f"--matrix {spec}: {key} given twice")
        axes.append((key, values))
    return axes


def cell_text(recipe: Path, values: Mapping[str, str]) -> str:
    """The recipe text of one cell: extends ``recipe``, sets ``values`` in ``[env]``."""
    lines = [
        f"# matrix cell of {recipe.name}: "
        + ", ".join(f"{k}={v}" for k, v in values.items()),
        "# written by rocmforge realize --matrix; rewritten on the next run",
        f"extends = {json.dumps(str(recipe))}",
        "[env]",
        *(f"{k} = {json.dumps(v)}" for k, v in values.items()),
    ]
    return "\n".join(lines) + "\n"


def write_cells(
    recipes: Sequence[Path], axes: Sequence[tuple[str, Sequence[str]]], directory: Path
) -> list[Cell]:
    """Write the cell recipe files of every recipe x every combination of ``axes``."""
    cells = []
    keys = [k for k, _ in axes]
    for recipe in recipes:
        recipe = Path(os.path.abspath(recipe))
        if not axes:  # no matrix for this recipe: the recipe itself is its one cell
            cells.append(Cell(recipe=recipe, values={}, file=recipe))
            continue
        for combo in itertools.product(*(v for _, v in axes)):
            values = dict(zip(keys, combo, strict=True))
            tag = ",".join(f"{k}={_UNSAFE.sub('_', v)}" for k, v in values.items())
            file = directory / f"{recipe.stem}@{tag}.toml"
            text = cell_text(recipe, values)
            write_if_changed(file, text)
            cells.append(Cell(recipe=recipe, values=values, file=file))
    return cells
