"""``realize`` and ``plan``: the pipeline from a loaded recipe to a wheel in the store.

The cache-hit path (resolve from stat caches, one directory lookup) imports nothing heavy: the
build machinery (sandbox, venv, zstandard, filelock) is imported only on a miss.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import UsageError
from rocmforge.pipeline.options import RealizeOptions
from rocmforge.plan.derivation import Dependency
from rocmforge.plan.resolve import Resolved, resolve
from rocmforge.recipe.lints import Finding, LintFacts, describe, preflight
from rocmforge.recipe.model import Recipe
from rocmforge.sources.requirements import Fetcher, check_wheels, resolve_requirements
from rocmforge.store import layout
from rocmforge.store.entry import Entry
from rocmforge.store.roots import TempRoots
from rocmforge.store.store import Store
from rocmforge.toolchain.machine import lint_facts
from rocmforge.util.fsutil import symlink_atomic
from rocmforge.util.progress import NullReporter, Reporter

if TYPE_CHECKING:
    from rocmforge.build.sandbox import Runner
    from rocmforge.trust.explain import Nearest

#: The options of a plain ``rocmforge realize RECIPE``.
DEFAULT_OPTIONS = RealizeOptions()


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
    #: The cache URL the entry was substituted from on this realize (None: built or cached).
    substituted: str | None = None

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
            "substituted": self.substituted,
        }


def lint(recipe: Recipe, facts: LintFacts | None = None) -> tuple[Finding, ...]:
    """Lint ``recipe`` before anything is fetched; return every finding.

    The machine is probed for the facts (:func:`~rocmforge.toolchain.machine.lint_facts`) unless
    ``facts`` are given. Error lints the recipe does not acknowledge raise
    :class:`~rocmforge.recipe.lints.LintError`.
    """
    return preflight(recipe, lint_facts(recipe) if facts is None else facts)


def check_locked(recipe: Recipe) -> None:
    """Raise the error realize would stop this recipe with because something is not locked: a
    ``url`` input without sha256, or ROCm SDK wheels without digests. ``realize`` calls it for
    every recipe of a graph before building any, so a stack stops before its first build rather
    than after the builds of the nodes before it."""
    from rocmforge.errors import SourceError
    from rocmforge.lock.sdkwheels import unlocked_sdk
    from rocmforge.sources.inputs import unlocked_message

    for name in sorted(recipe.inputs):
        spec = recipe.inputs[name]
        if spec.url is not None and spec.sha256 is None:
            raise SourceError(unlocked_message(spec, recipe.file))
    error = unlocked_sdk(recipe)
    if error is not None:
        raise error


def plan(
    recipe: Recipe,
    *,
    store: Store,
    fetcher: Fetcher | None,
    facts: LintFacts | None = None,
    dependencies: Sequence[Dependency] = (),
) -> PlanReport:
    """Lint and resolve ``recipe`` and report its derivation and hash, without building.

    ``dependencies`` are its planned dependencies (:func:`rocmforge.plan.graph.plan_dependencies`).

    Error lints raise :class:`~rocmforge.recipe.lints.LintError` before anything is fetched.
    """
    findings = lint(recipe, facts)
    with store.shared_lock():  # gc must not remove a source cache resolve is filling
        r = resolve(
            recipe, store=store, fetcher=fetcher, provisional=True, dependencies=dependencies
        )
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
    from rocmforge.trust.explain import nearest_cached

    try:
        return nearest_cached(store, derivation)
    except RocmforgeError:
        return None  # a diagnosis must never stop a plan or a build


def _explain_miss(
    store: Store, derivation: Mapping[str, Any], reporter: Reporter, recipe: Path
) -> None:
    """On a miss, tell the reporter which cached build is nearest and what differs, by kind
    (:func:`rocmforge.plan.summary.miss_line`), with the ``explain`` command for every key."""
    near = _nearest(store, derivation)
    if near is not None:
        from rocmforge.plan.summary import miss_line
        from rocmforge.util.shownpath import shown_path

        explain = f"rocmforge explain {near.hash[:12]} {shown_path(recipe)}"
        reporter.warning(miss_line(near.name, near.version, near.hash, near.differences, explain))


_ENTRY_NAME = re.compile(r"^[0-9a-f]{32}-.+")


def _points_into_a_store(target: str, base: Path) -> bool:
    """True if the symlink text ``target`` names a store entry (``.../entries/<hash>-...``)."""
    path = Path(os.path.normpath(os.path.join(base, target)))
    parts = path.parts
    return any(
        parts[i] == "entries" and _ENTRY_NAME.match(parts[i + 1]) is not None
        for i in range(len(parts) - 1)
    )


def check_link(link: Path) -> None:
    """Refuse an ``-o LINK`` that would replace anything but a link of ours; call before building.

    ``LINK`` may be missing (its directory must exist) or a symlink pointing into a store entry
    (any store, even a deleted entry). A regular file, a directory or a symlink elsewhere is
    never replaced. Raises :class:`~rocmforge.errors.UsageError`.
    """
    parent = Path(os.path.abspath(link)).parent
    if not os.path.isdir(parent):
        raise UsageError(f"-o {link}: directory {parent} does not exist")
    try:
        st = os.lstat(link)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"-o {link}: cannot inspect it: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"-o {link} is a directory; name a link inside it, e.g. {link}/result")
    if not stat.S_ISLNK(st.st_mode):
        raise UsageError(f"-o {link} exists and is not a symlink; refusing to replace it")
    old = os.readlink(link)
    if not _points_into_a_store(old, parent):
        raise UsageError(
            f"-o {link} is a symlink to {old}, not into a rocmforge store; refusing to replace it"
        )


def make_link(link: Path, target: Path) -> Path:
    """Point the symlink ``link`` at ``target`` atomically, after :func:`check_link`.

    Replaces only a missing path or an older link into a store; never leaves a temp link behind.
    """
    check_link(link)
    try:
        symlink_atomic(os.fspath(target.resolve()), link)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise UsageError(f"-o {link}: cannot make the link: {exc.strerror or exc}") from exc
    return link


def satisfies(built: object, wanted: str) -> bool:
    """Whether an entry built at sandbox level ``built`` may answer a request for ``wanted``.

    A level satisfies itself and every weaker one. An unknown or missing level (an old entry,
    the removed ``unshare``) ranks below ``none`` and satisfies no request.
    """
    if built == wanted:
        return True
    from rocmforge.build.sandbox import STRENGTH

    strongest = max(STRENGTH.values())
    return isinstance(built, str) and STRENGTH.get(built, 0) >= STRENGTH.get(wanted, strongest)


def _weaker_note(entry: Entry, wanted: str) -> str:
    built = entry.meta.sandbox
    return (
        f"the cached build {entry.path} was made with sandbox {built!r}, weaker than the "
        f"requested {wanted!r}: not using it; rebuilding, the new build replaces it"
    )


def _remember(store: Store, r: Resolved, entry: Entry, since_ns: int) -> None:
    """Record this result in the realize memo so the next identical realize is instant.

    Paths are kept relative to the store root with each wheel's size and mtime as published;
    entries published before mtimes were recorded are not memoized, nor is a result whose
    guarded files changed after ``since_ns`` (the start of this realize, before hashing).
    """
    from rocmforge.pipeline import memo
    from rocmforge.recipe.lockfile import lock_candidates

    sigs = [[w.size, w.mtime_ns] for w in entry.meta.wheels]
    if any(None in sig for sig in sigs):
        return
    recipe = r.recipe
    # The code is an input too: an upgrade may hash differently (BUILDER, identities), so every
    # rocmforge module this run loaded is guarded (a few dozen stats on a hit).
    code = [
        str(m.__file__)
        for name, m in list(sys.modules.items())
        if (name == "rocmforge" or name.startswith("rocmforge.")) and getattr(m, "__file__", None)
    ]
    memo.record(
        str(store.root),
        str(recipe.file),
        files=[
            *code,
            *map(str, recipe.extends_chain),
            *map(str, lock_candidates(recipe)),  # a lock file appearing or changing counts
            *map(str, recipe.source.patches),
            *r.toolchain.guards,
            *(str(q.wheel) for q in r.requirements),
            *(str(s.path) for s in recipe.inputs.values() if s.path and not s.path.is_dir()),
        ],
        trees=[
            *([str(recipe.source.path)] if recipe.source.kind == "path" else []),
            *(str(i.host) for i in r.inputs if i.kind == "tree"),
        ],
        depends=[str(d.recipe) for d in r.dependencies],
        since_ns=since_ns,
        result={
            "hash": r.derivation.hash,
            "name": r.derivation.name,
            "version": r.derivation.version,
            "path": os.path.relpath(entry.path, store.root),
            "wheels": [os.path.relpath(w, store.root) for w in entry.wheels],
            "sigs": sigs,
            "sandbox": entry.meta.sandbox,
        },
    )


def _ago(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600 else (
        f"{s // 3600}h{s // 60 % 60:02d}m")  # fmt: skip


def waiting_reporter(store: Store, drv: Any, reporter: Reporter) -> Callable[[], None]:
    """Return the callback a realize runs while another process holds the build lock of
    ``drv``: it says whose build it waits for (pid, started how long ago) and passes that
    build's last log line on as progress."""
    from rocmforge.store.running import running_build

    said: list[object] = [None]
    last: list[str] = [""]

    def on_busy() -> None:
        other = running_build(store, drv.hash)
        who = (other.pid, other.started) if other is not None else None
        if who != said[0]:
            said[0] = who
            what = f"the build of {drv.name} {drv.version} ({drv.hash[:12]})"
            if other is None:
                reporter.phase(f"waiting for {what} by another process")
            else:
                reporter.phase(
                    f"waiting for {what} by pid {other.pid} "
                    f"(started {_ago(time.time() - other.started)} ago)"
                )
        if other is not None and other.last_line and other.last_line != last[0]:
            last[0] = other.last_line
            reporter.log_line(f"[pid {other.pid}, log {other.log_bytes} bytes] {other.last_line}")

    return on_busy


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How a realize got its entry: looked up (both None), substituted from ``substituted``
    (a cache URL) or built under ``sandbox``."""

    entry: Entry
    sandbox: str | None = None
    substituted: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Run:
    """What every step of one realize shares: the resolved recipe, the store and the roots
    protecting it, and when the realize began."""

    r: Resolved
    store: Store
    roots: TempRoots
    reporter: Reporter
    options: RealizeOptions
    started: float
    since_ns: int


def lookup(run: _Run) -> Entry | None:
    """Step 1: the store's entry of the derivation if it may answer (built at a level the
    options accept); on a miss, protect the hash about to be built. Call under the shared lock.

    Raises :class:`~rocmforge.errors.StoreError` on a miss in a read-only store.
    """
    store, drv = run.store, run.r.derivation
    entry = store.lookup(drv.hash, drv.name, drv.version, verify=run.options.verify)
    if entry is not None and satisfies(entry.meta.sandbox, run.options.level):
        return entry
    if not store.writable:
        from rocmforge.errors import StoreError

        raise StoreError(
            f"{drv.name} {drv.version} ({drv.hash}) is not in the store and the store "
            f"{store.root} is read-only: it can serve cache hits only (build it into a "
            "writable store)"
        )
    run.roots.add(drv.hash)  # what we are about to build and publish
    return None


def substitution(run: _Run) -> Outcome | None:
    """Step 2: the entry from the first binary cache of the options that has it, or None (or
    :class:`~rocmforge.errors.SubstituteError` with ``require_substitute``). Call under the
    build lock; does nothing when no cache is asked."""
    options = run.options
    if not (options.caches or options.require_substitute):
        return None
    from rocmforge.cache.substitute import Wanted, substitute

    store, roots, drv = run.store, run.roots, run.r.derivation
    want = Wanted(drv.hash, drv.name, drv.version)

    def protect(hash: str) -> None:  # a dependency substituted with it
        with store.shared_lock():
            roots.add(hash)

    entry = substitute(
        store,
        options.caches,
        want,
        run.reporter,
        require=options.require_substitute,
        trusted=options.trusted,
        protect=protect,
    )
    if entry is None:
        return None
    origin = entry.meta.origin
    return Outcome(entry=entry, substituted=str(origin["cache"]) if origin is not None else None)


def build_step(
    run: _Run,
    *,
    fetcher: Fetcher,
    runner_factory: Callable[[], Runner],
    replacing: Entry | None = None,
) -> Outcome:
    """Step 3: build the derivation in the sandbox and publish it into the store (``replacing``
    the entry built under a weaker sandbox, if any). Call under the build lock."""
    from rocmforge.build.builder import build, closure_wheels

    store, r, reporter, options = run.store, run.r, run.reporter, run.options
    wanted = options.level
    store.clean_leftovers()
    if replacing is not None:
        reporter.warning(_weaker_note(replacing, wanted))
    else:
        _explain_miss(store, r.derivation.data, reporter, r.recipe.file)
    runner = runner_factory()
    if not satisfies(runner.level, wanted):
        from rocmforge.errors import SandboxError

        raise SandboxError(
            f"sandbox level {runner.level!r} is weaker than the requested {wanted!r}"
        )
    warning = getattr(runner, "warning", None)
    if warning:
        reporter.warning(warning)
    check_reqs = resolve_requirements(
        r.recipe.check.requirements,
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
        keep_failed=options.keep_failed,
        check_requirements=tuple(closure_wheels([q.wheel for q in check_reqs], r)),
        replace=replacing is not None,
        compiler_cache=options.compiler_cache,
        stall_after=options.stall_after,
        stall_timeout=options.stall_timeout,
    )
    return Outcome(entry=outcome.entry, sandbox=outcome.sandbox)


def publish(run: _Run, got: Outcome, link: Path | None) -> RealizeReport:
    """Step 4: protect the entry, make the result link, remember the result in the memo and
    report it; call under the shared lock."""
    from rocmforge.pipeline import memo
    from rocmforge.store.roots import register_link

    store, roots, entry = run.store, run.roots, got.entry
    roots.add(entry.hash)
    roots.set_busy(False)
    made = None
    if link is not None:
        made = make_link(link, entry.path)
        register_link(store, made)
    _remember(store, run.r, entry, run.since_ns)
    memo.touch_used(str(store.root), entry.hash)
    drv = run.r.derivation
    return RealizeReport(
        recipe=run.r.recipe.file,
        hash=drv.hash,
        name=drv.name,
        version=drv.version,
        path=entry.path,
        wheels=entry.wheels,
        cached=got.sandbox is None and got.substituted is None,
        sandbox=got.sandbox,
        substituted=got.substituted,
        seconds=time.monotonic() - run.started,
        link=made,
    )


def realize(
    recipe: Recipe,
    *,
    store: Store,
    fetcher: Fetcher,
    runner_factory: Callable[[], Runner],
    reporter: Reporter | None = None,
    options: RealizeOptions = DEFAULT_OPTIONS,
    link: Path | None = None,
    lints: tuple[Finding, ...] | None = None,
    temp_roots: TempRoots | None = None,
    dependencies: Sequence[Dependency] = (),
) -> RealizeReport:
    """Return the store entry for ``recipe``, building it in the sandbox on a miss.

    The steps, each a function: :func:`lookup` (the store), :func:`substitution` (the binary
    caches of ``options``), :func:`build_step` and :func:`publish` (link, roots, memo).

    ``dependencies`` are the built entries of the recipes it is built against (its closure, in
    the order :mod:`rocmforge.plan.graph` realized them); they are hashed into its derivation and
    installed into its build and check venvs.

    ``lints`` are the findings of :func:`lint` when the caller already ran it (the CLI lints every
    recipe before building any); without them, the recipe is linted here. Either way the
    unacknowledged warnings are reported once, here.

    ``options.level`` is the weakest sandbox level the caller accepts (``runner_factory`` gives
    that level or a stronger one). A cached entry built under a weaker level is not returned: it
    is rebuilt, with a warning, and the new build replaces it in the store atomically.

    The entry is protected from gc until ``temp_roots`` is closed (the CLI keeps one open until
    it exits); without one, only until this call returns. The store's shared lock is held only
    around the lookup and the return, never across a build: while resolving and building, this
    process's temp roots mark the hash as rooted and the source caches as busy instead.
    A cache hit checks the wheels' size and mtime against publish (``options.verify``: re-hashes
    them); a damaged entry is quarantined and rebuilt (:meth:`Store.lookup`).

    ``options.compiler_cache`` False builds without the compiler cache (it never changes the
    hash). ``options.caches`` (URLs) are asked in order on a miss before building
    (:mod:`rocmforge.cache`); ``options.require_substitute`` fails instead of building when none
    provides the entry; ``options.trusted`` are the keys a substituted entry must be signed with
    (default: the trusted-keys file or ``$ROCMFORGE_TRUSTED_KEYS``).
    """
    reporter = reporter or NullReporter()
    if lints is None:
        lints = lint(recipe)  # error lints stop here, before any fetch
    for finding in lints:
        if finding.allowed is None:
            reporter.warning(describe(recipe, finding))
    started, since_ns = time.monotonic(), time.time_ns()
    roots = temp_roots if temp_roots is not None else TempRoots(store)
    try:
        with store.shared_lock():
            roots.set_busy(True)  # gc leaves source caches alone while we resolve and build
        r = resolve(recipe, store=store, fetcher=fetcher, dependencies=dependencies)
        run = _Run(
            r=r, store=store, roots=roots, reporter=reporter, options=options,
            started=started, since_ns=since_ns,
        )  # fmt: skip
        drv = r.derivation
        with store.shared_lock():
            hit = lookup(run)
            if hit is not None:
                return publish(run, Outcome(entry=hit), link)
        with store.build_lock(drv.hash, on_busy=waiting_reporter(store, drv, reporter)):
            entry = store.lookup(drv.hash, drv.name, drv.version)  # another process's build
            got = Outcome(entry=entry) if entry is not None else substitution(run)
            if got is None or not satisfies(got.entry.meta.sandbox, options.level):
                built = build_step(
                    run,
                    fetcher=fetcher,
                    runner_factory=runner_factory,
                    replacing=got.entry if got is not None else None,
                )
                # a substituted entry rebuilt (weaker sandbox) still reports where it came from
                got = replace(built, substituted=got.substituted if got is not None else None)
        with store.shared_lock():
            return publish(run, got, link)
    except BaseException:
        if temp_roots is not None:
            with store.shared_lock():
                roots.set_busy(False)
        raise
    finally:
        if temp_roots is None:
            roots.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckReport:
    """``realize --check``: a cached derivation rebuilt and compared byte for byte."""

    recipe: Path
    hash: str
    name: str
    version: str
    path: Path
    differences: Mapping[str, tuple[str, ...]]
    seconds: float

    @property
    def identical(self) -> bool:
        """True when every rebuilt wheel is byte-identical to the stored one."""
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {
            "recipe": str(self.recipe),
            "hash": self.hash,
            "name": self.name,
            "version": self.version,
            "path": str(self.path),
            "identical": self.identical,
            "differences": {k: list(v) for k, v in self.differences.items()},
            "seconds": round(self.seconds, 3),
        }


def check_rebuild(
    recipe: Recipe,
    *,
    store: Store,
    fetcher: Fetcher,
    runner_factory: Callable[[], Runner],
    reporter: Reporter | None = None,
    dependencies: Sequence[Dependency] = (),
) -> CheckReport:
    """Rebuild the cached derivation of ``recipe`` in a fresh sandbox and compare the wheels.

    Like ``nix-build --check``: the recipe must already be in the store (a
    :class:`~rocmforge.errors.UsageError` otherwise); nothing is published. ``differences``
    maps each wheel whose bytes differ to the members inside it that differ.
    ``dependencies`` are the stored entries it was built against
    (:func:`rocmforge.pipeline.graph.built_dependencies`).
    """
    from rocmforge.build.builder import closure_wheels, rebuild
    from rocmforge.errors import UsageError
    from rocmforge.util.hashing import file_blake3
    from rocmforge.wheel.compare import differing_members

    reporter = reporter or NullReporter()
    started = time.monotonic()
    roots = TempRoots(store)
    try:
        r = resolve(recipe, store=store, fetcher=fetcher, dependencies=dependencies)
        drv = r.derivation
        with store.shared_lock():
            entry = store.lookup(drv.hash, drv.name, drv.version)
            if entry is None:
                raise UsageError(
                    f"{recipe.file}: {drv.name} {drv.version} ({drv.hash}) is not in the store; "
                    "`realize --check` rebuilds a cached build: run `rocmforge realize` first"
                )
            roots.add(drv.hash)
        check_reqs = resolve_requirements(
            recipe.check.requirements,
            python_version=r.toolchain.python_version,
            wheel_dir=store.sources_dir / "wheels",
            cache_dir=store.cache_dir,
            fetcher=fetcher,
        )
        dest = store.tmp_dir / f"check-{drv.hash}-{os.getpid()}"
        try:
            rebuilt = rebuild(
                r,
                store=store,
                runner=runner_factory(),
                reporter=reporter,
                dest=dest,
                check_requirements=tuple(closure_wheels([q.wheel for q in check_reqs], r)),
            )
            stored = {w.name: w for w in entry.wheels}
            new = {w.name: w for w in rebuilt}
            differences: dict[str, tuple[str, ...]] = {}
            for name in sorted(stored.keys() | new.keys()):
                if name not in new:
                    differences[name] = ("(not produced by the rebuild)",)
                elif name not in stored:
                    differences[name] = ("(produced only by the rebuild)",)
                elif file_blake3(stored[name]) != file_blake3(new[name]):
                    differences[name] = tuple(differing_members(stored[name], new[name])) or (
                        "(archive bytes)",
                    )
        finally:
            import shutil

            shutil.rmtree(dest, ignore_errors=True)
    finally:
        roots.close()
    return CheckReport(
        recipe=recipe.file,
        hash=drv.hash,
        name=drv.name,
        version=drv.version,
        path=entry.path,
        differences=differences,
        seconds=time.monotonic() - started,
    )
