"""The SQLite index of the store: lookups by input hash, wheel digest, name and env flag.

The index is a cache of ``entries/`` (the source of truth) and can be rebuilt from it at any
time. It runs in WAL mode so readers never block the single writer; writers wait up to
``BUSY_TIMEOUT`` seconds for each other. Every ``sqlite3.Error`` leaves this module as a
:class:`~rocmforge.errors.StoreError` naming the index file; a damaged database (not a database,
malformed, a directory) as its subclass :class:`IndexCorruptError`, which the store answers by
setting the file aside and rebuilding it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.entry import DerivationDoc
from rocmforge.store.scan import name_version_clauses, register_functions

if TYPE_CHECKING:
    from rocmforge.store.entry import Entry

SCHEMA_VERSION = 1
BUSY_TIMEOUT = 30.0
#: SQLite result codes that mean the file itself is damaged.
_CORRUPT_CODES = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB


class IndexCorruptError(StoreError):
    """The index file is damaged: not a database, malformed, or not a file at all."""


def _corrupt(e: sqlite3.Error) -> bool:
    return getattr(e, "sqlite_errorcode", None) in _CORRUPT_CODES

_SCHEMA = """
CREATE TABLE entries (
    hash TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    path TEXT NOT NULL,
    created REAL NOT NULL,
    last_used REAL NOT NULL,
    size INTEGER NOT NULL,
    sandbox TEXT
);
CREATE TABLE wheels (
    hash TEXT NOT NULL,
    filename TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    blake3 TEXT NOT NULL
);
CREATE TABLE env (
    hash TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL
);
CREATE INDEX entries_name ON entries(name);
CREATE INDEX wheels_hash ON wheels(hash);
CREATE INDEX wheels_sha256 ON wheels(sha256);
CREATE INDEX wheels_blake3 ON wheels(blake3);
CREATE INDEX env_hash ON env(hash);
CREATE INDEX env_key_value ON env(key, value);
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class WheelRow:
    """One wheel of an indexed entry with its digests."""

    filename: str
    sha256: str
    blake3: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexRow:
    """One indexed store entry."""

    hash: str
    name: str
    version: str
    location: str
    created: float
    last_used: float
    size: int
    sandbox: str | None
    wheels: tuple[WheelRow, ...] = ()

    @property
    def path(self) -> Path:
        """The entry directory (made on demand: parsing 10,000 paths costs ~100 ms)."""
        return Path(self.location)


class Index:
    """The index database at ``path`` (created with the current schema if missing).

    ``path=None`` is an index in memory (for a read-only store whose file is unusable);
    ``read_only`` opens an existing file without writing to it (falling back to SQLite's
    ``immutable`` mode on a read-only mount). :attr:`created` tells whether the schema was
    just created (the caller may then fill it from ``entries/``). Given the store's ``root``,
    rows name their entry directory under ``root/entries/`` whatever directory was recorded, so
    the index of a copied or moved store stays right; without it, the recorded path.
    """

    def __init__(
        self, path: Path | None, *, read_only: bool = False, root: Path | None = None
    ) -> None:
        self.path = path if path is not None else Path(":memory:")
        self._entries = os.fspath(root / layout.ENTRIES) if root is not None else None
        self.created = False
        if path is not None and os.path.lexists(path) and not os.path.isfile(path):
            raise IndexCorruptError(f"{path}: the store index is not a regular file")
        try:
            if path is None:
                self._db = sqlite3.connect(":memory:", isolation_level=None)
            elif read_only:
                self._db = self._connect_read_only(path)
            else:
                self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
        except sqlite3.Error as e:
            cls = IndexCorruptError if _corrupt(e) else StoreError
            raise cls(f"{path}: cannot open the store index: {e}") from e
        try:
            if read_only and path is not None:
                version = self._db.execute("PRAGMA user_version").fetchone()[0]
                if version != SCHEMA_VERSION:
                    raise StoreError(f"{path}: index schema {version} cannot be read")
                register_functions(self._db)
            else:
                self._setup(memory=path is None)
        except sqlite3.Error as e:
            self._db.close()
            cls = IndexCorruptError if _corrupt(e) else StoreError
            raise cls(f"{path}: cannot set up the store index: {e}") from e
        except BaseException:
            self._db.close()
            raise

    @staticmethod
    def _connect_read_only(path: Path) -> sqlite3.Connection:
        uri = "file:" + urllib.parse.quote(os.path.abspath(path))
        try:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
            db.execute("PRAGMA user_version").fetchone()
            return db
        except sqlite3.Error as e:
            if _corrupt(e):
                raise
        # A WAL database on a read-only mount cannot make its -shm: read it as immutable.
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)

    def _setup(self, *, memory: bool = False) -> None:
        db = self._db
        # Names compare as pip compares them (PEP 503), in SQL too.
        register_functions(db)
        if memory:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self.created = True
            return
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{self.path}: cannot switch the store index to WAL (got {mode})")
        db.execute("PRAGMA synchronous = NORMAL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: index schema {version} is newer than this rocmforge "
                f"understands ({SCHEMA_VERSION}); upgrade rocmforge"
            )
        with self._write():
            # Re-read under the write lock: a concurrent opener may have created it.
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self.created = True

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """Run the body in one IMMEDIATE transaction, rolled back on any exception."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _fail(self, what: str, e: sqlite3.Error) -> StoreError:
        cls = IndexCorruptError if _corrupt(e) else StoreError
        return cls(f"{self.path}: store index {what} failed: {e}")

    def integrity_problem(self) -> str | None:
        """Run SQLite's ``quick_check``; return what it found, or None when the file is sound."""
        try:
            rows = self._db.execute("PRAGMA quick_check").fetchall()
        except sqlite3.Error as e:
            return str(e)
        found = [str(r[0]) for r in rows if r and r[0] != "ok"]
        return "; ".join(found[:3]) or None

    # -- writing ----------------------------------------------------------------------------------

    def add(self, entry: Entry, derivation: Mapping[str, Any]) -> None:
        """Insert or replace ``entry``; env rows come from ``derivation["env"]``."""
        try:
            with self._write() as db:
                self._insert(db, entry, derivation, last_used=None)
        except sqlite3.Error as e:
            raise self._fail(f"add of {entry.hash}", e) from e

    def _insert(
        self,
        db: sqlite3.Connection,
        entry: Entry,
        derivation: Mapping[str, Any],
        *,
        last_used: float | None,
    ) -> None:
        meta = entry.meta
        created = meta.created
        sandbox = meta.sandbox
        if sandbox is not None and not isinstance(sandbox, str):
            sandbox = json.dumps(sandbox, sort_keys=True, separators=(",", ":"))
        env = DerivationDoc(derivation).env
        if env is None:
            raise StoreError(f"derivation of {entry.hash}: 'env' is not a table")
        db.execute(
            """
            INSERT INTO entries (hash, name, version, path, created, last_used, size, sandbox)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(hash) DO UPDATE SET
                name = excluded.name, version = excluded.version, path = excluded.path,
                created = excluded.created, size = excluded.size, sandbox = excluded.sandbox,
                last_used = max(entries.last_used, excluded.last_used)
            """,
            (
                entry.hash,
                entry.name,
                entry.version,
                str(entry.path),
                created,
                max(created, last_used or 0.0),
                meta.size,
                sandbox,
            ),
        )
        db.execute("DELETE FROM wheels WHERE hash = ?", (entry.hash,))
        db.execute("DELETE FROM env WHERE hash = ?", (entry.hash,))
        wheel_rows = [
            (entry.hash, w.file, w.sha256.lower(), w.blake3.lower()) for w in meta.wheels
        ]
        db.executemany(
            "INSERT INTO wheels (hash, filename, sha256, blake3) VALUES (?, ?, ?, ?)", wheel_rows
        )
        db.executemany(
            "INSERT INTO env (hash, key, value) VALUES (?, ?, ?)",
            [(entry.hash, str(k), str(v)) for k, v in env.items()],
        )

    def remove(self, hash: str) -> None:
        """Forget ``hash`` (a no-op if it is not indexed)."""
        try:
            with self._write() as db:
                for table in ("entries", "wheels", "env"):
                    db.execute(f"DELETE FROM {table} WHERE hash = ?", (hash,))
        except sqlite3.Error as e:
            raise self._fail(f"remove of {hash}", e) from e

    def remove_many(self, hashes: Iterable[str]) -> None:
        """Forget every hash in ``hashes`` in one transaction (unknown ones are ignored)."""
        rows = [(h,) for h in hashes]
        try:
            with self._write() as db:
                for table in ("entries", "wheels", "env"):
                    db.executemany(f"DELETE FROM {table} WHERE hash = ?", rows)
        except sqlite3.Error as e:
            raise self._fail(f"removal of {len(rows)} entries", e) from e

    def touch(self, hash: str, when: float) -> None:
        """Record that ``hash`` was used at ``when`` (last_used never moves backwards)."""
        try:
            self._db.execute(
                "UPDATE entries SET last_used = max(last_used, ?) WHERE hash = ?", (when, hash)
            )
        except sqlite3.Error as e:
            raise self._fail(f"touch of {hash}", e) from e

    def rebuild(self, entries: Iterable[tuple[Entry, Mapping[str, Any]]]) -> int:
        """Replace the whole index by ``entries`` in one transaction; return how many.

        ``last_used`` of entries that were already indexed is kept.
        """
        try:
            with self._write() as db:
                used = dict(db.execute("SELECT hash, last_used FROM entries").fetchall())
                for table in ("entries", "wheels", "env"):
                    db.execute(f"DELETE FROM {table}")
                n = 0
                for entry, derivation in entries:
                    self._insert(db, entry, derivation, last_used=used.get(entry.hash))
                    n += 1
        except sqlite3.Error as e:
            raise self._fail("rebuild", e) from e
        return n

    # -- reading ----------------------------------------------------------------------------------

    def _rows(self, where: str, params: Sequence[Any]) -> list[IndexRow]:
        try:
            # One pass over entries LEFT JOIN wheels: rows of one entry arrive together.
            rows = self._db.execute(
                "SELECT e.hash, e.name, e.version, e.path, e.created, e.last_used, e.size, "
                "e.sandbox, w.filename, w.sha256, w.blake3 "
                f"FROM (SELECT * FROM entries WHERE {where}) e "
                "LEFT JOIN wheels w ON w.hash = e.hash ORDER BY e.created, e.hash, w.filename",
                params,
            ).fetchall()
        except sqlite3.Error as e:
            raise self._fail("query", e) from e
        out: list[IndexRow] = []
        i, n = 0, len(rows)
        while i < n:
            h, name, version, path, created, last_used, size, sandbox = rows[i][:8]
            wheels: list[WheelRow] = []
            while i < n and rows[i][0] == h:
                if rows[i][8] is not None:
                    filename, sha256, b3 = rows[i][8:]
                    wheels.append(WheelRow(filename=filename, sha256=sha256, blake3=b3))
                i += 1
            out.append(
                IndexRow(
                    hash=h,
                    name=name,
                    version=version,
                    location=(
                        path
                        if self._entries is None
                        else os.path.join(self._entries, os.path.basename(path))
                    ),
                    created=created,
                    last_used=last_used,
                    size=size,
                    sandbox=sandbox,
                    wheels=tuple(wheels),
                )
            )
        return out

    def get(self, hash: str) -> IndexRow | None:
        """Return the row of ``hash`` or None."""
        rows = self._rows("hash = ?", (hash,))
        return rows[0] if rows else None

    def by_prefix(self, prefix: str) -> list[IndexRow]:
        """Return the rows whose hash starts with ``prefix`` (lowercase hex)."""
        if prefix and not layout.is_hex(prefix):
            return []
        return self._rows("hash GLOB ?", (prefix + "*",))

    def by_wheel_digest(self, digest: str) -> list[IndexRow]:
        """Return the rows with a wheel whose sha256 or blake3 hex digest is ``digest``."""
        d = digest.lower()
        return self._rows(
            "hash IN (SELECT hash FROM wheels WHERE sha256 = ? OR blake3 = ?)", (d, d)
        )

    def by_name(self, name: str) -> list[IndexRow]:
        """Return the rows of package ``name`` (PEP 503: case, ``-_.`` alike), oldest first."""
        return self._rows("rf_normal_name(name) = ?", (layout.normal_name(name),))

    def by_env(self, key: str, value: str) -> list[IndexRow]:
        """Return the rows whose derivation env had ``key`` set to ``value``."""
        return self._rows(
            "hash IN (SELECT hash FROM env WHERE key = ? AND value = ?)", (key, value)
        )

    def env_values(self, hashes: Sequence[str], keys: Sequence[str]) -> dict[str, dict[str, str]]:
        """Return ``{hash: {key: value}}`` of the hashed env ``keys`` of the entries ``hashes``."""
        if not hashes or not keys:
            return {}
        out: dict[str, dict[str, str]] = {}
        wanted = list(dict.fromkeys(keys))
        try:
            for start in range(0, len(hashes), 500):  # stay below SQLite's parameter limit
                part = list(hashes[start : start + 500])
                rows = self._db.execute(
                    f"SELECT hash, key, value FROM env WHERE hash IN ({','.join('?' * len(part))})"
                    f" AND key IN ({','.join('?' * len(wanted))})",
                    [*part, *wanted],
                ).fetchall()
                for h, key, value in rows:
                    out.setdefault(h, {})[key] = value
        except sqlite3.Error as e:
            raise self._fail("query", e) from e
        return out

    def query(
        self,
        *,
        name: str | None = None,
        version: str | None = None,
        env_equals: Sequence[tuple[str, str]] = (),
        env_contains: Sequence[tuple[str, str]] = (),
        since: float | None = None,
    ) -> list[IndexRow]:
        """Return the rows matching every given filter, oldest first.

        ``name`` compares case-insensitively; ``env_equals`` are ``(key, value)`` pairs that must
        be set exactly; ``env_contains`` are ``(key, substring)`` pairs; ``since`` is the
        earliest creation time.
        """
        clauses, names = name_version_clauses(name, version)
        params: list[Any] = list(names)
        for key, value in env_equals:
            clauses.append("hash IN (SELECT hash FROM env WHERE key = ? AND value = ?)")
            params += [key, value]
        for key, part in env_contains:
            clauses.append("hash IN (SELECT hash FROM env WHERE key = ? AND instr(value, ?) > 0)")
            params += [key, part]
        if since is not None:
            clauses.append("created >= ?")
            params.append(since)
        return self._rows(" AND ".join(clauses) or "1", params)

    def rows(self) -> list[IndexRow]:
        """Return every row, oldest first."""
        return self._rows("1", ())

    def summary_rows(
        self, *, name: str | None = None, version: str | None = None
    ) -> Iterator[tuple[str, str, str, int, float, float]]:
        """Yield ``(hash, name, version, size, created, last_used)`` of every entry (or those of
        ``name`` and ``version``), oldest first, as plain tuples streamed from one SELECT (no
        wheels, no row objects): what ``list`` prints."""
        from rocmforge.store.scan import summary_query

        sql, params = summary_query(name=name, version=version)
        try:
            cur = self._db.execute(sql, params)
            while batch := cur.fetchmany(4096):
                yield from batch
        except sqlite3.Error as e:
            raise self._fail("query", e) from e

    def journal_mode(self) -> str:
        """Return the database's journal mode (``"wal"`` when healthy)."""
        try:
            return str(self._db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        except sqlite3.Error as e:
            raise self._fail("query", e) from e

    # -- lifetime ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (idempotent)."""
        try:
            self._db.close()
        except sqlite3.Error as e:
            raise self._fail("close", e) from e

    def __enter__(self) -> Index:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def set_aside(index_path: Path, root: Path) -> Path:
    """Rename a corrupt ``index.sqlite`` (and its -wal, -shm) out of the way; return its new
    path (``index.sqlite.corrupt-<time>-<rand>`` in ``root``)."""
    aside = root / f"{layout.INDEX}.corrupt-{int(time.time())}-{os.urandom(3).hex()}"
    try:
        os.rename(index_path, aside)
        for suffix in ("-wal", "-shm"):
            with suppress(FileNotFoundError):
                os.rename(f"{index_path}{suffix}", f"{aside}{suffix}")
    except OSError as e:
        raise StoreError(f"cannot set the corrupt index {index_path} aside: {e}") from e
    return aside


def open_index(
    index_path: Path, root: Path, *, writable: bool, notice: Callable[[str, Path, str], None]
) -> tuple[Index, bool]:
    """Open the store's index; return it and whether it must be rebuilt from ``entries/``.

    A corrupt index is set aside (:func:`set_aside`) and made anew; a read-only store opens it
    read-only and, when that is impossible (corrupt, missing), uses one in memory. Each repair
    is told to ``notice`` as ``(kind, path, detail)``.
    """
    try:
        return Index(index_path, read_only=not writable, root=root), False
    except IndexCorruptError as e:
        if writable:
            aside = set_aside(index_path, root)
            notice(
                "corrupt-index",
                index_path,
                f"{e}; set aside as {aside.name} and rebuilt from {layout.ENTRIES}/",
            )
            return Index(index_path, root=root), True
        notice(
            "corrupt-index", index_path, f"{e}; read-only store: using an index rebuilt in memory"
        )
        return Index(None, root=root), True
    except StoreError:
        if writable:
            raise
        return Index(None, root=root), True  # a read-only store without an index
