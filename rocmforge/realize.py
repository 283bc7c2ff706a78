"""``realize`` and ``plan``: the pipeline from a loaded recipe to a wheel in the store.

The cache-hit path (resolve from stat caches, one directory lookup) imports nothing heavy: the
build machinery (sandbox, venv, zstandard, filelock) is imported only on a miss.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.recipe.lints import Finding, LintFacts, describe, preflight
from rocmforge.recipe.model import Recipe
from rocmforge.resolve import Resolved, resolve
from rocmforge.sources.requirements import Fetcher, check_wheels, resolve_requirements
from rocmforge.store import layout
from rocmforge.store.entry import Entry
from rocmforge.store.roots import TempRoots
from rocmforge.store.store import Store
from rocmforge.toolchain.machine import lint_facts
from rocmforge.util.fsutil import symlink_atomic
from rocmforge.util.progress import NullReporter, Reporter

if TYPE_CHECKING:
    from rocmforge.explain import Nearest
    from rocmforge.sandbox import Runner


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanReport:
    """What ``plan`` found: the derivation, its hash and whether the store has it."""

    recipe: Path
    hash: str
    name: str
    version: str
    cached: bool
    path: Path | None
    derivation: Mapping[str, Any]
    lints: tuple[Finding, ...] = ()
    nearest: Nearest | None = None
    provisional: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {
            "provisional": list(self.provisional),
            "recipe": str(self.recipe),
            "hash": self.hash,
            "name": self.name,
            "version": self.version,
            "cached": self.cached,
            "path": str(self.path) if self.path else None,
            "derivation": dict(self.derivation),
            "lints": [f.to_json() for f in self.lints],
            "nearest": self.nearest.to_json() if self.nearest else None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RealizeReport:
    """The outcome of one realize: where the wheels are and whether a build ran."""

    recipe: Path
    hash: str
    name: str
    version: str
    path: Path
    wheels: tuple[Path, ...]
    cached: bool
    sandbox: str | None = None
    seconds: float = 0.0
    link: Path | None = None
    warnings: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {
            "recipe": str(self.recipe),
            "hash": self.hash,
            "name": self.name,
            "version": self.version,
            "path": str(self.path),
            "wheels": [str(w) for w in self.wheels],
            "cached": self.cached,
            "sandbox": self.sandbox,
            "seconds": round(self.seconds, 3),
            "link": str(self.link) if self.link else None,
        }


def lint(recipe: Recipe, facts: LintFacts | None = None) -> tuple[Finding, ...]:
    """Lint ``recipe`` before anything is fetched; return every finding.

    The machine is probed for the facts (:func:`~rocmforge.toolchain.machine.lint_facts`) unless
    ``facts`` are given. Error lints the recipe does not acknowledge raise
    :class:`~rocmforge.recipe.lints.LintError`.
    """
    return preflight(recipe, lint_facts(recipe) if facts is None else facts)


def plan(
    recipe: Recipe, *, store: Store, fetcher: Fetcher | None, facts: LintFacts | None = None
) -> PlanReport:
    """Lint and resolve ``recipe`` and report its derivation and hash, without building.

    Error lints raise :class:`~rocmforge.recipe.lints.LintError` before anything is fetched.
    """
    findings = lint(recipe, facts)
    with store.shared_lock():  # gc must not remove a source cache resolve is filling
        r = resolve(recipe, store=store, fetcher=fetcher, provisional=True)
        drv = r.derivation
        entry = store.lookup(drv.hash, drv.name, drv.version)
    return PlanReport(
        provisional=r.provisional,
        recipe=recipe.file,
        hash=drv.hash,
        name=drv.name,
        version=drv.version,
        cached=entry is not None,
        path=entry.path if entry else None,
        derivation=drv.data,
        lints=findings,
        nearest=None if entry else _nearest(store, drv.data),
    )


def _nearest(store: Store, derivation: Mapping[str, Any]) -> Nearest | None:
    """Return the cached build of the same package nearest to ``derivation`` (None if none)."""
    from rocmforge.errors import RocmforgeError
    from rocmforge.explain import nearest_cached

    try:
        return nearest_cached(store, derivation)
    except RocmforgeError:
        return None  # a diagnosis must never stop a plan or a build


def _explain_miss(store: Store, derivation: Mapping[str, Any], reporter: Reporter) -> None:
    """On a miss, tell the reporter which cached build is nearest and which keys differ."""
    near = _nearest(store, derivation)
    if near is not None:
        reporter.warning(near.message())


def make_link(link: Path, target: Path) -> Path:
    """Point the symlink ``link`` at ``target`` atomically (replacing an older link)."""
    symlink_atomic(os.fspath(target.resolve()), link)
    return link


def _remember(store: Store, r: Resolved, entry: Entry) -> None:
    """Record this result in the realize memo so the next identical realize is instant.

    Paths are kept relative to the store root with each wheel's size and mtime as published;
    entries published before mtimes were recorded are not memoized.
    """
    from rocmforge import memo

    sigs = [[w.size, w.mtime_ns] for w in entry.meta.wheels]
    if any(None in sig for sig in sigs):
        return
    recipe = r.recipe
    memo.record(
        str(store.root),
        str(recipe.file),
        files=[
            *map(str, recipe.extends_chain),
            *map(str, recipe.source.patches),
            *r.toolchain.guards,
            *(str(q.wheel) for q in r.requirements),
            *(str(s.path) for s in recipe.inputs.values() if s.path and not s.path.is_dir()),
        ],
        trees=[
            *([str(recipe.source.path)] if recipe.source.kind == "path" else []),
            *(str(i.host) for i in r.inputs if i.kind == "tree"),
        ],
        result={
            "hash": r.derivation.hash,
            "name": r.derivation.name,
            "version": r.derivation.version,
            "path": os.path.relpath(entry.path, store.root),
            "wheels": [os.path.relpath(w, store.root) for w in entry.wheels],
            "sigs": sigs,
        },
    )


def _finish(
    store: Store,
    r: Resolved,
    entry: Entry,
    roots: TempRoots,
    link: Path | None,
    *,
    started: float,
    sandbox: str | None,
) -> RealizeReport:
    """Protect, link, remember and report ``entry``; call under the shared lock."""
    from rocmforge import memo
    from rocmforge.store.roots import register_link

    roots.add(entry.hash)
    roots.set_busy(False)
    made = None
    if link is not None:
        made = make_link(link, entry.path)
        register_link(store, made)
    _remember(store, r, entry)
    memo.touch_used(str(store.root), entry.hash)
    drv = r.derivation
    return RealizeReport(
        recipe=r.recipe.file,
        hash=drv.hash,
        name=drv.name,
        version=drv.version,
        path=entry.path,
        wheels=entry.wheels,
        cached=sandbox is None,
        sandbox=sandbox,
        seconds=time.monotonic() - started,
        link=made,
    )


def realize(
    recipe: Recipe,
    *,
    store: Store,
    fetcher: Fetcher,
    runner_factory: Callable[[], Runner],
    reporter: Reporter | None = None,
    keep_failed: bool = False,
    link: Path | None = None,
    lints: tuple[Finding, ...] | None = None,
    temp_roots: TempRoots | None = None,
    verify: bool = False,
) -> RealizeReport:
    """Return the store entry for ``recipe``, building it in the sandbox on a miss.

    ``lints`` are the findings of :func:`lint` when the caller already ran it (the CLI lints every
    recipe before building any); without them, the recipe is linted here. Either way the
    unacknowledged warnings are reported once, here.
    The entry is protected from gc until ``temp_roots`` is closed (the CLI keeps one open until
    it exits); without one, only until this call returns. The store's shared lock is held only
    around the lookup and the return, never across a build: while resolving and building, this
    process's temp roots mark the hash as rooted and the source caches as busy instead.
    A cache hit checks the wheels' size and mtime against publish (``verify``: re-hashes them);
    a damaged entry is quarantined and rebuilt (:meth:`Store.lookup`).
    """
    reporter = reporter or NullReporter()
    if lints is None:
        lints = lint(recipe)  # error lints stop here, before any fetch
    for finding in lints:
        if finding.allowed is None:
            reporter.warning(describe(recipe, finding))
    started = time.monotonic()
    roots = temp_roots if temp_roots is not None else TempRoots(store)
    try:
        with store.shared_lock():
            roots.set_busy(True)  # gc leaves source caches alone while we resolve and build
        r = resolve(recipe, store=store, fetcher=fetcher)
        drv = r.derivation
        with store.shared_lock():
            entry = store.lookup(drv.hash, drv.name, drv.version, verify=verify)
            if entry is not None:
                return _finish(store, r, entry, roots, link, started=started, sandbox=None)
            if not store.writable:
                from rocmforge.errors import StoreError

                raise StoreError(
                    f"{drv.name} {drv.version} ({drv.hash}) is not in the store and the store "
                    f"{store.root} is read-only: it can serve cache hits only (build it into a "
                    "writable store)"
                )
            roots.add(drv.hash)  # what we are about to build and publish
        sandbox = None
        with store.build_lock(drv.hash):
            entry = store.lookup(drv.hash, drv.name, drv.version)
            if entry is None:
                from rocmforge.build import build

                store.clean_leftovers()
                _explain_miss(store, drv.data, reporter)
                runner = runner_factory()
                warning = getattr(runner, "warning", None)
                if warning:
                    reporter.warning(warning)
                check_reqs = resolve_requirements(
                    recipe.check.requirements,
                    python_version=r.toolchain.python_version,
                    wheel_dir=store.sources_dir / layout.SOURCES_WHEELS,
                    cache_dir=store.cache_dir,
                    fetcher=fetcher,
                )
                check_wheels(
                    (*r.requirements, *check_reqs),
                    python_version=r.toolchain.python_version,
                    fetcher=fetcher,
                    quarantine=store.quarantine,
                )
                outcome = build(
                    r,
                    store=store,
                    runner=runner,
                    reporter=reporter,
                    keep_failed=keep_failed,
                    check_requirements=tuple(q.wheel for q in check_reqs),
                )
                entry, sandbox = outcome.entry, outcome.sandbox
        with store.shared_lock():
            return _finish(store, r, entry, roots, link, started=started, sandbox=sandbox)
    except BaseException:
        if temp_roots is not None:
            with store.shared_lock():
                roots.set_busy(False)
        raise
    finally:
        if temp_roots is None:
            roots.close()
