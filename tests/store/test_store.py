"""Tests of the content-addressed store: layout, publish, lookup, locks, leftovers, resolve."""

from __future__ import annotations

import itertools
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rocmforge.errors import StoreError, UsageError
from rocmforge.store.entry import Entry
from rocmforge.store.store import Store, open_store
from rocmforge.util.hashing import file_digests

REPO = Path(__file__).resolve().parents[2]
H1 = "0123456789abcdef0123456789abcdef"
H2 = "0123ffffffffffffffffffffffffffff"
H3 = "fedcba9876543210fedcba9876543210"


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_py(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def stage(parent: Path, *, name: str = "demo", version: str = "1.0", tag: str = "a") -> Path:
    """Make a staged build output: one wheel, derivation.json, build.log.zst."""
    staged = parent / f"out-{tag}"
    staged.mkdir(parents=True)
    (staged / f"{name}-{version}-py3-none-any.whl").write_bytes(b"PK wheel bytes " + tag.encode())
    (staged / "derivation.json").write_text(json.dumps({"env": {"USE_ROCM": "1", "TAG": tag}}))
    (staged / "build.log.zst").write_bytes(b"log " + tag.encode())
    return staged


def publish_one(
    store: Store, hash: str, *, name: str = "demo", version: str = "1.0", tag: str = "a"
) -> Entry:
    with store.new_build_dir(hash) as bd:
        staged = stage(bd.path, name=name, version=version, tag=tag)
        return store.publish(
            staged, hash=hash, name=name, version=version, meta={"sandbox": "bwrap"}
        )


# -- layout -----------------------------------------------------------------------------------


def test_open_store_creates_layout_idempotently(tmp_path: Path) -> None:
    root = tmp_path / "a" / "store"
    store = open_store(root)
    for d in ("entries", "tmp", "locks", "failed", "sources", "cache"):
        assert (root / d).is_dir()
    assert store.entries_dir == root / "entries"
    assert store.sources_dir == root / "sources"
    assert store.cache_dir == root / "cache"
    publish_one(store, H1)
    again = open_store(root)
    assert again.lookup(H1, "demo", "1.0") is not None


def test_open_store_relative_root_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store(Path("store"))
    assert store.root == tmp_path / "store"
    assert store.entries_dir.is_dir()


def test_open_store_on_a_file_is_a_store_error(tmp_path: Path) -> None:
    f = tmp_path / "store"
    f.write_text("not a dir")
    with pytest.raises(StoreError, match="not a directory"):
        open_store(f)


def test_entry_dir_and_failed_log_path_validate_parts(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    assert store.entry_dir(H1, "torch", "2.5.1+rocm6.2") == (
        tmp_path / "s" / "entries" / f"{H1}-torch-2.5.1+rocm6.2"
    )
    assert store.failed_log_path(H1, "torch", "2.5.1") == (
        tmp_path / "s" / "failed" / f"{H1}-torch-2.5.1.log.zst"
    )
    for bad in ("ABC", H1.upper(), H1[:-1], "../" + H1[3:]):
        with pytest.raises(StoreError):
            store.entry_dir(bad, "torch", "1")
    with pytest.raises(StoreError):
        store.entry_dir(H1, "../evil", "1")
    with pytest.raises(StoreError):
        store.entry_dir(H1, "torch", "1/2")


# -- publish and lookup -------------------------------------------------------------------------


def test_publish_makes_a_complete_read_only_entry(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    before = time.time()
    with store.new_build_dir(H1) as bd:
        staged = stage(bd.path)
        wheel_digests = file_digests(staged / "demo-1.0-py3-none-any.whl")
        entry = store.publish(
            staged,
            hash=H1,
            name="demo",
            version="1.0",
            meta={"sandbox": "bwrap", "build_seconds": 12.5},
        )
        assert not staged.exists()
    assert entry.path == store.entries_dir / f"{H1}-demo-1.0"
    assert entry.wheels == (entry.path / "demo-1.0-py3-none-any.whl",)
    assert sorted(os.listdir(entry.path)) == [
        "build.log.zst",
        "demo-1.0-py3-none-any.whl",
        "derivation.json",
        "meta.json",
    ]
    meta = json.loads((entry.path / "meta.json").read_text())
    assert meta == entry.meta.to_json()
    assert meta["hash"] == H1 and meta["name"] == "demo" and meta["version"] == "1.0"
    assert meta["sandbox"] == "bwrap" and meta["build_seconds"] == 12.5
    assert before <= meta["created"] <= time.time()
    expected_size = sum(
        (entry.path / f).stat().st_size
        for f in ("build.log.zst", "demo-1.0-py3-none-any.whl", "derivation.json")
    )
    assert meta["size"] == expected_size
    b3, sha = wheel_digests
    assert meta["wheels"] == [
        {
            "file": "demo-1.0-py3-none-any.whl",
            "sha256": sha,
            "blake3": b3,
            "size": entry.wheels[0].stat().st_size,
            "mtime_ns": entry.wheels[0].stat().st_mtime_ns,
        }
    ]
    assert meta["seal"] == entry.meta.compute_seal()  # meta.json is sealed
    assert not os.listdir(store.root / "pending")  # indexed: no marker left
    # Read-only once published (we may run as root, which ignores modes: check the bits).
    assert stat.S_IMODE(entry.path.stat().st_mode) == 0o555
    for f in entry.path.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o444, f
    # No temp files left behind anywhere in the store.
    assert os.listdir(store.tmp_dir) == []
    # The index was updated.
    row = store.index.get(H1)
    assert row is not None and row.path == entry.path and row.sandbox == "bwrap"
    store.close()


def test_publish_keeps_caller_wheel_list_and_checks_it(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    with store.new_build_dir(H1) as bd:
        staged = stage(bd.path)
        wheels = [{"file": "demo-1.0-py3-none-any.whl", "sha256": "aa", "blake3": "bb", "size": 1}]
        entry = store.publish(staged, hash=H1, name="demo", version="1.0", meta={"wheels": wheels})
    # The caller's digests are kept; size and mtime are what the published file has.
    (w,) = entry.meta.wheels
    assert (w.file, w.sha256, w.blake3) == ("demo-1.0-py3-none-any.whl", "aa", "bb")
    st = entry.wheels[0].stat()
    assert (w.size, w.mtime_ns) == (st.st_size, st.st_mtime_ns)
    with store.new_build_dir(H2) as bd:
        staged = stage(bd.path)
        with pytest.raises(StoreError, match="does not match"):
            store.publish(
                staged,
                hash=H2,
                name="demo",
                version="1.0",
                meta={"wheels": [{"file": "other.whl"}]},
            )
    assert store.lookup(H2, "demo", "1.0") is None


def test_publish_refuses_incomplete_outputs(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    with store.new_build_dir(H1) as bd:
        staged = stage(bd.path)
        (staged / "derivation.json").unlink()
        with pytest.raises(StoreError, match=r"derivation\.json"):
            store.publish(staged, hash=H1, name="demo", version="1.0", meta={})
        staged2 = stage(bd.path, tag="b")
        (staged2 / "demo-1.0-py3-none-any.whl").unlink()
        with pytest.raises(StoreError, match="no wheel"):
            store.publish(staged2, hash=H1, name="demo", version="1.0", meta={})
    assert list(store.entries()) == []


def test_lookup_hit_and_miss(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    assert store.lookup(H1, "demo", "1.0") is None
    entry = publish_one(store, H1)
    hit = store.lookup(H1, "demo", "1.0")
    assert hit == entry
    assert hit is not None and hit.meta.hash == H1
    assert store.lookup(H1, "demo", "1.1") is None
    assert store.lookup(H2, "demo", "1.0") is None


def test_lookup_quarantines_a_damaged_entry(tmp_path: Path) -> None:
    """A directory without meta.json is damage: moved aside, reported, and a miss (never a
    permanent blocker)."""
    store = open_store(tmp_path / "s")
    damaged = store.entries_dir / f"{H1}-demo-1.0"
    damaged.mkdir()
    assert store.lookup(H1, "demo", "1.0") is None
    assert not damaged.exists()
    (moved,) = (store.root / "quarantine").iterdir()
    assert moved.name.startswith(damaged.name)
    assert [(h.kind, h.path) for h in store.healed] == [("quarantined", damaged)]


def test_lookup_imports_neither_sqlite3_nor_filelock(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    publish_one(store, H1)
    store.close()
    proc = run_py(
        """
        import sys
        from pathlib import Path
        from rocmforge.store.store import open_store
        s = open_store(Path(sys.argv[1]))
        e = s.lookup(sys.argv[2], "demo", "1.0")
        assert e is not None and e.wheels[0].is_file()
        print(sorted(m for m in sys.modules if m in ("sqlite3", "_sqlite3", "filelock")))
        """,
        str(tmp_path / "s"),
        H1,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    timed = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            f"from pathlib import Path; from rocmforge.store.store import open_store; "
            f"assert open_store(Path({str(tmp_path / 's')!r})).lookup({H1!r}, 'demo', '1.0')",
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in timed.stderr.splitlines()}
    assert "rocmforge.store.store" in imported
    assert not imported & {"sqlite3", "_sqlite3", "filelock", "rocmforge.store.index"}


def test_publish_of_an_existing_hash_returns_it_and_discards_staged(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    first = publish_one(store, H1, tag="a")
    with store.new_build_dir(H1) as bd:
        staged = stage(bd.path, tag="b")
        second = store.publish(staged, hash=H1, name="demo", version="1.0", meta={})
        assert not staged.exists()
    assert second == first
    assert first.wheels[0].read_bytes() == b"PK wheel bytes a"


def test_publish_losing_the_rename_race_returns_the_winner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Make the early lookup miss once, as if the other publisher renamed just after it.
    store = open_store(tmp_path / "s")
    winner = publish_one(store, H1, tag="a")
    real_lookup = Store.lookup
    calls = []

    def late_lookup(self: Store, hash: str, name: str, version: str) -> Entry | None:
        calls.append(hash)
        return None if len(calls) == 1 else real_lookup(self, hash, name, version)

    monkeypatch.setattr(Store, "lookup", late_lookup)
    with store.new_build_dir(H1) as bd:
        staged = stage(bd.path, tag="b")
        got = store.publish(staged, hash=H1, name="demo", version="1.0", meta={})
        assert not staged.exists()
    assert len(calls) == 2
    assert got == winner
    assert got.wheels[0].read_bytes() == b"PK wheel bytes a"


@pytest.mark.slow
def test_concurrent_publishes_of_one_hash_end_with_one_entry(tmp_path: Path) -> None:
    root = tmp_path / "s"
    open_store(root)
    go = tmp_path / "go"
    code = """
        import json, os, sys, time
        from pathlib import Path
        from rocmforge.store.store import open_store
        root, h, tag, go = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
        s = open_store(root)
        with s.new_build_dir(h) as bd:
            st = bd.path / "out"
            st.mkdir()
            (st / "demo-1.0-py3-none-any.whl").write_bytes(b"wheel " + tag.encode())
            (st / "derivation.json").write_text(json.dumps({"env": {}}))
            (st / "build.log.zst").write_bytes(b"log")
            while not go.exists():
                time.sleep(0.001)
            e = s.publish(st, hash=h, name="demo", version="1.0", meta={})
        print(e.path, e.wheels[0].read_bytes().decode())
    """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), str(root), H1, str(i), str(go)],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    time.sleep(1.0)
    go.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append(out.strip())
    assert len(set(outs)) == 1, outs
    store = open_store(root)
    assert [e.hash for e in store.entries()] == [H1]
    assert os.listdir(store.tmp_dir) == []
    assert [r.hash for r in store.index.rows()] == [H1]
    store.close()


# -- build dirs and leftovers -------------------------------------------------------------------


def test_build_dir_is_created_locked_and_removed(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    bd = store.new_build_dir(H1)
    assert bd.path.parent == store.tmp_dir
    assert bd.path.name.startswith(f"{H1}.{os.getpid()}.")
    assert not bd.path.exists()
    with bd:
        assert bd.path.is_dir() and os.listdir(bd.path) == []
        lock = bd.path.with_name(bd.path.name + ".lock")
        assert lock.is_file()
        # The lock is held: another process cannot take it.
        proc = run_py(
            """
            import fcntl, os, sys
            fd = os.open(sys.argv[1], os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print("held")
            """,
            str(lock),
        )
        assert proc.stdout.strip() == "held", proc.stderr
        (bd.path / "sub").mkdir()
        (bd.path / "sub" / "ro.txt").write_text("x")
        os.chmod(bd.path / "sub" / "ro.txt", 0o444)
        os.chmod(bd.path / "sub", 0o555)
        assert store.clean_leftovers() == []
    assert not bd.path.exists()
    assert os.listdir(store.tmp_dir) == []


def test_build_dir_keep_leaves_the_directory(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    with pytest.raises(RuntimeError), store.new_build_dir(H1) as bd:
        bd.keep = True
        (bd.path / "build.log").write_text("failed")
        raise RuntimeError("build failed")
    assert (bd.path / "build.log").read_text() == "failed"
    assert os.listdir(store.tmp_dir) == [bd.path.name]
    # A kept dir is not a leftover, unless asked for.
    assert store.clean_leftovers() == []
    assert bd.path.exists()
    assert store.clean_leftovers(include_kept=True) == [bd.path]
    assert os.listdir(store.tmp_dir) == []


def test_clean_leftovers_removes_dead_builds_and_keeps_live_ones(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = open_store(root)
    code = """
        import os, sys, time
        from pathlib import Path
        from rocmforge.store.store import open_store
        s = open_store(Path(sys.argv[1]))
        with s.new_build_dir(sys.argv[2]) as bd:
            (bd.path / "src").mkdir()
            (bd.path / "src" / "x.o").write_bytes(b"obj")
            os.chmod(bd.path / "src" / "x.o", 0o444)
            os.chmod(bd.path / "src", 0o555)
            print(bd.path, flush=True)
            time.sleep(600)
    """
    children = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), str(root), h],
            env=child_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        for h in (H1, H2)
    ]
    try:
        assert children[0].stdout is not None and children[1].stdout is not None
        dead_dir = Path(children[0].stdout.readline().strip())
        live_dir = Path(children[1].stdout.readline().strip())
        assert dead_dir.is_dir() and live_dir.is_dir()
        children[0].send_signal(signal.SIGKILL)
        children[0].wait(timeout=30)
        assert dead_dir.is_dir()  # a crash leaves the dir behind...
        removed = store.clean_leftovers()
        assert removed == [dead_dir]  # ...and the next run cleans it
        assert not dead_dir.exists()
        assert not dead_dir.with_name(dead_dir.name + ".lock").exists()
        assert live_dir.is_dir()
        assert live_dir.with_name(live_dir.name + ".lock").exists()
    finally:
        for c in children:
            c.kill()
            c.wait(timeout=30)
            if c.stdout is not None:
                c.stdout.close()
    assert store.clean_leftovers() == [live_dir]
    assert os.listdir(store.tmp_dir) == []


def test_clean_leftovers_removes_an_orphan_lock_file(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    orphan = store.tmp_dir / f"{H1}.99999.abcd.lock"
    orphan.write_text("99999\n")
    unrelated = store.tmp_dir / "notes.txt"
    unrelated.write_text("leave me")
    assert store.clean_leftovers() == []
    assert not orphan.exists()
    assert unrelated.exists()


# -- locks --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_build_lock_serialises_processes(tmp_path: Path) -> None:
    root = tmp_path / "s"
    open_store(root)
    code = """
        import sys, time
        from pathlib import Path
        from rocmforge.store.store import open_store
        s = open_store(Path(sys.argv[1]))
        with s.build_lock(sys.argv[2]):
            enter = time.monotonic()
            time.sleep(0.3)
            leave = time.monotonic()
        Path(sys.argv[3]).write_text(f"{enter} {leave}")
    """
    outs = [tmp_path / f"t{i}" for i in range(3)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), str(root), H1, str(o)], env=child_env()
        )
        for o in outs
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0
    spans = sorted(tuple(map(float, o.read_text().split())) for o in outs)
    for (_, leave), (enter, _) in itertools.pairwise(spans):
        assert leave <= enter, spans
    assert (root / "locks" / f"{H1}.lock").exists()


def test_build_lock_rejects_a_bad_hash(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    with pytest.raises(StoreError):
        store.build_lock("../../etc/passwd")


LOCK_CHILD = """
    import sys
    from pathlib import Path
    from rocmforge.store.store import open_store
    s = open_store(Path(sys.argv[1]))
    with getattr(s, sys.argv[2])():
        print("acquired", flush=True)
"""


@pytest.mark.slow
def test_shared_lock_blocks_exclusive_lock(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    root = str(store.root)
    with store.shared_lock():
        with pytest.raises(subprocess.TimeoutExpired):
            run_py(LOCK_CHILD, root, "exclusive_lock", timeout=1.5)
        # Readers share.
        assert run_py(LOCK_CHILD, root, "shared_lock", timeout=30).stdout.strip() == "acquired"
    assert run_py(LOCK_CHILD, root, "exclusive_lock", timeout=30).stdout.strip() == "acquired"


@pytest.mark.slow
def test_exclusive_lock_blocks_shared_lock(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    with store.exclusive_lock(), pytest.raises(subprocess.TimeoutExpired):
        run_py(LOCK_CHILD, str(store.root), "shared_lock", timeout=1.5)
    assert run_py(LOCK_CHILD, str(store.root), "shared_lock", timeout=30).returncode == 0


# -- entries, resolve, index rebuild ------------------------------------------------------------


def test_entries_scans_the_filesystem(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    a = publish_one(store, H3, name="zeta", version="2.0")
    b = publish_one(store, H1, name="alpha", version="1.0")
    (store.entries_dir / "README").write_text("not an entry")
    assert list(store.entries()) == [b, a]


def test_resolve_by_prefix_dir_name_and_path(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    e1 = publish_one(store, H1)
    e2 = publish_one(store, H2, name="other", version="3")
    e3 = publish_one(store, H3)
    assert store.resolve(H1) == e1
    assert store.resolve("0123456") == e1
    assert store.resolve("0123f") == e2
    assert store.resolve("fedc") == e3
    assert store.resolve(e2.path.name) == e2
    assert store.resolve(str(e3.path)) == e3
    assert store.resolve(str(e3.wheels[0])) == e3
    link = tmp_path / "result.whl"
    link.symlink_to(e2.wheels[0])
    assert store.resolve(str(link)) == e2


def test_resolve_errors_list_candidates(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    e1 = publish_one(store, H1)
    e2 = publish_one(store, H2, name="other", version="3")
    with pytest.raises(UsageError, match="ambiguous") as ambiguous:
        store.resolve("0123")
    assert e1.path.name in str(ambiguous.value) and e2.path.name in str(ambiguous.value)
    with pytest.raises(UsageError, match="too short"):
        store.resolve("012")
    with pytest.raises(UsageError, match="no store entry") as unknown:
        store.resolve("beef")
    assert e1.path.name in str(unknown.value)
    outside = tmp_path / "elsewhere.whl"
    outside.write_bytes(b"x")
    with pytest.raises(UsageError, match="not inside"):
        store.resolve(str(outside))
    with pytest.raises(UsageError):
        store.resolve(str(store.entries_dir))


def test_rebuild_index_from_entries(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    publish_one(store, H1)
    publish_one(store, H3, name="zeta", version="2.0")
    store.close()
    (tmp_path / "s" / "index.sqlite").unlink()
    for suffix in ("-wal", "-shm"):
        (tmp_path / "s" / f"index.sqlite{suffix}").unlink(missing_ok=True)
    store = open_store(tmp_path / "s")
    # A new index while entries exist is filled from them on open.
    assert [r.hash for r in store.index.rows()] == [H1, H3]
    assert store.rebuild_index() == 2
    assert [r.hash for r in store.index.by_env("TAG", "a")] == [H1, H3]
    store.close()
