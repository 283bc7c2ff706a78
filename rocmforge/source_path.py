"""Path sources: a canonical blake3 content hash of a directory tree, a stat cache, and copying it.

The hash covers, for every listed file in POSIX byte order of its relative path, the path, its type
(``f`` file, ``x`` executable file, ``l`` symlink) and the blake3 of its content (or the link
target); mtimes, owners and where the directory lives do not count. Inside a git work tree the
listing is git's (tracked plus untracked-not-ignored files, checked-out submodules recursed into);
elsewhere it is every file except ``.git``.

A per-directory record under ``cache/trees`` keeps ``path -> (size, mtime_ns, ino, ctime_ns)`` with
the digest, so unchanged files are only stat'ed. In a git work tree the hit path goes further: when
the index file is unchanged and git reports the same dirty and untracked files as last time (git
does those stats in C), the recorded tree hash is returned without stat'ing every file in Python.
Entries whose timestamps are too fresh to be trusted (racy-git) are never reused.
"""

from __future__ import annotations

import marshal
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import blake3

from rocmforge.errors import SourceError
from rocmforge.hashing import blake3_hex
from rocmforge.source_git import git_env

RECORD_VERSION = 1
TREE_TAG = b"rocmforge-tree-v1\0"
BIG_FILE = 1 << 22
# Timestamps this close to the scan start may hide a same-tick rewrite; such digests are not reused.
RACY_SLACK_NS = 50_000_000

# rel -> (size, mtime_ns, ino, ctime_ns, kind, digest-or-link-target); size -1 marks "do not trust".
FileRec = tuple[int, int, int, int, str, str]


def digest_file(path: str, size: int) -> str:
    """Return the blake3 hex of a file's content; ``size`` (from stat) only sizes the first read.

    Big files are memory-mapped and hashed with blake3's threads (the GIL is released); small
    ones are read whole with raw ``os`` calls, which costs far less than a buffered file object.
    """
    if size >= BIG_FILE:
        h = blake3.blake3(max_threads=blake3.blake3.AUTO)
        h.update_mmap(path)
        return str(h.hexdigest())
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, size + 1)
        if len(data) > size:  # grew since stat: read the rest
            chunks = [data]
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            data = b"".join(chunks)
    finally:
        os.close(fd)
    return str(blake3.blake3(data).hexdigest())


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return "x" if mode & 0o111 else "f"
    if stat.S_ISLNK(mode):
        return "l"
    return None


def _record_paths(root: Path, cache: Path) -> tuple[Path, Path]:
    """Return the record's small head (digest, git state) and its big file table."""
    stem = cache / "trees" / blake3_hex(os.fsencode(root))[:24]
    return stem.with_suffix(".head"), stem.with_suffix(".files")


def _load(path: Path) -> Any:
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def _load_head(path: Path, root: Path) -> dict[str, Any]:
    data = _load(path)
    if (
        not isinstance(data, dict)
        or data.get("v") != RECORD_VERSION
        or data.get("root") != os.fspath(root)
    ):
        return {}
    return data


def _load_files(path: Path, head: dict[str, Any]) -> dict[str, FileRec]:
    data = _load(path)
    if not head or not isinstance(data, tuple) or len(data) != 2 or data[0] != head["token"]:
        return {}
    files: dict[str, FileRec] = data[1]
    return files


def _write_atomic(path: Path, payload: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".rec-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        raise SourceError(f"cannot write stat cache {path}: {exc}") from exc


def _find_gitdir(start: Path) -> Path | None:
    """Return the git dir of the work tree containing ``start``, looking upwards, or None."""
    d = start
    while True:
        dot = d / ".git"
        found: Path | None = None
        if dot.is_dir():
            found = dot
        elif dot.is_file():
            try:
                text = dot.read_text().strip()
            except OSError:
                text = ""
            if text.startswith("gitdir:"):
                gd = Path(text[len("gitdir:"):].strip())
                found = gd if gd.is_absolute() else (d / gd)
        # Like git, a .git without HEAD is not a repository; keep looking upwards.
        if found is not None and (found / "HEAD").is_file():
            return found
        if d.parent == d:
            return None
        d = d.parent


def _index_stat(gitdir: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(gitdir / "index")
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def _git_many(cwd: Path, commands: list[list[str]]) -> list[bytes]:
    """Run several read-only git queries concurrently in ``cwd``; return their outputs."""
    env = git_env()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for args in commands:
            procs.append(
                subprocess.Popen(
                    ["git", "-c", "safe.directory=*", "--no-optional-locks", *args],
                    cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                )
            )
        outs = []
        for args, p in zip(commands, procs, strict=True):
            out, err = p.communicate()
            if p.returncode != 0:
                line = err.decode(errors="replace").strip().splitlines()[:1]
                raise SourceError(
                    f"{cwd}: git {' '.join(args)} failed: {line[0] if line else p.returncode}"
                )
            outs.append(out)
        return outs
    except OSError as exc:
        raise SourceError(f"{cwd}: cannot run git: {exc}") from exc
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _split_z(data: bytes) -> list[str]:
    return [os.fsdecode(x) for x in data.split(b"\0") if x]


_DIRTY = ["diff-files", "-z", "--name-only", "--relative", "--ignore-submodules=all"]
_OTHERS = ["ls-files", "-z", "--others", "--exclude-standard"]
_CACHED = ["ls-files", "-z", "-s"]


class _Scan:
    """One scan of a tree: collects entries, notes what needs hashing, builds the new record."""

    def __init__(self, root: Path, old_files: dict[str, FileRec]) -> None:
        self.root = root
        self.old_files = old_files
        self.files: dict[str, FileRec] = {}
        self.todo: list[tuple[str, os.stat_result, str]] = []  # (rel, stat, kind)
        self.git: dict[str, dict[str, Any]] = {}
        self.worktrees: list[tuple[Path, str]] = []
        self.cutoff = time.time_ns() - RACY_SLACK_NS

    def add(self, rel: str, st: os.stat_result) -> None:
        kind = _kind(st.st_mode)
        if kind is None:
            return
        prev = self.old_files.get(rel)
        if (
            prev is not None
            and prev[0] == st.st_size
            and prev[1] == st.st_mtime_ns
            and prev[2] == st.st_ino
            and prev[3] == st.st_ctime_ns
            and prev[4] == kind
        ):
            self.files[rel] = prev
        elif kind == "l":
            try:
                target = os.readlink(os.path.join(self.root, rel))
            except OSError as exc:
                raise SourceError(f"{self.root / rel}: cannot read link: {exc}") from exc
            self.files[rel] = self._rec(st, kind, target)
        else:
            self.todo.append((rel, st, kind))

    def _rec(self, st: os.stat_result, kind: str, digest: str) -> FileRec:
        racy = max(st.st_mtime_ns, st.st_ctime_ns) >= self.cutoff
        return (-1 if racy else st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, kind, digest)

    def add_paths(self, rels: Iterable[str], prefix: str) -> None:
        lstat = os.lstat
        base = os.fspath(self.root)
        for rel in rels:
            full = prefix + rel
            try:
                st = lstat(os.path.join(base, full))
            except FileNotFoundError:
                continue  # tracked but deleted in the work tree
            except OSError as exc:
                raise SourceError(f"{self.root / full}: cannot stat: {exc}") from exc
            self.add(full, st)

    def walk(self, top: str, prefix: str) -> None:
        """Add every file under ``top`` (not a git work tree), skipping ``.git``."""
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError as exc:
            raise SourceError(f"{top}: cannot list directory: {exc}") from exc
        for e in entries:
            if e.name == ".git":
                continue
            rel = prefix + e.name
            try:
                if e.is_dir(follow_symlinks=False):
                    self.walk(e.path, rel + "/")
                    continue
                st = e.stat(follow_symlinks=False)
            except OSError as exc:
                raise SourceError(f"{e.path}: cannot stat: {exc}") from exc
            self.add(rel, st)

    def git_tree(self, wt: Path, prefix: str) -> None:
        """Add the listing of the git work tree at ``wt`` (``prefix`` from root), recursively."""
        gitdir = _find_gitdir(wt)
        index = _index_stat(gitdir) if gitdir is not None else None
        cached, others = _git_many(wt, [_CACHED, _OTHERS])
        tracked: set[str] = set()
        subs: list[tuple[str, bool]] = []
        for rec in cached.split(b"\0"):
            if not rec:
                continue
            meta, _, path = rec.partition(b"\t")
            rel = os.fsdecode(path)
            if meta.startswith(b"160000 "):
                checked_out = os.path.exists(os.path.join(wt, rel, ".git"))
                subs.append((rel, checked_out))
                if checked_out:
                    self.git_tree(wt / rel, prefix + rel + "/")
            else:
                tracked.add(rel)
        untracked = [r for r in _split_z(others) if not r.endswith("/")]
        self.add_paths(sorted(tracked.union(untracked)), prefix)
        self.git[prefix] = {
            "index": index,
            "dirty": [],  # filled by finish_git(), after the files were read
            "untracked": sorted(untracked),
            "subs": sorted(set(subs)),
        }
        self.worktrees.append((wt, prefix))

    def finish_git(self) -> None:
        """Record git's dirty files, asked after hashing so an edit during the scan shows up."""
        for wt, prefix in self.worktrees:
            (dirty,) = _git_many(wt, [_DIRTY])
            self.git[prefix]["dirty"] = sorted(_split_z(dirty))

    def hash_todo(self) -> None:
        """Hash the files the stat cache could not vouch for.

        Big files go to one worker thread (mmap, GIL released, blake3's own threads) while this
        thread reads and hashes the small ones; a pool for small files measured slower (GIL).
        """
        if not self.todo:
            return
        base = os.fspath(self.root)
        big = [i for i, (_, st, _) in enumerate(self.todo) if st.st_size >= BIG_FILE]
        small = [i for i, (_, st, _) in enumerate(self.todo) if st.st_size < BIG_FILE]

        def run(indexes: list[int]) -> list[str]:
            return [
                digest_file(os.path.join(base, self.todo[i][0]), self.todo[i][1].st_size)
                for i in indexes
            ]

        try:
            with ThreadPoolExecutor(max_workers=1) as pool:
                big_future = pool.submit(run, big)
                results = list(zip(small, run(small), strict=True))
                results += zip(big, big_future.result(), strict=True)
        except OSError as exc:
            raise SourceError(f"{self.root}: cannot read file: {exc}") from exc
        for i, d in results:
            rel, st, kind = self.todo[i]
            self.files[rel] = self._rec(st, kind, d)
        self.todo = []


def _tree_digest(files: dict[str, FileRec]) -> str:
    h = blake3.blake3(TREE_TAG)
    parts = []
    for rel in sorted(files, key=os.fsencode):
        r = files[rel]
        parts.append(b"%s\0%s\0%s\0" % (os.fsencode(rel), r[4].encode(), os.fsencode(r[5])))
    h.update(b"".join(parts))
    return str(h.hexdigest())


def _git_unchanged(root: Path, head: dict[str, Any], prefix: str, wt: Path) -> bool:
    """Return whether the git work tree at ``wt`` is provably as it was when ``head`` was made."""
    rec = head.get("git", {}).get(prefix)
    if rec is None or rec["index"] is None:
        return False
    gitdir = _find_gitdir(wt)
    if gitdir is None or _index_stat(gitdir) != rec["index"]:
        return False
    for rel, checked_out in rec["subs"]:
        if os.path.exists(os.path.join(wt, rel, ".git")) != checked_out:
            return False
    others, dirty = _git_many(wt, [_OTHERS, _DIRTY])
    untracked = sorted(r for r in _split_z(others) if not r.endswith("/"))
    if untracked != rec["untracked"] or sorted(_split_z(dirty)) != rec["dirty"]:
        return False
    hot: dict[str, FileRec] = head["hot"]
    for rel in (*untracked, *rec["dirty"]):
        full = prefix + rel
        prev = hot.get(full)
        try:
            st = os.lstat(os.path.join(root, full))
        except FileNotFoundError:
            if prev is None:
                continue
            return False
        if prev is None or prev[:4] != (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns):
            return False
    return all(
        _git_unchanged(root, head, prefix + rel + "/", wt / rel)
        for rel, checked_out in rec["subs"]
        if checked_out
    )


def _scan_tree(
    root: Path, cache: Path, *, need_files: bool
) -> tuple[str, dict[str, FileRec]]:
    try:
        st = os.stat(root)
    except OSError as exc:
        raise SourceError(f"path source {root}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise SourceError(f"path source {root}: not a directory")
    root = Path(os.path.abspath(root))
    head_path, files_path = _record_paths(root, cache)
    head = _load_head(head_path, root)
    in_git = _find_gitdir(root) is not None
    if in_git and head and _git_unchanged(root, head, "", root):
        files = _load_files(files_path, head) if need_files else {}
        if files or not need_files:
            return head["digest"], files
    old_files = _load_files(files_path, head)
    scan = _Scan(root, old_files)
    if in_git:
        scan.git_tree(root, "")
    else:
        scan.walk(os.fspath(root), "")
    scan.hash_todo()
    scan.finish_git()
    if head and scan.files == old_files and head.get("git", {}) == scan.git:
        return head["digest"], scan.files
    digest = _tree_digest(scan.files)
    hot = {
        prefix + rel: scan.files[prefix + rel]
        for prefix, rec in scan.git.items()
        for rel in (*rec["dirty"], *rec["untracked"])
        if prefix + rel in scan.files
    }
    if head and scan.files == old_files:
        token = head["token"]
    else:
        token = blake3_hex(os.urandom(16))
        _write_atomic(files_path, marshal.dumps((token, scan.files)))
    _write_atomic(
        head_path,
        marshal.dumps({"v": RECORD_VERSION, "root": os.fspath(root), "token": token,
                       "digest": digest, "git": scan.git, "hot": hot}),
    )
    return digest, scan.files


def tree_digest(root: Path, *, cache: Path) -> str:
    """Return the blake3 hex of the tree at ``root``, reusing and updating the stat cache."""
    return _scan_tree(root, cache, need_files=False)[0]


def tree_listing(root: Path, *, cache: Path) -> dict[str, FileRec]:
    """Return the listing of ``root`` (the same set :func:`tree_digest` hashes)."""
    return _scan_tree(root, cache, need_files=True)[1]


def copy_tree(
    root: Path,
    files: dict[str, FileRec],
    dest: Path,
    *,
    copy: Callable[[str, str], object] = shutil.copyfile,
) -> None:
    """Copy the listed files of ``root`` into ``dest``: modes 0644/0755, symlinks kept as links."""
    src = os.fspath(root)
    dst = os.fspath(dest)
    made: set[str] = set()
    for rel in sorted(files):
        kind, target = files[rel][4], files[rel][5]
        out = os.path.join(dst, rel)
        parent = os.path.dirname(out)
        try:
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            if kind == "l":
                os.symlink(target, out)
            else:
                copy(os.path.join(src, rel), out)
                os.chmod(out, 0o755 if kind == "x" else 0o644)
        except OSError as exc:
            raise SourceError(f"cannot copy {root / rel} to {out}: {exc}") from exc
