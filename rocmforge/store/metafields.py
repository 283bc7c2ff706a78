"""The checks of ``meta.json``'s fields, over plain JSON values: the one parser's rules.

:class:`rocmforge.store.entry.EntryMeta` builds its records from what :func:`meta_fields`
returns (and turns a :class:`MetaProblem` into a ``StoreError`` with the same words); the read
commands' import-light readers (:mod:`rocmforge.store.readers`) call it to know that an entry's
``meta.json`` is one the full commands accept, before they print from it.
Imports only the import-free :mod:`rocmforge.store.layout`.
"""

from __future__ import annotations

from rocmforge.store import layout

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


class MetaProblem(ValueError):
    """A ``meta.json`` field of the wrong shape; the message names the file and the field."""


def fail(file: object, key: str, expected: str, value: Any) -> MetaProblem:
    """Return the problem of field ``key`` of ``file``: not ``expected`` but ``value``."""
    return MetaProblem(f"{file}: field {key!r} must be {expected}, not {value!r}")


def string(data: Mapping[str, Any], key: str, file: object) -> str:
    """Return ``data[key]`` if it is a string."""
    value = data.get(key)
    if not isinstance(value, str):
        raise fail(file, key, "a string", value)
    return value


def number(data: Mapping[str, Any], key: str, file: object) -> float:
    """Return ``data[key]`` as a float if it is a number (not a bool)."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(file, key, "a number", value)
    return float(value)


def whole(data: Mapping[str, Any], key: str, file: object) -> int:
    """Return ``data[key]`` if it is a whole number >= 0 (not a bool)."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(file, key, "a whole number >= 0", value)
    return value


def same_number(value: float, raw: Any) -> float | int:
    """Give back an int where the file had an int, so a round trip keeps the bytes."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else value


def step_fields(data: Any, *, file: object, key: str) -> dict[str, Any]:
    """Check one item of ``steps``: ``{label, command, started, seconds}``."""
    if not isinstance(data, dict):
        raise fail(file, key, "a table", data)
    return {
        "label": string(data, "label", file),
        "command": string(data, "command", file),
        "started": same_number(number(data, "started", file), data["started"]),
        "seconds": same_number(number(data, "seconds", file), data["seconds"]),
    }


def wheel_fields(value: Any, *, file: object, key: str) -> dict[str, Any]:
    """Check one item of ``wheels`` (``key``, e.g. ``wheels[0]``, names it in problems):
    ``{file, sha256, blake3, size, mtime_ns}``."""
    if not isinstance(value, dict):
        raise fail(file, key, "a table", value)
    name = value.get("file")
    if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
        raise fail(file, f"{key}.file", "a file name", name)
    size = value.get("size")
    if size is not None:
        size = whole(value, "size", f"{file}: {key}")
    mtime_ns = value.get("mtime_ns")
    if mtime_ns is not None:
        mtime_ns = whole(value, "mtime_ns", f"{file}: {key}")
    return {
        "file": name,
        "sha256": string(value, "sha256", f"{file}: {key}"),
        "blake3": string(value, "blake3", f"{file}: {key}"),
        "size": size,
        "mtime_ns": mtime_ns,
    }


#: The fields ``meta.json`` may carry; any other key is kept as an ``extra``.
KNOWN = frozenset(
    {"hash", "name", "version", "created", "size", "wheels", "sandbox", "build_seconds",
     "sources", "files", "archs", "links", "seal", "steps", "compiler_cache",
     "portability", "built_against", "origin", "telemetry"}
)  # fmt: skip


def meta_fields(data: Any, *, file: object) -> dict[str, Any]:
    """Check the decoded ``meta.json`` at ``file`` and return its fields by name (``wheels``
    and ``steps`` as tuples of checked dicts, unknown keys under ``extra``); raise
    :class:`MetaProblem` naming the first bad field."""
    if not isinstance(data, dict):
        raise MetaProblem(f"{file}: not a JSON object")
    hash_, name, version = (string(data, k, file) for k in ("hash", "name", "version"))
    problem = layout.entry_problem(hash_, name, version)
    if problem is not None:
        raise MetaProblem(f"{file}: {problem}")
    wheels = data.get("wheels")
    if not isinstance(wheels, list):
        raise fail(file, "wheels", "a list", wheels)
    sandbox = data.get("sandbox")
    if sandbox is not None and not isinstance(sandbox, (str, dict)):
        raise fail(file, "sandbox", "a string", sandbox)
    build_seconds = None
    if data.get("build_seconds") is not None:
        build_seconds = same_number(number(data, "build_seconds", file), data["build_seconds"])
    sources = data.get("sources")
    if sources is not None:
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise fail(file, "sources", "a list of strings", sources)
        sources = tuple(sources)
    files = data.get("files")
    if files is not None and not (
        isinstance(files, dict) and all(isinstance(v, str) for v in files.values())
    ):
        raise fail(file, "files", "a table of file name = blake3", files)
    archs = data.get("archs")
    if archs is not None and not isinstance(archs, dict):
        raise fail(file, "archs", "a table", archs)
    links = data.get("links")
    if links is not None and not (
        isinstance(links, dict)
        and all(isinstance(v, list) and all(isinstance(x, dict) for x in v) for v in links.values())
    ):
        raise fail(file, "links", "a table of wheel = [link tables]", links)
    seal = data.get("seal")
    if seal is not None and not isinstance(seal, str):
        raise fail(file, "seal", "a string", seal)
    steps = data.get("steps")
    if steps is not None:
        if not isinstance(steps, list):
            raise fail(file, "steps", "a list", steps)
        steps = tuple(step_fields(t, file=file, key=f"steps[{i}]") for i, t in enumerate(steps))
    compiler_cache = data.get("compiler_cache")
    if compiler_cache is not None and not (
        isinstance(compiler_cache, dict)
        and all(
            isinstance(compiler_cache.get(k), int) and not isinstance(compiler_cache[k], bool)
            for k in ("compiles", "hits", "misses", "uncacheable")
        )
    ):
        what = "a table of compiles/hits/misses/uncacheable counts"
        raise fail(file, "compiler_cache", what, compiler_cache)
    portability = data.get("portability")
    if portability is not None:
        if not isinstance(portability, list) or not all(
            isinstance(p, dict) and all(isinstance(v, str) for v in p.values()) for p in portability
        ):
            raise fail(file, "portability", "a list of {file, flag} tables", portability)
        portability = tuple(portability)
    against = data.get("built_against", [])
    if not isinstance(against, list) or not all(isinstance(h, str) for h in against):
        raise fail(file, "built_against", "a list of input hashes", against)
    origin = data.get("origin")
    if origin is not None and not (
        isinstance(origin, dict) and isinstance(origin.get("cache"), str)
    ):
        raise fail(file, "origin", "a table with a 'cache' URL", origin)
    telemetry = data.get("telemetry")
    if telemetry is not None and not (
        isinstance(telemetry, dict)
        and all(
            isinstance(telemetry.get(k), int) and not isinstance(telemetry[k], bool)
            for k in ("peak_rss", "job_peak_rss", "jobs_peak")
        )
    ):
        raise fail(file, "telemetry", "a table of peak_rss/job_peak_rss/jobs_peak", telemetry)
    return {
        "hash": hash_,
        "name": name,
        "version": version,
        "created": same_number(number(data, "created", file), data["created"]),
        "size": whole(data, "size", file),
        "wheels": tuple(
            wheel_fields(w, file=file, key=f"wheels[{i}]") for i, w in enumerate(wheels)
        ),
        "sandbox": sandbox,
        "build_seconds": build_seconds,
        "sources": sources,
        "files": files,
        "archs": archs,
        "links": links,
        "seal": seal,
        "steps": steps,
        "compiler_cache": compiler_cache,
        "portability": portability,
        "built_against": tuple(against),
        "origin": origin,
        "telemetry": telemetry,
        "extra": {k: v for k, v in data.items() if k not in KNOWN},
    }
