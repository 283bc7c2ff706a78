"""The read commands' answers from a healthy store, import-light: ``list``, ``pins``,
``query --name/--version``, ``show TARGET``, ``du [--top N]``, ``log HASH`` and ``audit WHEEL...``.

A read command's work is a directory listing and one SELECT; importing the store classes
(``dataclasses``, ``inspect``, ``pathlib``, ``json``, ``re``) would cost it more than the work.
These functions read the store with :mod:`rocmforge.store.scan`, :mod:`rocmforge.util.table`,
:mod:`rocmforge.store.showtext`, :mod:`rocmforge.store.audittext`,
:mod:`rocmforge.store.metafields`, :mod:`rocmforge.store.measure` and
:mod:`rocmforge.util.zstdread`, the same functions the commands' full branches print with.

Each answers only on a store that needs no creation, repair or indexing (:func:`healthy`), and
returns None for anything it leaves to the command's full branch: an index that needs repair, a
target only the full resolver can judge (a wheel, a package name, an ambiguous prefix), a wheel
the index does not verify, a signed entry, trusted keys or a configuration file. The command
then runs its full branch, which also says what is wrong with a damaged file. Imports ``os``,
``sys``; ``_sqlite3`` for the index, ``blake3`` for ``audit``.
"""

from __future__ import annotations

import os

from rocmforge.store import layout

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    import sqlite3

#: The index schema these readers understand (the full path's :data:`SCHEMA_VERSION`).
INDEX_SCHEMA = 1


def healthy(root: str) -> bool:
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


def entry_table(root: str, name: str | None = None, version: str | None = None) -> str | None:
    """The entry table of ``list`` / ``query --name/--version``, or None if the index is not
    healthy."""
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


def pins_text(root: str) -> str:
    """What ``pins`` prints: ``NAME -> ENTRY`` a line."""
    from rocmforge.store.scan import pin_entries

    return "".join(f"{n} -> {e or '(dangling)'}\n" for n, e, _ in pin_entries(root))


#: The biggest compressed log :func:`log_bytes` prints (it decompresses into memory first, so
#: that a damaged log prints nothing here); a bigger one takes ``log``'s full branch.
LOG_LIMIT = 32 << 20


def log_bytes(root: str, target: str) -> bytes | None:
    """The build log of the one entry whose input hash starts with the operand (the full
    command's first answer for a hash prefix: ``Store.resolve``); anything else falls through."""
    import io

    from rocmforge.store.scan import entry_meta, entry_names
    from rocmforge.util.zstdread import copy_log

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


def du_text(root: str, top: int) -> str | None:
    """The text of ``du`` (``--top N``) from the same functions as the full command."""
    import time

    from rocmforge.store import measure, scan

    if os.environ.get(measure.CCACHE_ENV_SIZE, "").strip():
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


def show_text_of(root: str, target: str) -> str | None:
    """What ``show TARGET`` prints, for a target naming one entry by hash, hash prefix, entry
    name or path; None for anything else (a wheel, a package name, an unknown or ambiguous
    target), an entry whose files the full command would reject, or an unhealthy index."""
    from rocmforge.store import scan
    from rocmforge.store.showtext import show_text

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
    accepted = []
    if os.path.isdir(os.path.join(root, layout.ACCEPTED, h)):  # json only where runs are kept
        from rocmforge.store.accepted import read_runs

        accepted = [r.facts() for r in read_runs(root, h)]
    return show_text(
        path, meta, derivation, provenance, indexed=row is not None, last_used=last_used,
        roots=roots, accepted=accepted,
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


def _files_as_listed(entry: str, statement: dict[str, object]) -> bool:
    """Whether the files of ``entry`` are exactly those its statement's ``entryFiles`` lists
    (False for an older statement without the list: the full command reads it)."""
    try:
        listed = statement["predicate"]["buildDefinition"]["internalParameters"]["entryFiles"]  # type: ignore[index]
        names = {str(f["name"]) for f in listed}
        present = set(os.listdir(entry))
    except (KeyError, TypeError, OSError):
        return False
    return names == present - {layout.PROVENANCE, layout.PROVENANCE_DSSE, layout.META}


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
    if os.path.isdir(os.path.join(root, layout.ACCEPTED, h)):
        return None  # acceptance runs: the full command reads them and checks their signatures
    derivation = _json_file(os.path.join(entry, layout.DERIVATION))
    statement = _json_file(os.path.join(entry, layout.PROVENANCE))
    raw_meta = _json_file(os.path.join(entry, layout.META))
    if not isinstance(derivation, dict) or not isinstance(statement, (dict, type(None))):
        return None
    if statement is not None and not _files_as_listed(entry, statement):
        return None  # a file no statement covers, or one gone: the full command names it
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
        signature={
            "status": "unsigned", "keyid": None, "fingerprint": None, "detail": "", "signers": []
        },
        origin=origin,
        derivation=derivation,
    )


def audit_texts(root: str, how: str, wheels: list[str]) -> tuple[str, str] | None:
    """What ``audit WHEEL...`` prints (stderr, stdout) with the healthy store at ``root``
    (chosen ``how``) when every wheel is verified by its index and no configuration file or
    trusted key is set; None else."""
    from rocmforge.store import scan
    from rocmforge.store.audittext import audit_text, banner

    if not all(_plain_path(w) for w in wheels):
        return None  # the full command prints pathlib's spelling of it
    files = [w for w in wheels if os.path.isfile(w) or os.path.isdir(w)]
    if not _no_config([os.path.dirname(os.path.abspath(f)) for f in files]):
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
