"""Stack files: one name for a set of recipes realized, pinned, exported and gc-rooted together.

A stack is a TOML file with a ``[stack]`` table instead of ``[package]``::

    schema = 1
    [stack]
    name = "mi300x"
    recipes = ["mi300x.toml", "torchvision-mi300x.toml"]   # relative to the stack file
    matrix = { PYTORCH_ROCM_ARCH = ["gfx90a", "gfx942"] }   # optional: each recipe per cell

A stack is not hashed: it only names recipes; each keeps its own input hash. ``matrix``
realizes every recipe of the stack once per combination of the values (an ``[env]`` override
per cell, see ``realize --matrix``).
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from rocmforge.errors import Problem, RecipeError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stack:
    """A loaded stack file: its name and the absolute paths of its recipes."""

    file: Path
    name: str
    recipes: tuple[Path, ...]
    #: ``[stack] matrix``: (variable, values) axes; every recipe is realized once per cell.
    matrix: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _problem(file: Path, key: str, message: str) -> RecipeError:
    return RecipeError([Problem(file=file, key=key, message=message)])


def load_stack(path: Path | str) -> Stack | None:
    """Return the stack at ``path``, or None if the file is a recipe (no ``[stack]`` table).

    A missing or unreadable file is left to the recipe loader (None); a malformed stack raises
    :class:`~rocmforge.errors.RecipeError` naming the file and key.
    """
    file = Path(os.path.abspath(path))
    try:
        if not stat.S_ISREG(os.stat(file).st_mode):
            return None  # a FIFO or a device: the recipe loader refuses it without blocking
        with open(file, "rb") as f:
            head = f.read(1 << 20)
    except (OSError, ValueError):  # missing, unreadable, a NUL in the name: the loader says so
        return None
    if b"[stack]" not in head:
        return None
    try:
        data = tomllib.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None  # the recipe loader reports it with a line
    table = data.get("stack")
    if not isinstance(table, dict):
        return None
    if data.get("schema") != 1:
        raise _problem(file, "schema", "required: write schema = 1 at the top")
    keys = {"name", "recipes", "matrix"}
    extra = sorted(set(data) - {"schema", "stack"}) + sorted(set(table) - keys)
    if extra:
        raise _problem(
            file,
            extra[0],
            "unknown key in a stack file (keys: stack.name, stack.recipes, stack.matrix)",
        )
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise _problem(file, "stack.name", "must be a name like 'mi300x'")
    recipes = table.get("recipes")
    if not isinstance(recipes, list) or not recipes:
        raise _problem(file, "stack.recipes", "must be a non-empty array of recipe paths")
    paths = []
    for i, item in enumerate(recipes):
        if not isinstance(item, str) or not item.strip():
            raise _problem(file, f"stack.recipes[{i}]", "must be a recipe path (a string)")
        paths.append(Path(os.path.normpath(os.path.join(file.parent, item))))
    return Stack(file=file, name=name, recipes=tuple(paths), matrix=_matrix(file, table))


_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _matrix(file: Path, table: dict[str, object]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    value = table.get("matrix", {})
    if not isinstance(value, dict):
        raise _problem(file, "stack.matrix", "must be a table of VARIABLE = [values]")
    axes = []
    for key, values in value.items():
        where = f"stack.matrix.{key}"
        if not _VAR.match(key):
            raise _problem(file, where, "must be an [env] variable name (letters, digits, _)")
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) and v for v in values)
        ):
            raise _problem(file, where, "must be a non-empty array of strings")
        axes.append((key, tuple(dict.fromkeys(values))))
    return tuple(axes)
