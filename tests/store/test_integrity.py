"""Store integrity and self-healing on real stores: interrupted publishes, corrupt indexes,
damaged and tampered entries, a sealed meta.json, copied and read-only stores.

One real entry is built once per module; every test works on its own ``cp -a`` copy of it.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, build_tiny_entry, commit_all, git, pip_args, rf, rf_in

from rocmforge.store.entry import input_hash
from rocmforge.util.hashing import file_blake3

MODE_RW = 0o644
DEMO = input_hash({"env": {}})


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A store with one tiny entry built by the real CLI, and the recipe that built it."""
    return build_tiny_entry(tmp_path_factory.mktemp("built"))


@pytest.fixture
def copy(built: dict, tmp_path: Path) -> Path:
    """A private copy of the built store (times and modes kept, as ``cp -a`` does)."""
    dest = tmp_path / "store"
    subprocess.run(["cp", "-a", str(built["store"]), str(dest)], check=True)
    return dest


def entry_dir(store: Path, built: dict) -> Path:
    return store / "entries" / built["entry"]


def realize(built: dict, store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return rf("realize", built["recipe"], "--store", store, *extra)


def realize_ok(built: dict, store: Path, *extra: str) -> Path:
    """Realize the tiny recipe; check it returned a sound wheel in ``store``; return it."""
    proc = realize(built, store, *extra)
    assert proc.returncode == 0, proc.stderr
    if "--json" in extra:
        wheel = Path(json.loads(proc.stdout)[0]["wheels"][0])
    else:
        wheel = Path(proc.stdout.strip().splitlines()[-1])
    assert str(wheel).startswith(str(store) + os.sep), (wheel, store)
    assert file_blake3(wheel) == built["blake3"]  # the build is reproducible
    return wheel


def verify(store: Path, *extra: str) -> tuple[int, dict]:
    proc = rf_in("verify", "--store", store, "--json", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def listed(store: Path) -> list[str]:
    proc = rf_in("list", "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    return [e["hash"] for e in json.loads(proc.stdout)]


def writable(path: Path) -> None:
    """Let root's careless tools write ``path`` and its entry (modes are 0444/0555)."""
    os.chmod(path.parent, 0o755)
    if path.exists():
        os.chmod(path, MODE_RW)


def flip_byte(path: Path, offset: int, *, keep_mtime: bool = False) -> None:
    """Change one byte of ``path`` in place (size kept); optionally restore its mtime."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x01
    writable(path)
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def drop_from_index(store: Path, hash: str) -> None:
    db = sqlite3.connect(store / "index.sqlite")
    with db:
        for table in ("entries", "wheels", "env"):
            db.execute(f"DELETE FROM {table} WHERE hash = ?", (hash,))
    db.close()


# -- item 5: a publish that dies before indexing -----------------------------------------------


CRASH_BEFORE_INDEX = """
import json, os, sys, zstandard
from pathlib import Path
from rocmforge.store import index
from rocmforge.store.entry import input_hash
from rocmforge.store.store import open_store

def die(*args, **kwargs):
    os._exit(9)  # the process dies right after the rename into entries/, before indexing

index.Index.add = die
store = open_store(Path(sys.argv[1]))
h = input_hash({"env": {}})
with store.new_build_dir(h) as bd:
    staged = bd.path / "out"
    staged.mkdir()
    (staged / "demo-1.0-py3-none-any.whl").write_bytes(b"PK wheel")
    (staged / "derivation.json").write_text(json.dumps({"env": {}}))
    (staged / "build.log.zst").write_bytes(zstandard.ZstdCompressor().compress(b"log"))
    store.publish(staged, hash=h, name="demo", version="1.0", meta={})
"""


@pytest.mark.parametrize("command", ["list", "verify", "audit"])
@pytest.mark.slow
def test_an_entry_published_but_not_indexed_is_indexed_by_the_next_command(
    copy: Path, command: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_BEFORE_INDEX, str(copy)], capture_output=True, text=True
    )
    assert proc.returncode == 9, proc.stderr
    entry = copy / "entries" / f"{DEMO}-demo-1.0"
    assert (entry / "meta.json").is_file()  # published, complete, but the index lacks it
    if command == "list":
        assert DEMO in listed(copy)
    elif command == "verify":
        code, report = verify(copy)
        assert code == 0, report
        assert [p["kind"] for p in report["repaired"]] == ["unindexed"]
    else:
        out = rf("audit", "--store", copy, entry / "demo-1.0-py3-none-any.whl")
        assert out.returncode == 0, out.stdout + out.stderr
        assert "CLAIMED" not in out.stdout
    assert not os.listdir(copy / "pending")
    assert verify(copy)[0] == 0


@pytest.mark.slow
def test_a_lookup_indexes_an_interrupted_publish_of_its_entry(built: dict, copy: Path) -> None:
    """The crash left the realize's own entry unindexed: the next realize of it heals it."""
    drop_from_index(copy, built["entry"][:32])
    (copy / "pending").mkdir(exist_ok=True)
    (copy / "pending" / built["entry"]).touch()  # what publish leaves when it dies mid-way
    realize_ok(built, copy, "--json")  # --json: the full pipeline, not the memo
    assert built["entry"][:32] in listed(copy)
    assert not os.listdir(copy / "pending")


# -- item 6: a corrupt index, damaged entries ----------------------------------------------------


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:1000])


def _garbage(p: Path) -> None:
    p.write_bytes(os.urandom(8192))


def _directory(p: Path) -> None:
    p.unlink()
    p.mkdir()
    (p / "x").write_text("x")


@pytest.mark.parametrize("damage", [_truncate, _garbage, _directory])
def test_a_corrupt_index_is_set_aside_and_rebuilt(built: dict, copy: Path, damage) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{copy / 'index.sqlite'}{suffix}").unlink(missing_ok=True)
    damage(copy / "index.sqlite")
    proc = rf_in("list", "--store", copy, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "warning:" in proc.stderr and "index.sqlite" in proc.stderr
    assert [e["hash"] for e in json.loads(proc.stdout)] == [built["entry"][:32]]
    assert list(copy.glob("index.sqlite.corrupt-*"))  # set aside, not deleted
    assert rf_in("verify", "--store", copy, "--repair-index").returncode == 0
    realize_ok(built, copy)


def test_verify_repair_index_survives_a_corrupt_index(built: dict, copy: Path) -> None:
    _garbage(copy / "index.sqlite")
    code, report = verify(copy, "--repair-index")
    assert code == 0, report
    assert [p["kind"] for p in report["repaired"]] == ["corrupt-index"]


def test_an_entry_without_meta_is_quarantined_not_a_blocker(built: dict, copy: Path) -> None:
    entry = entry_dir(copy, built)
    writable(entry / "meta.json")
    (entry / "meta.json").unlink()
    proc = realize(built, copy)
    assert proc.returncode == 0, proc.stderr
    assert "quarantine" in proc.stderr
    assert (entry / "meta.json").is_file()  # rebuilt
    (moved,) = (copy / "quarantine").iterdir()
    assert moved.name.startswith(built["entry"])
    assert verify(copy)[0] == 0
    gc = rf_in("gc", "--store", copy, "--json", "--keep-last", "5")
    assert gc.returncode == 0, gc.stderr
    assert not os.listdir(copy / "quarantine")  # gc collects it


def test_a_stray_entry_like_directory_does_not_block_a_repair(built: dict, copy: Path) -> None:
    stray = copy / "entries" / ("f" * 32 + "-stray-1.0")
    stray.mkdir()
    (stray / "junk").write_text("junk")
    code, report = verify(copy)
    assert code == 1 and {p["kind"] for p in report["problems"]} == {"damaged"}
    code, report = verify(copy, "--repair-index")
    assert code == 1  # the index is fine: the stray is not the index's business
    code, report = verify(copy, "--repair")
    assert code == 0, report
    assert not stray.exists()
    realize_ok(built, copy)


# -- item 7: a tampered wheel is never a cache hit ---------------------------------------------


@pytest.mark.parametrize("path", ["memo", "full"])
def test_a_tampered_wheel_is_not_returned(built: dict, copy: Path, path: str) -> None:
    wheel = entry_dir(copy, built) / built["wheel"]
    flip_byte(wheel, 100)
    extra = () if path == "memo" else ("--json",)
    proc = realize(built, copy, *extra)
    assert proc.returncode == 0, proc.stderr
    assert "built in" in proc.stderr or "built" in proc.stdout
    assert file_blake3(wheel) == built["blake3"]
    assert list((copy / "quarantine").iterdir())


def test_realize_verify_rehashes_and_catches_a_tamper_that_kept_size_and_mtime(
    built: dict, copy: Path
) -> None:
    wheel = entry_dir(copy, built) / built["wheel"]
    flip_byte(wheel, 100, keep_mtime=True)
    # The documented limit of the cheap check: same size and mtime pass a plain hit ...
    proc = realize(built, copy, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)[0]["cached"]
    # ... and --verify re-hashes, quarantines and rebuilds.
    proc = realize(built, copy, "--verify", "--json")
    assert proc.returncode == 0, proc.stderr
    assert not json.loads(proc.stdout)[0]["cached"]
    assert file_blake3(wheel) == built["blake3"]


# -- item 8: meta.json is sealed ----------------------------------------------------------------


def test_an_edited_meta_json_is_detected(built: dict, copy: Path) -> None:
    meta_path = entry_dir(copy, built) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["sandbox"] = "none"  # a plausible, well-formed lie
    writable(meta_path)
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    code, report = verify(copy)
    assert code == 1
    assert ("modified", "meta.json") in {
        (p["kind"], Path(p["path"]).name) for p in report["problems"]
    }
    assert verify(copy, "--repair")[0] == 0
    realize_ok(built, copy)


# -- item 9: a copied or moved store answers with its own paths ---------------------------------


def test_the_memo_of_a_copied_store_answers_with_the_copy_s_paths(
    built: dict, copy: Path, tmp_path: Path
) -> None:
    realize_ok(built, copy)  # the copy's memo now holds a record
    second = tmp_path / "second"
    subprocess.run(["cp", "-a", str(copy), str(second)], check=True)
    realize_ok(built, second)
    moved = tmp_path / "moved"
    os.rename(second, moved)
    realize_ok(built, moved)


# -- item 10: a read-only store ------------------------------------------------------------------


@pytest.fixture
def read_only(copy: Path, tmp_path: Path) -> Iterator[Path]:
    """``copy`` bind-mounted read-only (root only; skipped where mounting is not allowed)."""
    view = tmp_path / "ro"
    view.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root for a read-only bind mount")
    made = subprocess.run(["mount", "--bind", str(copy), str(view)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot bind-mount: {made.stderr!r}")
    try:
        ro = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(view)], capture_output=True, check=False
        )
        if ro.returncode != 0:
            pytest.skip(f"cannot remount read-only: {ro.stderr!r}")
        yield view
    finally:
        # lazily if something still holds it open: the mount never outlives the test
        if subprocess.run(["umount", str(view)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(view)], check=True)


def test_a_read_only_store_serves_hits_verify_and_list(built: dict, read_only: Path) -> None:
    with pytest.raises(OSError):
        (read_only / "probe").touch()
    realize_ok(built, read_only)  # the memo's fast path (or the full one)
    realize_ok(built, read_only, "--json")  # the full pipeline
    assert verify(read_only)[0] == 0
    assert listed(read_only) == [built["entry"][:32]]
    # What it cannot do, it says: a miss needs a build, and a build needs write access.
    other = read_only.parent / "other.toml"
    other.write_text(
        built["recipe"].read_text().replace("[build]\n", '[env]\nX = "1"\n\n[build]\n')
    )
    proc = rf("realize", other, "--store", read_only)
    assert proc.returncode == 3 and "read-only" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_read_only_store_with_stale_probe_caches_still_serves(
    built: dict, copy: Path, read_only: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store mounted read-only on another machine (or after an apt-get install), with a
    read-only home too, cannot keep its probe caches (toolchain, system manifest): they are
    recomputed in memory, not written."""
    subprocess.run(["mount", "-o", "remount,bind,rw", str(read_only)], check=True)
    for cache in (read_only / "cache").glob("*.json"):
        cache.unlink()
    (read_only / "host-cache").mkdir()
    subprocess.run(["mount", "-o", "remount,bind,ro", str(read_only)], check=True)
    monkeypatch.setenv("ROCMFORGE_HOST_CACHE", str(read_only / "host-cache"))
    realize_ok(built, read_only, "--json")  # the full pipeline, every probe from scratch
    assert not any((read_only / "host-cache").iterdir())


def test_a_read_only_store_with_a_corrupt_index_still_lists(
    built: dict, copy: Path, read_only: Path
) -> None:
    subprocess.run(["mount", "-o", "remount,bind,rw", str(read_only)], check=True)
    _garbage(read_only / "index.sqlite")
    subprocess.run(["mount", "-o", "remount,bind,ro", str(read_only)], check=True)
    proc = rf_in("list", "--store", read_only, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "read-only" in proc.stderr
    assert [e["hash"] for e in json.loads(proc.stdout)] == [built["entry"][:32]]


def test_a_damaged_entry_in_a_read_only_store_is_an_error_that_says_why(
    built: dict, copy: Path, read_only: Path
) -> None:
    subprocess.run(["mount", "-o", "remount,bind,rw", str(read_only)], check=True)
    flip_byte(entry_dir(read_only, built) / built["wheel"], 100)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(read_only)], check=True)
    proc = realize(built, read_only, "--json")
    assert proc.returncode == 3, proc.stderr
    assert "damaged store entry" in proc.stderr and "write access" in proc.stderr


# -- item 11: requirement wheels are checked before use ----------------------------------------


@pytest.mark.slow
def test_a_changed_requirement_wheel_is_caught_before_a_build_uses_it(
    tmp_path: Path, tiny_src: Path, wheelhouse: Path
) -> None:
    with_req = TINY_RECIPE + '\n[requirements]\nbuild = ["setuptools==75.6.0"]\n'
    first = tmp_path / "first.toml"
    first.write_text(with_req.format(src=tiny_src))
    second = tmp_path / "second.toml"  # another derivation: a miss that builds
    second.write_text(
        with_req.replace("[build]\n", '[env]\nTINY_FLAG = "2"\n\n[build]\n').format(src=tiny_src)
    )
    store = tmp_path / "store"
    env = {"ROCMFORGE_PIP_ARGS": pip_args(wheelhouse)}
    assert rf("realize", first, "--store", store, env=env).returncode == 0
    wheel = store / "sources" / "wheels" / "setuptools-75.6.0-py3-none-any.whl"
    good = file_blake3(wheel)
    flip_byte(wheel, 5000, keep_mtime=True)  # same size, mtime and inode: the stat cache hits
    code, report = verify(store)
    assert code == 1
    assert [(p["kind"], Path(p["path"]).name) for p in report["problems"]] == [
        ("modified", wheel.name)
    ]
    proc = rf("realize", second, "--store", store, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "requirement wheel changed" in proc.stderr
    assert file_blake3(wheel) == good  # fetched again before the build used it
    assert verify(store)[0] == 0


@pytest.mark.slow
def test_verify_finds_a_damaged_git_mirror_and_repair_quarantines_it(
    tmp_path: Path, tiny_src: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(tiny_src, repo)
    git(repo, "init", "-q")
    rev = commit_all(repo, "tiny")
    recipe = tmp_path / "git.toml"
    recipe.write_text(TINY_RECIPE.replace('path = "{src}"', f'git = "{repo}"\nrev = "{rev}"'))
    store = tmp_path / "store"
    assert rf("realize", recipe, "--store", store).returncode == 0
    assert verify(store)[0] == 0
    (mirror,) = (store / "sources" / "git").glob("*.git")
    objects = (mirror / "objects").rglob("*")
    obj = sorted(p for p in objects if p.is_file() and p.stat().st_size > 20)[0]
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0x01
    obj.unlink()  # a local clone hard-links objects: do not damage the test's own repository
    obj.write_bytes(bytes(data))
    code, report = verify(store)
    assert code == 1
    assert [(p["kind"], Path(p["path"]).name) for p in report["problems"]] == [
        ("modified", mirror.name)
    ]
    assert verify(store, "--repair")[0] == 0
    assert not mirror.exists()
    # A rebuild fetches the mirror again.
    env_recipe = tmp_path / "git2.toml"
    env_recipe.write_text(
        recipe.read_text().replace("[build]\n", '[env]\nX = "1"\n\n[build]\n')
    )
    assert rf("realize", env_recipe, "--store", store).returncode == 0
    assert verify(store)[0] == 0
