"""``lock`` for build requirements: resolve the closure, fetch its wheels, write the lock file.

Resolution happens here and only here (never at build time): the specifiers (plus the source's
own ``[build-system] requires`` with ``build-system = true``, and the requirements of its
``build-file`` such as PyTorch's ``requirements-build.txt``) go to a real resolver
(:mod:`rocmforge.sources.resolver`), every wheel of the closure is fetched into the store, and
the recipe's lock file (:mod:`rocmforge.recipe.lockfile`) records exact versions and sha256s.

A re-lock keeps what it can: the previous lock (the recipe's own, else the nearest base's) is
passed as constraints, except for packages whose specifier changed or that ``--upgrade`` names;
only if that has no solution is the closure resolved afresh. So a child recipe that changes one
pin of its base gets a lock that differs from the base's in that package (and whatever it
drags in) only.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.errors import RequirementError, SourceError, UsageError
from rocmforge.recipe.lockfile import (
    LockedPackage,
    LockFile,
    LockInputs,
    find_lock,
    inputs_of,
    lock_path,
    read_requirements_lock,
    read_source_lock,
    render_lock,
)
from rocmforge.recipe.model import Recipe
from rocmforge.store import layout
from rocmforge.toolchain.pythons import ANY, concrete_version
from rocmforge.util.fsutil import write_atomic

if TYPE_CHECKING:
    from rocmforge.sources.requirements import Fetcher, ResolvedRequirement
    from rocmforge.store.store import Store

Change = tuple[str, str | None, str | None]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class SourceNotHere(Exception):
    """The source tree is not in the mirror cache, and a ``lock --check`` fetches nothing: what
    its files say cannot be compared here (a provisional note, not a change)."""


def source_file(recipe: Recipe, name: str, *, store: Store, fetch: bool) -> tuple[bytes, str]:
    """Return the bytes of ``name`` in the recipe's source (a path source, or the git mirror at
    ``rev``) and where they were read. Raises :class:`SourceNotHere` when ``fetch`` is False
    and the commit is not in the mirror cache, FileNotFoundError if the file is not there."""
    spec = recipe.source
    if spec.kind == "path" and spec.path is not None:
        path = spec.path / name
        try:
            return path.read_bytes(), str(path)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    from rocmforge.sources.git import ensure_mirror, git_ok, mirror_path, run_git

    if not spec.git or not spec.rev:
        raise UsageError(f"{recipe.file}: source.rev: needed to read {name} from the source")
    where = f"{spec.git}@{spec.rev[:12]}:{name}"
    mirror = mirror_path(spec.git, store.sources_dir)
    if not fetch and not git_ok(["--git-dir", mirror, "cat-file", "-e", f"{spec.rev}^{{commit}}"]):
        raise SourceNotHere(where)
    mirror = ensure_mirror(spec.git, spec.rev, store.sources_dir)
    if not git_ok(["--git-dir", mirror, "cat-file", "-e", f"{spec.rev}:{name}"]):
        raise FileNotFoundError(where)
    raw = run_git(["--git-dir", mirror, "show", f"{spec.rev}:{name}"], what=f"reading {where}")
    return raw, where


def source_build_requires(recipe: Recipe, *, store: Store) -> tuple[str, ...]:
    """Return the source's own ``[build-system] requires`` (path sources, or git via the mirror).

    A source without a pyproject.toml (or without the table) gets PEP 517's default,
    ``setuptools>=40.8.0``.
    """
    try:
        raw, where = source_file(recipe, "pyproject.toml", store=store, fetch=True)
    except FileNotFoundError:
        return ("setuptools>=40.8.0",)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SourceError(f"{where}: invalid TOML: {exc}") from exc
    table = data.get("build-system")
    if not isinstance(table, dict) or "requires" not in table:
        return ("setuptools>=40.8.0",)
    requires = table["requires"]
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise SourceError(f"{where}: build-system.requires: must be a list of strings")
    return tuple(r.strip() for r in requires)


def source_file_requires(recipe: Recipe, *, store: Store, fetch: bool = True) -> tuple[str, ...]:
    """Return the requirements of the recipe's ``[requirements] build-file`` as its source has
    it (comments and blank lines dropped; pip options such as ``-r`` are refused)."""
    name = recipe.requirements.build_file
    assert name is not None
    try:
        raw, where = source_file(recipe, name, store=store, fetch=fetch)
    except FileNotFoundError as exc:
        raise SourceError(
            f"{recipe.file}: requirements.build-file: {exc.args[0] if exc.args else name} "
            "is not in the source"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{where}: not valid UTF-8") from exc
    out: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if not line:
            continue
        if line.startswith("-") or line.endswith("\\"):
            raise SourceError(f"{where}:{n}: {line!r}: only requirements are read (no pip "
                              "options, includes or continued lines)")  # fmt: skip
        out.append(line)
    return tuple(out)


def lock_owner(recipe: Recipe) -> Path:
    """Return the recipe file whose lock file ``lock`` writes: the nearest one along the
    ``extends`` chain (the recipe itself first) that sets ``[requirements] build``,
    ``build-system`` or ``build-file``. A child that only inherits its base's requirements
    locks the base."""
    for file in reversed(recipe.extends_chain or (recipe.file,)):
        if file == recipe.file:
            return file if _declares(recipe.file) else _next(recipe)
    return recipe.file


def _declares(file: Path) -> bool:
    try:
        with open(file, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return True
    table = data.get("requirements")
    return isinstance(table, dict) and any(k in table for k in ("build", "build-system",
                                                                    "build-file"))


def _next(recipe: Recipe) -> Path:
    for file in reversed(recipe.extends_chain[:-1]):
        if _declares(file):
            return file
    return recipe.file


def _base_lock(recipe: Recipe) -> LockFile | None:
    """The nearest existing lock file along the chain (own first), matching or not."""
    for file in reversed(recipe.extends_chain or (recipe.file,)):
        path = lock_path(file)
        if path.is_file():
            found = read_requirements_lock(path)
            if found is not None:
                return found
    return None


def _names(requires: Sequence[str]) -> set[str]:
    from packaging.requirements import Requirement

    return {_canonical(Requirement(r).name) for r in requires}


def lock_requirements(
    recipe: Recipe,
    *,
    store: Store,
    fetcher: Fetcher | None,
    write: bool,
    upgrade: Sequence[str] = (),
) -> list[Change]:
    """Bring the recipe's lock file up to date; return ``(key, old, new)`` per change.

    With ``write=False`` (``lock --check``) nothing is resolved or written unless ``upgrade`` is
    given: a lock whose recorded inputs differ from the recipe's is reported as one change.
    """
    owner = lock_owner(recipe)
    own_path = lock_path(owner)
    wanted = inputs_of(recipe)
    source_requires: tuple[str, ...] = ()
    if wanted.build_system:
        source_requires = source_build_requires(recipe, store=store)
    if wanted.build_file is not None:  # a --check reads it only if the source is already here
        source_requires += source_file_requires(recipe, store=store, fetch=write or bool(upgrade))
    wanted = LockInputs(
        python=wanted.python,
        requires=wanted.requires,
        build_system=wanted.build_system,
        build_file=wanted.build_file,
        source_requires=source_requires,
    )
    current = find_lock(recipe)
    if current is not None and current.inputs.source_requires != source_requires:
        current = None
    if current is not None and not upgrade:
        changes: list[Change] = []
        if current.path != own_path and own_path.is_file():
            # The recipe's own lock is stale and shadowed by its base's: drop it.
            changes.append((f"lock {own_path.name}", "stale", None))
            if write:
                os.unlink(own_path)
        if write:
            _fetch(recipe, current.packages, store=store, fetcher=fetcher)
        return changes
    previous = _base_lock(recipe)
    if not write and not upgrade:
        old = "missing" if previous is None or previous.path != own_path else "stale"
        return [(f"lock {own_path.name}", old, "re-lock: the requirements changed")]

    from rocmforge.sources.resolver import resolve_closure

    requires = (*source_requires, *wanted.requires)
    free = set() if previous is None else _names(
        [r for r in requires if r not in (*previous.inputs.requires,
                                          *previous.inputs.source_requires)]
    )  # fmt: skip
    free |= {_canonical(u) for u in upgrade}
    constraints: list[str] = []
    if previous is not None and previous.inputs.python == wanted.python and "*" not in upgrade:
        constraints = [p.pin for p in previous.packages if p.name not in free]
    try:
        resolution = resolve_closure(
            requires, python_version=concrete_version(wanted.python), constraints=constraints
        )
    except RequirementError:
        if not constraints:
            raise
        resolution = resolve_closure(requires, python_version=concrete_version(wanted.python))
    pins = [f"{n}=={v}" for n, v in resolution.pins]
    if not write:  # --check --upgrade: versions only, nothing fetched
        before = {p.name: p.version for p in (previous.packages if previous else ())}
        after = dict(resolution.pins)
        return [
            (f"lock.{n}", before.get(n), after.get(n))
            for n in sorted(set(before) | set(after))
            if before.get(n) != after.get(n)
        ]
    if fetcher is None:
        raise RequirementError("lock: the locked wheels must be fetched, but fetching is off")
    from rocmforge.sources.requirements import resolve_requirements

    resolved = resolve_requirements(
        pins,
        python_version=concrete_version(wanted.python),
        wheel_dir=store.sources_dir / layout.SOURCES_WHEELS,
        cache_dir=store.cache_dir,
        fetcher=fetcher,
    )
    require_any_python(owner, wanted.python, resolved)
    packages = tuple(
        LockedPackage(
            name=r.name, version=r.version, wheel=r.wheel.name, sha256=r.sha256, blake3=r.blake3
        )
        for r in resolved
    )
    kept = read_source_lock(own_path)  # the [source] table lock_source wrote stays
    new = LockFile(path=own_path, inputs=wanted, packages=packages, resolver=resolution.resolver,
                   source=kept)  # fmt: skip
    old_lock = read_requirements_lock(own_path) if own_path.is_file() else None
    changes = _diff(old_lock, new)
    if changes:
        text = render_lock(owner.name, new)
        try:
            mode = os.stat(own_path).st_mode & 0o7777 if own_path.exists() else 0o644
            write_atomic(own_path, text.encode("utf-8"), mode=mode)
        except OSError as exc:
            raise UsageError(f"{own_path}: cannot write lock file: {exc.strerror or exc}") from exc
    return changes


def require_any_python(
    where: Path, python: str, resolved: Sequence[ResolvedRequirement]
) -> None:
    """Refuse wheels that fit one Python only when the recipe builds with :data:`ANY`: a lock
    (or recorded digest) made on one host must hold on the next, whatever its ``3.X``."""
    if python != ANY:
        return
    bound = [r.wheel.name for r in resolved if not r.wheel.name.endswith("-none-any.whl")]
    if bound:
        raise RequirementError(
            f"{where}: toolchain.python = \"3\" (the host's Python 3) needs pure-Python build "
            f"requirements, but {', '.join(bound)} fits one Python only: set [toolchain] python "
            "to a version like \"3.12\""
        )


def _diff(old: LockFile | None, new: LockFile) -> list[Change]:
    """Per package: ``lock.NAME`` with ``version sha256:...`` before and after."""
    changes: list[Change] = []
    if old is None or old.inputs != new.inputs:
        changes.append(
            ("lock.requires", None if old is None else ", ".join(old.inputs.requires),
             ", ".join(new.inputs.requires) or "(none)")
        )  # fmt: skip
    before = old.by_name() if old else {}
    after = new.by_name()

    def show(p: LockedPackage | None) -> str | None:
        return None if p is None else f"{p.version} sha256:{p.sha256[:16]}"

    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a != b:
            changes.append((f"lock.{name}", show(a), show(b)))
    return changes


def _fetch(
    recipe: Recipe, packages: Sequence[LockedPackage], *, store: Store, fetcher: Fetcher | None
) -> None:
    """Make sure every locked wheel is in the store and matches (a warm store runs no process)."""
    from rocmforge.sources.requirements import resolve_requirements

    resolved = resolve_requirements(
        [p.pin for p in packages],
        python_version=concrete_version(recipe.toolchain.python),
        wheel_dir=store.sources_dir / layout.SOURCES_WHEELS,
        cache_dir=store.cache_dir,
        fetcher=fetcher,
    )
    want = {p.pin: p.sha256 for p in packages}
    for r in resolved:
        if want.get(f"{r.name}=={r.version}", r.sha256) != r.sha256:
            raise RequirementError(
                f"{lock_path(lock_owner(recipe))}: {r.name}=={r.version}: the fetched wheel "
                f"{r.wheel.name} has sha256:{r.sha256}, not the locked one; if it is the one you "
                f"want, run `rocmforge lock --upgrade {r.name} {recipe.file}`"
            )
