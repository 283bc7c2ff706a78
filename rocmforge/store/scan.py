"""Lean reads of a store directory: last-use marks, roots, pins, the index's summary rows, the
entry a target names.

The one implementation of each read, shared by the full commands (through
:class:`rocmforge.store.store.Store` and :mod:`rocmforge.store.roots`) and by the read
commands' import-light readers (:mod:`rocmforge.store.readers`), which answer ``list``, ``pins``,
``query`` and ``show`` without the store classes.
So this module takes the store root as a string, imports only ``os`` and ``fcntl``
(``_sqlite3`` inside the one function that opens the index) and the import-free
:mod:`rocmforge.store.layout`, and raises plain :class:`OSError` / ``sqlite3.Error``: callers
turn those into their own errors.
"""

from __future__ import annotations

import fcntl
import os

from rocmforge.store import layout

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~2 ms)
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterable, Iterator, Mapping, Sized
    from typing import Any

#: Columns of one summary row: ``(hash, name, version, size, created, last_used)``.
SUMMARY_COLUMNS = "hash, name, version, size, created, last_used"


def used_times(root: str) -> dict[str, float]:
    """Return the last-use time of each entry hash marked under ``used/`` (every cache hit,
    the memo's included, touches ``used/<hash>``); empty if there is no ``used/``."""
    d = os.path.join(root, layout.USED)
    out: dict[str, float] = {}
    try:
        it = os.scandir(d)
    except FileNotFoundError:
        return out
    with it:
        for de in it:
            try:  # noqa: SIM105 (contextlib: 1 ms of start-up)
                out[de.name] = de.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                pass
    return out


def entry_of_path(root: str, path: str) -> str | None:
    """Return the entry directory name of the store at ``root`` that ``path`` (followed) lies
    in, or None."""
    try:
        real = os.path.realpath(path, strict=True)
    except OSError:
        return None
    base = os.path.realpath(os.path.join(root, layout.ENTRIES)) + os.sep
    if not real.startswith(base):
        return None
    top = real[len(base) :].split(os.sep, 1)[0]
    return top if layout.is_entry_name(top) else None


def listdir_sorted(d: str) -> list[str]:
    """Return the sorted names in ``d``; empty if it does not exist (other errors raise)."""
    try:
        return sorted(os.listdir(d))
    except FileNotFoundError:
        return []


def lock_state(path: str) -> tuple[bool, bytes] | None:
    """Return (held by someone, content) for a lock file, or None if it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True, os.pread(fd, 1 << 20, 0)
        return False, b""
    finally:
        os.close(fd)


def pin_entries(root: str) -> list[tuple[str, str | None, str]]:
    """Return ``(name, entry directory name or None, pin path)`` of every pin, by name."""
    d = os.path.join(root, layout.ROOTS, layout.ROOTS_PINS)
    return [
        (n, entry_of_path(root, os.path.join(d, n)), os.path.join(d, n))
        for n in listdir_sorted(d)
        if not n.startswith(".")
    ]


def scan_roots(root: str) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """Read every root of the store at ``root``: ``(by_hash, busy, stale)``.

    ``by_hash`` maps an input hash to why it is rooted (``pin NAME``, ``link PATH``, ``realize
    pid N running``, ``build in progress (pid N)``); ``busy`` says why source caches are in use;
    ``stale`` lists root files that root nothing any more. gc calls this under the store's
    exclusive lock; readers call it without one (a snapshot).
    """
    by_hash: dict[str, list[str]] = {}
    busy: list[str] = []
    stale: list[str] = []

    def add(dirname: str | None, why: str) -> bool:
        if dirname is None:
            return False
        by_hash.setdefault(dirname[: layout.HASH_LEN], []).append(why)
        return True

    roots = os.path.join(root, layout.ROOTS)
    for n, entry, p in pin_entries(root):
        if not add(entry, f"pin {n}"):
            stale.append(p)
    auto = os.path.join(roots, layout.ROOTS_AUTO)
    for n in listdir_sorted(auto):
        p = os.path.join(auto, n)
        try:
            link = os.readlink(p)
        except OSError:
            stale.append(p)
            continue
        # The user's link must still be a symlink into an entry; anything else stops rooting.
        if not (os.path.islink(link) and add(entry_of_path(root, link), f"link {link}")):
            stale.append(p)
    live = os.path.join(roots, layout.ROOTS_LIVE)
    for n in listdir_sorted(live):
        p = os.path.join(live, n)
        state = lock_state(p)
        if state is None:
            continue
        held, content = state
        if not held:
            stale.append(p)
            continue
        pid = n.split("-", 1)[0]
        for line in content.decode(errors="replace").splitlines():
            word, _, arg = line.partition(" ")
            if word == "root" and layout.is_hash(arg):
                by_hash.setdefault(arg, []).append(f"realize pid {pid} running")
            elif word == "busy":
                busy.append(f"realize pid {pid} is resolving or building")
    tmp = os.path.join(root, layout.TMP)
    for n in listdir_sorted(tmp):
        build = n.endswith(layout.LOCK_SUFFIX) and layout.parse_build_dir_name(
            n.removesuffix(layout.LOCK_SUFFIX)
        )
        if not build:
            continue
        h, pid = build
        state = lock_state(os.path.join(tmp, n))
        if state is not None and state[0]:
            by_hash.setdefault(h, []).append(f"build in progress (pid {pid})")
            busy.append(f"build of {h} in progress (pid {pid})")
    return by_hash, busy, stale


def with_usage(
    rows: Iterable[tuple[str, str, str, int, float, float]],
    used: Mapping[str, float],
    roots: Mapping[str, Sized],
) -> Iterator[tuple[str, str, str, int, float, float, int]]:
    """Yield summary rows ``(hash, name, version, size, created, last_used)`` with last use
    raised to the ``used/`` mark (:func:`used_times`) and the number of roots appended (``roots``:
    hash -> reasons, from :func:`scan_roots`)."""
    for h, name, version, size, created, last in rows:
        if used:
            last = max(last, used.get(h, 0.0))
        yield h, name, version, size, created, last, len(roots[h]) if h in roots else 0


def name_version_clauses(
    name: str | None = None, version: str | None = None
) -> tuple[list[str], list[str]]:
    """Return the WHERE clauses (and parameters) of the index's ``name`` filter (as pip
    compares names: the SQL function ``rf_normal_name``) and exact ``version`` filter."""
    clauses: list[str] = []
    params: list[str] = []
    if name is not None:
        clauses.append("rf_normal_name(name) = ?")
        params.append(layout.normal_name(name))
    if version is not None:
        clauses.append("version = ?")
        params.append(version)
    return clauses, params


def summary_query(*, name: str | None = None, version: str | None = None) -> tuple[str, list[str]]:
    """Return the SELECT of summary rows (oldest first) matching ``name`` and ``version``, and
    its parameters."""
    clauses, params = name_version_clauses(name, version)
    where = " AND ".join(clauses) or "1"
    return f"SELECT {SUMMARY_COLUMNS} FROM entries WHERE {where} ORDER BY created, hash", params


def register_functions(db: sqlite3.Connection) -> None:
    """Register the SQL functions the index's queries use (``rf_normal_name``)."""
    db.create_function("rf_normal_name", 1, layout.normal_name, deterministic=True)


def open_index_read_only(root: str, schema: int) -> sqlite3.Connection | None:
    """Open the store's index read-only if it is a healthy file of schema ``schema``; else
    None (the caller falls back to the full path, which repairs or reports).

    Opened through the C module ``_sqlite3`` itself (the ``sqlite3`` package is it plus the
    default date adapters: ``datetime`` and ``collections.abc``, 2-3 ms of start-up that no
    query of the index needs); the connection and its errors are the same classes."""
    try:
        import _sqlite3 as sqlite3
    except ImportError:  # pragma: no cover - an interpreter that hides it
        import sqlite3  # type: ignore[no-redef]

    path = os.path.join(root, layout.INDEX)
    # A URI needs "?", "#" and "%" quoted: such a path takes the full path (urllib is 2 ms).
    if not os.path.isfile(path) or any(c in path for c in "?#%"):
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error:
        return None
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] != schema:
            db.close()
            return None
    except sqlite3.Error:
        db.close()
        return None
    register_functions(db)
    return db


def entry_names(root: str) -> list[str]:
    """Return the directory names of the entries in ``entries/`` of the store at ``root``,
    sorted (names of the entry form that are directories; no parsing); OSError if it cannot
    be listed."""
    d = os.path.join(root, layout.ENTRIES)
    return sorted(
        n for n in os.listdir(d) if layout.is_entry_name(n) and os.path.isdir(os.path.join(d, n))
    )


#: What :func:`resolve_target` found: one entry, a hash prefix too short, an ambiguous prefix,
#: an existing path outside every entry, or nothing (the caller tries package names).
FOUND, TOO_SHORT, AMBIGUOUS, OUTSIDE, UNKNOWN = "found", "short", "ambiguous", "outside", "unknown"


def resolve_target(root: str, target: str) -> tuple[str, list[str]]:
    """Resolve a hash, unique hash prefix, entry directory name or path (the directory or any
    file inside it, links followed) in the store at ``root``: ``(FOUND, [dirname])``,
    ``(AMBIGUOUS, candidates)``, ``(TOO_SHORT, [])``, ``(OUTSIDE, [])`` or ``(UNKNOWN, entry
    names)``. The one resolver of :meth:`rocmforge.store.store.Store.resolve` and the read
    path; OSError if ``entries/`` cannot be listed."""
    entries = os.path.join(root, layout.ENTRIES)
    name_like = target and "/" not in target and target not in (".", "..")
    if name_like and os.path.isdir(os.path.join(entries, target)):
        return FOUND, [target]
    names = entry_names(root)
    if layout.is_hex(target) and len(target) <= layout.HASH_LEN:
        if len(target) < layout.MIN_PREFIX and not os.path.exists(target):
            return TOO_SHORT, []
        matches = [n for n in names if n.startswith(target)]
        if len(matches) == 1:
            return FOUND, matches
        if len(matches) > 1:
            return AMBIGUOUS, matches
    if os.path.exists(target):
        rel = os.path.relpath(os.path.realpath(target), os.path.realpath(entries))
        if rel != "." and not rel.startswith(".."):
            top = rel.split(os.sep, 1)[0]
            if top in names:
                return FOUND, [top]
        return OUTSIDE, []
    return UNKNOWN, names


def entry_meta(raw: bytes, dirname: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the decoded ``meta.json`` bytes ``raw`` of entry directory ``dirname`` and its
    fields as :func:`rocmforge.store.metafields.meta_fields` checks them (the checks of
    :meth:`rocmforge.store.entry.EntryMeta.from_json`); ValueError if any field is malformed
    or it names another directory."""
    from rocmforge.store.metafields import meta_fields
    from rocmforge.util.leanjson import loads

    data = loads(raw)
    f = meta_fields(data, file=dirname)
    if layout.entry_name(f["hash"], f["name"], f["version"]) != dirname:
        raise ValueError(f"records another entry than {dirname}")
    return data, f
