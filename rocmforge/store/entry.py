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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.metafields import MetaProblem, meta_fields, step_fields, wheel_fields
from rocmforge.util.fsutil import read_json_object
from rocmforge.util.hashing import blake3_hex, canonical_json


def _checked(check: Callable[..., dict[str, Any]], data: Any, **where: Any) -> dict[str, Any]:
    """Run one of :mod:`rocmforge.store.metafields`' checks; its problem as a StoreError."""
    try:
        return check(data, **where)
    except MetaProblem as exc:
        raise StoreError(str(exc)) from None


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
        return cls(**_checked(step_fields, data, file=file, key=key))


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
        return cls(**_checked(wheel_fields, value, file=file, key=key))

    def to_json(self) -> dict[str, Any]:
        """Return the record as it is stored in ``meta.json``."""
        out: dict[str, Any] = {"file": self.file, "sha256": self.sha256, "blake3": self.blake3}
        if self.size is not None:
            out["size"] = self.size
        if self.mtime_ns is not None:
            out["mtime_ns"] = self.mtime_ns
        return out


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
    #: The build's telemetry summary (peak RSS, CPU seconds, compile-job peak, per step; see
    #: :mod:`rocmforge.observe.record`); None when built without it.
    telemetry: Mapping[str, Any] | None = None
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
        fields = _checked(meta_fields, data, file=file)
        fields["wheels"] = tuple(WheelRecord(**w) for w in fields["wheels"])
        if fields["steps"] is not None:
            fields["steps"] = tuple(StepTiming(**t) for t in fields["steps"])
        return cls(**fields)

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
            "telemetry": self.telemetry,
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
    telemetry: Mapping[str, Any] | None = None,
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
    if telemetry is not None:
        out["telemetry"] = dict(telemetry)
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

    The document is written by :func:`rocmforge.plan.derivation.make_derivation`. Each accessor
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
