"""Recipe lock files: the resolved closure of ``[requirements] build``, beside the recipe.

``recipes/demo.toml`` is locked by ``recipes/demo.lock`` (TOML; the ``.lock`` suffix keeps it out
of ``*.toml`` recipe globs). The file records what it was resolved from — the specifiers exactly as
the recipe writes them, ``build-system`` and the Python version — and one ``[[package]]`` per
locked wheel: the normalised (PEP 503) name, the exact version, the wheel file name and its sha256.
``rocmforge lock`` writes it (:mod:`rocmforge.lock.locker`); loading a recipe applies it
(:func:`apply_lock`), so a build installs exactly the locked closure and nothing is resolved at
build time.

A git source's resolution (issue 34) is recorded there too, in ``[source]``: the commit, whether
submodules were followed, the commit's time (the tree's epoch) and every submodule's path and
commit: what the input hash needs of the source, so ``plan`` and ``realize --cache`` of a locked
recipe hash it without cloning anything (:func:`source_lock_of`). A build still fetches the tree,
and refuses it when it does not match (``materialize_source``). A recipe without requirements to
lock gets a lock file of that table only.

With ``extends``, the nearest lock file along the chain (the recipe's own first, then its bases')
whose recorded inputs equal the recipe's effective ones is used: a child that does not change its
base's requirements needs no lock file of its own; a child that does gets its own, and the base's
stays as it is.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import Problem, RecipeError

if TYPE_CHECKING:
    from rocmforge.recipe.model import Recipe

LOCK_VERSION = 1
"""The lock file format version (``lock-version``)."""
LOCK_SUFFIX = ".lock"
"""A recipe ``NAME.toml`` is locked by ``NAME.lock`` in the same directory."""
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_MAX_LOCK_BYTES = 4 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class LockedPackage:
    """One locked wheel: normalised name, exact version, wheel file name and sha256 (hex)."""

    name: str
    version: str
    wheel: str
    sha256: str
    #: the wheel's blake3 (hex), what the derivation names; locks made before it lack it
    blake3: str | None = None

    @property
    def pin(self) -> str:
        """``name==version``."""
        return f"{self.name}=={self.version}"


@dataclass(frozen=True, slots=True, kw_only=True)
class LockInputs:
    """What a lock was resolved from; a lock applies to a recipe only if these are equal.

    ``source_requires`` are the source's own ``[build-system] requires`` (if ``build_system``)
    and the requirements of its ``build_file``, as read at lock time; the recipe's specifiers,
    that flag and that file name are compared at load time, ``lock --check`` compares the
    source's lists as well.
    """

    python: str
    requires: tuple[str, ...]
    build_system: bool = False
    #: ``[requirements] build-file``: the source's requirements file read at lock time
    build_file: str | None = None
    source_requires: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LockedSource:
    """``[source]`` of a lock file: a git source resolved at ``commit`` (40 hex digits)."""

    commit: str
    #: whether submodules were followed (the recipe's ``submodules``)
    submodules: bool
    #: the commit's committer time: the materialised tree's epoch
    epoch: int
    #: ``(path, commit)`` of every submodule, recursively, sorted
    modules: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LockFile:
    """A parsed lock file (its requirements part; ``source`` the ``[source]`` table if any)."""

    path: Path
    inputs: LockInputs
    packages: tuple[LockedPackage, ...]
    resolver: str = ""
    source: LockedSource | None = None

    def by_name(self) -> dict[str, LockedPackage]:
        """Return the packages keyed by normalised name."""
        return {p.name: p for p in self.packages}


def lock_path(recipe_file: Path) -> Path:
    """Return the lock file of the recipe at ``recipe_file``: ``NAME.toml`` -> ``NAME.lock``."""
    name = recipe_file.name
    stem = name[: -len(".toml")] if name.endswith(".toml") else name
    return recipe_file.with_name(stem + LOCK_SUFFIX)


def inputs_of(recipe: Recipe) -> LockInputs:
    """Return the lock inputs a recipe's effective ``[requirements]`` call for."""
    return LockInputs(
        python=recipe.toolchain.python,
        requires=recipe.requirements.specifiers,
        build_system=recipe.requirements.build_system,
        build_file=recipe.requirements.build_file,
    )


def _same(a: LockInputs, b: LockInputs) -> bool:
    """True if the recipe-side inputs agree (the source's own list is checked by ``lock``)."""
    return (a.python, a.requires, a.build_system, a.build_file) == (
        b.python, b.requires, b.build_system, b.build_file
    )  # fmt: skip


def _bad(path: Path, key: str, message: str) -> RecipeError:
    return RecipeError([Problem(file=path, key=key, message=message)])


def _load_data(path: Path) -> dict[str, Any]:
    """The TOML of the lock file at ``path``; :class:`RecipeError` naming it if unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_LOCK_BYTES + 1)
    except OSError as exc:
        raise _bad(path, "", f"cannot read lock file: {exc.strerror or exc}") from exc
    if len(raw) > _MAX_LOCK_BYTES:
        raise _bad(path, "", f"lock file larger than {_MAX_LOCK_BYTES} bytes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _bad(path, "", f"invalid lock file: {exc}; run `rocmforge lock` again") from exc
    if data.get("lock-version") != LOCK_VERSION:
        raise _bad(path, "lock-version", f"must be {LOCK_VERSION}; run `rocmforge lock` again")
    return data


def _source_of(path: Path, data: dict[str, Any]) -> LockedSource | None:
    table = data.get("source")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise _bad(path, "source", "must be a table")
    commit, epoch = table.get("commit"), table.get("epoch")
    subs, modules = table.get("submodules", False), table.get("modules", [])
    if not isinstance(commit, str) or not _COMMIT.match(commit):
        raise _bad(path, "source.commit", "must be a full commit (40 hex digits)")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise _bad(path, "source.epoch", "must be a non-negative integer (a commit time)")
    if not isinstance(subs, bool):
        raise _bad(path, "source.submodules", "must be true or false")
    if not isinstance(modules, list) or not all(
        isinstance(m, list) and len(m) == 2 and isinstance(m[0], str) and m[0]
        and isinstance(m[1], str) and _COMMIT.match(m[1]) for m in modules
    ):  # fmt: skip
        raise _bad(path, "source.modules", "must be a list of [path, commit] pairs")
    return LockedSource(commit=commit, submodules=subs, epoch=epoch,
                        modules=tuple((str(a), str(b)) for a, b in modules))  # fmt: skip


def has_requirements(path: Path) -> bool:
    """Whether the lock file at ``path`` locks requirements (not only a ``[source]``)."""
    return "python" in _load_data(path)


def read_source_lock(path: Path) -> LockedSource | None:
    """The ``[source]`` of the lock file at ``path`` (None if the file or the table is absent)."""
    try:
        if not path.is_file():
            return None
    except OSError:
        return None
    return _source_of(path, _load_data(path))


def read_lock(path: Path) -> LockFile:
    """Parse the lock file at ``path``; raise :class:`RecipeError` naming the key if malformed."""
    data = _load_data(path)

    def strings(key: str) -> tuple[str, ...]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _bad(path, key, "must be a list of strings")
        return tuple(value)

    python, build_system = data.get("python"), data.get("build-system", False)
    if not isinstance(python, str):
        raise _bad(path, "python", "must be a string such as '3.11'")
    if not isinstance(build_system, bool):
        raise _bad(path, "build-system", "must be true or false")
    build_file = data.get("build-file")
    if build_file is not None and not isinstance(build_file, str):
        raise _bad(path, "build-file", "must be a string (a path in the source)")
    packages: list[LockedPackage] = []
    items = data.get("package", [])
    if not isinstance(items, list):
        raise _bad(path, "package", "must be an array of tables ([[package]])")
    for i, item in enumerate(items):
        key = f"package[{i}]"
        if not isinstance(item, dict):
            raise _bad(path, key, "must be a table")
        fields = {k: item.get(k) for k in ("name", "version", "wheel", "sha256")}
        missing = [k for k, v in fields.items() if not isinstance(v, str) or not v]
        if missing:
            raise _bad(path, f"{key}.{missing[0]}", "missing or not a string")
        if not _SHA256.match(str(fields["sha256"])):
            raise _bad(path, f"{key}.sha256", "must be 64 lowercase hex digits")
        b3 = item.get("blake3")
        if b3 is not None and not (isinstance(b3, str) and _SHA256.match(b3)):
            raise _bad(path, f"{key}.blake3", "must be 64 lowercase hex digits")
        packages.append(LockedPackage(**{k: str(v) for k, v in fields.items()}, blake3=b3))
    resolver = data.get("resolver", "")
    return LockFile(
        path=path,
        inputs=LockInputs(
            python=python,
            requires=strings("requires"),
            build_system=build_system,
            build_file=build_file,
            source_requires=strings("source-requires"),
        ),
        packages=tuple(packages),
        resolver=resolver if isinstance(resolver, str) else "",
        source=_source_of(path, data),
    )


def read_requirements_lock(path: Path) -> LockFile | None:
    """:func:`read_lock` of a file that locks requirements; None for a ``[source]``-only one."""
    return read_lock(path) if has_requirements(path) else None


def _q(text: str) -> str:
    """A TOML basic string (JSON string escapes are valid TOML)."""
    return json.dumps(text, ensure_ascii=False)


def _array(items: Sequence[str]) -> str:
    if not items:
        return "[]"
    return "[\n" + "".join(f"    {_q(i)},\n" for i in items) + "]"


def _render_source(source: LockedSource) -> list[str]:
    lines = [
        "",
        "# the git source as resolved: what its input hash needs, without cloning it",
        "[source]",
        f"commit = {_q(source.commit)}",
        f"submodules = {'true' if source.submodules else 'false'}",
        f"epoch = {source.epoch}",
    ]
    if source.modules:
        lines.append("modules = [\n" + "".join(
            f"    [{_q(p)}, {_q(c)}],\n" for p, c in source.modules) + "]")  # fmt: skip
    else:
        lines.append("modules = []")
    return lines


def render_lock(recipe_name: str, lock: LockFile) -> str:
    """Return the text of a lock file: one key per line, packages sorted by name, then the
    ``[source]`` table if any."""
    i = lock.inputs
    lines = [
        f"# Written by `rocmforge lock {recipe_name}`: the resolved closure of its "
        "[requirements] build.",
        "# Do not edit by hand; change the recipe and run `rocmforge lock` again.",
        f"lock-version = {LOCK_VERSION}",
        f"resolver = {_q(lock.resolver)}",
        f"python = {_q(i.python)}",
        f"build-system = {'true' if i.build_system else 'false'}",
        f"requires = {_array(i.requires)}",
    ]
    if i.build_file is not None:
        lines.insert(-1, f"build-file = {_q(i.build_file)}")
    if i.build_system or i.build_file is not None:
        lines.append(f"source-requires = {_array(i.source_requires)}")
    for p in sorted(lock.packages, key=lambda p: p.name):
        lines += [
            "",
            "[[package]]",
            f"name = {_q(p.name)}",
            f"version = {_q(p.version)}",
            f"wheel = {_q(p.wheel)}",
            f"sha256 = {_q(p.sha256)}",
            *([f"blake3 = {_q(p.blake3)}"] if p.blake3 else []),
        ]
    if lock.source is not None:
        lines += _render_source(lock.source)
    return "\n".join(lines) + "\n"


def render_source_lock(recipe_name: str, source: LockedSource) -> str:
    """Return the text of a lock file holding only ``[source]`` (a recipe without
    requirements to lock)."""
    lines = [
        f"# Written by `rocmforge lock {recipe_name}`: its git source as resolved.",
        "# Do not edit by hand; change the recipe and run `rocmforge lock` again.",
        f"lock-version = {LOCK_VERSION}",
        *_render_source(source),
    ]
    return "\n".join(lines) + "\n"


def with_source(path: Path, recipe_name: str, source: LockedSource) -> str:
    """The text of the lock file at ``path`` with ``source`` as its ``[source]`` (its
    requirements part, if any, kept as it is)."""
    if path.is_file() and has_requirements(path):
        return render_lock(recipe_name, dataclasses.replace(read_lock(path), source=source))
    return render_source_lock(recipe_name, source)


def source_lock_of(recipe: Recipe) -> LockedSource | None:
    """The recorded resolution of ``recipe``'s git source: the nearest along the ``extends``
    chain for its ``rev`` and its ``submodules`` setting; None if none is recorded."""
    spec = recipe.source
    if spec.kind != "git" or spec.rev is None:
        return None
    for file in reversed(recipe.extends_chain or (recipe.file,)):
        found = read_source_lock(lock_path(file))
        if found is not None and found.commit == spec.rev.lower() and (
            found.submodules == spec.submodules
        ):
            return found
    return None


def find_lock(recipe: Recipe) -> LockFile | None:
    """Return the nearest lock file along the ``extends`` chain that matches ``recipe``.

    The recipe's own lock file comes first, then each base's. A lock file whose inputs differ
    is skipped (it locks something else); None if none matches.
    """
    wanted = inputs_of(recipe)
    chain = recipe.extends_chain or (recipe.file,)
    for file in reversed(chain):
        path = lock_path(file)
        try:
            if not path.is_file():
                continue
        except OSError:
            continue
        lock = read_requirements_lock(path)
        if lock is not None and _same(lock.inputs, wanted):
            return lock
    return None


def apply_lock(recipe: Recipe) -> Recipe:
    """Return ``recipe`` with its locked closure as ``requirements.build`` and ``digests``.

    A recipe of exact pins without a lock file is returned unchanged (pins installed as written).
    A recipe that needs a lock (specifiers, or ``build-system = true``) and has no matching one
    raises :class:`RecipeError` with the command to run.
    """
    from rocmforge.util.shownpath import shown_path

    reqs = recipe.requirements
    if not reqs.specifiers and not reqs.build_system and reqs.build_file is None:
        return recipe
    lock = find_lock(recipe)
    if lock is None:
        if not reqs.needs_lock:
            return recipe
        own = lock_path(recipe.file)
        why = (
            f"{own.name} was locked for other requirements"
            if own.is_file()
            else "no lock file matches them"
        )
        raise RecipeError(
            [
                Problem(
                    file=recipe.file,
                    key="requirements.build",
                    message=f"requirements are not locked ({why}); "
                    f"run `rocmforge lock {shown_path(recipe.file)}`",
                )
            ]
        )
    locked = dataclasses.replace(
        reqs,
        build=tuple(p.pin for p in lock.packages),
        digests={p.pin: f"sha256:{p.sha256}" for p in lock.packages},
        lock=lock.path,
        locked_wheels={p.pin: (p.wheel, p.blake3) for p in lock.packages if p.blake3},
    )
    return dataclasses.replace(recipe, requirements=locked)


def apply_source_lock(recipe: Recipe) -> Recipe:
    """Return ``recipe`` with its git source's recorded resolution (:func:`source_lock_of`) as
    ``source.locked``, or unchanged when none is recorded."""
    found = source_lock_of(recipe)
    if found is None:
        return recipe
    source = dataclasses.replace(recipe.source, locked=(found.epoch, found.modules))
    return dataclasses.replace(recipe, source=source)


def lock_candidates(recipe: Recipe) -> tuple[Path, ...]:
    """Every lock file path that could apply to ``recipe`` (guarded by the realize memo)."""
    return tuple(lock_path(f) for f in (recipe.extends_chain or (recipe.file,)))


def lock_to_json(lock: LockFile) -> dict[str, Any]:
    """Return a lock as JSON-ready data."""
    return {
        "path": str(lock.path),
        "python": lock.inputs.python,
        "requires": list(lock.inputs.requires),
        "packages": [dataclasses.asdict(p) for p in lock.packages],
    }
