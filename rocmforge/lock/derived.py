"""Pins that a pinned tree already decides: read them from the tree, never copy them by hand.

A recipe pins a source commit; that tree then names other things the build needs, and a recipe
that pins them too can disagree with it. ``lock`` reads them from the tree at the pinned commit
and writes them; ``lock --check`` fails naming the recipe key, both values and the tree file:

- **Triton's LLVM** (an input whose ``env`` is ``LLVM_SYSPATH``): ``cmake/llvm-info.json``
  (``llvm_hash``, ``build_number``, an optional ``release_base_url`` and a ``sha256sum`` per
  platform) gives the archive's name ``llvm-<hash8>-<platform>[-<build>]``, its URL, its digest
  and the directory it unpacks to, as Triton's ``python/build_helpers.py`` computes them; an
  older tree's ``cmake/llvm-hash.txt`` gives the commit only (no digest to compare). The
  platform is the one the recipe's archive names (``ubuntu-x64`` if it names none: what Triton
  picks on a glibc newer than 2.28).
- **AOTriton** (inputs whose URL names an ``aotriton-*`` release asset): torch's
  ``cmake/External/aotriton.cmake`` gives the version, the runtime archive per ROCm
  (``__AOTRITON_ROCM_LIST`` with its manylinux tags and digests) and the kernel images per
  arch family (``__AOTRITON_IMAGE_LIST``), each with its sha256.

The build requirements of ``requirements-build.txt`` are read the same way by
``[requirements] build-file`` (:mod:`rocmforge.lock.lockreq`). What cannot be read here (a
remote tree not yet in the mirror cache during a ``--check``, no network) is said as a note,
never passed over in silence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import RecipeError, SourceError
from rocmforge.lock.locker import LockChange, LockReport

if TYPE_CHECKING:
    from rocmforge.recipe.model import InputSpec, Recipe
    from rocmforge.store.store import Store

LLVM_INFO = "cmake/llvm-info.json"
LLVM_HASH = "cmake/llvm-hash.txt"
AOTRITON_CMAKE = "cmake/External/aotriton.cmake"
#: Where Triton's build_helpers.py downloads its prebuilt LLVM from unless llvm-info.json says.
LLVM_BASE_URL = "https://oaitriton.blob.core.windows.net/public/llvm-builds"
#: The platform Triton picks on x86-64 Linux with a glibc newer than 2.28.
LLVM_DEFAULT_PLATFORM = "ubuntu-x64"
AOTRITON_BASE_URL = "https://github.com/ROCm/aotriton/releases/download/"
LLVM_ENV = "LLVM_SYSPATH"

#: Reads a file of the recipe's source tree at its pinned commit: (text, where) or None if the
#: tree holds no such file. Raises :class:`TreeNotHere` when the tree cannot be read here.
TreeReader = Callable[[str], "tuple[str, str] | None"]

_ARCHIVE = re.compile(r"^llvm-(?P<hash>[0-9a-f]{7,40})-(?P<rest>.+?)\.tar\.(?:gz|xz|zst)$")


class TreeNotHere(Exception):
    """The pinned tree cannot be read here (not in the mirror cache during a check, offline)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DerivedPin:
    """One recipe value that a tree file decides: the recipe's key, its value (None when
    absent), the value the tree gives and where the tree says so."""

    key: str
    have: str | None
    want: str
    where: str

    @property
    def agrees(self) -> bool:
        """True when the recipe holds what the tree says."""
        return self.have == self.want


@dataclass(frozen=True, slots=True, kw_only=True)
class Derivation:
    """What the tree decides for one recipe: the pins and what could not be checked."""

    pins: tuple[DerivedPin, ...] = ()
    notes: tuple[str, ...] = ()


def _filename(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


# --- Triton's LLVM -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LlvmPin:
    """The prebuilt LLVM a Triton tree asks for."""

    commit: str
    build: int | None
    base_url: str | None
    sha256: Mapping[str, str]

    def name(self, platform: str) -> str:
        """The archive's base name (and the directory it unpacks to) for ``platform``."""
        suffix = "" if self.build is None else f"-{self.build}"
        return f"llvm-{self.commit[:8]}-{platform}{suffix}"

    def url(self, platform: str) -> str:
        """The archive's URL for ``platform``."""
        base = (self.base_url or LLVM_BASE_URL).rstrip("/")
        return f"{base}/{self.name(platform)}.tar.gz"


def parse_llvm_info(text: str, where: str) -> LlvmPin:
    """Parse a Triton tree's ``cmake/llvm-info.json``. Raises SourceError."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SourceError(f"{where}: not JSON: {exc}") from exc
    commit = data.get("llvm_hash") if isinstance(data, dict) else None
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise SourceError(f"{where}: llvm_hash: a commit id is needed")
    build = data.get("build_number")
    if build is not None and (not isinstance(build, int) or isinstance(build, bool)):
        raise SourceError(f"{where}: build_number: must be an integer")
    base = data.get("release_base_url")
    if base is not None and not isinstance(base, str):
        raise SourceError(f"{where}: release_base_url: must be a string")
    sums = data.get("sha256sum", {})
    if not isinstance(sums, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in sums.items()
    ):
        raise SourceError(f"{where}: sha256sum: must map platforms to digests")
    return LlvmPin(commit=commit, build=build, base_url=base, sha256=dict(sums))


def _platform(url: str | None, known: Mapping[str, str]) -> str:
    """The platform a recipe's LLVM archive names (one of ``known`` when it can tell)."""
    m = _ARCHIVE.match(_filename(url or ""))
    if m is not None:
        rest = m.group("rest")
        for platform in sorted(known, key=len, reverse=True):
            if rest == platform or rest.startswith(f"{platform}-"):
                return platform
        return re.sub(r"-\d+$", "", rest)
    return LLVM_DEFAULT_PLATFORM


def llvm_pins(name: str, spec: InputSpec, read: TreeReader) -> Derivation:
    """What the Triton tree says about the recipe's LLVM input ``name``."""
    got = read(LLVM_INFO)
    if got is not None:
        text, where = got
        pin = parse_llvm_info(text, where)
        platform = _platform(spec.url, pin.sha256)
        archive = pin.name(platform)
        pins = [
            DerivedPin(key=f"inputs.{name}.url", have=spec.url, want=pin.url(platform), where=where)
        ]
        digest = pin.sha256.get(platform)
        notes: list[str] = []
        if digest is not None:
            pins.append(
                DerivedPin(key=f"inputs.{name}.sha256", have=spec.sha256, want=digest, where=where)
            )
        else:
            listed = ", ".join(sorted(pin.sha256)) or "none"
            notes.append(
                f"inputs.{name}.sha256: {where} lists no digest for {platform} "
                f"(it has {listed}): not checked"
            )
        if spec.subdir is not None:
            pins.append(
                DerivedPin(key=f"inputs.{name}.subdir", have=spec.subdir, want=archive, where=where)
            )
        return Derivation(pins=tuple(pins), notes=tuple(notes))
    got = read(LLVM_HASH)
    if got is None:
        return Derivation(
            notes=(
                f"inputs.{name}: the tree has neither {LLVM_INFO} nor "
                f"{LLVM_HASH}: its LLVM pin is not checked",
            )
        )
    text, where = got
    commit = text.strip()
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise SourceError(f"{where}: {commit[:60]!r} is not a commit id")
    m = _ARCHIVE.match(_filename(spec.url or ""))
    have = m.group("hash")[:8] if m else None
    return Derivation(
        pins=(
            DerivedPin(
                key=f"inputs.{name}.url (LLVM commit)", have=have, want=commit[:8], where=where
            ),
        ),
        notes=(f"inputs.{name}.sha256: {where} names a commit only: the digest is not checked",),
    )


# --- AOTriton ------------------------------------------------------------------------------------

_SET = re.compile(r"^\s*set\(\s*(__AOTRITON_[A-Z0-9_]+)\b(.*?)\)", re.M | re.S)
_STRING = re.compile(r'"([^"]*)"')


@dataclass(frozen=True, slots=True, kw_only=True)
class AotritonPins:
    """The AOTriton release torch's ``aotriton.cmake`` downloads: version, runtime archives
    by ROCm (``rocm7.14``: (manylinux tag, sha256)) and kernel images (``amd-gfx942``: sha256)."""

    version: str
    variants: str
    runtimes: Mapping[str, tuple[str, str]]
    images: Mapping[str, str]
    base_url: str
    z: str

    def runtime(self, rocm: str, arch: str) -> tuple[str, str] | None:
        """(url, sha256) of the runtime for ``rocm`` (``rocm7.14``) on ``arch``, or None."""
        found = self.runtimes.get(rocm)
        if found is None:
            return None
        manylinux, sha = found
        release = f"aotriton-{self.version}{self.variants}"
        file = f"{release}-{manylinux}_{arch}-{rocm}-shared.tar.{self.z}"
        return f"{self.base_url}{self.version}/{file}", sha

    def image(self, image: str) -> tuple[str, str] | None:
        """(url, sha256) of the kernel images ``image`` (``amd-gfx942``), or None."""
        sha = self.images.get(image)
        if sha is None:
            return None
        file = f"aotriton-{self.version}{self.variants}-images-{image}.tar.{self.z}"
        return f"{self.base_url}{self.version}/{file}", sha


def parse_aotriton_cmake(text: str, where: str) -> AotritonPins:
    """Parse torch's ``cmake/External/aotriton.cmake`` (the default, non-ASAN lists: the first
    ``set`` of each name). Raises SourceError when a list is missing or the lengths differ."""
    values: dict[str, list[str]] = {}
    for m in _SET.finditer(text):
        values.setdefault(m.group(1), _STRING.findall(m.group(2)))

    def one(name: str, default: str | None = None) -> str:
        got = values.get(name)
        if got:
            return got[0]
        if default is None:
            raise SourceError(f"{where}: no set({name} ...) found")
        return default

    def many(name: str) -> list[str]:
        got = values.get(name)
        if not got:
            raise SourceError(f"{where}: no set({name} ...) found")
        return got

    rocms, manylinux, sums = (
        many("__AOTRITON_ROCM_LIST"),
        many("__AOTRITON_MANYLINUX_LIST"),
        many("__AOTRITON_SHA256_LIST"),
    )
    images, image_sums = many("__AOTRITON_IMAGE_LIST"), many("__AOTRITON_IMAGE_SHA256_LIST")
    if not len(rocms) == len(manylinux) == len(sums) or len(images) != len(image_sums):
        raise SourceError(f"{where}: the AOTriton lists differ in length")
    base = values.get("__AOTRITON_BASE_URL")
    literal = next((b for b in base or [] if b.startswith("https://")), None)
    return AotritonPins(
        version=one("__AOTRITON_VER"),
        variants=one("__AOTRITON_BUILD_VARIANTS", ""),
        runtimes={r: (ml, s) for r, ml, s in zip(rocms, manylinux, sums, strict=True)},
        images=dict(zip(images, image_sums, strict=True)),
        base_url=literal or AOTRITON_BASE_URL,
        z=one("__AOTRITON_Z", "gz"),
    )


_RUNTIME = re.compile(
    r"^aotriton-(?P<ver>[^-]+?)(?P<var>\+[a-z]+)?-(?P<ml>manylinux_\d+_\d+)_(?P<arch>[a-z0-9_]+)"
    r"-(?P<rocm>rocm[0-9.]+)-shared\.tar\.\w+$"
)
_IMAGES = re.compile(
    r"^aotriton-(?P<ver>[^-]+?)(?P<var>\+[a-z]+)?-images-(?P<image>[a-z0-9-]+)"
    r"\.tar\.\w+$"
)


def aotriton_inputs(recipe: Recipe) -> dict[str, InputSpec]:
    """The recipe's inputs that are AOTriton release assets (by their file name)."""
    return {
        n: s for n, s in recipe.inputs.items() if s.url and _filename(s.url).startswith("aotriton-")
    }


def aotriton_pins(inputs: Mapping[str, InputSpec], read: TreeReader) -> Derivation:
    """What torch's tree says about the recipe's AOTriton inputs."""
    got = read(AOTRITON_CMAKE)
    if got is None:
        return Derivation(
            notes=(
                f"inputs: the tree has no {AOTRITON_CMAKE}: the AOTriton inputs are not checked",
            )
        )
    text, where = got
    tree = parse_aotriton_cmake(text, where)
    pins: list[DerivedPin] = []
    notes: list[str] = []
    for name, spec in sorted(inputs.items()):
        file = _filename(spec.url or "")
        runtime, images = _RUNTIME.match(file), _IMAGES.match(file)
        if runtime is not None:
            rocm = runtime.group("rocm")
            found = tree.runtime(rocm, runtime.group("arch"))
            if found is None:
                notes.append(
                    f"inputs.{name}: {where} (AOTriton {tree.version}) has no runtime "
                    f"for {rocm} (it has {', '.join(tree.runtimes)})"
                )
                continue
        elif images is not None:
            found = tree.image(images.group("image"))
            if found is None:
                listed = ", ".join(tree.images)
                notes.append(
                    f"inputs.{name}: {where} (AOTriton {tree.version}) has no "
                    f"{images.group('image')} images (it has {listed})"
                )
                continue
        else:
            notes.append(
                f"inputs.{name}: {file} is not an AOTriton runtime or image archive "
                "name: not checked"
            )
            continue
        url, sha = found
        pins.append(DerivedPin(key=f"inputs.{name}.url", have=spec.url, want=url, where=where))
        pins.append(
            DerivedPin(key=f"inputs.{name}.sha256", have=spec.sha256, want=sha, where=where)
        )
    return Derivation(pins=tuple(pins), notes=tuple(notes))


# --- the recipe ----------------------------------------------------------------------------------


def derive(recipe: Recipe, read: TreeReader) -> Derivation:
    """Everything the recipe's own tree (read with ``read``) decides about its other pins."""
    pins: list[DerivedPin] = []
    notes: list[str] = []
    parts: list[Derivation] = []
    for name, spec in sorted(recipe.inputs.items()):
        if spec.env == LLVM_ENV and spec.url:
            parts.append(llvm_pins(name, spec, read))
    found = aotriton_inputs(recipe)
    if found:
        parts.append(aotriton_pins(found, read))
    for part in parts:
        pins.extend(part.pins)
        notes.extend(part.notes)
    return Derivation(pins=tuple(pins), notes=tuple(notes))


def wants_tree(recipe: Recipe) -> bool:
    """True if the recipe holds a pin its tree decides (so the tree is worth reading)."""
    return bool(aotriton_inputs(recipe)) or any(
        s.env == LLVM_ENV and s.url for s in recipe.inputs.values()
    )


def tree_reader(recipe: Recipe, *, store: Store, fetch: bool) -> TreeReader:
    """Read files of the recipe's source at its pinned commit (a path source: its directory;
    git: the mirror cache, fetching only when ``fetch``)."""
    from rocmforge.lock.lockreq import SourceNotHere, source_file

    def read(name: str) -> tuple[str, str] | None:
        try:
            raw, where = source_file(recipe, name, store=store, fetch=fetch)
        except FileNotFoundError:
            return None
        except SourceNotHere as exc:
            raise TreeNotHere(f"{exc.args[0]} is not in the mirror cache") from exc
        except SourceError as exc:
            if fetch:
                raise TreeNotHere(str(exc)) from exc
            raise
        try:
            return raw.decode("utf-8"), where
        except UnicodeDecodeError as exc:
            raise SourceError(f"{where}: not valid UTF-8") from exc

    return read


def lock_derived(path: Path, *, store: Store, write: bool, fetch: bool) -> LockReport | None:
    """Check (and with ``write``, write) the pins the recipe at ``path``'s tree decides.

    Returns None when the recipe holds no such pin. A pin of an input the recipe inherits
    (``extends``) is reported, not written: the base file holds it.
    """
    from rocmforge.recipe.load import load_recipe

    try:
        recipe = load_recipe(path)
    except RecipeError:
        # a base recipe (no [package]), or one whose ref a --check left unpinned: lock_recipe
        # has said what is wrong with it; there is no pinned tree to read yet
        return None
    if not wants_tree(recipe) or recipe.source.kind not in ("git", "path"):
        return None
    if recipe.source.kind == "git" and not recipe.source.rev:
        return LockReport(
            recipe=path,
            changes=(),
            written=False,
            notes=("source.rev: not pinned yet: the pins its tree decides are checked once it is",),
        )
    from rocmforge.sources.identity import is_remote_url

    local = recipe.source.kind == "path" or not is_remote_url(recipe.source.git or "")
    try:
        found = derive(recipe, tree_reader(recipe, store=store, fetch=fetch or local))
    except TreeNotHere as exc:
        return LockReport(
            recipe=path,
            changes=(),
            written=False,
            notes=(
                f"not checked: the pins its tree decides (Triton's LLVM, "
                f"AOTriton): {exc}; `rocmforge lock {path}` reads it",
            ),
        )
    wrong = [p for p in found.pins if not p.agrees]
    changes = tuple(
        LockChange(key=p.key, old=p.have, new=p.want, why=f"{p.where} says so") for p in wrong
    )
    written = False
    notes = found.notes
    if write and wrong:
        written = _write_inputs(path, wrong)
        if not written:
            notes += (
                "not written: an input above is declared in a base recipe (extends); "
                "change it there",
            )
    return LockReport(recipe=path, changes=changes, written=written, notes=notes)


def _write_inputs(path: Path, pins: list[DerivedPin]) -> bool:
    """Write the ``inputs.NAME.KEY`` values of ``pins`` into the recipe (comments kept);
    False when one of them lives in a base file (nothing is written then)."""
    import tomlkit

    from rocmforge.lock.locker import write_recipe

    doc: Any = tomlkit.parse(path.read_text(encoding="utf-8"))
    inputs = doc.get("inputs")
    for p in pins:
        parts = p.key.split(".")
        if len(parts) != 3 or not isinstance(inputs, dict) or parts[1] not in inputs:
            return False
        inputs[parts[1]][parts[2]] = p.want
    write_recipe(path, tomlkit.dumps(doc))
    return True


def merge(first: LockReport, second: LockReport | None) -> LockReport:
    """One report for a recipe from the requirement/source lock and the derived pins."""
    if second is None:
        return first
    return LockReport(
        recipe=first.recipe,
        changes=first.changes + second.changes,
        written=first.written or second.written,
        notes=first.notes + second.notes,
    )
