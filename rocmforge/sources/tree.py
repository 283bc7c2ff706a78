"""Path sources: a canonical blake3 content hash of a directory tree, and copying it.

The hash covers, for every listed file in POSIX byte order of its relative path, the path, its type
(``f`` file, ``x`` executable file, ``l`` symlink) and the blake3 of its content (or the link
target); mtimes, owners and where the directory lives do not count. Inside a git work tree the
listing is git's (tracked plus untracked-not-ignored files, checked-out submodules recursed into);
elsewhere it is every file except ``.git``.

What a hash found is kept in a stat cache (:mod:`rocmforge.sources.treecache`: per directory,
its files' records and its share of the hashed text, in bucket files under a small head), so a
re-hash looks again only at what may have changed.

Which directories changed: in a plain tree every directory is listed and every file stat'ed (a
file's content can change without its directory's mtime moving, so nothing less is sound; it
is what ``git status`` does too), and a directory whose signature equals the recorded one is
not looked at further. In a git work tree whose index file is unchanged, git is asked which
files are dirty or untracked (``diff-files``, ``ls-files --others``: git stats in C); only
those, the ones that were dirty or untracked last time, and records too fresh to be trusted
(racy-git) are looked at again. A changed index, or a tree listed by its own ignore rules,
is listed and stat'ed whole (unchanged files are still only stat'ed, never read).

Big trees (``PARALLEL_MIN_ENTRIES`` and up) are scanned by one forked worker per core, since the
per-file work is Python under the GIL; the parent hashes big files as the workers report them.
The worker pool is :mod:`rocmforge.sources.forkmap`; the git listing is
:mod:`rocmforge.sources.gitlisting`.
"""

from __future__ import annotations

import os
import select
import shutil
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import blake3

from rocmforge.errors import SourceError
from rocmforge.sources.forkmap import (
    collect,
    fork_map,
    in_worker,
    reap,
    send_message,
    spawn,
    take_messages,
)
from rocmforge.sources.forkmap import workers as _workers
from rocmforge.sources.gitlisting import (
    DIRTY,
    OTHERS,
    GitListing,
    find_gitdir,
    git_many,
    index_stat,
    split_z,
)
from rocmforge.sources.treecache import (
    REC_CONTENT,
    REC_CTIME,
    REC_INO,
    REC_KIND,
    REC_MTIME,
    REC_SIZE,
    Dir,
    FileRec,
    Parts,
    Stale,
    Table,
    bucket_of,
    commit,
    dir_signature,
    load_head,
    record_paths,
)

TREE_TAG = b"rocmforge-tree-v1\0"
BIG_FILE = 1 << 22
# Timestamps this close to the scan start may hide a same-tick rewrite; such digests are not reused.
RACY_SLACK_NS = 50_000_000
# Below this many entries a scan stays in this process: a fork costs more than it saves.
PARALLEL_MIN_ENTRIES = 4096
# What a scan records of one file before reading it: (name, size, mtime_ns, ino, ctime_ns, mode);
# the name is relative to its directory (to the root in a big-file message).
_Stat = tuple[str, int, int, int, int, int]
# A worker's outcome: prefixes of directories seen, directories changed, big files left to hash.
_PartResult = tuple[list[str], list[Dir], list[tuple[_Stat, str]]]
_S_IFMT, _S_IFREG, _S_IFLNK = 0o170000, 0o100000, 0o120000

_local = threading.local()


def _buffer(size: int) -> memoryview:
    """Return this thread's reusable read buffer, at least ``size`` bytes long."""
    buf: bytearray | None = getattr(_local, "buf", None)
    if buf is None or len(buf) < size:
        buf = bytearray(max(size, 1 << 16))
        _local.buf = buf
    return memoryview(buf)


def digest_file(path: str, size: int) -> str:
    """Return the blake3 hex of a file's content; ``size`` (from stat) only sizes the first read.

    Big files are memory-mapped and hashed with blake3's threads (one thread in a forked scan
    worker, where blake3's pool does not exist); small ones are read with raw ``os`` calls into
    a reused buffer, which costs far less than a buffered file object or a fresh bytes object.
    """
    if size >= BIG_FILE:
        h = blake3.blake3(max_threads=1 if in_worker() else blake3.blake3.AUTO)
        h.update_mmap(path)
        return str(h.hexdigest())
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        view = _buffer(size + 1)
        n = os.readv(fd, [view[: size + 1]])
        if n > size:  # grew since stat: read the rest
            chunks = [bytes(view[:n])]
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return str(blake3.blake3(b"".join(chunks)).hexdigest())
    finally:
        os.close(fd)
    return str(blake3.blake3(view[:n]).hexdigest())


class _Job:
    """One share of a scan: directories or listed files to stat, and the table to compare with."""

    __slots__ = ("base", "cutoff", "deep", "rels", "shallow", "table")

    def __init__(
        self,
        *,
        base: str,
        table: Table,
        cutoff: int,
        shallow: Sequence[str] = (),
        deep: Sequence[str] = (),
        rels: Sequence[str] = (),
    ) -> None:
        self.base = base  # root with a trailing "/"
        self.table = table
        self.cutoff = cutoff
        self.shallow = shallow  # directory prefixes ("" or "a/b/") to list, not recursing
        self.deep = deep  # directory prefixes to walk recursively (.git skipped)
        self.rels = rels  # listed files (relative paths, grouped by directory) to lstat


def _make_recs(
    base: str,
    prefix: str,
    facts: list[_Stat],
    old: dict[str, FileRec],
    cutoff: int,
    big_fd: int | None,
    big: list[tuple[_Stat, str]],
) -> tuple[dict[str, FileRec], bool]:
    """Return the records of one directory's files (reused when their stat facts are the
    recorded ones, else hashed) and whether any is too fresh to trust. Big files are sent
    through ``big_fd`` to a process that has time for them, or else added to ``big``."""
    recs: dict[str, FileRec] = {}
    racy_seen = False
    for name, size, mtime, ino, ctime, mode in facts:
        kind = "l" if mode & _S_IFMT == _S_IFLNK else "x" if mode & 0o111 else "f"
        prev = old.get(name)
        if (
            prev is not None
            and prev[REC_SIZE] == size
            and prev[REC_MTIME] == mtime
            and prev[REC_INO] == ino
            and prev[REC_CTIME] == ctime
            and prev[REC_KIND] == kind
        ):
            recs[name] = prev
            continue
        racy = (mtime if mtime > ctime else ctime) >= cutoff
        racy_seen = racy_seen or racy
        rel = prefix + name
        if kind != "l" and size >= BIG_FILE:
            fact = (rel, size, mtime, ino, ctime, mode)
            if not send_message(big_fd, (fact, kind)):
                big.append((fact, kind))
            continue
        path = base + rel
        try:
            content = os.readlink(path) if kind == "l" else digest_file(path, size)
        except FileNotFoundError:
            continue  # removed since the stat: not part of the tree
        except OSError as exc:
            raise SourceError(f"{path}: cannot read: {exc}") from exc
        recs[name] = (-1 if racy else size, mtime, ino, ctime, kind, content)
    return recs, racy_seen


def _scan_dirs(job: _Job, big_fd: int | None = None) -> _PartResult:
    """Plain tree: list each directory of ``job``, stat its files, and compare the blake3 of
    those stat facts (and the subdirectory names) with the recorded signature; only a directory
    whose signature moved has its records loaded and its changed files hashed.

    A file's content can change without its directory's mtime moving, so every file is stat'ed
    (as ``git status`` does); what the signature spares is loading, comparing and rewriting
    the records of the directories where nothing moved.
    """
    base, table, cutoff = job.base, job.table, job.cutoff
    seen: list[str] = []
    changed: list[Dir] = []
    big: list[tuple[_Stat, str]] = []
    todo = [(p, False) for p in job.shallow] + [(p, True) for p in job.deep]
    sigs = table.sigs
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        top = os.open(base, flags & ~os.O_NOFOLLOW)  # the root itself may be a symlink
    except OSError as exc:
        raise SourceError(f"{base}: cannot list directory: {exc}") from exc
    try:
        while todo:
            prefix, deep = todo.pop()
            facts, subs = _list_dir(top, base, prefix, flags)
            if deep:
                todo.extend((prefix + name + "/", True) for name in subs)
            sig = dir_signature(facts, subs)
            seen.append(prefix)
            if sigs.get(prefix) == sig:
                continue
            old = table.recs(prefix)
            recs, racy = _make_recs(base, prefix, facts, old, cutoff, big_fd, big)
            changed.append((prefix, None if racy else sig, recs, subs))
    finally:
        os.close(top)
    return seen, changed, big


def _list_dir(top: int, base: str, prefix: str, flags: int) -> tuple[list[_Stat], list[str]]:
    """Return the stat facts of the files and symlinks in directory ``prefix`` (opened relative
    to ``top``, the root, and listed by descriptor: each stat is relative to the directory)
    and the names of its subdirectories, ``.git`` skipped, in listing order."""
    facts: list[_Stat] = []
    subs: list[str] = []
    try:
        fd = os.open(prefix or ".", flags, dir_fd=top)
    except OSError as exc:
        raise SourceError(f"{base + prefix}: cannot list directory: {exc}") from exc
    add, add_sub = facts.append, subs.append  # the loop runs once per file: locals only
    ifmt, kinds = _S_IFMT, (_S_IFREG, _S_IFLNK)
    try:
        with os.scandir(fd) as it:
            entries = list(it)
        for e in entries:
            name = e.name
            if name == ".git":
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    add_sub(name)
                    continue
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise SourceError(f"{base + prefix + name}: cannot stat: {exc}") from exc
            mode = st.st_mode
            if mode & ifmt in kinds:
                add((name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, mode))
    except OSError as exc:
        raise SourceError(f"{base + prefix}: cannot list directory: {exc}") from exc
    finally:
        os.close(fd)
    return facts, subs


def _scan_rels(job: _Job, big_fd: int | None = None) -> _PartResult:
    """Listed tree (git's listing): lstat each listed file of ``job``, reuse or make its record."""
    base, table, cutoff = job.base, job.table, job.cutoff
    groups: dict[str, list[_Stat]] = {}
    lstat = os.lstat
    for rel in job.rels:
        try:
            st = lstat(base + rel)
        except FileNotFoundError:
            continue  # tracked but deleted in the work tree, or removed since listed
        except OSError as exc:
            raise SourceError(f"{base + rel}: cannot stat: {exc}") from exc
        mode = st.st_mode
        if mode & _S_IFMT in (_S_IFREG, _S_IFLNK):
            i = rel.rfind("/") + 1
            fact = (rel[i:], st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, mode)
            groups.setdefault(rel[:i], []).append(fact)
    changed: list[Dir] = []
    big: list[tuple[_Stat, str]] = []
    for prefix, facts in groups.items():
        recs, _ = _make_recs(base, prefix, facts, table.recs(prefix), cutoff, big_fd, big)
        changed.append((prefix, None, recs, None))
    return [], changed, big


def _big_rec(base: str, fact: _Stat, kind: str, cutoff: int, threads: int) -> FileRec:
    rel, size, mtime, ino, ctime, _ = fact
    try:
        h = blake3.blake3(max_threads=threads)
        h.update_mmap(base + rel)
    except OSError as exc:
        raise SourceError(f"{base + rel}: cannot read: {exc}") from exc
    racy = max(mtime, ctime) >= cutoff
    return (-1 if racy else size, mtime, ino, ctime, kind, str(h.hexdigest()))


_Scan = Callable[[_Job, "int | None"], _PartResult]


def _scan_hashing(
    fn: _Scan, jobs: list[_Job], base: str, cutoff: int
) -> tuple[list[_PartResult], dict[str, FileRec]]:
    """Run every job in a forked worker; meanwhile hash the big files they report, as they come.

    Three busy processes on two cores keep both cores full to the end, where a big file found
    late is hashed with all of blake3's threads instead of one.
    """
    r_big, w_big = os.pipe()
    kids: dict[int, int] = {}
    big: dict[str, FileRec] = {}

    def scan(job: _Job) -> _PartResult:
        try:
            return fn(job, w_big)
        finally:
            os.close(w_big)  # the end of this worker's reports

    try:
        try:
            for job in jobs:
                pid, r = spawn(scan, job, close=(r_big,))
                kids[pid] = r
        finally:
            os.close(w_big)
        os.set_blocking(r_big, False)
        data = bytearray()
        pending: deque[tuple[_Stat, str]] = deque()
        eof = False
        while True:
            while not eof:
                try:
                    chunk = os.read(r_big, 1 << 16)
                except BlockingIOError:
                    break
                eof = not chunk
                data += chunk
            pending.extend(take_messages(data))
            if pending:
                fact, kind = pending.popleft()
                threads = blake3.blake3.AUTO if eof else 1
                big[fact[0]] = _big_rec(base, fact, kind, cutoff, threads)
            elif eof:
                break
            else:
                select.select([r_big], [], [])
        results = []
        for pid in list(kids):
            r = kids.pop(pid)
            try:
                results.append(collect(pid, r))
            finally:
                os.close(r)
        return results, big
    except OSError as exc:
        raise SourceError(f"path scan: cannot run a worker: {exc}") from exc
    finally:
        os.close(r_big)
        reap(kids)


def _plan_walk(base: str, workers: int) -> list[tuple[list[str], list[str]]]:
    """Split a plain tree into ``(shallow, deep)`` directory shares, one per worker.

    Directories are listed breadth first here until the tree is known to be big enough to be
    worth a fork and there are several directories per worker; the directories listed here
    are "shallow" (their subdirectories are shared out too), the rest are walked whole.
    Small trees get one share.
    """
    if workers == 1:
        return [([], [""])]
    shallow: list[str] = []
    todo: deque[str] = deque([""])
    seen = 0
    while todo and (seen < PARALLEL_MIN_ENTRIES or len(todo) < 4 * workers):
        prefix = todo.popleft()
        shallow.append(prefix)
        try:
            with os.scandir(base + prefix) as it:
                for e in it:
                    seen += 1
                    try:
                        is_dir = e.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    if is_dir and e.name != ".git":
                        todo.append(prefix + e.name + "/")
        except OSError as exc:
            raise SourceError(f"{base + prefix}: cannot list directory: {exc}") from exc
    if seen < PARALLEL_MIN_ENTRIES and not todo:
        return [([], [""])]
    deep = list(todo)
    return [(shallow[k::workers], deep[k::workers]) for k in range(workers)]


def _key(name: str) -> bytes:
    return os.fsencode(name)


def _render(prefix: str, recs: dict[str, FileRec], children: Iterable[str]) -> Parts:
    """Return a directory's parts of the hashed text: ``rel NUL kind NUL digest NUL`` of each
    of its files, with its subdirectories' prefixes where their files belong.

    The text lists every file in byte order of its relative path; within a directory that is
    the byte order of its files' names and its subdirectories' names with a ``/`` appended
    (no name holds a ``/``), so the whole text is this order applied directory by directory.
    """
    items: list[tuple[bytes, bool, str]] = [(_key(n), False, n) for n in recs]
    items.extend((_key(c[len(prefix):]), True, c) for c in children)
    items.sort()
    parts: list[bytes | str] = []
    run: list[str] = []
    for _, is_dir, x in items:
        if is_dir:
            if run:
                parts.append(os.fsencode("".join(run)))
                run = []
            parts.append(x)
        else:
            rec = recs[x]
            run.append(f"{prefix}{x}\0{rec[REC_KIND]}\0{rec[REC_CONTENT]}\0")
    if run:
        parts.append(os.fsencode("".join(run)))
    return tuple(parts)


def _digest_of(parts_of: dict[str, Parts]) -> str:
    """Hash the text the directories' parts make, from the root down, in order."""
    out: list[bytes] = [TREE_TAG]
    stack: list[Iterator[bytes | str]] = [iter(parts_of.get("", ()))]
    while stack:
        for p in stack[-1]:
            if isinstance(p, bytes):
                out.append(p)
            else:
                stack.append(iter(parts_of.get(p, ())))
                break
        else:
            stack.pop()
    return str(blake3.blake3(b"".join(out)).hexdigest())


def _git_changes(
    root: Path, head: dict[str, Any], prefix: str, wt: Path
) -> tuple[set[str], set[str], dict[str, dict[str, Any]]] | None:
    """Ask git what may have changed in the work tree at ``wt`` since ``head`` was recorded.

    Returns the files to look at again (dirty or untracked now or then), those of them that are
    no longer listed, and the new git state; None when the listing itself may have changed
    (the index file or the checked-out submodules moved), which needs a full listing.
    Every other listed file is tracked and clean now and was clean then against the same
    index, so its content is what was recorded (git compares its stat data in C, racy
    timestamps included).
    """
    rec = head.get("git", {}).get(prefix)
    if rec is None or rec["index"] is None:
        return None
    gitdir = find_gitdir(wt)
    if gitdir is None or index_stat(gitdir) != rec["index"]:
        return None
    for rel, checked_out in rec["subs"]:
        if os.path.exists(os.path.join(wt, rel, ".git")) != checked_out:
            return None
    others, dirty = git_many(wt, [OTHERS, DIRTY])
    untracked = sorted(r for r in split_z(others) if not r.endswith("/"))
    dirty_now = sorted(split_z(dirty))
    was_untracked = set(rec["untracked"])
    now_untracked = set(untracked)
    look = {*untracked, *dirty_now, *rec["dirty"], *rec["untracked"]}
    gone = {prefix + r for r in look if r in was_untracked and r not in now_untracked}
    state = {prefix: {**rec, "dirty": dirty_now, "untracked": untracked}}
    for rel, checked_out in rec["subs"]:
        if checked_out:
            sub = _git_changes(root, head, prefix + rel + "/", wt / rel)
            if sub is None:
                return None
            look_sub, gone_sub, state_sub = sub
            look.update(r[len(prefix):] for r in look_sub)
            gone |= gone_sub
            state.update(state_sub)
    return {prefix + r for r in look}, gone, state


def _scan_tree(
    root: Path, cache: Path, *, need_files: bool, own_ignores: bool = False
) -> tuple[str, dict[str, FileRec]]:
    try:
        st = os.stat(root)
    except OSError as exc:
        raise SourceError(f"path source {root}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise SourceError(f"path source {root}: not a directory")
    root = Path(os.path.abspath(root))
    mode = "git" if find_gitdir(root) is not None else "plain"
    own: list[str] | None = None
    if own_ignores and mode == "git":
        from rocmforge.sources.enclosing import is_enclosed, own_rules_listing

        if is_enclosed(root):  # the enclosing repository's rules must not apply: own rules only
            own = own_rules_listing(root)
            mode = "own"
    head_path, files_dir = record_paths(root, cache, own=mode == "own")
    head = load_head(head_path, root, mode)
    try:
        return _scan(root, head, head_path, files_dir, mode, own, need_files)
    except Stale:  # a bucket went missing: scan as if nothing were recorded
        return _scan(root, {}, head_path, files_dir, mode, own, need_files)


def _scan(
    root: Path,
    head: dict[str, Any],
    head_path: Path,
    files_dir: Path,
    mode: str,
    own: list[str] | None,
    need_files: bool,
) -> tuple[str, dict[str, FileRec]]:
    base = os.path.join(os.fspath(root), "")
    table = Table(head, files_dir)
    workers = _workers()
    cutoff = time.time_ns() - RACY_SLACK_NS
    git_state: dict[str, dict[str, Any]] = {}
    found: list[Dir]
    complete = True  # found holds every directory (else: only those that changed)
    seen: list[str] | None = None
    if mode == "plain":
        shares = _plan_walk(base, workers)
        jobs = [_Job(base=base, table=table, cutoff=cutoff, shallow=s, deep=d) for s, d in shares]
        results, big = _run(_scan_dirs, jobs, base, cutoff, warm=bool(head))
        seen = [p for r in results for p in r[0]]
        complete = not head
    else:
        changes = _git_changes(root, head, "", root) if mode == "git" and head else None
        if changes is not None:
            look, gone, git_state = changes
            results, big = [_look_again(base, table, cutoff, look, gone)], {}
            _hash_left(results, base, cutoff, big)  # a big file git named is hashed here too
            complete = False
        else:
            if own is not None:
                rels = own  # listed as its own repository would list it; no git state to keep
            else:
                listing = GitListing()
                listing.add(root, "")
                rels, git_state = listing.rels, listing.git
            rels = sorted(rels)  # files of one directory together, in one share
            n = workers if len(rels) >= PARALLEL_MIN_ENTRIES else 1
            chunks = [rels[k * len(rels) // n : (k + 1) * len(rels) // n] for k in range(n)]
            jobs = [_Job(base=base, table=table, cutoff=cutoff, rels=c) for c in chunks]
            results, big = _run(_scan_rels, jobs, base, cutoff, warm=bool(head))
    found = [d for r in results for d in r[1]]
    return commit(
        root, table, head_path, files_dir, mode, found, big, seen, complete, git_state, need_files,
        render=_render, digest_of=_digest_of,
    )


def _run(
    fn: _Scan, jobs: list[_Job], base: str, cutoff: int, *, warm: bool = False
) -> tuple[list[_PartResult], dict[str, FileRec]]:
    """Run the scan's jobs (forked when several) and hash the big files they leave.

    ``warm``: few files are expected to need hashing, so this process takes a share itself
    (one fork fewer) instead of standing by to hash the big files the workers report.
    """
    if len(jobs) > 1 and warm:
        results = fork_map(lambda job: fn(job, None), jobs)
        big: dict[str, FileRec] = {}
    elif len(jobs) > 1:
        results, big = _scan_hashing(fn, jobs, base, cutoff)
    else:
        results, big = [fn(jobs[0], None)], {}
    _hash_left(results, base, cutoff, big)
    return results, big


def _hash_left(
    results: list[_PartResult], base: str, cutoff: int, big: dict[str, FileRec]
) -> None:
    """Hash the big files the scan left for later into ``big`` (every scan path must)."""
    for _, _, left in results:
        for fact, kind in left:
            try:
                digest = digest_file(base + fact[0], fact[1])
            except OSError as exc:
                raise SourceError(f"{base + fact[0]}: cannot read: {exc}") from exc
            rel, size, mtime, ino, ctime, _ = fact
            racy = max(mtime, ctime) >= cutoff
            big[rel] = (-1 if racy else size, mtime, ino, ctime, kind, digest)


def _look_again(
    base: str, table: Table, cutoff: int, look: set[str], gone: set[str]
) -> _PartResult:
    """Git work tree with an unchanged index: re-stat the files git names (and the ones not
    trusted last time), reusing or making their records, directory by directory."""
    by_dir: dict[str, list[str]] = {}
    for rel in look | set(table.head.get("racy", ())):
        i = rel.rfind("/") + 1
        by_dir.setdefault(rel[:i], []).append(rel[i:])
    changed: list[Dir] = []
    big: list[tuple[_Stat, str]] = []
    for prefix, names in by_dir.items():
        if prefix in table.sigs and (
            table.entry(prefix) is None
            or table.rec_bucket(bucket_of(prefix, table.buckets)) is None
        ):
            raise Stale  # its other files' records are lost: the listing must be made anew
        old = table.recs(prefix)
        recs = dict(old)
        facts: list[_Stat] = []
        for name in names:
            recs.pop(name, None)
            if prefix + name in gone:
                continue
            try:
                st = os.lstat(base + prefix + name)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise SourceError(f"{base + prefix + name}: cannot stat: {exc}") from exc
            if st.st_mode & _S_IFMT in (_S_IFREG, _S_IFLNK):
                facts.append(
                    (name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_mode)
                )
        made, _ = _make_recs(base, prefix, facts, old, cutoff, None, big)
        recs.update(made)
        if recs != old or prefix not in table.sigs:
            changed.append((prefix, None, recs, None))
    return [], changed, big


def tree_digest(root: Path, *, cache: Path, own_ignores: bool = False) -> str:
    """Return the blake3 hex of the tree at ``root``, reusing and updating the stat cache.

    With ``own_ignores`` a tree inside an enclosing git work tree is listed by its own ignore
    rules only (see :mod:`rocmforge.sources.enclosing`)."""
    digest, _ = _scan_tree(root, cache, need_files=False, own_ignores=own_ignores)
    return digest


def tree_sha256(root: Path, *, cache: Path) -> str:
    """Return the sha256 hex of the same listing whose blake3 is :func:`tree_digest` (for
    provenance readers that want a sha256; the file contents enter by their blake3)."""
    import hashlib

    files = tree_listing(root, cache=cache)
    text = "".join(
        f"{rel}\0{files[rel][REC_KIND]}\0{files[rel][REC_CONTENT]}\0"
        for rel in sorted(files, key=os.fsencode)
    )
    return hashlib.sha256(TREE_TAG + os.fsencode(text)).hexdigest()


def tree_listing(root: Path, *, cache: Path, own_ignores: bool = False) -> dict[str, FileRec]:
    """Return the listing of ``root`` (the same set :func:`tree_digest` hashes)."""
    _, files = _scan_tree(root, cache, need_files=True, own_ignores=own_ignores)
    return files


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
        kind, target = files[rel][REC_KIND], files[rel][REC_CONTENT]
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
