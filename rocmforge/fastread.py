"""The console's read path: ``list``, ``pins``, ``query`` and ``show`` answered before any heavy
import.

A read command's work is a directory listing and one SELECT; what made it 5x slower than the
interpreter's own start was importing the CLI (argparse, dataclasses, pathlib, the store and
error classes: ~30 ms). The commonest forms — the text output of ``list``, ``pins``,
``query --name/--version`` and ``show TARGET`` (a hash, prefix, entry name or path) on a healthy
store — are answered here from the same lean functions the full commands call
(:mod:`rocmforge.store.scan`, :mod:`rocmforge.util.table`, :mod:`rocmforge.store.showtext`,
:mod:`rocmforge.store.metafields`), so the output is byte for byte the same. Anything else —
another option, ``--json``, no store there, an index that needs repair, entries waiting to be
indexed, a target the full resolver must judge, any error — returns None and the full CLI runs
from the start, exactly as if this module did not exist: it can make a command faster, never
different. Imports ``os``, ``sys``, ``fcntl``, ``time`` and ``_json``; ``sqlite3`` for the index.
"""

from __future__ import annotations

import os
import sys

from rocmforge.store import layout

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

#: The index schema this read path understands (the full path's :data:`SCHEMA_VERSION`).
INDEX_SCHEMA = 1


def _parse(argv: Sequence[str]) -> tuple[str, str | None, dict[str, str]]:
    """Split ``argv`` into (command, --store value, the command's other options and its
    positional arguments, under ``"1"``, ``"2"`` ...); raise ValueError on anything the read
    path does not handle (the full CLI will)."""
    args = list(argv)
    command = ""
    store: str | None = None
    found: dict[str, str] = {}
    positional = 0
    while args:
        a = args.pop(0)
        key, eq, value = a.partition("=")
        if command and positional < _COMMANDS[command][2] and not a.startswith("-"):
            positional += 1
            found[str(positional)] = a
        elif key == "--store" or (command and key in _COMMANDS[command][0]):
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
    if command and positional != _COMMANDS[command][2]:
        raise ValueError(command)
    return command, store, found


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


def _list(root: str, opts: dict[str, str]) -> str | None:
    return _table(root, None, None)


def _query(root: str, opts: dict[str, str]) -> str | None:
    return _table(root, opts.get("--name"), opts.get("--version"))


def _pins(root: str, opts: dict[str, str]) -> str | None:
    from rocmforge.store.scan import pin_entries

    return "".join(f"{n} -> {e or '(dangling)'}\n" for n, e, _ in pin_entries(root))


def _json_file(path: str) -> object:
    """The JSON value stored at ``path`` (None if there is no such file), parsed without
    :mod:`json`; ValueError for anything but plain UTF-8 JSON."""
    from rocmforge.util.leanjson import loads_bytes

    try:
        f = open(path, "rb")  # noqa: SIM115 (contextlib-free: the file is closed below)
    except FileNotFoundError:
        return None
    with f:
        return loads_bytes(f.read())


def _show(root: str, opts: dict[str, str]) -> str | None:
    """What ``show TARGET`` prints, for a target naming one entry by hash, hash prefix, entry
    name or path; None for anything else (a wheel, a package name, an unknown or ambiguous
    target), an entry whose files the full command would reject, or an unhealthy index."""
    from rocmforge.store import scan
    from rocmforge.store.metafields import meta_fields
    from rocmforge.store.showtext import show_text

    target = opts["1"]
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


#: command -> (the options it may carry besides --store, its answer, its positional arguments)
_COMMANDS: dict[str, tuple[tuple[str, ...], Callable[[str, dict[str, str]], str | None], int]] = {
    "list": ((), _list, 0),
    "pins": ((), _pins, 0),
    "query": (("--name", "--version"), _query, 0),
    "show": ((), _show, 1),
}


def fast_read(argv: Sequence[str]) -> int | None:
    """Answer a plain read command, or return None to fall through to the full CLI."""
    if not any(a in _COMMANDS for a in argv):
        return None
    try:
        command, store, opts = _parse(argv)
        root = _healthy_store(store) if command else None
        text = None if root is None else _COMMANDS[command][1](root, opts)
    except Exception:  # any surprise: the full CLI does it again and reports it
        return None
    if text is None:
        return None
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0
