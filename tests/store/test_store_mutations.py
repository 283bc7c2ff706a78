"""Every kind of store damage is detected by ``verify``, repaired or quarantined by
``verify --repair``, and never makes a later realize return a damaged wheel.

One real entry is built once per module; each mutation works on its own ``cp -a`` copy.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import build_tiny_entry, rf

from rocmforge.util.hashing import file_blake3


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A store with one tiny entry built by the real CLI (copied per case)."""
    return build_tiny_entry(tmp_path_factory.mktemp("mutations"))


class Case:
    """A store copy being damaged: the entry directory and the files in it."""

    def __init__(self, store: Path, built: dict) -> None:
        self.store = store
        self.entry = store / "entries" / built["entry"]
        self.hash = built["entry"][:32]
        self.wheel = self.entry / built["wheel"]
        self.index = store / "index.sqlite"
        os.chmod(self.entry, 0o755)  # root's careless tool; modes are restored below

    def writable(self, path: Path) -> Path:
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o644)
        return path

    def flip(self, path: Path, offset: int = -40, *, keep_mtime: bool = False) -> None:
        st = path.stat()
        data = bytearray(path.read_bytes())
        data[offset] ^= 0x01
        self.writable(path).write_bytes(bytes(data))
        if keep_mtime:
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    def db(self, sql: str, *params: object) -> None:
        db = sqlite3.connect(self.index)
        with db:
            db.execute(sql, params)
        db.close()

    def index_file(self, damage: Callable[[Path], None]) -> None:
        for suffix in ("-wal", "-shm"):
            Path(f"{self.index}{suffix}").unlink(missing_ok=True)
        damage(self.index)


def _flip_meta_digest(c: Case) -> None:
    meta = c.entry / "meta.json"
    text = meta.read_text()
    i = text.index('"blake3": "') + len('"blake3": "')
    swapped = "0" if text[i] != "0" else "1"
    c.writable(meta).write_text(text[:i] + swapped + text[i + 1 :])


def _edit_meta(c: Case) -> None:
    meta = c.entry / "meta.json"
    data = json.loads(meta.read_text())
    data["sandbox"] = "none"
    c.writable(meta).write_text(json.dumps(data, indent=2, sort_keys=True))


def _stray_entry_dir(c: Case, junk: bool) -> None:
    stray = c.store / "entries" / ("f" * 32 + "-stray-1.0")
    stray.mkdir()
    if junk:
        (stray / "stray-1.0-py3-none-any.whl").write_bytes(b"not a wheel")


def _replace_by_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


MUTATIONS: dict[str, Callable[[Case], None]] = {
    "wheel byte flip": lambda c: c.flip(c.wheel),
    "wheel byte flip, size and mtime kept": lambda c: c.flip(c.wheel, keep_mtime=True),
    "wheel truncated": lambda c: _truncate(c.writable(c.wheel)),
    "wheel deleted": lambda c: c.wheel.unlink(),
    "wheel replaced by a symlink": lambda c: (
        c.wheel.unlink(),
        c.wheel.symlink_to(c.entry / "derivation.json"),
    ),
    "meta.json byte flip in a digest": _flip_meta_digest,
    "meta.json edited and well-formed": _edit_meta,
    "meta.json truncated": lambda c: _truncate(c.writable(c.entry / "meta.json")),
    "meta.json missing": lambda c: (c.entry / "meta.json").unlink(),
    "meta.json replaced by a directory": lambda c: _replace_by_dir(c.entry / "meta.json"),
    "derivation byte flip": lambda c: c.flip(c.entry / "derivation.json", 30),
    "derivation deleted": lambda c: (c.entry / "derivation.json").unlink(),
    "build log byte flip": lambda c: c.flip(c.entry / "build.log.zst"),
    "build log deleted": lambda c: (c.entry / "build.log.zst").unlink(),
    "provenance byte flip": lambda c: c.flip(c.entry / "provenance.json", 60),
    "provenance deleted": lambda c: (c.entry / "provenance.json").unlink(),
    "stray file in an entry": lambda c: (c.entry / "extra.txt").write_text("x"),
    "stray directory in an entry": lambda c: (c.entry / "extra").mkdir(),
    "stray file in entries/": lambda c: (c.store / "entries" / "junk").write_text("x"),
    "stray entry-like directory": lambda c: _stray_entry_dir(c, junk=False),
    "stray entry-like directory with a wheel": lambda c: _stray_entry_dir(c, junk=True),
    "entry directory deleted": lambda c: shutil.rmtree(c.entry),
    "index truncated": lambda c: c.index_file(_truncate),
    "index garbage": lambda c: c.index_file(lambda p: p.write_bytes(os.urandom(8192))),
    "index is a directory": lambda c: c.index_file(_replace_by_dir),
    "index lost the entry": lambda c: c.db("DELETE FROM entries WHERE hash = ?", c.hash),
    "index records another wheel digest": lambda c: c.db(
        "UPDATE wheels SET blake3 = ? WHERE hash = ?", "0" * 64, c.hash
    ),
    "publish interrupted before indexing": lambda c: (
        c.db("DELETE FROM entries WHERE hash = ?", c.hash),
        (c.store / "pending").mkdir(exist_ok=True),
        (c.store / "pending" / c.entry.name).touch(),
    ),
}
#: Damage the cheap hit check cannot see (same size and mtime): only verify finds it.
NEEDS_VERIFY_FIRST = {"wheel byte flip, size and mtime kept"}


def _verify(store: Path, *extra: str) -> tuple[int, dict]:
    proc = rf("verify", "--store", store, "--json", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _realize_sound(built: dict, store: Path) -> None:
    for extra in ((), ("--json",)):  # the memo's fast path, then the full pipeline
        proc = rf("realize", built["recipe"], "--store", store, *extra)
        assert proc.returncode == 0, proc.stderr
        if extra:
            wheel = Path(json.loads(proc.stdout)[0]["wheels"][0])
        else:
            wheel = Path(proc.stdout.strip().splitlines()[-1])
        assert wheel.parent.parent.parent == store
        assert wheel.is_file() and not wheel.is_symlink()
        assert file_blake3(wheel) == built["blake3"]


def test_there_are_at_least_25_mutations() -> None:
    assert len(MUTATIONS) >= 25


@pytest.mark.parametrize("name", sorted(MUTATIONS))
@pytest.mark.slow
def test_a_mutation_is_detected_repaired_and_never_served(
    built: dict, tmp_path: Path, name: str
) -> None:
    store = tmp_path / "store"
    subprocess.run(["cp", "-a", str(built["store"]), str(store)], check=True)
    case = Case(store, built)
    MUTATIONS[name](case)
    if case.entry.is_dir():
        os.chmod(case.entry, 0o555)

    code, report = _verify(store)
    assert code == 1 or report["repaired"], report  # found (or healed on sight, and said so)

    if name not in NEEDS_VERIFY_FIRST:
        _realize_sound(built, store)

    code, report = _verify(store, "--repair")
    assert code == 0, report
    code, report = _verify(store)
    assert code == 0 and not report["problems"], report
    _realize_sound(built, store)  # rebuilds what the repair quarantined
    code, report = _verify(store)
    assert code == 0 and report["entries"] == 1, report
    assert not (store / "pending").exists() or not os.listdir(store / "pending")
