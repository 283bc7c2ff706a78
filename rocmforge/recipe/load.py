"""Load a recipe file: TOML text -> merged plain data (``extends`` followed) -> :class:`Recipe`.

The hot path is ``tomllib`` plus :meth:`Recipe.from_dict`. Line numbers are only computed when there
is something to report: tomllib gives none, so a small scanner maps dotted keys to lines and each
problem is moved to the file that declared the offending key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.errors import Problem, RecipeError
from rocmforge.recipe.model import SCHEMA_VERSION, Recipe, join_key, locate_line, parent_keys
from rocmforge.util.fsutil import read_bounded

MAX_RECIPE_BYTES = 1 << 20
"""The largest recipe file read (1 MiB); real recipes are a few kB."""
MAX_NESTING = 64
"""The deepest nesting of arrays and tables a recipe may have."""
MAX_EXTENDS = 32
"""The longest ``extends`` chain followed."""
_MAX_PATH = 4096

_SCP_LIKE = re.compile(r"^[^/@:]+@[^/:]+:")
_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Layer:
    """One file of an ``extends`` chain: its text and its data, paths made absolute."""

    file: Path
    text: str
    data: dict[str, Any]


def load_recipe(path: Path | str) -> Recipe:
    """Read, merge (following ``extends``) and validate the recipe at ``path``.

    Raises :class:`~rocmforge.errors.RecipeError` listing every problem, each with file, key
    path and line; a problem in a base recipe also names the recipe given and the chain to it.
    The file must be a regular file of at most :data:`MAX_RECIPE_BYTES`.
    """
    if len(os.fsencode(path)) > _MAX_PATH:
        shown = os.fsdecode(path)[:80]
        raise RecipeError([Problem(file=Path(shown + "..."), key="", message="path too long")])
    file = Path(os.path.abspath(path))
    return _load(file, _read(file, None))


def load_recipe_unlocked(path: Path | str) -> Recipe:
    """Like :func:`load_recipe`, without applying the lock file (what ``lock`` reads)."""
    file = Path(os.path.abspath(path))
    return _load(file, _read(file, None), locked=False)


def parse_recipe_text(text: str, *, file: Path, locked: bool = True) -> Recipe:
    """Validate recipe ``text`` as if it were stored at ``file``.

    Relative paths, including ``extends``, are taken relative to ``file.parent``; a base recipe
    named by ``extends`` is read from disk. With ``locked=False`` the lock file is not applied
    (``rocmforge lock`` reads the requirements as written).
    """
    return _load(Path(os.path.abspath(file)), text, locked=locked)


def _lockable(problem: Problem) -> bool:
    """True for a problem that ``rocmforge lock`` fixes (its hint says so)."""
    return "`rocmforge lock " in problem.message


def _unlocked_beyond(merged: dict[str, Any], file: Path, problems: list[Problem]) -> list[Problem]:
    """When the only problems are ones ``lock`` fixes (an unpinned ``ref``), the lock file is
    never reached; check it anyway, with a stand-in commit, so one message names everything the
    next ``rocmforge lock`` must do."""
    if not problems or not all(_lockable(p) for p in problems):
        return []
    source = merged.get("source")
    if not isinstance(source, dict) or "ref" not in source:
        return []
    from rocmforge.recipe.lockfile import apply_lock

    stand_in = {**merged, "source": {**source, "rev": "0" * 40}}
    try:
        apply_lock(Recipe.from_dict(stand_in, file=file))
    except RecipeError as e:
        return [p for p in e.problems if _lockable(p) and p not in problems]
    return []


def _lock_note(problems: list[Problem]) -> str | None:
    """``2 things need `rocmforge lock recipes/x.toml`: source.rev, requirements.build`` when
    more than one problem is fixed by one lock."""
    keys = list(dict.fromkeys(p.key for p in problems if _lockable(p)))
    if len(keys) < 2:
        return None
    from rocmforge.util.shownpath import shown_path

    target = shown_path(problems[0].file)
    return f"{len(keys)} things need `rocmforge lock {target}`: {', '.join(keys)}"


def _load(file: Path, text: str, *, locked: bool = True) -> Recipe:
    files: list[Path] = []
    try:
        layers = _chain(file, text, files)
        merged: dict[str, Any] = {}
        for layer in layers:
            merged = _merge(merged, layer.data)
        try:
            recipe = Recipe.from_dict(merged, file=file)
        except RecipeError as e:
            problems = list(e.problems)
            if locked:
                problems += _unlocked_beyond(merged, file, problems)
            note = _lock_note(problems)
            raise RecipeError(_relocate(tuple(problems), layers), note=note) from None
    except RecipeError as e:
        raise _name_the_recipe(e, files) from None
    recipe = dataclasses.replace(recipe, extends_chain=tuple(layer.file for layer in layers))
    if not locked:
        return recipe
    from rocmforge.recipe.lockfile import apply_lock, apply_source_lock

    return apply_source_lock(apply_lock(recipe))


def _name_the_recipe(error: RecipeError, files: list[Path]) -> RecipeError:
    """Add a note naming the recipe given and its ``extends`` chain if a problem lies elsewhere."""
    if not files or all(p.file == files[0] for p in error.problems):
        return error
    top = files[0]
    chain = " -> ".join([str(top), *(_show(f, top) for f in files[1:])])
    note = f"in recipe {top} (extends chain: {chain})"
    return RecipeError(error.problems, note=f"{note}; {error.note}" if error.note else note)


def _read(file: Path, declared_by: _Layer | None) -> str:
    """Return the text of ``file``; a failure is blamed on the ``extends`` that named it.

    Only a regular file of at most :data:`MAX_RECIPE_BYTES` is read: a FIFO, a device or
    ``/dev/zero`` is refused without blocking or reading it.
    """
    try:
        raw = read_bounded(file, MAX_RECIPE_BYTES, what="a recipe")
    except (OSError, ValueError) as e:
        if isinstance(e, FileNotFoundError):
            reason = "no such recipe"
        elif isinstance(e, OSError):
            reason = e.strerror or str(e)
        else:
            reason = str(e)
        if declared_by is None:
            raise RecipeError([Problem(file=file, key="", message=reason)]) from None
        raise _extends_error(declared_by, f"{reason}: {file}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        problem = Problem(file=file, key="", message="not valid UTF-8", line=line)
        raise RecipeError([problem]) from None


def _extends_error(layer: _Layer, message: str) -> RecipeError:
    line = locate_line("extends", scan_lines(layer.text))
    return RecipeError([Problem(file=layer.file, key="extends", message=message, line=line)])


def _chain(file: Path, text: str, files: list[Path]) -> list[_Layer]:
    """Parse ``file`` and every recipe it extends; return them base-most first.

    ``files`` receives each file as it is reached (the named recipe first), for error notes.
    """
    layers: list[_Layer] = []
    seen: list[str] = []
    files.append(file)
    while True:
        layer = _Layer(file=file, text=text, data=_parse(file, text))
        layers.append(layer)
        seen.append(os.path.realpath(file))
        _check_schema(layer)
        target = layer.data.get("extends")
        if target is None:
            break
        if not isinstance(target, str) or not target:
            raise _extends_error(layer, "must be a non-empty string (a path to another recipe)")
        file = Path(target)
        if os.path.realpath(file) in seen:
            names = [_show(x.file, layers[0].file) for x in layers] + [_show(file, layers[0].file)]
            raise _extends_error(layer, "extends cycle: " + " -> ".join(names))
        if len(layers) >= MAX_EXTENDS:
            raise _extends_error(layer, f"extends chain longer than {MAX_EXTENDS} recipes")
        files.append(file)
        text = _read(file, layer)
    layers.reverse()
    return layers


def _check_schema(layer: _Layer) -> None:
    """Refuse a base recipe of another schema (the merged value only shows the top one)."""
    schema = layer.data.get("schema", SCHEMA_VERSION)
    if isinstance(schema, int) and not isinstance(schema, bool) and schema != SCHEMA_VERSION:
        line = locate_line("schema", scan_lines(layer.text))
        message = f"unsupported schema {schema}; this rocmforge reads {SCHEMA_VERSION}"
        raise RecipeError([Problem(file=layer.file, key="schema", message=message, line=line)])


def _show(file: Path, top: Path) -> str:
    return os.path.relpath(file, top.parent)


def _parse(file: Path, text: str) -> dict[str, Any]:
    """Parse TOML ``text`` and make its path-valued keys absolute relative to ``file.parent``."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise RecipeError([_too_deep(file, text)]) from None
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        m = _TOML_AT.search(message)
        line = int(m.group(1)) if m else text.count("\n") + 1
        if m:
            message = f"{message[: m.start()]} (column {m.group(2)})"
        problem = Problem(file=file, key="", message=f"invalid TOML: {message}", line=line)
        raise RecipeError([problem]) from None
    if _depth(data) > MAX_NESTING:
        raise RecipeError([_too_deep(file, text)])
    base = file.parent
    if isinstance(data.get("extends"), str):
        data["extends"] = _absolute(base, data["extends"])
    source = data.get("source")
    if isinstance(source, dict):
        if isinstance(source.get("path"), str):
            source["path"] = _absolute(base, source["path"])
        git = source.get("git")
        if isinstance(git, str) and "://" not in git and not _SCP_LIKE.match(git):
            source["git"] = _absolute(base, git)
        patches = source.get("patches")
        if isinstance(patches, list):
            source["patches"] = [_absolute(base, p) if isinstance(p, str) else p for p in patches]
    toolchain = data.get("toolchain")
    if isinstance(toolchain, dict) and isinstance(toolchain.get("root"), str):
        toolchain["root"] = _absolute(base, toolchain["root"])
    if isinstance(toolchain, dict) and isinstance(toolchain.get("device-libs"), str):
        toolchain["device-libs"] = _absolute(base, toolchain["device-libs"])
    inputs = data.get("inputs")
    if isinstance(inputs, dict):
        for spec in inputs.values():
            if isinstance(spec, dict) and isinstance(spec.get("path"), str):
                spec["path"] = _absolute(base, spec["path"])
    test = data.get("test")
    if isinstance(test, dict) and isinstance(test.get("script"), str):
        test["script"] = _absolute(base, test["script"])
    reqs = data.get("requirements")
    if isinstance(reqs, dict) and isinstance(reqs.get("recipes"), list):
        reqs["recipes"] = [_absolute(base, p) if isinstance(p, str) else p for p in reqs["recipes"]]
    return data


def _depth(data: Any) -> int:
    """Return how deeply tables and arrays nest in ``data`` (iteratively: never recurses)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_NESTING:
            break
        if isinstance(value, dict):
            stack.extend((v, level + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, level + 1) for v in value)
    return deepest


def _too_deep(file: Path, text: str) -> Problem:
    """The problem of a recipe nested too deeply, at the first line that opens many levels."""
    line = next(
        (i for i, ln in enumerate(text.splitlines(), 1) if ln.count("[") + ln.count("{") > 32),
        None,
    )
    message = f"arrays or tables nested more than {MAX_NESTING} levels deep"
    return Problem(file=file, key="", message=message, line=line)


def _absolute(base: Path, path: str) -> str:
    return os.path.normpath(os.path.join(base, path)) if path else path


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``over`` onto ``base``: tables merge recursively, arrays and scalars replace."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            out[key] = _merge(old, value)
        else:
            out[key] = value
    return out


# --- error path: where was each key declared, and on which line ------------------------------


def _relocate(problems: tuple[Problem, ...], layers: list[_Layer]) -> list[Problem]:
    """Give each problem the file that declared its key and that key's line in the file."""
    origins: dict[str, int] = {}
    for index, layer in enumerate(layers):
        _record_origins(layer.data, "", index, origins)
    lines = [scan_lines(layer.text) for layer in layers]
    top = len(layers) - 1
    placed = []
    for p in problems:
        index = next((origins[k] for k in parent_keys(p.key) if k in origins), top)
        line = locate_line(p.key, lines[index])
        placed.append(
            (top - index, line or 0, dataclasses.replace(p, file=layers[index].file, line=line))
        )
    # The named file first, then its bases; within a file, in line order.
    return [p for _, _, p in sorted(placed, key=lambda t: t[:2])]


def _record_origins(data: Mapping[str, Any], prefix: str, index: int, out: dict[str, int]) -> None:
    """Note, for every key path in ``data``, that layer ``index`` is the last to declare it."""
    for name, value in data.items():
        key = join_key(prefix, name)
        if not isinstance(value, Mapping):
            for stale in [k for k in out if k.startswith((key + ".", key + "["))]:
                del out[stale]
        out[key] = index
        if isinstance(value, Mapping):
            _record_origins(value, key, index, out)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                out[join_key(key, i)] = index
                if isinstance(item, Mapping):
                    _record_origins(item, join_key(key, i), index, out)


class _ScanError(Exception):
    """The scanner met text it does not understand; what it found so far is still used."""


def scan_lines(text: str) -> dict[str, int]:
    """Map each dotted key path in TOML ``text`` to its 1-based line (first occurrence).

    Covers ``[table]`` and ``[[array]]`` headers, dotted and quoted keys, array elements
    (``build.steps[1]``) and inline tables. Meant for valid TOML; it stops quietly otherwise.
    """
    scanner = _Scanner(text)
    with contextlib.suppress(_ScanError, IndexError):
        scanner.run()
    return scanner.lines


class _Scanner:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.line = 1
        self.lines: dict[str, int] = {}
        self.tables: dict[str, int] = {}

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def advance(self, n: int = 1) -> None:
        self.line += self.s.count("\n", self.i, self.i + n)
        self.i += n

    def blank(self, *, newlines: bool) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r" or (newlines and c == "\n"):
                self.advance()
            elif c == "#":
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
            else:
                return

    def mark(self, prefix: str, parts: list[str], line: int) -> str:
        key = prefix
        for part in parts:
            key = join_key(key, part)
            self.lines.setdefault(key, line)
        return key

    def run(self) -> None:
        prefix = ""
        while True:
            self.blank(newlines=True)
            if self.i >= len(self.s):
                return
            line = self.line
            if self.peek(2) == "[[":
                self.advance(2)
                name = self.mark("", self.key_parts("]"), line)
                self.advance(2)
                self.tables[name] = self.tables.get(name, -1) + 1
                prefix = join_key(name, self.tables[name])
                self.lines.setdefault(prefix, line)
            elif self.peek() == "[":
                self.advance()
                prefix = self.mark("", self.key_parts("]"), line)
                self.advance()
            else:
                key = self.mark(prefix, self.key_parts("="), line)
                self.advance()
                self.value(key)

    def key_parts(self, stop: str) -> list[str]:
        parts = []
        while True:
            self.blank(newlines=False)
            if self.peek() in ('"', "'"):
                start = self.i
                self.string()
                raw = self.s[start : self.i]
                parts.append(tomllib.loads(f"k = {raw}")["k"] if "\\" in raw else raw[1:-1])
            else:
                start = self.i
                while self.i < len(self.s) and (self.s[self.i].isalnum() or self.s[self.i] in "_-"):
                    self.i += 1
                parts.append(self.s[start : self.i])
            self.blank(newlines=False)
            if self.peek() == ".":
                self.advance()
            elif self.peek() == stop:
                return parts
            else:
                raise _ScanError(self.line)

    def value(self, key: str) -> None:
        self.blank(newlines=False)
        c = self.peek()
        if c == "[":
            self.advance()
            self.items(key, array=True)
        elif c == "{":
            self.advance()
            self.items(key, array=False)
        elif c in ('"', "'"):
            self.string()
        else:
            while self.i < len(self.s) and self.s[self.i] not in ",]}#\n":
                self.i += 1

    def items(self, key: str, *, array: bool) -> None:
        """Scan array elements (``key[0]``, ...) or inline-table ``key = value`` pairs."""
        close, newlines, index = ("]", True, 0) if array else ("}", False, 0)
        while True:
            self.blank(newlines=newlines)
            if self.peek() == close:
                self.advance()
                return
            if array:
                sub = join_key(key, index)
                self.lines.setdefault(sub, self.line)
            else:
                sub = self.mark(key, self.key_parts("="), self.line)
                self.advance()
            self.value(sub)
            self.blank(newlines=newlines)
            if self.peek() == ",":
                self.advance()
                index += 1
            elif self.peek() != close:
                raise _ScanError(self.line)

    def string(self) -> None:
        quote = self.peek()
        basic = quote == '"'
        delim = quote * 3 if self.peek(3) == quote * 3 else quote
        self.advance(len(delim))
        while True:  # jump from escape to escape with str.find: a 100k-character string is cheap
            end = self.s.find(delim, self.i)
            if end < 0:
                raise _ScanError(self.line)
            escape = self.s.find("\\", self.i, end) if basic else -1
            if escape >= 0:
                self.advance(escape + 2 - self.i)
                continue
            self.advance(end + len(delim) - self.i)
            while len(delim) == 3 and self.peek() == quote:  # up to 2 quotes end the content
                self.advance()
            return
