"""The console's read path: ``list``, ``pins``, ``query``, ``show``, ``du``, ``log`` and
``audit`` answered before any heavy import.

A read command's work is a directory listing and one SELECT; what made it 5x slower than the
interpreter's own start was importing the CLI (argparse, dataclasses, pathlib, the store and
error classes: ~30 ms). The commonest forms — the text output of ``list``, ``pins``,
``query --name/--version``, ``show TARGET`` (a hash, prefix, entry name or path), ``du [--top N]``,
``log HASH`` and ``audit WHEEL...`` of wheels the index verifies, on a healthy store — are
answered here from the same lean functions the full commands call (:mod:`rocmforge.store.scan`,
:mod:`rocmforge.util.table`, :mod:`rocmforge.store.showtext`, :mod:`rocmforge.store.audittext`,
:mod:`rocmforge.store.metafields`, :mod:`rocmforge.store.measure`, :mod:`rocmforge.util.zstdread`),
so the output is byte for byte the same. Anything else — another option, ``--json``, no store
there, an index that needs repair, entries waiting to be indexed, a target the full resolver must
judge, a wheel the index does not verify, a signed entry, trusted keys or a configuration file,
any error — returns None and the full CLI runs from the start, exactly as if this module did not
exist: it can make a command faster, never different. Imports ``os``, ``sys``, ``fcntl``,
``time`` and ``_json``; ``_sqlite3`` for the index, ``blake3`` for ``audit``."""

from __future__ import annotations

import os
import sys

from rocmforge.store import layout

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Sequence

#: The index schema this read path understands (the full path's :data:`SCHEMA_VERSION`).
INDEX_SCHEMA = 1


def _parse(argv: Sequence[str]) -> tuple[str, str | None, dict[str, str], list[str]]:
    """Split ``argv`` into (command, --store value, the command's other options, its operands);
    raise ValueError on anything the read path does not handle (the full CLI will)."""
    args = list(argv)
    command = ""
    store: str | None = None
    found: dict[str, str] = {}
    operands: list[str] = []
    closed = False  # an option after one or more operands: argparse takes no more of them
    while args:
        a = args.pop(0)
        key, eq, value = a.partition("=")
        limit = _COMMANDS[command][1] if command else 0
        if command and not a.startswith("-") and (
            len(operands) < limit or (limit < 0 and not closed)
        ):
            operands.append(a)
        elif key == "--store" or (command and key in _COMMANDS[command][0]):
            closed = bool(operands)
            if not eq:
                if not args:
                    raise ValueError(a)
                value = args.pop(0)
            if key == "--store":
                store = value
            else:
                found[key] = value
        elif command or a not in _COMMANDS:
            raise ValueError(a)
        else:
            command = a
    limit = _COMMANDS[command][1] if command else 0
    if command and (not operands if limit < 0 else len(operands) != limit):
        raise ValueError(command)
    return command, store, found, operands


def _healthy_store(store: str | None) -> str | None:
    """Return the root of the store the full CLI would open, if it needs no creation, no repair
    and has nothing waiting to be indexed; else None."""
    from rocmforge.store.locate import find_store

    root = find_store(store)[0]
    return root if _healthy(root) else None


def _healthy(root: str) -> bool:
    """Whether the store at ``root`` exists and opens without creation, repair or indexing."""
    if not os.path.isfile(os.path.join(root, layout.MARKER)):
        return False
    if not all(os.path.isdir(os.path.join(root, d)) for d in layout.CREATED_DIRS):
        return False
    try:
        pending = os.listdir(os.path.join(root, layout.PENDING))
    except FileNotFoundError:
        pending = []
    return not any(layout.is_entry_name(n) for n in pending)


def _table(root: str, name: str | None, version: str | None) -> str | None:
    """The entry table of ``list`` / ``query``, or None if the index is not healthy."""
    from rocmforge.store import scan
    from rocmforge.util.table import format_summary

    db = scan.open_index_read_only(root, INDEX_SCHEMA)
    if db is None:
        return None
    try:
        used = scan.used_times(root)
        roots = scan.scan_roots(root)[0]
        sql, params = scan.summary_query(name=name, version=version)
        return format_summary(scan.with_usage(db.execute(sql, params), used, roots))
    finally:
        db.close()


def _list(root: str, opts: dict[str, str], operands: list[str]) -> str | None:
    return _table(root, None, None)


def _query(root: str, opts: dict[str, str], operands: list[str]) -> str | None:
    return _table(root, opts.get("--name"), opts.get("--version"))


def _pins(root: str, opts: dict[str, str], operands: list[str]) -> str | None:
    from rocmforge.store.scan import pin_entries

    return "".join(f"{n} -> {e or '(dangling)'}\n" for n, e, _ in pin_entries(root))


#: The biggest compressed log the read path prints (it decompresses into memory first, so that
#: a damaged log still falls through with nothing printed); a bigger one takes the full CLI.
LOG_LIMIT = 32 << 20


def _log(root: str, opts: dict[str, str], operands: list[str]) -> bytes | None:
    """The build log of the one entry whose input hash starts with the operand (the full
    command's first answer for a hash prefix: ``Store.resolve``); anything else falls through."""
    import io

    from rocmforge.store.scan import entry_meta, entry_names
    from rocmforge.util.zstdread import copy_log

    target = operands[0]
    if not (layout.is_hex(target) and layout.MIN_PREFIX <= len(target) <= layout.HASH_LEN):
        return None
    entries = os.path.join(root, layout.ENTRIES)
    if os.path.lexists(target) or os.path.lexists(os.path.join(entries, target)):
        return None  # a file of that name here, or an odd entry directory: the full command
    matches = [n for n in entry_names(root) if n.startswith(target)]
    if len(matches) != 1:
        return None
    entry = os.path.join(entries, matches[0])
    with open(os.path.join(entry, layout.META), "rb") as f:
        entry_meta(f.read(), matches[0])  # a damaged entry: the full command says so
    path = os.path.join(entry, layout.BUILD_LOG)
    if not os.path.isfile(path) or os.path.getsize(path) > LOG_LIMIT:
        return None
    out = io.BytesIO()
    copy_log(path, out)
    return out.getvalue()


def _du(root: str, opts: dict[str, str], operands: list[str]) -> str | None:
    """The text of ``du`` (``--top N``) from the same functions as the full command."""
    import time

    from rocmforge.store import measure, scan

    top = int(opts.get("--top", "10"))  # what argparse's type does; a bad one raises
    if top < 0 or os.environ.get(measure.CCACHE_ENV_SIZE, "").strip():
        return None  # the size's check (a regular expression) is the full command's
    cache = measure.compiler_cache_root(root, os.environ)
    if cache is None or cache.startswith("//") or os.path.normpath(cache) != cache:
        return None  # an error, or a path pathlib would print otherwise
    db = scan.open_index_read_only(root, INDEX_SCHEMA)
    if db is None:
        return None
    try:
        indexed = dict(db.execute("SELECT hash, last_used FROM entries").fetchall())
    finally:
        db.close()
    entries = measure.read_entries(root, indexed, scan.used_times(root))
    areas, packages, biggest = measure.summarize(
        root,
        entries,
        ((rel, size) for rel, size, _ in measure.scan_sources(root)),
        scan.scan_roots(root)[0],
    )
    return measure.format_du(
        areas,
        packages,
        biggest,
        measure.scan_failed(root),
        (cache, measure.compiler_cache_usage(cache)),
        top=top,
        now=time.time(),
    )


def _json_file(path: str) -> object:
    """The JSON value stored at ``path`` (None if there is no such file), parsed without
    :mod:`json`; ValueError for anything but plain UTF-8 JSON."""
    from rocmforge.util.leanjson import loads

    try:
        f = open(path, "rb")  # noqa: SIM115 (contextlib-free: the file is closed below)
    except FileNotFoundError:
        return None
    with f:
        return loads(f.read())


def _show(root: str, opts: dict[str, str], operands: list[str]) -> str | None:
    """What ``show TARGET`` prints, for a target naming one entry by hash, hash prefix, entry
    name or path; None for anything else (a wheel, a package name, an unknown or ambiguous
    target), an entry whose files the full command would reject, or an unhealthy index."""
    from rocmforge.store import scan
    from rocmforge.store.showtext import show_text

    target = operands[0]
    if target.endswith(".whl"):  # perhaps a wheel file: the full command looks it up
        return None
    how, found = scan.resolve_target(root, target)
    if how != scan.FOUND:
        return None
    path = os.path.join(root, layout.ENTRIES, found[0])
    with open(os.path.join(path, layout.META), "rb") as f:
        meta, fields = scan.entry_meta(f.read(), found[0])  # damaged: the full command says so
    derivation = _json_file(os.path.join(path, layout.DERIVATION))
    provenance = _json_file(os.path.join(path, layout.PROVENANCE))
    if not isinstance(derivation, dict):
        return None
    if provenance is not None and not isinstance(provenance, dict):
        return None
    db = scan.open_index_read_only(root, INDEX_SCHEMA)
    if db is None:
        return None
    try:
        h = fields["hash"]
        row = db.execute("SELECT last_used FROM entries WHERE hash = ?", (h,)).fetchone()
    finally:
        db.close()
    roots = scan.scan_roots(root)[0].get(h, [])
    last_used = fields["created"]
    if row is not None:
        last_used = max(row[0], scan.used_times(root).get(h, 0.0))
    return show_text(
        path, meta, derivation, provenance, indexed=row is not None, last_used=last_used,
        roots=roots,
    )  # fmt: skip


def _plain_path(path: str) -> bool:
    """Whether ``str(pathlib.Path(path)) == path`` (no empty or ``.`` component to drop)."""
    parts = path.split("/")
    return bool(path) and all(p not in ("", ".") for p in parts[1 if path[0] == "/" else 0 :])


def _no_config(starts: list[str]) -> bool:
    """Whether no configuration file or trusted key could change what ``audit`` does: no user
    or project file (:func:`rocmforge.config.effective_settings` would read them), no trusted
    keys (checking a signature needs PyNaCl)."""
    from rocmforge.util import configpaths

    home = configpaths.config_home()
    keys = os.environ.get(configpaths.TRUSTED_KEYS_ENV)
    if (
        keys.split()
        if keys is not None
        else os.path.lexists(os.path.join(home, configpaths.TRUSTED_KEYS_FILE))
    ):
        return False
    if os.path.lexists(os.path.join(home, configpaths.USER_FILE)):
        return False
    return configpaths.find_project_config([*starts, os.getcwd()]) is None


def _verified(root: str, db: sqlite3.Connection, wheel: str) -> dict[str, object] | None:
    """The JSON report (``AuditReport.to_json``) of ``wheel`` if its blake3 is in the index and
    its entry needs nothing the read path leaves to the full command (a signature, the entries
    it was built against, a file it would reject); else None."""
    import stat

    from rocmforge.store.audittext import VERIFIED, audit_facts, report_json
    from rocmforge.store.metafields import meta_fields
    from rocmforge.util.leanhash import file_blake3

    st = os.stat(wheel)
    if not stat.S_ISREG(st.st_mode):  # the full command says what it is
        return None
    b3 = file_blake3(wheel)
    # the rows Index.by_wheel_digest returns, oldest first: audit_wheel takes the first
    row = db.execute(
        "SELECT hash, path FROM entries WHERE hash IN "
        "(SELECT hash FROM wheels WHERE sha256 = ? OR blake3 = ?) ORDER BY created, hash LIMIT 1",
        (b3, b3),
    ).fetchone()
    if row is None:
        return None
    h, recorded = row
    found = db.execute(
        "SELECT filename, sha256 FROM wheels WHERE hash = ? AND blake3 = ? ORDER BY filename",
        (h, b3),
    ).fetchone()
    base = os.path.basename(recorded)
    if found is None or not found[1] or not base:
        return None
    name, sha = found
    entry = os.path.join(root, layout.ENTRIES, base)  # where Index rows point, whatever recorded
    if not os.path.isdir(entry) or os.path.lexists(os.path.join(entry, layout.PROVENANCE_DSSE)):
        return None
    derivation = _json_file(os.path.join(entry, layout.DERIVATION))
    statement = _json_file(os.path.join(entry, layout.PROVENANCE))
    raw_meta = _json_file(os.path.join(entry, layout.META))
    if not isinstance(derivation, dict) or not isinstance(statement, (dict, type(None))):
        return None
    recipes = derivation.get("recipes")
    if isinstance(recipes, list) and any(isinstance(r, dict) for r in recipes):
        return None  # the entries it was built against: Store.resolve and load judge them
    archs: object = {}
    links: object = ()
    origin = None
    if raw_meta is not None:
        meta = meta_fields(raw_meta, file=os.path.join(entry, layout.META))
        archs = (meta["archs"] or {}).get(name, {})
        links = (meta["links"] or {}).get(name, ())
        origin = meta["origin"]
    if not isinstance(archs, dict) or not isinstance(links, (list, tuple)):
        return None
    notes = [] if statement is not None else [
        "the store entry has no provenance statement (built before it)"
    ]  # fmt: skip
    return report_json(
        wheel=wheel,
        status=VERIFIED,
        blake3=b3,
        sha256=sha,
        size=st.st_size,
        facts=audit_facts(derivation, statement),
        notes=notes,
        input_hash=h,
        store_path=entry,
        archs=archs,
        links=links,
        signature={"status": "unsigned", "keyid": None, "detail": ""},
        origin=origin,
        derivation=derivation,
    )


def _audit(store: str | None, operands: list[str]) -> tuple[str, str] | None:
    """What ``audit WHEEL...`` prints (stderr, stdout) when every wheel is verified by the
    index of a healthy store and no configuration file or trusted key is set; None else."""
    from rocmforge.store import scan
    from rocmforge.store.audittext import audit_text, banner
    from rocmforge.store.locate import find_store

    wheels = operands
    if not all(_plain_path(w) for w in wheels):
        return None  # the full command prints pathlib's spelling of it
    files = [w for w in wheels if os.path.isfile(w) or os.path.isdir(w)]
    root, how = find_store(store, recipes=files)
    if not _healthy(root) or not _no_config([os.path.dirname(os.path.abspath(f)) for f in files]):
        return None
    db = scan.open_index_read_only(root, INDEX_SCHEMA)
    if db is None:
        return None
    reports = []
    try:
        for wheel in wheels:
            report = _verified(root, db, wheel)
            if report is None:  # one wheel the full command must judge: it does them all
                return None
            reports.append(report)
    finally:
        db.close()
    return banner(root, how, found=True) + "\n", audit_text(reports)


#: command -> (the options it may carry besides --store, its number of operands (-1: one or
#: more), its answer)
_COMMANDS: dict[
    str,
    tuple[
        tuple[str, ...], int, Callable[[str, dict[str, str], list[str]], str | bytes | None] | None
    ],
] = {
    "du": (("--top",), 0, _du),
    "list": ((), 0, _list),
    "log": ((), 1, _log),
    "pins": ((), 0, _pins),
    "query": (("--name", "--version"), 0, _query),
    "show": ((), 1, _show),
    "audit": ((), -1, None),  # answered by _audit (its store is found from its wheels too)
}


def fast_read(argv: Sequence[str]) -> int | None:
    """Answer a plain read command, or return None to fall through to the full CLI."""
    if not any(a in _COMMANDS for a in argv):
        return None
    err = ""
    try:
        command, store, opts, operands = _parse(argv)
        answer = _COMMANDS[command][2] if command else None
        text: str | bytes | None = None
        if command == "audit":
            both = _audit(store, operands)
            if both is not None:
                err, text = both
        elif answer is not None:
            root = _healthy_store(store)
            text = None if root is None else answer(root, opts, operands)
        for out in (text, err):  # a name or path a stream cannot encode: the full CLI's error
            if isinstance(out, str):
                stream = sys.stdout if out is text else sys.stderr
                out.encode(stream.encoding or "utf-8", stream.errors or "strict")
    except Exception:  # any surprise: the full CLI does it again and reports it
        return None
    if text is None:
        return None
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()
    if isinstance(text, bytes):
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0
