"""Sources: path hashing with a stat cache, git mirrors with nested submodules, patches."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from rocmforge.errors import PatchError, SourceError
from rocmforge.recipe.model import SourceSpec
from rocmforge.sources import git as source_git
from rocmforge.sources import tree as source_path
from rocmforge.sources import treecache
from rocmforge.sources.git import resolve_url
from rocmforge.sources.identity import SourceIdentity, identify_source, materialize_source

GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.org",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org",
}


def git(cwd: Path, *args: str, date: int = 1700000000) -> str:
    env = {**GIT_ENV, "GIT_AUTHOR_DATE": f"{date} +0000", "GIT_COMMITTER_DATE": f"{date} +0000"}
    out = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
        cwd=cwd, env=env, check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def commit(repo: Path, msg: str = "c", date: int = 1700000000) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg, date=date)
    return git(repo, "rev-parse", "HEAD")


def new_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    write(path, files)
    return path


def settle() -> None:
    """Let fresh files age past the racy-timestamp window so the stat cache may trust them."""
    time.sleep(source_path.RACY_SLACK_NS / 1e9 + 0.02)


@pytest.fixture
def count_digests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Spy on the content digest: records every file whose bytes were hashed."""
    seen: list[str] = []
    real = source_path.digest_file

    def spy(path: str, size: int) -> str:
        seen.append(os.path.basename(path))
        return real(path, size)

    monkeypatch.setattr(source_path, "digest_file", spy)
    return seen


def path_id(root: Path, cache: Path) -> str:
    ident = identify_source(SourceSpec(kind="path", path=root), cache=cache)
    assert ident.tree is not None
    return ident.tree


# ---------------------------------------------------------------- path sources


def make_plain_tree(root: Path) -> None:
    write(root, {"a.py": "print(1)\n", "pkg/b.c": "int b;\n", "pkg/deep/c.txt": "c\n"})
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    os.symlink("pkg/b.c", root / "link")
    (root / ".git").mkdir()  # a stray .git dir without a repo is still skipped
    (root / ".git" / "junk").write_text("x")


def test_path_identity_ignores_location_and_mtimes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_plain_tree(src)
    cache = tmp_path / "cache"
    first = path_id(src, cache)
    assert first.startswith("blake3:")
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(src, moved, symlinks=True)
    for p in moved.rglob("*"):
        os.utime(p, (1, 1), follow_symlinks=False)
    assert path_id(moved, cache) == first
    (src / ".git" / "junk").write_text("changed")
    assert path_id(src, cache) == first


@pytest.mark.parametrize(
    "change",
    ["content", "added", "exec_bit", "symlink", "removed", "renamed"],
)
def test_path_identity_changes(tmp_path: Path, change: str) -> None:
    src = tmp_path / "src"
    make_plain_tree(src)
    cache = tmp_path / "cache"
    settle()
    before = path_id(src, cache)
    if change == "content":
        (src / "pkg/b.c").write_text("int c;\n")  # same size as before
    elif change == "added":
        (src / "pkg/new.h").write_text("")
    elif change == "exec_bit":
        (src / "a.py").chmod(0o755)
    elif change == "symlink":
        (src / "link").unlink()
        os.symlink("a.py", src / "link")
    elif change == "removed":
        (src / "pkg/deep/c.txt").unlink()
    elif change == "renamed":
        (src / "a.py").rename(src / "z.py")
    assert path_id(src, cache) != before


def test_path_missing_names_path(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="nope"):
        identify_source(SourceSpec(kind="path", path=tmp_path / "nope"), cache=tmp_path / "c")


def test_stat_cache_avoids_reading_unchanged_files(
    tmp_path: Path, count_digests: list[str]
) -> None:
    src = tmp_path / "src"
    make_plain_tree(src)
    cache = tmp_path / "cache"
    settle()
    first = path_id(src, cache)
    assert sorted(count_digests) == ["a.py", "b.c", "c.txt", "run.sh"]
    count_digests.clear()
    assert path_id(src, cache) == first
    assert count_digests == []
    (src / "pkg/deep/c.txt").write_text("C\n")
    assert path_id(src, cache) != first
    assert count_digests == ["c.txt"]


def test_fresh_files_are_rehashed(tmp_path: Path, count_digests: list[str]) -> None:
    # A file written within the racy window could change again in the same clock tick unseen.
    src = tmp_path / "src"
    write(src, {"f": "1"})
    cache = tmp_path / "cache"
    path_id(src, cache)
    path_id(src, cache)
    assert count_digests == ["f", "f"]


def make_git_tree(tmp_path: Path) -> Path:
    repo = new_repo(
        tmp_path / "work",
        {".gitignore": "build/\n*.so\n", "setup.py": "x = 1\n", "src/m.c": "int m;\n"},
    )
    commit(repo)
    write(repo, {"build/stale.so": "old", "src/m.so": "old", "notes.txt": "untracked\n"})
    settle()
    return repo


def test_git_tree_honours_gitignore(tmp_path: Path) -> None:
    repo = make_git_tree(tmp_path)
    cache = tmp_path / "cache"
    first = path_id(repo, cache)
    (repo / "build/stale.so").write_text("newer")
    (repo / "build/more.o.so").write_text("x")
    assert path_id(repo, cache) == first
    (repo / "notes.txt").write_text("untracked but not ignored counts\n")
    assert path_id(repo, cache) != first
    dest = tmp_path / "dest"
    spec = SourceSpec(kind="path", path=repo)
    materialize_source(spec, identify_source(spec, cache=cache), dest, cache=cache)
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir())
    assert got == [".gitignore", "notes.txt", "setup.py", "src/m.c"]


def test_git_tree_stat_cache_and_fast_path(tmp_path: Path, count_digests: list[str]) -> None:
    repo = make_git_tree(tmp_path)
    cache = tmp_path / "cache"
    first = path_id(repo, cache)
    assert sorted(count_digests) == [".gitignore", "m.c", "notes.txt", "setup.py"]
    count_digests.clear()
    assert path_id(repo, cache) == first
    assert count_digests == []
    # A tracked file edited and then restored: the dirty set changes twice, content matters.
    (repo / "src/m.c").write_text("int n;\n")
    edited = path_id(repo, cache)
    assert edited != first
    assert count_digests == ["m.c"]
    settle()
    assert path_id(repo, cache) == edited
    (repo / "src/m.c").write_text("int m;\n")
    assert path_id(repo, cache) == first
    # A staged-only change (index rewritten) is still noticed through the content.
    (repo / "setup.py").write_text("x = 2\n")
    git(repo, "add", "setup.py")
    assert path_id(repo, cache) not in (first, edited)


def test_git_subdirectory_and_checked_out_submodule(tmp_path: Path) -> None:
    lib = new_repo(tmp_path / "lib", {"lib.c": "int lib;\n"})
    commit(lib)
    top = new_repo(tmp_path / "top", {"pkg/a.py": "a\n", "other.txt": "o\n"})
    git(top, "submodule", "add", "-q", "../lib", "pkg/vendor/lib")
    commit(top)
    settle()
    cache = tmp_path / "cache"
    spec = SourceSpec(kind="path", path=top / "pkg")
    ident = identify_source(spec, cache=cache)
    dest = tmp_path / "dest"
    materialize_source(spec, ident, dest, cache=cache)
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir())
    assert got == ["a.py", "vendor/lib/lib.c"]
    # The copy (no git at all) lists the same files, so it hashes the same.
    assert path_id(dest, tmp_path / "cache2") == ident.tree
    (top / "pkg/vendor/lib/lib.c").write_text("int changed;\n")
    assert path_id(top / "pkg", cache) != ident.tree


def test_path_materialize_modes_links_and_no_git(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_plain_tree(src)
    (src / "a.py").chmod(0o600)
    cache = tmp_path / "cache"
    spec = SourceSpec(kind="path", path=src)
    ident = identify_source(spec, cache=cache)
    dest = tmp_path / "out"
    materialize_source(spec, ident, dest, cache=cache)
    assert not (dest / ".git").exists()
    assert os.readlink(dest / "link") == "pkg/b.c"
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "a.py").stat().st_mode) == 0o644
    assert (dest / "pkg/deep/c.txt").read_text() == "c\n"
    assert (dest / "a.py").stat().st_mtime == ident.epoch == 315532800
    assert path_id(dest, cache) == path_id(src, cache)


# ---------------------------------------------------------------- git sources


def make_super(tmp_path: Path) -> dict[str, str]:
    """top -> third_party/mid (../mid) -> deps/leaf (../leaf); returns names -> commits."""
    leaf = new_repo(tmp_path / "leaf", {"leaf.h": "#define LEAF 1\n"})
    c_leaf = commit(leaf, date=1600000000)
    mid = new_repo(tmp_path / "mid", {"mid.c": "int mid;\n"})
    git(mid, "submodule", "add", "-q", "../leaf", "deps/leaf")
    c_mid = commit(mid, date=1650000000)
    top = new_repo(tmp_path / "top", {"setup.py": "print('top')\n", "tools/gen.sh": "#!/bin/sh\n"})
    (top / "tools/gen.sh").chmod(0o755)
    git(top, "submodule", "add", "-q", "../mid", "third_party/mid")
    c_top = commit(top, date=1700000123)
    return {"top": c_top, "mid": c_mid, "leaf": c_leaf}


def git_spec(url: Path | str, rev: str, **kw: object) -> SourceSpec:
    # The submodules of these test repositories are local repositories made by the tests.
    kw.setdefault("allow_local_submodules", True)
    return SourceSpec(kind="git", git=str(url), rev=rev, **kw)  # type: ignore[arg-type]


def test_git_identity_has_every_submodule_and_no_url(tmp_path: Path) -> None:
    c = make_super(tmp_path)
    ident = identify_source(git_spec(tmp_path / "top", c["top"], submodules=True),
                            cache=tmp_path / "cache")
    assert ident == SourceIdentity(
        kind="git",
        commit=c["top"],
        submodules=(("third_party/mid", c["mid"]), ("third_party/mid/deps/leaf", c["leaf"])),
        epoch=1700000123,
    )
    text = str(ident.to_json())
    assert str(tmp_path) not in text and "top" not in text
    plain = identify_source(git_spec(tmp_path / "top", c["top"]), cache=tmp_path / "cache")
    assert plain.submodules == () and plain.commit == c["top"]


@pytest.mark.slow
def test_git_same_commits_through_a_mirror_url_same_identity(tmp_path: Path) -> None:
    c = make_super(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    for name in ("top", "mid", "leaf"):
        git(tmp_path, "clone", "-q", "--mirror", str(tmp_path / name), str(other / name))
    a = identify_source(git_spec(tmp_path / "top", c["top"], submodules=True),
                        cache=tmp_path / "c1")
    b = identify_source(git_spec(f"file://{other}/top", c["top"], submodules=True),
                        cache=tmp_path / "c2")
    assert a == b
    assert a.to_json() == b.to_json()


@pytest.mark.slow
def test_git_submodule_bump_changes_identity(tmp_path: Path) -> None:
    c = make_super(tmp_path)
    cache = tmp_path / "cache"
    before = identify_source(git_spec(tmp_path / "top", c["top"], submodules=True), cache=cache)
    leaf = tmp_path / "leaf"
    write(leaf, {"leaf.h": "#define LEAF 2\n"})
    new_leaf = commit(leaf)
    mid, top = tmp_path / "mid", tmp_path / "top"
    git(mid, "update-index", "--cacheinfo", f"160000,{new_leaf},deps/leaf")
    git(mid, "commit", "-q", "-m", "bump leaf")
    new_mid = git(mid, "rev-parse", "HEAD")
    git(top, "update-index", "--cacheinfo", f"160000,{new_mid},third_party/mid")
    git(top, "commit", "-q", "-m", "bump mid")
    new_top = git(top, "rev-parse", "HEAD")
    after = identify_source(git_spec(top, new_top, submodules=True), cache=cache)
    assert after.submodules == (
        ("third_party/mid", new_mid),
        ("third_party/mid/deps/leaf", new_leaf),
    )
    assert after.to_json() != before.to_json()


def test_git_hit_is_offline_and_runs_no_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = make_super(tmp_path)
    cache = tmp_path / "cache"
    spec = git_spec(tmp_path / "top", c["top"], submodules=True)
    first = identify_source(spec, cache=cache)
    for name in ("top", "mid", "leaf"):
        (tmp_path / name).rename(tmp_path / f"{name}.gone")
    calls: list[object] = []
    real_run, real_popen = subprocess.run, subprocess.Popen

    def run_spy(*a: object, **k: object) -> object:
        calls.append(a)
        return real_run(*a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", run_spy)
    def popen_spy(*a: object, **k: object) -> object:
        calls.append(a)
        return real_popen(*a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "Popen", popen_spy)
    assert identify_source(spec, cache=cache) == first
    assert calls == []
    # Materialising works from the mirrors alone, origin gone.
    monkeypatch.setattr(subprocess, "run", real_run)
    monkeypatch.setattr(subprocess, "Popen", real_popen)
    dest = tmp_path / "dest"
    materialize_source(spec, first, dest, cache=cache)
    assert (dest / "third_party/mid/deps/leaf/leaf.h").exists()


def test_git_fetches_only_for_a_missing_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = new_repo(tmp_path / "repo", {"a": "1\n"})
    c1 = commit(repo)
    cache = tmp_path / "cache"
    identify_source(git_spec(repo, c1), cache=cache)
    write(repo, {"a": "2\n"})
    c2 = commit(repo, date=1700000500)
    commands: list[list[str]] = []
    real = source_git.run_git

    def spy(args: list[str], **kw: object) -> bytes:
        commands.append([str(a) for a in args])
        return real(args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(source_git, "run_git", spy)
    # A fresh resolution of the old commit (new submodules flag) needs no fetch.
    identify_source(git_spec(repo, c1, submodules=True), cache=cache)
    assert not any("fetch" in cmd for cmd in commands)
    ident = identify_source(git_spec(repo, c2), cache=cache)
    assert ident.commit == c2 and ident.epoch == 1700000500
    assert sum("fetch" in cmd for cmd in commands) == 1
    assert len(list((cache / "git").glob("*.git"))) == 1


def test_git_unknown_commit(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", {"a": "1\n"})
    commit(repo)
    bogus = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(SourceError) as err:
        identify_source(git_spec(repo, bogus), cache=tmp_path / "cache")
    assert bogus in str(err.value) and str(repo) in str(err.value)
    with pytest.raises(SourceError, match="full commit"):
        identify_source(git_spec(repo, "main"), cache=tmp_path / "cache")


@pytest.mark.slow
def test_git_materialize_tree_submodules_modes(tmp_path: Path) -> None:
    c = make_super(tmp_path)
    cache = tmp_path / "cache"
    spec = git_spec(tmp_path / "top", c["top"], submodules=True)
    ident = identify_source(spec, cache=cache)
    dest = tmp_path / "dest"
    materialize_source(spec, ident, dest, cache=cache)
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir())
    assert files == [
        ".gitmodules",
        "setup.py",
        "third_party/mid/.gitmodules",
        "third_party/mid/deps/leaf/leaf.h",
        "third_party/mid/mid.c",
        "tools/gen.sh",
    ]
    assert not list(dest.rglob(".git"))
    assert stat.S_IMODE((dest / "tools/gen.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "setup.py").stat().st_mode) == 0o644
    assert int((dest / "third_party/mid/mid.c").stat().st_mtime) == 1700000123
    # Without submodules the gitlink directories stay empty.
    dest2 = tmp_path / "dest2"
    spec2 = git_spec(tmp_path / "top", c["top"])
    materialize_source(spec2, identify_source(spec2, cache=cache), dest2, cache=cache)
    assert not (dest2 / "third_party/mid/mid.c").exists()


# ---------------------------------------------------------------- patches


def make_patch(path: Path, rel: str, old: str, new: str) -> Path:
    path.write_text(
        f"--- a/{rel}\n+++ b/{rel}\n@@ -1 +1 @@\n-{old}\n+{new}\n"
    )
    return path


def test_patches_apply_in_order_and_enter_identity(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", {"f.txt": "one\n"})
    c1 = commit(repo)
    p1 = make_patch(tmp_path / "01-two.patch", "f.txt", "one", "two")
    p2 = make_patch(tmp_path / "02-three.patch", "f.txt", "two", "three")
    cache = tmp_path / "cache"
    spec = git_spec(repo, c1, patches=(p1, p2))
    ident = identify_source(spec, cache=cache)
    assert [name for name, _ in ident.patches] == ["01-two.patch", "02-three.patch"]
    assert ident != identify_source(git_spec(repo, c1, patches=(p1,)), cache=cache)
    dest = tmp_path / "dest"
    materialize_source(spec, ident, dest, cache=cache)
    assert (dest / "f.txt").read_text() == "three\n"
    # Path sources are patched the same way, and the source itself is left alone.
    pspec = SourceSpec(kind="path", path=repo, patches=(p1,))
    pdest = tmp_path / "pdest"
    materialize_source(pspec, identify_source(pspec, cache=cache), pdest, cache=cache)
    assert (pdest / "f.txt").read_text() == "two\n"
    assert (repo / "f.txt").read_text() == "one\n"


def test_bad_patch_names_the_file(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", {"f.txt": "one\n"})
    c1 = commit(repo)
    good = make_patch(tmp_path / "good.patch", "f.txt", "one", "two")
    bad = make_patch(tmp_path / "bad.patch", "f.txt", "nothere", "x")
    cache = tmp_path / "cache"
    spec = git_spec(repo, c1, patches=(good, bad))
    ident = identify_source(spec, cache=cache)
    with pytest.raises(PatchError) as err:
        materialize_source(spec, ident, tmp_path / "dest", cache=cache)
    assert "bad.patch" in str(err.value) and "f.txt" in str(err.value)
    missing = git_spec(repo, c1, patches=(tmp_path / "missing.patch",))
    with pytest.raises(SourceError, match=r"missing\.patch"):
        identify_source(missing, cache=cache)


def test_materialize_refuses_nonempty_dest(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write(src, {"a": "1"})
    dest = tmp_path / "dest"
    write(dest, {"left": "over"})
    spec = SourceSpec(kind="path", path=src)
    with pytest.raises(SourceError, match="not empty"):
        materialize_source(spec, identify_source(spec, cache=tmp_path / "c"), dest,
                           cache=tmp_path / "c")


@pytest.mark.parametrize(
    ("base", "rel", "want"),
    [
        ("https://github.com/org/super.git", "../sub.git", "https://github.com/org/sub.git"),
        ("https://github.com/org/super", "./sub", "https://github.com/org/super/sub"),
        ("git@github.com:org/super.git", "../other/x.git", "git@github.com:org/other/x.git"),
        ("/srv/repos/super", "../../lib", "/srv/lib"),
        ("file:///srv/repos/super/", "../lib", "file:///srv/repos/lib"),
        ("/srv/super", "https://example.org/abs.git", "https://example.org/abs.git"),
    ],
)
def test_resolve_relative_submodule_urls(base: str, rel: str, want: str) -> None:
    assert resolve_url(base, rel) == want


def test_empty_tree_twice(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    first = path_id(tmp_path / "empty", tmp_path / "c")
    assert path_id(tmp_path / "empty", tmp_path / "c") == first


# ---------------------------------------------------------------- pinned digests and parallel scans

PINNED_TREE_DIGEST = "ec248200508c157e78ab284b00257b895c256a35ffc96995ab00852cd78760b4"


def make_pinned_tree(root: Path) -> None:
    """A fixed tree whose digest is pinned: kinds, nesting, and names whose byte order differs."""
    contents: dict[str, tuple[bytes, int]] = {
        "a.py": (b"print(1)\n", 0o644),
        "pkg/b.c": (b"int b;\n", 0o644),
        "pkg/deep/c.txt": (b"", 0o644),
        "run.sh": (b"#!/bin/sh\n", 0o755),
        "pkg-x": (b"dash sorts before slash\n", 0o644),
        "\u00e9t\u00e9.txt": (b"utf-8 name\n", 0o644),
        "Zed": (b"upper sorts first\n", 0o644),
        os.fsdecode(b"raw-\xff"): (b"undecodable name\n", 0o644),
        "\ue000-private": (b"private use char\n", 0o644),
        # U+E000 is EE 80 80 in UTF-8, so it sorts before the raw byte FF but after U+DCFF as str.
        os.fsdecode(b"q-\xff"): (b"ff\n", 0o644),
        "q-\ue000": (b"ee\n", 0o644),
    }
    for rel, (data, mode) in contents.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(mode)
    os.symlink("pkg/b.c", root / "link")
    os.symlink("missing-target", root / "pkg/dangling")


def test_tree_digest_is_pinned(tmp_path: Path) -> None:
    # The canonical walk and the hashed bytes must never change: every recorded identity uses them.
    src = tmp_path / "src"
    make_pinned_tree(src)
    (src / ".git").mkdir()
    (src / ".git" / "junk").write_text("not a repo, still skipped")
    assert source_path.tree_digest(src, cache=tmp_path / "cache") == PINNED_TREE_DIGEST
    settle()
    assert source_path.tree_digest(src, cache=tmp_path / "cache") == PINNED_TREE_DIGEST


def test_tree_digest_is_pinned_in_a_git_work_tree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    make_pinned_tree(repo)
    git(repo, "add", "-A")
    git(repo, "rm", "-q", "--cached", "Zed")  # untracked but not ignored: still listed
    assert source_path.tree_digest(repo, cache=tmp_path / "cache") == PINNED_TREE_DIGEST


@pytest.fixture
def parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make even a small tree take the forked multi-worker path, with small 'big' files."""
    monkeypatch.setattr(source_path, "PARALLEL_MIN_ENTRIES", 8)
    monkeypatch.setattr(source_path, "BIG_FILE", 4096)
    monkeypatch.setattr(source_path, "_workers", lambda: 3)


def make_wide_tree(root: Path) -> None:
    for i in range(120):
        p = root / f"d{i % 7}" / f"s{i % 5}" / f"f{i}.c"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i % 251]) * (i * 97))  # some above the patched BIG_FILE
    (root / "d0" / "tool").write_text("#!/bin/sh\n")
    (root / "d0" / "tool").chmod(0o755)
    os.symlink("../d1", root / "d0" / "up")


def test_parallel_scan_hashes_like_the_serial_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    make_wide_tree(src)
    make_pinned_tree(src / "pinned")
    serial = source_path.tree_digest(src, cache=tmp_path / "c1")
    listing = source_path.tree_listing(src, cache=tmp_path / "c1")
    serial_files = {k: v[treecache.REC_KIND :] for k, v in listing.items()}
    monkeypatch.setattr(source_path, "PARALLEL_MIN_ENTRIES", 8)
    monkeypatch.setattr(source_path, "BIG_FILE", 4096)
    monkeypatch.setattr(source_path, "_workers", lambda: 3)
    assert source_path.tree_digest(src, cache=tmp_path / "c2") == serial
    listing = source_path.tree_listing(src, cache=tmp_path / "c2")
    assert {k: v[treecache.REC_KIND :] for k, v in listing.items()} == serial_files
    assert source_path.tree_digest(src / "pinned", cache=tmp_path / "c2") == PINNED_TREE_DIGEST


@pytest.mark.usefixtures("parallel")
def test_parallel_warm_scan_loads_no_table_and_sees_edits(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_wide_tree(src)
    cache = tmp_path / "cache"
    settle()
    first = source_path.tree_digest(src, cache=cache)
    _, files_dir = treecache.record_paths(src, cache)
    shutil.rmtree(files_dir)  # an unchanged tree is answered from the head: no table needed
    assert source_path.tree_digest(src, cache=cache) == first
    target = src / "d3" / "s3" / "f3.c"  # 291 bytes, rewritten with the same size
    before = target.read_bytes()
    target.write_bytes(b"x" * len(before))
    edited = source_path.tree_digest(src, cache=cache)  # the table is gone: scanned afresh
    assert edited != first
    target.write_bytes(before)
    assert source_path.tree_digest(src, cache=cache) == first
    (src / "d6" / "new").write_text("")
    assert source_path.tree_digest(src, cache=cache) not in (first, edited)


@pytest.mark.slow
@pytest.mark.usefixtures("parallel")
def test_parallel_git_scan_hashes_like_the_plain_copy(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    make_wide_tree(repo)
    (repo / ".gitignore").write_text("*.o\n")
    commit(repo)
    (repo / "d2" / "junk.o").write_text("ignored")
    (repo / "d2" / "untracked.txt").write_text("counted")
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True, ignore=shutil.ignore_patterns(".git", "*.o"))
    assert source_path.tree_digest(repo, cache=tmp_path / "c") == source_path.tree_digest(
        copy, cache=tmp_path / "c"
    )


@pytest.mark.usefixtures("parallel")
@pytest.mark.parametrize("how", ["error", "crash"])
def test_parallel_worker_failure_is_a_source_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    src = tmp_path / "src"
    make_wide_tree(src)
    parent = os.getpid()
    real = source_path.digest_file

    def failing(path: str, size: int) -> str:
        if os.getpid() != parent and path.endswith("f7.c"):  # only inside a forked worker
            if how == "crash":
                os._exit(3)
            raise OSError(5, "Input/output error", path)
        return real(path, size)

    monkeypatch.setattr(source_path, "digest_file", failing)
    match = "f7.c: cannot read" if how == "error" else "worker .* failed"
    with pytest.raises(SourceError, match=match):
        source_path.tree_digest(src, cache=tmp_path / "c")


def test_git_tree_with_a_merge_conflict_lists_the_file_once(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", {"a.txt": "base\n", "b.txt": "b\n"})
    commit(repo)
    git(repo, "checkout", "-q", "-b", "other")
    write(repo, {"a.txt": "other\n"})
    commit(repo, "other")
    git(repo, "checkout", "-q", "main")
    write(repo, {"a.txt": "main\n"})
    commit(repo, "main")
    with pytest.raises(subprocess.CalledProcessError):
        git(repo, "merge", "-q", "other")
    assert len(git(repo, "ls-files", "-s", "a.txt").splitlines()) == 3  # stages 1, 2 and 3
    listing = source_path.tree_listing(repo, cache=tmp_path / "c")
    assert sorted(listing) == ["a.txt", "b.txt"]
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    assert source_path.tree_digest(repo, cache=tmp_path / "c") == source_path.tree_digest(
        copy, cache=tmp_path / "c"
    )
