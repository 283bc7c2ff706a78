"""The console's read path: ``list``, ``pins``, ``query``, ``show``, ``du`` and ``log``
answered before any heavy import.

A read command's work is a directory listing and one SELECT; what made it 5x slower than the
interpreter's own start was importing the CLI (argparse, dataclasses, pathlib, the store and
error classes: ~30 ms). The commonest forms — the text output of ``list``, ``pins``,
``query --name/--version``, ``show TARGET`` (a hash, prefix, entry name or path), ``du [--top N]``
and ``log HASH`` on a healthy store — are answered here from the same lean functions the full
commands call (:mod:`rocmforge.store.scan`, :mod:`rocmforge.util.table`,
:mod:`rocmforge.store.showtext`, :mod:`rocmforge.store.metafields`,
:mod:`rocmforge.store.measure`, :mod:`rocmforge.util.zstdread`), so the output is byte for byte
the same. Anything else — another option, ``--json``, no store there, an index that needs
repair, entries waiting to be indexed, a target the full resolver must judge, any error —
returns None and the full CLI runs from the start, exactly as if this module did not exist: it
can make a command faster, never different. Imports ``os``, ``sys``, ``fcntl``, ``time`` and
``_json``; ``_sqlite3`` for the index."""

from __future__ import annotations

import os
import sys

from rocmforge.store import layout

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
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
    while args:
        a = args.pop(0)
        key, eq, value = a.partition("=")
        if key == "--store" or (command and key in _COMMANDS[command][0]):
            if not eq:
                if not args:
                    raise ValueError(a)
                value = args.pop(0)
            if key == "--store":
                store = value
            else:
                found[key] = value
        elif command and not a.startswith("-") and len(operands) < _COMMANDS[command][1]:
            operands.append(a)
        elif command or a not in _COMMANDS:
            raise ValueError(a)
        else:
            command = a
    if command and len(operands) != _COMMANDS[command][1]:
        raise ValueError(command)
    return command, store, found, operands


def _healthy_store(store: str | None) -> str | None:
    """Return the root of the store the full CLI would open, if it needs no creation, no repair
    and has nothing waiting to be indexed; else None."""
    from rocmforge.store.locate import find_store

    root = find_store(store)[0]
    if not os.path.isfile(os.path.join(root, layout.MARKER)):
        return None
    if not all(os.path.isdir(os.path.join(root, d)) for d in layout.CREATED_DIRS):
        return None
    try:
        pending = os.listdir(os.path.join(root, layout.PENDING))
    except FileNotFoundError:
        pending = []
    if any(layout.is_entry_name(n) for n in pending):
        return None
    return root


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

    from rocmforge.store.scan import entry_meta_fields, entry_names
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
        entry_meta_fields(f.read(), matches[0])  # a damaged entry: the full command says so
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
    from rocmforge.store.metafields import meta_fields
    from rocmforge.store.showtext import show_text

    target = operands[0]
    if target.endswith(".whl"):  # perhaps a wheel file: the full command looks it up
        return None
    how, found = scan.resolve_target(root, target)
    if how != scan.FOUND:
        return None
    path = os.path.join(root, layout.ENTRIES, found[0])
    meta = _json_file(os.path.join(path, layout.META))
    fields = meta_fields(meta, file=path)
    if layout.entry_name(fields["hash"], fields["name"], fields["version"]) != found[0]:
        return None
    derivation = _json_file(os.path.join(path, layout.DERIVATION))
    provenance = _json_file(os.path.join(path, layout.PROVENANCE))
    if not isinstance(meta, dict) or not isinstance(derivation, dict):
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


#: command -> (the options it may carry besides --store, its number of operands, its answer)
_COMMANDS: dict[
    str,
    tuple[tuple[str, ...], int, Callable[[str, dict[str, str], list[str]], str | bytes | None]],
] = {
    "du": (("--top",), 0, _du),
    "list": ((), 0, _list),
    "log": ((), 1, _log),
    "pins": ((), 0, _pins),
    "query": (("--name", "--version"), 0, _query),
    "show": ((), 1, _show),
}


def fast_read(argv: Sequence[str]) -> int | None:
    """Answer a plain read command, or return None to fall through to the full CLI."""
    if not any(a in _COMMANDS for a in argv):
        return None
    try:
        command, store, opts, operands = _parse(argv)
        root = _healthy_store(store) if command else None
        text = None if root is None else _COMMANDS[command][2](root, opts, operands)
        if isinstance(text, str):  # a name or path stdout cannot encode: the full CLI's error
            text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict")
    except Exception:  # any surprise: the full CLI does it again and reports it
        return None
    if text is None:
        return None
    if isinstance(text, bytes):
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0
