"""The path-source stat cache split by directory: a re-hash after any change equals a fresh hash.

Every test compares the re-hash of a warm cache with the hash a fresh cache computes from
scratch, after changes that the cheap paths could miss: a one-byte edit of a deep file that
keeps its size and mtime (so no directory mtime moves either), new and removed directories,
a lost bucket file, and (in a git work tree) edits git calls dirty, new untracked files,
ignore-rule changes and index changes.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest
from conftest import commit_all, git

from rocmforge.pipeline import memo
from rocmforge.sources import gitlisting, treecache
from rocmforge.sources import tree as source_path


def settle() -> None:
    """Let fresh files age past the racy-timestamp window so the stat cache trusts them."""
    time.sleep(source_path.RACY_SLACK_NS / 1e9 + 0.03)


def fresh(root: Path, tmp_path: Path) -> str:
    """The digest a cache that never saw ``root`` computes."""
    cache = tmp_path / f"fresh-{time.monotonic_ns()}"
    try:
        return source_path.tree_digest(root, cache=cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def make_deep_tree(root: Path) -> list[Path]:
    files = []
    for i in range(60):
        p = root / f"a{i % 3}" / f"b{i % 4}" / "c" / f"d{i % 2}" / f"f{i}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"line %d\n" % i * (i + 1))
        files.append(p)
    (root / "top.txt").write_text("top\n")
    return files


def edit_one_byte_keep_mtime(path: Path) -> None:
    """Flip one byte in place: same size, same mtime; only ctime (and the content) move."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.fixture(params=["serial", "parallel"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run with the tree scanned in this process, and by forked workers (small 'big' files)."""
    monkeypatch.setattr(source_path, "RACY_SLACK_NS", 20_000_000)
    monkeypatch.setattr(treecache, "BUCKET_DIRS", 2)  # many buckets even for a small tree
    if request.param == "parallel":
        monkeypatch.setattr(source_path, "PARALLEL_MIN_ENTRIES", 8)
        monkeypatch.setattr(source_path, "BIG_FILE", 300)
        monkeypatch.setattr(source_path, "_workers", lambda: 3)
    return str(request.param)


def bucket_inodes(root: Path, cache: Path) -> dict[str, int]:
    _, files_dir = treecache.record_paths(root, cache)
    return {p.name: p.stat().st_ino for p in files_dir.iterdir()}


def test_one_byte_edit_of_a_deep_file_keeping_size_and_mtime_is_seen(
    tmp_path: Path, mode: str
) -> None:
    src = tmp_path / "src"
    files = make_deep_tree(src)
    cache = tmp_path / "cache"
    settle()
    first = source_path.tree_digest(src, cache=cache)
    settle()
    assert source_path.tree_digest(src, cache=cache) == first  # trusted now
    deep = files[37]
    parents = [(p, p.stat().st_mtime_ns) for p in deep.parents if src in p.parents or p == src]
    before = bucket_inodes(src, cache)
    edit_one_byte_keep_mtime(deep)
    assert [(p, p.stat().st_mtime_ns) for p, _ in parents] == parents  # no directory moved
    edited = source_path.tree_digest(src, cache=cache)
    assert edited != first
    assert edited == fresh(src, tmp_path)
    after = bucket_inodes(src, cache)
    rewritten = {k.split(".")[0] for k in before if after.get(k) != before[k]}
    assert len(before) > 8 and len(rewritten) == 1  # only the edited directory's bucket


@pytest.mark.slow
def test_an_unchanged_tree_reads_no_bucket_and_a_lost_bucket_is_rebuilt(
    tmp_path: Path, mode: str
) -> None:
    src = tmp_path / "src"
    files = make_deep_tree(src)
    cache = tmp_path / "cache"
    settle()
    first = source_path.tree_digest(src, cache=cache)
    _, files_dir = treecache.record_paths(src, cache)
    shutil.rmtree(files_dir)
    assert source_path.tree_digest(src, cache=cache) == first  # the head alone answers
    settle()
    edit_one_byte_keep_mtime(files[5])
    assert source_path.tree_digest(src, cache=cache) == fresh(src, tmp_path)  # scanned afresh
    settle()
    victim = sorted(files_dir.iterdir())[0]
    victim.unlink()  # one bucket lost; an edit elsewhere needs it for the text
    edit_one_byte_keep_mtime(files[11])
    assert source_path.tree_digest(src, cache=cache) == fresh(src, tmp_path)
    assert victim.exists()  # the rescan wrote every bucket again


def mutate(root: Path, rng: random.Random, step: int) -> str:
    """Apply one random change below ``root``; return what it was."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)
    dirs = sorted(p for p in root.rglob("*") if p.is_dir() and ".git" not in p.parts)
    op = rng.choice(["edit", "append", "delete", "add", "newdir", "rmdir", "chmod", "link"])
    if op == "edit" and files:
        edit_one_byte_keep_mtime(rng.choice(files))
    elif op == "append" and files:
        with open(rng.choice(files), "ab") as f:
            f.write(b"more %d\n" % step)
    elif op == "delete" and files:
        rng.choice(files).unlink()
    elif op == "add" and dirs:
        (rng.choice(dirs) / f"new{step}.txt").write_text(f"new {step}\n")
    elif op == "newdir":
        d = (rng.choice(dirs) if dirs else root) / f"n{step}" / "deeper"
        d.mkdir(parents=True)
        (d / "x.txt").write_text(f"x {step}\n")
    elif op == "rmdir" and len(dirs) > 3:
        shutil.rmtree(rng.choice(dirs[1:]))
    elif op == "chmod" and files:
        p = rng.choice(files)
        p.chmod(p.stat().st_mode ^ 0o100)
    elif op == "link" and dirs:
        os.symlink(f"target-{step}", rng.choice(dirs) / f"link{step}")
    return op


@pytest.mark.slow
def test_random_changes_hash_like_a_fresh_scan(tmp_path: Path, mode: str) -> None:
    src = tmp_path / "src"
    make_deep_tree(src)
    cache = tmp_path / "cache"
    rng = random.Random(14)
    source_path.tree_digest(src, cache=cache)
    for step in range(12):
        settle()  # the records become trusted: the cheap paths are what is tested
        source_path.tree_digest(src, cache=cache)
        op = mutate(src, rng, step)
        assert source_path.tree_digest(src, cache=cache) == fresh(src, tmp_path), (step, op)
    listing = source_path.tree_listing(src, cache=cache)
    on_disk = {
        str(p.relative_to(src)) for p in src.rglob("*") if p.is_file() or p.is_symlink()
    }
    assert set(listing) == on_disk


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    make_deep_tree(root)
    (root / ".gitignore").write_text("*.o\n")
    commit_all(root, "tree")
    return root


def test_git_tree_with_an_unchanged_index_asks_git_what_changed(
    repo: Path, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = source_path.tree_digest(repo, cache=cache)
    settle()
    assert source_path.tree_digest(repo, cache=cache) == first

    def no_full_listing(*args: object, **kwargs: object) -> None:
        raise AssertionError("listed the whole work tree")

    monkeypatch.setattr(gitlisting.GitListing, "add", no_full_listing)
    deep = repo / "a1" / "b1" / "c" / "d1" / "f13.txt"
    edit_one_byte_keep_mtime(deep)
    edited = source_path.tree_digest(repo, cache=cache)
    (repo / "a2" / "new" / "deeper").mkdir(parents=True)
    (repo / "a2" / "new" / "deeper" / "u.txt").write_text("untracked\n")
    (repo / "a2" / "junk.o").write_text("ignored\n")
    untracked = source_path.tree_digest(repo, cache=cache)
    settle()
    (repo / ".gitignore").write_text("*.o\nu.txt\n")  # now ignored: out of the listing
    ignored = source_path.tree_digest(repo, cache=cache)
    (repo / "top.txt").unlink()
    deleted = source_path.tree_digest(repo, cache=cache)
    monkeypatch.undo()
    assert edited != first
    assert len({first, edited, untracked, ignored, deleted}) == 5
    assert deleted == fresh(repo, tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git", "*.o", "u.txt"))
    assert deleted == fresh(copy, tmp_path)


@pytest.mark.slow
def test_git_tree_edit_in_a_directory_whose_bucket_was_lost(
    repo: Path, tmp_path: Path, mode: str
) -> None:
    cache = tmp_path / "cache"
    source_path.tree_digest(repo, cache=cache)
    settle()
    source_path.tree_digest(repo, cache=cache)
    for p in treecache.record_paths(repo, cache)[1].iterdir():
        p.unlink()  # every bucket lost: the head alone cannot say what the other files hold
    edit_one_byte_keep_mtime(repo / "a0" / "b0" / "c" / "d0" / "f0.txt")
    assert source_path.tree_digest(repo, cache=cache) == fresh(repo, tmp_path)


@pytest.mark.slow
def test_git_tree_random_changes_and_commits_hash_like_a_fresh_scan(
    repo: Path, tmp_path: Path, mode: str
) -> None:
    cache = tmp_path / "cache"
    rng = random.Random(7)
    source_path.tree_digest(repo, cache=cache)
    for step in range(10):
        settle()
        source_path.tree_digest(repo, cache=cache)
        op = mutate(repo, rng, step)
        if step % 4 == 3:
            commit_all(repo, f"step {step}")  # the index changes: a full listing
            op += "+commit"
        assert source_path.tree_digest(repo, cache=cache) == fresh(repo, tmp_path), (step, op)


def test_memo_tree_guard_sees_a_one_byte_edit_in_either_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    files = make_deep_tree(src)
    store = tmp_path / "store"
    store.mkdir()
    recipe = tmp_path / "r.toml"
    recipe.write_text("")
    result = {"hash": "h", "name": "n", "version": "1", "path": "e", "wheels": [], "sigs": []}
    monkeypatch.setattr(memo, "PARALLEL_TREE_ENTRIES", 4)  # the check forks a second process
    for victim in (files[0], files[1], files[30], src / "top.txt"):
        memo.record(str(store), str(recipe), files=[], trees=[str(src)], result=result)
        item = memo._load_item(str(store), str(recipe))
        assert item is not None and memo._valid(item) is not None
        edit_one_byte_keep_mtime(victim)
        assert memo._valid(item) is None, victim
    memo.record(str(store), str(recipe), files=[], trees=[str(src)], result=result)
    item = memo._load_item(str(store), str(recipe))
    (files[7].parent / "new.txt").write_text("")
    assert item is not None and memo._valid(item) is None
    memo.record(str(store), str(recipe), files=[], trees=[str(src)], result=result)
    item = memo._load_item(str(store), str(recipe))
    shutil.rmtree(files[9].parent)
    assert item is not None and memo._valid(item) is None


def test_memo_records_nothing_when_the_tree_changed_during_the_realize(tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = make_deep_tree(src)
    store = tmp_path / "store"
    store.mkdir()
    recipe = tmp_path / "r.toml"
    recipe.write_text("")
    result = {"hash": "h", "name": "n", "version": "1", "path": "e", "wheels": [], "sigs": []}
    time.sleep(0.05)
    since = time.time_ns()
    edit_one_byte_keep_mtime(files[3])  # edited after the realize began (and hashed)
    memo.record(
        str(store), str(recipe), files=[], trees=[str(src)], result=result, since_ns=since
    )
    assert memo._load_item(str(store), str(recipe)) is None
    memo.record(
        str(store), str(recipe), files=[], trees=[str(src)], result=result,
        since_ns=time.time_ns() + memo.RACY_SLACK_NS + 10**9,
    )  # fmt: skip
    assert memo._load_item(str(store), str(recipe)) is not None


def test_git_tree_edit_of_a_big_file_git_names_is_hashed(
    repo: Path, tmp_path: Path, mode: str
) -> None:
    """A file over the big-file size that git calls dirty is hashed on the cheap path too (its
    record was dropped once, and the re-hash differed from a fresh scan when such a file was
    racy or dirty)."""
    cache = tmp_path / "cache"
    source_path.tree_digest(repo, cache=cache)
    settle()
    source_path.tree_digest(repo, cache=cache)
    big = max(repo.rglob("f*.txt"), key=lambda p: p.stat().st_size)
    assert big.stat().st_size > 300  # over the parallel mode's BIG_FILE
    edit_one_byte_keep_mtime(big)
    assert source_path.tree_digest(repo, cache=cache) == fresh(repo, tmp_path)
    settle()
    assert source_path.tree_digest(repo, cache=cache) == fresh(repo, tmp_path)


def test_a_bucket_directory_made_by_another_process_meanwhile_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two realizes of recipes on one source (``realize -j``) scan the same tree at once: the
    bucket directory can appear between one's check for an old one-file table and its unlink
    of it (CI saw ``IsADirectoryError`` as an internal error). The scan goes on and writes its
    buckets into the directory the other made."""
    src = tmp_path / "src"
    make_deep_tree(src)
    cache = tmp_path / "cache"
    settle()
    first = source_path.tree_digest(src, cache=cache)
    head, files_dir = treecache.record_paths(src, cache)
    head.unlink()  # the next scan starts afresh and writes every bucket
    real = Path.is_dir
    asked: list[Path] = []

    def other_process_not_there_yet(self: Path) -> bool:
        """The scan's first look at the bucket directory comes before the other made it."""
        if self == files_dir and not asked:
            asked.append(self)
            return False
        return real(self)

    monkeypatch.setattr(Path, "is_dir", other_process_not_there_yet)
    assert source_path.tree_digest(src, cache=cache) == first
    monkeypatch.undo()
    assert asked and files_dir.is_dir() and head.exists()
    assert source_path.tree_digest(src, cache=cache) == fresh(src, tmp_path)
