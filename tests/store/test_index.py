"""Tests of the SQLite store index: WAL, schema version, add/get/queries/remove/touch/rebuild."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocmforge.errors import StoreError
from rocmforge.store.entry import Entry, EntryMeta
from rocmforge.store.index import SCHEMA_VERSION, Index, IndexRow, WheelRow

H1 = "0123456789abcdef0123456789abcdef"
H2 = "0123ffffffffffffffffffffffffffff"
H3 = "fedcba9876543210fedcba9876543210"
REPO = Path(__file__).resolve().parents[2]


def make_entry(
    hash: str,
    *,
    name: str = "torch",
    version: str = "2.5.1",
    created: float = 100.0,
    sha: str = "",
    b3: str = "",
    sandbox: Any = "bwrap",
) -> Entry:
    path = Path("/store/entries") / f"{hash}-{name}-{version}"
    wheel = f"{name}-{version}-cp311-cp311-linux_x86_64.whl"
    meta = {
        "hash": hash,
        "name": name,
        "version": version,
        "created": created,
        "size": 1234,
        "sandbox": sandbox,
        "wheels": [
            {"file": wheel, "sha256": sha or "a" * 64, "blake3": b3 or "b" * 64, "size": 1000}
        ],
    }
    return Entry.from_meta(path, EntryMeta.from_json(meta, file=path / "meta.json"))


def deriv(**env: str) -> dict[str, Any]:
    return {"env": env, "builder": 1}


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    idx = Index(tmp_path / "index.sqlite")
    yield idx
    idx.close()


def test_index_uses_wal_busy_timeout_and_schema_version(tmp_path: Path, index: Index) -> None:
    assert index.journal_mode() == "wal"
    raw = sqlite3.connect(tmp_path / "index.sqlite")
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"entries", "wheels", "env"}
        indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"entries_name", "wheels_sha256", "wheels_blake3", "env_key_value"} <= indexes
    finally:
        raw.close()
    assert index._db.execute("PRAGMA busy_timeout").fetchone()[0] == 30000


def test_reopening_keeps_data(tmp_path: Path) -> None:
    with Index(tmp_path / "i.sqlite") as idx:
        idx.add(make_entry(H1), deriv(A="1"))
    with Index(tmp_path / "i.sqlite") as idx:
        assert idx.get(H1) is not None


def test_add_and_get(index: Index) -> None:
    assert index.get(H1) is None
    e = make_entry(H1, sha="C" * 64, b3="d" * 64)
    index.add(e, deriv(USE_ROCM="1", PYTORCH_ROCM_ARCH="gfx942"))
    row = index.get(H1)
    assert row == IndexRow(
        hash=H1,
        name="torch",
        version="2.5.1",
        location=str(e.path),
        created=100.0,
        last_used=100.0,
        size=1234,
        sandbox="bwrap",
        wheels=(WheelRow(filename=e.wheels[0].name, sha256="c" * 64, blake3="d" * 64),),
    )


def test_add_is_an_upsert(index: Index) -> None:
    index.add(make_entry(H1), deriv(A="1", B="2"))
    index.add(make_entry(H1, sha="e" * 64, sandbox={"level": "none"}), deriv(A="9"))
    assert len(index.rows()) == 1
    row = index.get(H1)
    assert row is not None and row.sandbox == '{"level":"none"}'
    assert [w.sha256 for w in row.wheels] == ["e" * 64]
    assert index.by_env("A", "1") == []
    assert index.by_env("B", "2") == []
    assert [r.hash for r in index.by_env("A", "9")] == [H1]
    assert index.by_wheel_digest("a" * 64) == []


def test_queries(index: Index) -> None:
    index.add(make_entry(H1, created=1.0, sha="1" * 64, b3="2" * 64), deriv(ARCH="gfx942"))
    index.add(make_entry(H2, created=2.0, sha="3" * 64, b3="4" * 64), deriv(ARCH="gfx90a"))
    index.add(
        make_entry(H3, name="numpy", version="2.0.2", created=3.0, sha="5" * 64),
        deriv(ARCH="gfx942"),
    )
    assert [r.hash for r in index.by_prefix("0123")] == [H1, H2]
    assert [r.hash for r in index.by_prefix("0123f")] == [H2]
    assert [r.hash for r in index.by_prefix(H3)] == [H3]
    assert index.by_prefix("zz") == []
    assert index.by_prefix("0123%") == []
    assert [r.hash for r in index.by_wheel_digest("3" * 64)] == [H2]
    assert [r.hash for r in index.by_wheel_digest("4" * 64)] == [H2]
    assert [r.hash for r in index.by_wheel_digest("2" * 64)] == [H1]
    assert index.by_wheel_digest("9" * 64) == []
    assert [r.hash for r in index.by_name("torch")] == [H1, H2]
    assert [r.hash for r in index.by_name("numpy")] == [H3]
    assert [r.hash for r in index.by_env("ARCH", "gfx942")] == [H1, H3]
    assert [r.hash for r in index.by_env("ARCH", "gfx90a")] == [H2]
    assert index.by_env("ARCH", "gfx1100") == []


def test_remove_and_touch(index: Index) -> None:
    index.add(make_entry(H1), deriv(A="1"))
    index.add(make_entry(H2), deriv(A="1"))
    index.touch(H1, 500.0)
    index.touch(H1, 400.0)  # never moves backwards
    row = index.get(H1)
    assert row is not None and row.last_used == 500.0
    index.remove(H1)
    assert index.get(H1) is None
    assert [r.hash for r in index.by_env("A", "1")] == [H2]
    assert index.by_wheel_digest("a" * 64)[0].hash == H2
    index.remove(H1)  # idempotent


def test_rebuild_replaces_everything_and_keeps_last_used(index: Index) -> None:
    index.add(make_entry(H1), deriv(A="1"))
    index.add(make_entry(H2), deriv(A="1"))
    index.touch(H1, 999.0)
    n = index.rebuild([(make_entry(H1), deriv(A="2")), (make_entry(H3), deriv(A="2"))])
    assert n == 2
    assert [r.hash for r in index.rows()] == [H1, H3]
    assert index.by_env("A", "1") == []
    row = index.get(H1)
    assert row is not None and row.last_used == 999.0


def test_rebuild_is_one_transaction(index: Index) -> None:
    index.add(make_entry(H1), deriv(A="1"))

    def broken() -> Iterator[tuple[Entry, dict[str, Any]]]:
        yield make_entry(H2), deriv(A="2")
        yield make_entry(H3), {"env": ["not", "a", "table"]}

    with pytest.raises(StoreError, match="env"):
        index.rebuild(broken())
    assert [r.hash for r in index.rows()] == [H1]


def test_sqlite_errors_become_store_errors_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"garbage\.sqlite"):
        Index(bad)
    with pytest.raises(StoreError, match="nodir"):
        Index(tmp_path / "nodir" / "index.sqlite")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "i.sqlite"
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(StoreError, match="newer"):
        Index(path)


def test_a_reader_does_not_block_a_writer_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "i.sqlite"
    with Index(path) as idx:
        idx.add(make_entry(H1), deriv(A="1"))
        reader = idx._db
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM entries").fetchone()[0] == 1
        code = """
            import sys
            from pathlib import Path
            from rocmforge.store.index import Index
            with Index(Path(sys.argv[1])) as idx:
                idx.remove(sys.argv[2])
            print("written")
        """
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), str(path), H1],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert proc.stdout.strip() == "written", proc.stderr
        # The open read transaction still sees its snapshot (WAL), then the new state.
        assert reader.execute("SELECT count(*) FROM entries").fetchone()[0] == 1
        reader.execute("COMMIT")
        assert idx.get(H1) is None
