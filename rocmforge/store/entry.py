"""A published store entry and its ``meta.json``, written down as types.

:class:`EntryMeta` is the one reader and writer of ``meta.json``: every module that needs a fact
of an entry (its wheels, size, sandbox level, source caches, file digests, GPU archs) reads it
from an :class:`EntryMeta`, never by string key. Parsing is strict: a field of the wrong type
raises :class:`~rocmforge.errors.StoreError` naming the file and the field. Keys this version
does not know are kept in :attr:`EntryMeta.extra` and written back unchanged. The fields are
documented in ``docs/store.md``.

The derivation document of an entry is read through :func:`read_derivation`, its fields through
:class:`DerivationDoc`; its input hash (the key of the store) is :func:`input_hash`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.util.fsutil import read_json_object
from rocmforge.util.hashing import blake3_hex, canonical_json


def _fail(file: Path | str, key: str, expected: str, value: Any) -> StoreError:
    return StoreError(f"{file}: field {key!r} must be {expected}, not {value!r}")


def _str(data: Mapping[str, Any], key: str, file: Path | str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise _fail(file, key, "a string", value)
    return value


def _number(data: Mapping[str, Any], key: str, file: Path | str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(file, key, "a number", value)
    return float(value)


def _int(data: Mapping[str, Any], key: str, file: Path | str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(file, key, "a whole number >= 0", value)
    return value


def _same_number(value: float, raw: Any) -> float | int:
    """Give back an int where the file had an int, so a round trip keeps the bytes."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else value


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTiming:
    """One build step's wall time: its label (``step 1/2``, ``PEP 517 build``), its command,
    when it started (UTC seconds) and how long it ran."""

    label: str
    command: str
    started: float
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """Return the ``meta.json`` form."""
        return {
            "label": self.label,
            "command": self.command,
            "started": self.started,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: Any, *, file: Path | str, key: str) -> StepTiming:
        """Parse one item of ``steps``; StoreError naming ``file`` and ``key`` when malformed."""
        if not isinstance(data, dict):
            raise _fail(file, key, "a table", data)
        return cls(
            label=_str(data, "label", file),
            command=_str(data, "command", file),
            started=_same_number(_number(data, "started", file), data["started"]),
            seconds=_same_number(_number(data, "seconds", file), data["seconds"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class WheelRecord:
    """One wheel of an entry: its file name (inside the entry), digests, size and the mtime it
    had when it was published (the cache hit's cheap tamper check compares size and mtime)."""

    file: str
    sha256: str
    blake3: str
    size: int | None = None
    mtime_ns: int | None = None

    @classmethod
    def from_json(cls, value: Any, *, file: Path | str, key: str) -> WheelRecord:
        """Parse one item of ``wheels``; ``key`` (e.g. ``wheels[0]``) names it in errors."""
        if not isinstance(value, dict):
            raise _fail(file, key, "a table", value)
        name = value.get("file")
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            raise _fail(file, f"{key}.file", "a file name", name)
        size = value.get("size")
        if size is not None:
            size = _int(value, "size", f"{file}: {key}")
        mtime_ns = value.get("mtime_ns")
        if mtime_ns is not None:
            mtime_ns = _int(value, "mtime_ns", f"{file}: {key}")
        return cls(
            file=name,
            sha256=_str(value, "sha256", f"{file}: {key}"),
            blake3=_str(value, "blake3", f"{file}: {key}"),
            size=size,
            mtime_ns=mtime_ns,
        )

    def to_json(self) -> dict[str, Any]:
        """Return the record as it is stored in ``meta.json``."""
        out: dict[str, Any] = {"file": self.file, "sha256": self.sha256, "blake3": self.blake3}
        if self.size is not None:
            out["size"] = self.size
        if self.mtime_ns is not None:
            out["mtime_ns"] = self.mtime_ns
        return out


_KNOWN = frozenset(
    {"hash", "name", "version", "created", "size", "wheels", "sandbox", "build_seconds",
     "sources", "files", "archs", "links", "seal", "steps", "compiler_cache",
     "portability", "built_against", "origin"}
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryMeta:
    """The content of an entry's ``meta.json``.

    ``sources`` is None for entries built before source caches were tracked, ``files`` None for
    entries built before non-wheel file digests were recorded; ``archs`` is present when the
    check read GPU archs. ``extra`` holds keys this version does not know.
    """

    hash: str
    name: str
    version: str
    created: float
    size: int
    wheels: tuple[WheelRecord, ...]
    sandbox: str | Mapping[str, Any] | None = None
    build_seconds: float | None = None
    sources: tuple[str, ...] | None = None
    files: Mapping[str, str] | None = None
    archs: Mapping[str, Any] | None = None
    #: Per wheel file, the libraries its ELF members link and who provides each
    #: (``member``, ``soname``, ``provider``, ``package``, ``version``, ``path``).
    links: Mapping[str, list[dict[str, str]]] | None = None
    #: blake3 of the canonical JSON of every other field (checked by lookup and verify).
    seal: str | None = None
    #: Each build step's start and duration (absent for entries built before they were kept).
    steps: tuple[StepTiming, ...] | None = None
    #: The build's compiler-cache counters (compiles, hits, misses, uncacheable, namespace);
    #: None when the build ran without the cache.
    compiler_cache: Mapping[str, Any] | None = None
    portability: tuple[Mapping[str, str], ...] | None = None
    #: ``built_against``: input hashes of the entries this one was built against (its closure
    #: of ``[requirements] recipes``); gc keeps them while this entry stays.
    built_against: tuple[str, ...] = ()
    #: Where a substituted entry came from (``cache``, ``keyid``, ``substituted``); None when built.
    origin: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dirname(self) -> str:
        """The entry's directory name, ``<hash>-<name>-<version>``."""
        return layout.entry_name(self.hash, self.name, self.version)

    def wheel(self, file: str) -> WheelRecord | None:
        """Return the record of the wheel named ``file``, or None."""
        return next((w for w in self.wheels if w.file == file), None)

    @classmethod
    def from_json(cls, data: Any, *, file: Path | str) -> EntryMeta:
        """Parse ``data`` (the decoded ``meta.json`` at ``file``); StoreError on a bad field."""
        if not isinstance(data, dict):
            raise StoreError(f"{file}: not a JSON object")
        hash_, name, version = (_str(data, k, file) for k in ("hash", "name", "version"))
        problem = layout.entry_problem(hash_, name, version)
        if problem is not None:
            raise StoreError(f"{file}: {problem}")
        wheels = data.get("wheels")
        if not isinstance(wheels, list):
            raise _fail(file, "wheels", "a list", wheels)
        sandbox = data.get("sandbox")
        if sandbox is not None and not isinstance(sandbox, (str, dict)):
            raise _fail(file, "sandbox", "a string", sandbox)
        build_seconds = None
        if data.get("build_seconds") is not None:
            build_seconds = _same_number(
                _number(data, "build_seconds", file), data["build_seconds"]
            )
        sources = data.get("sources")
        if sources is not None:
            if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
                raise _fail(file, "sources", "a list of strings", sources)
            sources = tuple(sources)
        files = data.get("files")
        if files is not None and not (
            isinstance(files, dict) and all(isinstance(v, str) for v in files.values())
        ):
            raise _fail(file, "files", "a table of file name = blake3", files)
        archs = data.get("archs")
        if archs is not None and not isinstance(archs, dict):
            raise _fail(file, "archs", "a table", archs)
        links = data.get("links")
        if links is not None and not (
            isinstance(links, dict)
            and all(
                isinstance(v, list) and all(isinstance(x, dict) for x in v)
                for v in links.values()
            )
        ):
            raise _fail(file, "links", "a table of wheel = [link tables]", links)
        seal = data.get("seal")
        if seal is not None and not isinstance(seal, str):
            raise _fail(file, "seal", "a string", seal)
        steps = data.get("steps")
        if steps is not None:
            if not isinstance(steps, list):
                raise _fail(file, "steps", "a list", steps)
            steps = tuple(
                StepTiming.from_json(t, file=file, key=f"steps[{i}]") for i, t in enumerate(steps)
            )
        compiler_cache = data.get("compiler_cache")
        if compiler_cache is not None and not (
            isinstance(compiler_cache, dict)
            and all(
                isinstance(compiler_cache.get(k), int) and not isinstance(compiler_cache[k], bool)
                for k in ("compiles", "hits", "misses", "uncacheable")
            )
        ):
            what = "a table of compiles/hits/misses/uncacheable counts"
            raise _fail(file, "compiler_cache", what, compiler_cache)
        portability = data.get("portability")
        if portability is not None:
            if not isinstance(portability, list) or not all(
                isinstance(p, dict) and all(isinstance(v, str) for v in p.values())
                for p in portability
            ):
                raise _fail(file, "portability", "a list of {file, flag} tables", portability)
            portability = tuple(portability)
        against = data.get("built_against", [])
        if not isinstance(against, list) or not all(isinstance(h, str) for h in against):
            raise _fail(file, "built_against", "a list of input hashes", against)
        origin = data.get("origin")
        if origin is not None and not (
            isinstance(origin, dict) and isinstance(origin.get("cache"), str)
        ):
            raise _fail(file, "origin", "a table with a 'cache' URL", origin)
        return cls(
            hash=hash_,
            name=name,
            version=version,
            created=_same_number(_number(data, "created", file), data["created"]),
            size=_int(data, "size", file),
            wheels=tuple(
                WheelRecord.from_json(w, file=file, key=f"wheels[{i}]")
                for i, w in enumerate(wheels)
            ),
            sandbox=sandbox,
            build_seconds=build_seconds,
            sources=sources,
            files=files,
            archs=archs,
            links=links,
            seal=seal,
            steps=steps,
            compiler_cache=compiler_cache,
            portability=portability,
            built_against=tuple(against),
            origin=origin,
            extra={k: v for k, v in data.items() if k not in _KNOWN},
        )

    @classmethod
    def from_bytes(cls, raw: bytes, *, file: Path | str) -> EntryMeta:
        """Parse the raw bytes of the ``meta.json`` at ``file``."""
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise StoreError(f"{file}: invalid JSON: {exc}") from exc
        return cls.from_json(data, file=file)

    def to_json(self) -> dict[str, Any]:
        """Return the JSON object stored in ``meta.json`` (absent fields are left out)."""
        out: dict[str, Any] = dict(self.extra)
        out.update(
            hash=self.hash,
            name=self.name,
            version=self.version,
            created=self.created,
            size=self.size,
            wheels=[w.to_json() for w in self.wheels],
        )
        optional = {
            "sandbox": self.sandbox,
            "build_seconds": self.build_seconds,
            "sources": list(self.sources) if self.sources is not None else None,
            "files": dict(self.files) if self.files is not None else None,
            "archs": self.archs,
            "links": self.links,
            "seal": self.seal,
            "steps": [t.to_json() for t in self.steps] if self.steps is not None else None,
            "compiler_cache": self.compiler_cache,
            "portability": (
                [dict(p) for p in self.portability] if self.portability is not None else None
            ),
            "built_against": list(self.built_against) or None,
            "origin": self.origin,
        }
        out.update((k, v) for k, v in optional.items() if v is not None)
        return out

    def compute_seal(self) -> str:
        """Return the seal of this meta: blake3 of the canonical JSON of every field but
        ``seal`` (so any change to a recorded value, digests included, breaks it)."""
        data = self.to_json()
        data.pop("seal", None)
        return blake3_hex(canonical_json(data))

    def sealed(self) -> EntryMeta:
        """Return a copy carrying its own :meth:`compute_seal`."""
        return replace(self, seal=self.compute_seal())

    @property
    def seal_broken(self) -> bool:
        """True when a seal is recorded and no longer matches the other fields."""
        return self.seal is not None and self.seal != self.compute_seal()


def build_fields(
    *,
    wheels: Sequence[WheelRecord],
    sandbox: str,
    build_seconds: float,
    sources: Sequence[str],
    files: Mapping[str, str],
    archs: Mapping[str, Any] | None = None,
    links: Mapping[str, Any] | None = None,
    steps: Sequence[StepTiming] | None = None,
    compiler_cache: Mapping[str, Any] | None = None,
    portability: Sequence[Mapping[str, str]] = (),
    built_against: Sequence[str] = (),
) -> dict[str, Any]:
    """Return what a build knows of its entry's ``meta.json``, under the file's keys, for
    :meth:`~rocmforge.store.store.Store.publish` (which adds hash, name, version, created and
    size, and checks the whole through :class:`EntryMeta`)."""
    out: dict[str, Any] = {
        "wheels": [w.to_json() for w in wheels],
        "sandbox": sandbox,
        "build_seconds": build_seconds,
        "sources": list(sources),
        "files": dict(files),
    }
    if archs:
        out["archs"] = dict(archs)
    if links:
        out["links"] = dict(links)
    if steps is not None:
        out["steps"] = [t.to_json() for t in steps]
    if compiler_cache is not None:
        out["compiler_cache"] = dict(compiler_cache)
    if portability:
        out["portability"] = [dict(p) for p in portability]
    if built_against:
        out["built_against"] = list(built_against)
    return out


def listed_wheel_files(fields: Mapping[str, Any], *, what: str) -> list[str] | None:
    """Return the wheel file names that publish ``fields`` list; None when they list none (then
    :meth:`~rocmforge.store.store.Store.publish` records the staged wheels itself)."""
    if "wheels" not in fields:
        return None
    listed = fields["wheels"]
    if not isinstance(listed, list) or not all(
        isinstance(w, dict) and isinstance(w.get("file"), str) for w in listed
    ):
        raise StoreError(f"{what}: 'wheels' must be a list of {{'file': ...}}")
    return [w["file"] for w in listed]


def complete_fields(
    fields: Mapping[str, Any],
    *,
    hash: str,
    name: str,
    version: str,
    created: float,
    size: int,
    wheels: Sequence[WheelRecord] | None,
) -> dict[str, Any]:
    """Return ``fields`` with what publishing adds: identity, creation time, size and (unless
    ``wheels`` is None) the wheel records."""
    full = dict(fields)
    if wheels is not None:
        full["wheels"] = [w.to_json() for w in wheels]
    full.update(hash=hash, name=name, version=version, created=created, size=size)
    return full


def read_meta(entry_dir: Path) -> EntryMeta | None:
    """Return the :class:`EntryMeta` of the entry at ``entry_dir``; None if it has no meta.json."""
    path = entry_dir / layout.META
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc}") from exc
    return EntryMeta.from_bytes(raw, file=path)


def _table(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


@dataclass(frozen=True, slots=True)
class DerivationDoc:
    """Typed read access to a derivation document (``derivation.json``, or a wheel's stamp).

    The document is written by :func:`rocmforge.derivation.make_derivation`. Each accessor
    returns None when its part is absent or not of the documented type, so a document from an
    untrusted wheel can be read without trusting its shape.
    """

    data: Mapping[str, Any]

    @property
    def package(self) -> Mapping[str, Any] | None:
        """``package``: ``{"name", "version"}``."""
        return _table(self.data.get("package"))

    @property
    def package_name(self) -> str | None:
        """The package name, if the document names one."""
        name = (self.package or {}).get("name")
        return name if isinstance(name, str) else None

    @property
    def source(self) -> Mapping[str, Any] | None:
        """``source``: the source identity (kind, commit or tree, submodules, patches)."""
        return _table(self.data.get("source"))

    @property
    def toolchain(self) -> Mapping[str, Any] | None:
        """``toolchain``: the probed toolchain fingerprint."""
        return _table(self.data.get("toolchain"))

    @property
    def env(self) -> Mapping[str, Any] | None:
        """``env``: the hashed environment."""
        return _table(self.data.get("env"))

    @property
    def requirements(self) -> list[Any] | None:
        """``requirements``: one table per build requirement (name, version, wheel, digests)."""
        value = self.data.get("requirements")
        return value if isinstance(value, list) else None

    @property
    def build(self) -> Mapping[str, Any] | None:
        """``build``: ``{"steps": [...]}`` or ``{"pep517": true}``."""
        return _table(self.data.get("build"))

    @property
    def builder(self) -> str | None:
        """``builder``: the build protocol version."""
        value = self.data.get("builder")
        return value if isinstance(value, str) else None


def input_hash(derivation: Mapping[str, Any]) -> str:
    """Return the input hash of a derivation document: blake3 of its canonical JSON, cut to
    :data:`~rocmforge.store.layout.HASH_LEN` hex digits."""
    return blake3_hex(canonical_json(derivation))[: layout.HASH_LEN]


def read_derivation(entry_dir: Path) -> dict[str, Any]:
    """Return the derivation document of the entry (or staged entry) at ``entry_dir``.

    A missing, unreadable or malformed ``derivation.json`` raises StoreError naming the file.
    """
    path = entry_dir / layout.DERIVATION
    value = read_json_object(path, what="the derivation")
    if value is None:
        raise StoreError(f"{path}: the entry has no derivation")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One published store entry: its identity, directory, wheels and parsed ``meta.json``."""

    hash: str
    name: str
    version: str
    path: Path
    wheels: tuple[Path, ...]
    meta: EntryMeta = field(compare=False)

    @classmethod
    def from_meta(cls, path: Path, meta: EntryMeta) -> Entry:
        """Return the entry at ``path`` described by ``meta``."""
        return cls(
            hash=meta.hash,
            name=meta.name,
            version=meta.version,
            path=path,
            wheels=tuple(path / w.file for w in meta.wheels),
            meta=meta,
        )
