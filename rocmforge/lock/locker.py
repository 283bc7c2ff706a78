"""``lock``: pin a recipe's git ``ref`` to a full commit and its build requirements to digests.

The recipe is rewritten with tomlkit, so comments, key order and layout survive byte for byte
outside the values that changed: ``[source] rev`` (inserted right after ``ref`` if it was missing)
and ``[requirements] digests`` (an inline table ``{ "name==version" = "sha256:<hex>" }``).
``resolve`` (:func:`rocmforge.plan.resolve.check_digests`) refuses a fetched wheel whose digest does
not match the locked one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import Problem, RecipeError, SourceError, UsageError
from rocmforge.recipe.model import normal_pin
from rocmforge.store import layout
from rocmforge.toolchain.pythons import concrete_version
from rocmforge.util.fsutil import read_bounded, write_atomic

if TYPE_CHECKING:
    from rocmforge.recipe.model import Recipe
    from rocmforge.sources.requirements import Fetcher, ResolvedRequirement
    from rocmforge.store.store import Store

_SCP_LIKE = re.compile(r"^[^/@:]+@[^/:]+:")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class LockChange:
    """One value ``lock`` wrote: its dotted key path, the old value (None if new) and the new."""

    key: str
    old: str | None
    new: str | None
    #: where the new value comes from, when another file decides it (a tree file at a commit)
    why: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LockReport:
    """What ``lock`` did to one recipe file."""

    recipe: Path
    changes: tuple[LockChange, ...]
    written: bool
    #: What could not be checked here (a ROCm SDK without an index): provisional, not a change.
    notes: tuple[str, ...] = ()

    def pending(self) -> tuple[list[str], list[str]]:
        """The keys of the notes, split into those not locked yet (an SDK or input without its
        digests, a ref not pinned: what ``lock`` elsewhere would fill in) and those not checked
        here (a tree or a source file not at hand), each once, in note order."""
        unlocked: list[str] = []
        unchecked: list[str] = []
        for note in self.notes:
            if note.startswith("origin moved: "):  # information (sdkwheels.MOVED), not pending
                continue
            text = note.removeprefix("provisional: ").removeprefix("not checked: ")
            key = text.split(": ", 1)[0]
            into = unlocked if ("is not locked" in note or "not pinned yet" in note) else unchecked
            if key not in unlocked and key not in unchecked:
                into.append(key)
        return unlocked, unchecked

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {
            "recipe": str(self.recipe),
            "written": self.written,
            "changes": [
                {"key": c.key, "old": c.old, "new": c.new, "why": c.why} for c in self.changes
            ],
            "notes": list(self.notes),
        }


def resolve_ref(url: str, ref: str) -> str:
    """Return the full commit that ``ref`` (tag, branch or full ref name) names in ``url``.

    An annotated tag resolves to the commit it points at. A name that is both a tag and a
    branch is ambiguous and refused.
    """
    from rocmforge.sources.git import run_git

    if _COMMIT.fullmatch(ref.lower()):
        return ref.lower()
    out = run_git(["ls-remote", url], what=f"resolving {ref!r} in {url}").decode()
    refs: dict[str, str] = {}
    for line in out.splitlines():
        commit, _, name = line.partition("\t")
        refs[name.strip()] = commit.strip()
    candidates = []
    for full in (ref, f"refs/tags/{ref}", f"refs/heads/{ref}"):
        if f"{full}^{{}}" in refs:
            candidates.append((full, refs[f"{full}^{{}}"]))
        elif full in refs:
            candidates.append((full, refs[full]))
    found = dict(candidates)
    if not found:
        raise SourceError(f"{url}: no tag or branch named {ref!r}")
    if len(set(found.values())) > 1:
        raise SourceError(
            f"{url}: {ref!r} is ambiguous: "
            + ", ".join(f"{k} -> {v[:12]}" for k, v in found.items())
            + "; write the full ref name (refs/tags/... or refs/heads/...)"
        )
    return next(iter(found.values()))


def source_url(value: str, base: Path) -> str:
    """The git URL of ``[source] git`` as written in a recipe in ``base`` (a relative path is
    taken relative to the recipe's directory)."""
    if "://" in value or _SCP_LIKE.match(value):
        return value
    return os.path.normpath(os.path.join(base, value))


def insert_after(table: Any, after: str, key: str, value: Any) -> None:
    """Insert ``key`` right after ``after`` in a tomlkit table, keeping comments in place
    (appended when ``after`` is not in it).

    tomlkit has no public insert: its container's ``_insert_at``, which tomlkit's own ``append``
    uses, is (0.15 dropped the ``_insert_after`` lock used before, and ``rev`` went to the end).
    """
    container = getattr(table, "value", None)
    index = None
    for i, (k, _) in enumerate(getattr(container, "body", None) or ()):
        if k is not None and getattr(k, "key", None) == after:
            index = i
    if index is None or index + 1 >= len(container.body):  # type: ignore[union-attr]
        table[key] = value  # (_insert_at refuses the end)
    else:
        container._insert_at(index + 1, key, value)  # type: ignore[union-attr]


def write_recipe(path: Path, text: str) -> None:
    """Replace the recipe at ``path`` with ``text`` atomically, keeping its mode."""
    try:
        write_atomic(path, text.encode("utf-8"), mode=os.stat(path).st_mode & 0o7777)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write recipe: {exc.strerror or exc}") from exc


def lock_recipe(
    path: Path,
    *,
    store: Store,
    fetcher: Fetcher | None,
    write: bool = True,
    upgrade: Sequence[str] | None = None,
    inputs: bool = True,
) -> LockReport:
    """Resolve ``[source] ref`` and the build requirements of the recipe at ``path``.

    ``inputs=False`` leaves ``[inputs]`` given by url alone to :func:`lock_inputs`, called
    after the pins the tree decides are written (``lock`` does so: an AOTriton url that
    torch's tree replaces is never fetched).

    Values are written back only where they changed (nothing is written when nothing changed,
    or when ``write`` is False). ``[source] rev`` is written into the recipe itself. Build
    requirements given as specifiers (or ``build-system = true``) are resolved to their closure
    and written to the recipe's lock file (:mod:`rocmforge.recipe.lockfile`); a recipe of exact
    pins only, without a lock file, gets ``[requirements] digests`` in the recipe as before.
    ``upgrade`` (names, or ``["*"]`` for all) re-resolves those packages within the specifiers.
    The toolchain is never needed: the recipe declares its Python version.
    """
    from rocmforge.recipe.load import MAX_RECIPE_BYTES, parse_recipe_text
    from rocmforge.recipe.lockfile import has_requirements, lock_path

    path = Path(os.path.abspath(path))
    try:
        text = read_bounded(path, MAX_RECIPE_BYTES, what="a recipe").decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read recipe: {exc.strerror or exc}") from exc
    except ValueError as exc:  # not a regular file, too large (UnicodeDecodeError is below)
        if isinstance(exc, UnicodeDecodeError):
            bad = Problem(file=path, key="", line=1, message="not valid UTF-8")
            raise RecipeError([bad]) from exc
        raise RecipeError([Problem(file=path, key="", message=str(exc))]) from exc
    except UnicodeDecodeError as exc:
        raise RecipeError([Problem(file=path, key="", line=1, message="not valid UTF-8")]) from exc
    # Fast path (a no-op `lock --check` in ~0.1 s): no ref to resolve and a lock file to
    # keep: the recipe itself is not rewritten, so tomlkit is not needed.
    try:
        plain = parse_recipe_text(text, file=path, locked=False)
    except RecipeError:
        plain = None
    if (
        plain is not None
        and plain.source.ref is None
        and plain.requirements.needs_lock
        and plain.toolchain.kind != "rocm-sdk"
        and not (inputs and any(i.url and i.sha256 is None for i in plain.inputs.values()))
    ):
        from rocmforge.lock.lockreq import SourceNotHere, lock_requirements

        try:
            found = lock_requirements(
                plain, store=store, fetcher=fetcher, write=write, upgrade=upgrade or ()
            )
        except SourceNotHere as exc:
            return LockReport(recipe=path, changes=(), written=False, notes=(_not_here(exc),))
        fast_changes = [LockChange(key=k, old=o, new=n) for k, o, n in found]
        source_changes, source_notes = lock_source(plain, store=store, write=write)
        fast_changes += source_changes
        written = bool(fast_changes) and write
        return LockReport(recipe=path, changes=tuple(fast_changes), written=written,
                          notes=tuple(source_notes))  # fmt: skip
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    from rocmforge.sources.requirements import resolve_requirements

    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise RecipeError([Problem(file=path, key="", message=f"invalid TOML: {exc}")]) from exc
    changes: list[LockChange] = []
    notes: list[str] = []

    source = doc.get("source")
    if isinstance(source, dict) and isinstance(source.get("ref"), str) and "git" in source:
        ref = str(source["ref"])
        commit = resolve_ref(source_url(str(source["git"]), path.parent), ref)
        old = source.get("rev")
        if old is None:
            insert_after(source, "ref", "rev", commit)
            changes.append(LockChange(key="source.rev", old=None, new=commit))
        elif str(old).lower() != commit:
            source["rev"] = commit
            changes.append(LockChange(key="source.rev", old=str(old), new=commit))

    # Validate (and follow extends) without this file's digests: stale ones are replaced below.
    probe = tomlkit.parse(tomlkit.dumps(doc))
    reqs_table = probe.get("requirements")
    if isinstance(reqs_table, dict):
        reqs_table.pop("digests", None)
    try:
        recipe = parse_recipe_text(tomlkit.dumps(probe), file=path, locked=False)
    except RecipeError as exc:
        # A base recipe (no [package] or [source] of its own, made to be extended) is locked
        # on its own: only its requirements and toolchain matter here.
        if not exc.problems or any(p.key not in ("package", "source") for p in exc.problems):
            raise
        for p in exc.problems:
            probe[p.key] = {"name": "base", "version": "0"} if p.key == "package" else {"path": "."}
        recipe = parse_recipe_text(tomlkit.dumps(probe), file=path, locked=False)
        if recipe.requirements.build_file is not None and any(
            p.key == "source" for p in exc.problems
        ):  # its build-file is read from the source of a recipe that extends it
            notes.append(
                f"requirements.build-file: {recipe.requirements.build_file} is read from the "
                "source of a recipe that extends this one: lock that recipe"
            )
            return LockReport(recipe=path, changes=tuple(changes), written=False,
                              notes=tuple(notes))  # fmt: skip
    sdk_names = recipe.toolchain.kind == "rocm-sdk"
    req_upgrade = [u for u in upgrade or () if not (sdk_names and _is_sdk_name(u))]
    own_lock = lock_path(path)
    if (
        recipe.requirements.needs_lock
        or (own_lock.is_file() and has_requirements(own_lock))  # not a [source]-only lock
        or req_upgrade
    ):
        from rocmforge.lock.lockreq import SourceNotHere, lock_requirements

        try:
            changes.extend(
                LockChange(key=k, old=o, new=n)
                for k, o, n in lock_requirements(
                    recipe, store=store, fetcher=fetcher, write=write, upgrade=req_upgrade
                )
            )
        except SourceNotHere as exc:
            notes.append(_not_here(exc))
    elif recipe.requirements.build:
        resolved = resolve_requirements(
            recipe.requirements.build,
            python_version=concrete_version(recipe.toolchain.python),
            wheel_dir=store.sources_dir / layout.SOURCES_WHEELS,
            cache_dir=store.cache_dir,
            fetcher=fetcher,
        )
        from rocmforge.lock.lockreq import require_any_python

        require_any_python(recipe.file, recipe.toolchain.python, resolved)
        spelling = {normal_pin(p): p for p in recipe.requirements.build}
        changes.extend(_lock_digests(doc, resolved, spelling))

    if recipe.toolchain.kind == "rocm-sdk":
        from rocmforge.lock.sdkwheels import lock_origins, lock_sdk
        from rocmforge.toolchain.rocmsdk import index_args

        sdk_changes, table, module, notes_sdk = lock_sdk(
            recipe, store=store, write=write, upgrade=upgrade or ()
        )
        changes.extend(LockChange(key=k, old=o, new=n) for k, o, n in sdk_changes)
        notes.extend(notes_sdk)
        if table is not None:
            _write_table(doc, "toolchain", "wheels", table)
        if module is not None:
            _write_table(
                doc, "toolchain", "module", module,
                "written by `rocmforge lock`: the rocm sdist, source of the rocm_sdk module only",
            )  # fmt: skip
        if write and index_args(recipe.toolchain):
            more, origins = lock_origins(recipe, table, module, store=store)
            changes.extend(LockChange(key=k, old=o, new=n) for k, o, n in more)
            if origins is not None:
                _write_table(
                    doc, "toolchain", "origins", origins,
                    "written by `rocmforge lock`: where each pin was found (provenance)",
                )  # fmt: skip

    if inputs:
        input_changes, input_notes = _lock_inputs(doc, recipe, store=store, write=write)
        changes.extend(input_changes)
        notes.extend(input_notes)
    source_changes, source_notes = lock_source(recipe, store=store, write=write)
    changes.extend(source_changes)
    notes.extend(source_notes)

    written = False
    if changes and write:
        write_recipe(path, tomlkit.dumps(doc))
        written = True
    return LockReport(recipe=path, changes=tuple(changes), written=written, notes=tuple(notes))


def lock_source(recipe: Recipe, *, store: Store, write: bool) -> tuple[list[LockChange], list[str]]:
    """Record the resolution of ``recipe``'s git source (its ``rev``) in its lock file's
    ``[source]``: the commit time and every submodule's commit, what the input hash needs, so
    a teammate hashes (and substitutes) without cloning (:mod:`rocmforge.recipe.lockfile`).

    A record for this commit is kept as it is (nothing fetched); ``write=False`` reports a
    missing or stale one without fetching. Returns the changes and notes (a remote not
    reachable here is a note, not an error).
    """
    from rocmforge.recipe.lockfile import LockedSource, lock_path, read_source_lock, with_source
    from rocmforge.sources.git import resolve_tree

    spec = recipe.source
    if spec.kind != "git" or spec.rev is None or not spec.git:
        return [], []
    path = lock_path(recipe.file)
    current = read_source_lock(path)
    rev = spec.rev.lower()
    if current is not None and current.commit == rev and current.submodules == spec.submodules:
        return [], []
    old = None if current is None else current.commit
    if not write and current is None:  # locked before the record existed, or not yet
        return [], [
            f"not locked yet: lock.source ({rev[:12]}: the source's resolution is not "
            "recorded; `rocmforge lock` writes it where the repository is reachable)"
        ]
    if not write:
        return [LockChange(key="lock.source", old=old, new=f"{rev} (re-lock: recorded for "
                           "another commit)")], []  # fmt: skip
    try:
        epoch, modules = resolve_tree(
            spec.git, rev, store.sources_dir, submodules=spec.submodules,
            allow_local_submodules=spec.allow_local_submodules,
        )  # fmt: skip
    except SourceError as exc:
        return [], [f"not locked yet: lock.source ({exc})"]
    new = LockedSource(commit=rev, submodules=spec.submodules, epoch=epoch, modules=modules)
    try:
        mode = os.stat(path).st_mode & 0o7777 if path.exists() else 0o644
        write_atomic(path, with_source(path, recipe.file.name, new).encode(), mode=mode)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write lock file: {exc.strerror or exc}") from exc
    what = f"{rev[:12]}, {len(modules)} submodule(s), epoch {epoch}"
    return [LockChange(key="lock.source", old=old, new=what)], []


def _not_here(exc: Exception) -> str:
    """The provisional note of a ``lock --check`` that cannot read the source's requirements."""
    return (
        f"provisional: requirements.build-file: {exc} is not fetched here, so the lock's "
        "source-requires could not be compared; `rocmforge lock` reads it where the source is "
        "reachable"
    )


def lock_inputs(path: Path, *, store: Store, write: bool) -> LockReport | None:
    """Fill the sha256 of the recipe at ``path``'s ``[inputs]`` given by url alone (see
    :func:`_lock_inputs`); None when it has none to fill or cannot be loaded (lock_recipe has
    said why)."""
    import tomlkit

    from rocmforge.recipe.load import parse_recipe_text

    path = Path(os.path.abspath(path))
    text = path.read_text(encoding="utf-8")
    try:
        recipe = parse_recipe_text(text, file=path, locked=False)
    except RecipeError:
        return None
    if not any(i.url and i.sha256 is None for i in recipe.inputs.values()):
        return None
    doc = tomlkit.parse(text)
    changes, notes = _lock_inputs(doc, recipe, store=store, write=write)
    written = bool(changes) and write
    if written:
        write_recipe(path, tomlkit.dumps(doc))
    return LockReport(recipe=path, changes=tuple(changes), written=written, notes=tuple(notes))


def _lock_inputs(
    doc: Any, recipe: Any, *, store: Store, write: bool
) -> tuple[list[LockChange], list[str]]:
    """Fill the sha256 of each ``[inputs.NAME]`` given by ``url`` alone (like
    ``nix-prefetch-url``): fetch the archive (kept in the store's archive cache, so realize does
    not fetch it again) and write its sha256 right after ``url``.

    ``lock --check`` (``write=False``) fetches nothing: an unlocked input is a provisional note,
    not a change, as an SDK that is not locked at all is (realize stops on it). An input a base
    recipe declares is noted: that file is the one to lock.
    """
    from rocmforge.sources.inputs import UrllibFetcher, prefetch_input

    changes: list[LockChange] = []
    notes: list[str] = []
    tables = doc.get("inputs")
    for name in sorted(recipe.inputs):
        spec = recipe.inputs[name]
        if spec.url is None or spec.sha256 is not None:
            continue
        table = tables.get(name) if isinstance(tables, dict) else None
        if not isinstance(table, dict) or "url" not in table:
            notes.append(f"provisional: inputs.{name}: {spec.url} is not locked and is declared "
                         "in a recipe this one extends: lock that file")  # fmt: skip
        elif not write:
            notes.append(f"provisional: inputs.{name}: {spec.url} is not locked (no sha256); "
                         "run `rocmforge lock` where that URL is reachable")  # fmt: skip
        else:
            sha = prefetch_input(spec, cache=store.sources_dir, fetcher=UrllibFetcher())
            insert_after(table, "url", "sha256", sha)
            changes.append(LockChange(key=f"inputs.{name}.sha256", old=None, new=sha))
    return changes, notes


def _is_sdk_name(name: str) -> bool:
    """An SDK wheel's name, or ``rocm`` (the sdist locked as the rocm_sdk module's source)."""
    norm = re.sub(r"[-_.]+", "-", name).lower()
    return norm == "rocm" or norm.startswith("rocm-sdk-")


def _write_table(
    doc: Any,
    table_name: str,
    key: str,
    values: dict[str, str],
    comment: str = "written by `rocmforge lock`: the SDK wheels, by digest",
) -> None:
    """Replace ``[table_name.key]`` with ``values``, one ``"pin" = "digest"`` line each (a
    sub-table: an inline table of five SDK wheels would be one very long line)."""
    import tomlkit

    table = doc.get(table_name)
    if table is None:
        table = tomlkit.table()
        doc[table_name] = table
    sub = tomlkit.table()
    sub.add(tomlkit.comment(comment))
    for k, v in values.items():
        sub[k] = v
    sub.add(tomlkit.nl())
    table[key] = sub


def _lock_digests(
    doc: Any, resolved: Sequence[ResolvedRequirement], spelling: dict[str | None, str]
) -> list[LockChange]:
    """Write ``[requirements] digests`` keyed by each pin as the recipe spells it."""
    import tomlkit

    changes: list[LockChange] = []
    table = doc.get("requirements")
    if table is None:
        table = tomlkit.table()
        doc["requirements"] = table
    digests = table.get("digests")
    if digests is None:
        digests = tomlkit.inline_table()
        anchor = "build" if "build" in table else None
        if anchor:
            insert_after(table, anchor, "digests", digests)
        else:
            table["digests"] = digests
        digests = table["digests"]
    wanted = {f"{r.name}=={r.version}": r for r in resolved}
    existing = {normal_pin(str(k)): str(k) for k in list(digests.keys())}
    for norm, key in existing.items():
        if norm not in wanted:
            stale = str(digests[key])
            del digests[key]
            changes.append(LockChange(key=f"requirements.digests.{key}", old=stale, new=None))
    for pin, req in wanted.items():
        key = existing.get(pin, spelling.get(pin, pin))
        old = str(digests[key]) if key in digests else None
        if old is not None:
            algo, _, value = old.partition(":")
            current = req.blake3 if algo == "blake3" else req.sha256
            if value == current:
                continue
        new = f"sha256:{req.sha256}"
        digests[key] = new
        changes.append(LockChange(key=f"requirements.digests.{key}", old=old, new=new))
    return changes
