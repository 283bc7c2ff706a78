"""The store layout (one owner of every name, import-free) and the typed ``meta.json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.entry import EntryMeta, WheelRecord, read_meta
from rocmforge.store.roots import entry_of_path
from rocmforge.store.store import Store, open_store
from rocmforge.store.verify import verify_store
from rocmforge.util.fsutil import json_bytes, remove_tree, symlink_atomic

REPO = Path(__file__).resolve().parents[2]
H1 = "0123456789abcdef0123456789abcdef"
H2 = "fedcba9876543210fedcba9876543210"


def publish(store: Store, hash: str = H1, *, name: str = "demo", version: str = "1.0") -> Path:
    with store.new_build_dir(hash) as bd:
        staged = bd.path / "out"
        staged.mkdir()
        (staged / f"{name}-{version}-py3-none-any.whl").write_bytes(b"PK wheel")
        (staged / layout.DERIVATION).write_text(json.dumps({"env": {"A": "1"}}))
        (staged / layout.BUILD_LOG).write_bytes(b"log")
        meta = {"sandbox": "bwrap", "build_seconds": 1.5, "sources": ["wheels/x.whl"]}
        return store.publish(staged, hash=hash, name=name, version=version, meta=meta).path


# -- the checks -----------------------------------------------------------------------------------


def test_hash_checks() -> None:
    assert layout.is_hash(H1)
    for bad in ("", H1[:-1], H1 + "0", H1.upper(), "g" * 32, H1[:-1] + "-", " " + H1[1:]):
        assert not layout.is_hash(bad), bad
    assert layout.is_hex("0a") and not layout.is_hex("") and not layout.is_hex("0A")


@pytest.mark.parametrize(
    "dirname",
    [f"{H1}-torch-2.5.1", f"{H1}-my-pkg-1.0", f"{H1}-torch-2.5.1+rocm6.2", f"{H1}-a-1"],
)
def test_entry_names_accepted(dirname: str) -> None:
    assert layout.is_entry_name(dirname)


@pytest.mark.parametrize(
    "dirname",
    [
        f"{H1}--1.0",  # empty name
        f"{H1}-",  # empty name and version
        f"{H1}-torch",  # no version
        f"{H1}-torch-",  # empty version
        f"{H1}-.torch-1.0",  # name starts with a dot
        f"{H1}-torch-1.0/x",
        f"{H1.upper()}-torch-1.0",
        f"{H1[:-1]}-torch-1.0",
        f"{H1}_torch-1.0",
        f"{H1}-tørch-1.0",
    ],
)
def test_entry_names_refused(dirname: str) -> None:
    assert not layout.is_entry_name(dirname)


def test_entry_problem_names_the_bad_part() -> None:
    assert layout.entry_problem(H1, "torch", "2.5.1") is None
    assert "input hash" in (layout.entry_problem("abc", "torch", "1") or "")
    assert "package name" in (layout.entry_problem(H1, "", "1") or "")
    assert "version" in (layout.entry_problem(H1, "torch", "") or "")


def test_build_dir_names() -> None:
    name = layout.build_dir_name(H1, 1234, "00ff")
    assert layout.parse_build_dir_name(name) == (H1, "1234")
    for bad in (f"{H1}.12.zz", f"{H1}.x.00", f"{H1}.1", f"{H1}.1.00.lock", f"{H1[:-1]}.1.00"):
        assert layout.parse_build_dir_name(bad) is None, bad


def test_an_entry_directory_with_an_empty_name_is_no_entry(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    with pytest.raises(StoreError, match="package name"):
        store.entry_dir(H1, "", "1.0")
    for bad in (f"{H1}-", f"{H1}--1.0"):
        d = store.entries_dir / bad
        d.mkdir()
        (d / "file").write_text("x")
        # gc roots must not take such a directory for an entry (a link into it roots nothing)
        assert entry_of_path(store, d / "file") is None
    good = publish(store)
    assert entry_of_path(store, good / layout.META) == good.name
    assert [e.path for e in store.entries()] == [good]
    report = verify_store(store)
    orphans = sorted(p.path.name for p in report.problems if p.kind == "orphaned")
    assert orphans == sorted([f"{H1}-", f"{H1}--1.0"])
    store.close()


def test_layout_and_memo_import_nothing_heavy() -> None:
    code = (
        "import sys; import rocmforge.store.layout; a = sorted(sys.modules); "
        "import rocmforge.pipeline.memo; b = sorted(sys.modules); "
        "print(' '.join(m for m in a if m.startswith('rocmforge') or m == 're')); "
        "print(' '.join(m for m in b if m.startswith('rocmforge') or m == 're'))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.splitlines()
    assert out[0].split() == ["rocmforge", "rocmforge.store", "rocmforge.store.layout"]
    assert out[1].split() == [
        "rocmforge", "rocmforge.pipeline", "rocmforge.pipeline.memo", "rocmforge.store",
        "rocmforge.store.layout",
    ]  # fmt: skip


def test_each_file_name_is_spelled_once() -> None:
    """The store's file names are spelled only in layout.py; everything else goes through it."""
    names = [
        layout.META, layout.DERIVATION, layout.BUILD_LOG, layout.PROVENANCE, layout.INDEX,
        layout.GC_LOCK,
    ]  # fmt: skip
    found: dict[str, list[str]] = {n: [] for n in names}
    for path in sorted((REPO / "rocmforge").rglob("*.py")):
        text = path.read_text()
        for n in names:
            if f'"{n}"' in text or f"'{n}'" in text:
                found[n].append(path.relative_to(REPO).as_posix())
    assert found == {n: ["rocmforge/store/layout.py"] for n in names}


# -- meta.json ------------------------------------------------------------------------------------


def test_entry_meta_round_trips_the_published_bytes(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    path = publish(store)
    raw = (path / layout.META).read_bytes()
    meta = read_meta(path)
    assert meta is not None
    assert json_bytes(meta.to_json()) == raw
    assert EntryMeta.from_bytes(raw, file="x") == meta
    assert meta.dirname == path.name
    assert meta.sandbox == "bwrap" and meta.build_seconds == 1.5
    assert meta.sources == ("wheels/x.whl",) and meta.files is None and meta.archs is None
    [wheel] = meta.wheels
    assert isinstance(wheel, WheelRecord) and meta.wheel(wheel.file) == wheel
    assert wheel.size == len(b"PK wheel")
    assert read_meta(tmp_path) is None
    store.close()


def test_entry_meta_keeps_unknown_keys() -> None:
    data = {
        "hash": H1, "name": "demo", "version": "1.0", "created": 5, "size": 3,
        "wheels": [{"file": "demo-1.0-py3-none-any.whl", "sha256": "aa", "blake3": "bb"}],
        "from_the_future": {"x": [1, 2]},
    }  # fmt: skip
    meta = EntryMeta.from_json(data, file="m.json")
    assert meta.extra == {"from_the_future": {"x": [1, 2]}}
    assert meta.to_json() == data
    assert json.dumps(meta.to_json(), sort_keys=True) == json.dumps(data, sort_keys=True)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("size", "big"),
        ("size", -1),
        ("created", None),
        ("created", True),
        ("name", 7),
        ("name", ""),
        ("hash", "xyz"),
        ("wheels", {}),
        ("wheels", [{"file": "../evil.whl", "sha256": "a", "blake3": "b"}]),
        ("wheels", [{"file": "demo-1.0-py3-none-any.whl", "sha256": 1, "blake3": "b"}]),
        ("sandbox", 3),
        ("build_seconds", "fast"),
        ("sources", "wheels/x.whl"),
        ("files", {"build.log.zst": 1}),
        ("archs", []),
    ],
)
def test_a_bad_meta_field_is_a_store_error_naming_the_file(
    tmp_path: Path, field: str, value: object
) -> None:
    store = open_store(tmp_path / "s")
    path = publish(store, H2)
    meta_path = path / layout.META
    data = json.loads(meta_path.read_bytes())
    data[field] = value
    os.chmod(path, 0o755)
    os.chmod(meta_path, 0o644)
    meta_path.write_text(json.dumps(data))
    with pytest.raises(StoreError) as info:
        store.load(path)
    message = str(info.value)
    assert str(meta_path) in message
    assert field in message or "input hash" in message or "package name" in message
    # A lookup treats the damaged entry as a miss: moved to quarantine/, reported, never fatal.
    assert store.lookup(H2, "demo", "1.0") is None
    assert not path.exists() and len(os.listdir(store.root / layout.QUARANTINE)) == 1
    assert [h.kind for h in store.healed] == ["quarantined"]
    assert str(meta_path) in store.healed[0].detail
    store.close()


def test_a_published_entry_needs_a_valid_meta(tmp_path: Path) -> None:
    """publish checks the meta it writes: a caller's bad field never reaches the store."""
    store = open_store(tmp_path / "s")
    with store.new_build_dir(H1) as bd:
        staged = bd.path / "out"
        staged.mkdir()
        (staged / "demo-1.0-py3-none-any.whl").write_bytes(b"PK")
        (staged / layout.DERIVATION).write_text("{}")
        with pytest.raises(StoreError, match="sandbox"):
            store.publish(staged, hash=H1, name="demo", version="1.0", meta={"sandbox": 1})
    assert store.lookup(H1, "demo", "1.0") is None
    store.close()


# -- the shared file helpers ----------------------------------------------------------------------


def test_remove_tree_removes_sealed_trees_and_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    tree = tmp_path / "tree"
    for i in range(20):  # more than 16 children: removed by threads
        sub = tree / f"d{i}" / "deeper"
        sub.mkdir(parents=True)
        (sub / "f").write_text("x")
        os.chmod(sub / "f", 0o444)
        os.chmod(sub, 0o555)
        os.chmod(sub.parent, 0o555)
    os.symlink(outside, tree / "link")
    os.chmod(tree, 0o555)
    remove_tree(tree)
    assert not os.path.lexists(tree)
    assert (outside / "keep").read_text() == "keep"
    remove_tree(tree)  # a missing path is fine
    link = tmp_path / "alone"
    os.symlink(outside, link)
    remove_tree(link)
    assert not os.path.lexists(link) and outside.is_dir()


def test_symlink_atomic_replaces_a_link(tmp_path: Path) -> None:
    link = tmp_path / "sub" / "link"
    with pytest.raises(FileNotFoundError):
        symlink_atomic("a", link)
    symlink_atomic("a", link, make_parents=True)
    symlink_atomic("b", link)
    assert os.readlink(link) == "b"
    assert sorted(os.listdir(link.parent)) == ["link"]
