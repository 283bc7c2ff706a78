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
Outside git the record also keeps a blake3 signature of every file's stat facts, so an unchanged
plain tree is recognised by stat'ing it, without loading the file table. Entries whose timestamps
are too fresh to be trusted (racy-git) are never reused.

Big trees (``PARALLEL_MIN_ENTRIES`` and up) are scanned by one forked worker per core, since the
per-file work is Python under the GIL; the parent hashes big files as the workers report them.
The worker pool is :mod:`rocmforge.sources.forkmap`; the git listing is
:mod:`rocmforge.sources.gitlisting`.
"""

from __future__ import annotations

import marshal
import os
import select
import shutil
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

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
from rocmforge.store import layout
from rocmforge.util.fsutil import write_atomic
from rocmforge.util.hashing import blake3_hex

RECORD_VERSION = 2
TREE_TAG = b"rocmforge-tree-v1\0"
BIG_FILE = 1 << 22
# Timestamps this close to the scan start may hide a same-tick rewrite; such digests are not reused.
RACY_SLACK_NS = 50_000_000
# Below this many entries a scan stays in this process: a fork costs more than it saves.
PARALLEL_MIN_ENTRIES = 4096

# rel -> (size, mtime_ns, ino, ctime_ns, kind, digest-or-link-target); size -1 marks "do not trust".
# Plain tuples (the table is marshal'd, and loads as tuples), read by these positions:
FileRec = tuple[int, int, int, int, str, str]
REC_SIZE: Final = 0
REC_MTIME: Final = 1
REC_INO: Final = 2
REC_CTIME: Final = 3
REC_KIND: Final = 4
REC_CONTENT: Final = 5
# What a scan records of one file before reading it: (rel, size, mtime_ns, ino, ctime_ns, mode).
_Stat = tuple[str, int, int, int, int, int]
_FACT_REL: Final = 0

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


def record_stem(root: Path, cache: Path) -> Path:
    """Return the stem of the stat cache record of the tree at ``root`` (``.head``, ``.files``)."""
    return cache / layout.SOURCES_TREES / blake3_hex(os.fsencode(os.path.abspath(root)))[:24]


def _record_paths(root: Path, cache: Path) -> tuple[Path, Path]:
    """Return the record's small head (digest, git state) and its big file table."""
    stem = record_stem(root, cache)
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
    if not head or not isinstance(data, tuple) or len(data) != 2:
        return {}
    token, files = data  # as written by _write_table_and_digest
    if token != head["token"]:
        return {}
    table: dict[str, FileRec] = files
    return table


def _write_atomic(path: Path, payload: bytes) -> None:
    try:
        write_atomic(path, payload)
    except OSError as exc:
        raise SourceError(f"cannot write stat cache {path}: {exc}") from exc


class _Job:
    """One share of a scan: files to stat, directories to walk, and what to do with them."""

    __slots__ = ("base", "cutoff", "dirs", "full", "loose", "old")

    def __init__(
        self,
        *,
        base: str,
        loose: list[str],
        dirs: list[str],
        full: bool,
        old: dict[str, FileRec],
        cutoff: int,
    ) -> None:
        self.base = base  # root with a trailing "/"
        self.loose = loose  # relative paths to lstat
        self.dirs = dirs  # relative prefixes ("" or "a/b/") of directories to walk, .git skipped
        self.full = full  # False: only the stat signature; True: also compare and hash
        self.old = old
        self.cutoff = cutoff


# sig, racy seen, rels, their records, big files left to hash (stat + kind); marshal'd by workers
_PartResult = tuple[bytes, bool, list[str], list[FileRec], list[tuple[_Stat, str]]]
_PART_SIG: Final = 0
_S_IFMT, _S_IFREG, _S_IFLNK = 0o170000, 0o100000, 0o120000


def _walk_facts(base: str, top: str, add: Callable[[_Stat], None]) -> None:
    """Add the stat facts of every file and symlink under ``top`` (relative), skipping ``.git``."""
    stack = [top]
    while stack:
        prefix = stack.pop()
        try:
            with os.scandir(base + prefix) as it:
                entries = list(it)
        except OSError as exc:
            raise SourceError(f"{base + prefix}: cannot list directory: {exc}") from exc
        for e in entries:
            name = e.name
            if name == ".git":
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(prefix + name + "/")
                    continue
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise SourceError(f"{e.path}: cannot stat: {exc}") from exc
            mode = st.st_mode
            if mode & _S_IFMT in (_S_IFREG, _S_IFLNK):
                add((prefix + name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, mode))


def _scan_part(job: _Job, big_fd: int | None = None) -> _PartResult:
    """Stat every file of ``job``; with ``job.full`` also reuse or make each file's record.

    The signature is the blake3 of the stat facts in scan order (marshal version 2 has neither
    references nor interning flags, so equal lists give equal bytes in any process). Small files
    are hashed here; big ones are sent through ``big_fd`` to a process that has time for them
    (length-prefixed marshal messages below PIPE_BUF, so writes from several workers never
    interleave), or else returned.
    """
    base = job.base
    facts: list[_Stat] = []
    add = facts.append
    lstat = os.lstat
    for rel in job.loose:
        try:
            st = lstat(base + rel)
        except FileNotFoundError:
            continue  # tracked but deleted in the work tree, or removed since listed
        except OSError as exc:
            raise SourceError(f"{base + rel}: cannot stat: {exc}") from exc
        mode = st.st_mode
        if mode & _S_IFMT in (_S_IFREG, _S_IFLNK):
            add((rel, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, mode))
    for prefix in job.dirs:
        _walk_facts(base, prefix, add)
    sig = blake3.blake3(marshal.dumps(facts, 2)).digest()
    if not job.full:
        return sig, False, [], [], []
    old, cutoff = job.old, job.cutoff
    rels: list[str] = []
    recs: list[FileRec] = []
    big: list[tuple[_Stat, str]] = []
    racy_seen = False
    for fact in facts:
        rel, size, mtime, ino, ctime, mode = fact
        kind = "l" if mode & _S_IFMT == _S_IFLNK else "x" if mode & 0o111 else "f"
        if old:
            prev = old.get(rel)
            if (
                prev is not None
                and prev[REC_SIZE] == size
                and prev[REC_MTIME] == mtime
                and prev[REC_INO] == ino
                and prev[REC_CTIME] == ctime
                and prev[REC_KIND] == kind
            ):
                rels.append(rel)
                recs.append(prev)
                continue
        racy = (mtime if mtime > ctime else ctime) >= cutoff
        racy_seen = racy_seen or racy
        if kind != "l" and size >= BIG_FILE:
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
        rels.append(rel)
        recs.append((-1 if racy else size, mtime, ino, ctime, kind, content))
    return sig, racy_seen, rels, recs, big


def _big_rec(base: str, fact: _Stat, kind: str, cutoff: int, threads: int) -> FileRec:
    rel, size, mtime, ino, ctime, _ = fact
    try:
        h = blake3.blake3(max_threads=threads)
        h.update_mmap(base + rel)
    except OSError as exc:
        raise SourceError(f"{base + rel}: cannot read: {exc}") from exc
    racy = max(mtime, ctime) >= cutoff
    return (-1 if racy else size, mtime, ino, ctime, kind, str(h.hexdigest()))


def _scan_hashing(
    jobs: list[_Job], base: str, cutoff: int
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
            return _scan_part(job, w_big)
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
                big[fact[_FACT_REL]] = _big_rec(base, fact, kind, cutoff, threads)
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
    """Split a plain tree into ``(loose files, directories)`` shares, one per worker.

    Directories are listed breadth first here until the tree is known to be big enough to be
    worth a fork and there are several directories per worker; small trees get one share. The
    split depends only on the directory listings, so an unchanged tree is split the same way.
    """
    if workers == 1:
        return [([], [""])]
    loose: list[str] = []
    todo: deque[str] = deque([""])
    seen = 0
    while todo and (seen < PARALLEL_MIN_ENTRIES or len(todo) < 4 * workers):
        prefix = todo.popleft()
        try:
            with os.scandir(base + prefix) as it:
                for e in it:
                    seen += 1
                    try:
                        is_dir = e.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    if is_dir:
                        if e.name != ".git":
                            todo.append(prefix + e.name + "/")
                    elif e.name != ".git":
                        loose.append(prefix + e.name)
        except OSError as exc:
            raise SourceError(f"{base + prefix}: cannot list directory: {exc}") from exc
    if seen < PARALLEL_MIN_ENTRIES and not todo:
        return [(loose, [])]
    dirs = list(todo)
    return [(loose[k::workers], dirs[k::workers]) for k in range(workers)]


def _tree_digest(files: dict[str, FileRec]) -> str:
    """Hash ``rel NUL kind NUL digest NUL`` for every file in byte order of ``rel``.

    Without surrogate escapes, UTF-8 byte order is code point order, so the paths sort as
    ``str`` and the whole listing is encoded once; otherwise each path is sorted by its bytes.
    """
    rels = list(files)
    try:
        if sys.getfilesystemencoding().lower().replace("-", "") != "utf8":
            raise UnicodeError
        "".join(rels).encode("utf-8")
        rels.sort()
    except UnicodeError:
        rels.sort(key=os.fsencode)
    text = "".join(
        [f"{rel}\0{files[rel][REC_KIND]}\0{files[rel][REC_CONTENT]}\0" for rel in rels]
    )
    return str(blake3.blake3(TREE_TAG + os.fsencode(text)).hexdigest())


def _git_unchanged(root: Path, head: dict[str, Any], prefix: str, wt: Path) -> bool:
    """Return whether the git work tree at ``wt`` is provably as it was when ``head`` was made."""
    rec = head.get("git", {}).get(prefix)
    if rec is None or rec["index"] is None:
        return False
    gitdir = find_gitdir(wt)
    if gitdir is None or index_stat(gitdir) != rec["index"]:
        return False
    for rel, checked_out in rec["subs"]:
        if os.path.exists(os.path.join(wt, rel, ".git")) != checked_out:
            return False
    others, dirty = git_many(wt, [OTHERS, DIRTY])
    untracked = sorted(r for r in split_z(others) if not r.endswith("/"))
    if untracked != rec["untracked"] or sorted(split_z(dirty)) != rec["dirty"]:
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
        if prev is None or (
            prev[REC_SIZE],
            prev[REC_MTIME],
            prev[REC_INO],
            prev[REC_CTIME],
        ) != (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns):
            return False
    return all(
        _git_unchanged(root, head, prefix + rel + "/", wt / rel)
        for rel, checked_out in rec["subs"]
        if checked_out
    )


def _jobs(
    base: str, shares: list[tuple[list[str], list[str]]], *, full: bool,
    old: dict[str, FileRec], cutoff: int,
) -> list[_Job]:
    return [
        _Job(base=base, loose=loose, dirs=dirs, full=full, old=old, cutoff=cutoff)
        for loose, dirs in shares
    ]


def _signature(results: list[_PartResult]) -> str:
    return blake3_hex(b"".join(r[_PART_SIG] for r in results))


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
    base = os.path.join(os.fspath(root), "")
    head_path, files_path = _record_paths(root, cache)
    in_git = find_gitdir(root) is not None
    own: list[str] | None = None
    if own_ignores and in_git:
        from rocmforge.sources.enclosing import is_enclosed, own_rules_listing

        if is_enclosed(root):  # the enclosing repository's rules must not apply: own rules only
            own = own_rules_listing(root)
            head_path, files_path = (p.with_name(p.name + "-own") for p in (head_path, files_path))
    head = _load_head(head_path, root)
    workers = _workers()
    cutoff = time.time_ns() - RACY_SLACK_NS
    listing: GitListing | None = None
    shares: list[tuple[list[str], list[str]]]
    files: dict[str, FileRec]
    old_files: dict[str, FileRec] = {}

    def load_old() -> None:
        old_files.update(_load_files(files_path, head))

    if own is not None:
        # Listed by git as its own repository would list it; no git state to compare later
        # (sig stays None), so every scan re-lists and re-stats (the stat cache spares hashing).
        listing = GitListing()
        listing.rels = own
        load_old()
        rels = own
        n = workers if len(rels) >= PARALLEL_MIN_ENTRIES else 1
        shares = [(rels[k::n], []) for k in range(n)]
    elif in_git:
        if head and _git_unchanged(root, head, "", root):
            files = _load_files(files_path, head) if need_files else {}
            if files or not need_files:
                return head["digest"], files
        listing = GitListing()
        listing.add(root, "", meanwhile=load_old)  # the table loads while git lists
        rels = listing.rels
        n = workers if len(rels) >= PARALLEL_MIN_ENTRIES else 1
        shares = [(rels[k::n], []) for k in range(n)]
    else:
        shares = _plan_walk(base, workers)
        if head.get("sig"):
            # Plain tree: stat everything but load no file table; equal stat facts, same tree.
            quick = fork_map(_scan_part, _jobs(base, shares, full=False, old={}, cutoff=cutoff))
            if _signature(quick) == head["sig"]:
                files = _load_files(files_path, head) if need_files else {}
                if files or not need_files:
                    return head["digest"], files
        load_old()
    jobs = _jobs(base, shares, full=True, old=old_files, cutoff=cutoff)
    if len(jobs) > 1:
        results, files = _scan_hashing(jobs, base, cutoff)
    else:
        results, files = [_scan_part(jobs[0])], {}
    racy_seen = any(r[REC_SIZE] < 0 for r in files.values())
    big: list[tuple[_Stat, str]] = []
    for _, racy, rels_part, recs, big_part in results:
        files.update(zip(rels_part, recs, strict=True))
        racy_seen = racy_seen or racy
        big.extend(big_part)
    for (rel, size, mtime, ino, ctime, _), kind in big:
        try:
            digest = digest_file(base + rel, size)
        except OSError as exc:
            raise SourceError(f"{base + rel}: cannot read: {exc}") from exc
        racy = max(mtime, ctime) >= cutoff
        racy_seen = racy_seen or racy
        files[rel] = (-1 if racy else size, mtime, ino, ctime, kind, digest)
    git_state = listing.git if listing is not None else {}
    sig = None if racy_seen or listing is not None else _signature(results)
    same_files = bool(head) and files == old_files
    if same_files and head.get("git", {}) == git_state and head.get("sig") == sig:
        return head["digest"], files
    if same_files:
        token = head["token"]
        digest = head["digest"]
    else:
        token = blake3_hex(os.urandom(16))
        digest = _write_table_and_digest(files_path, token, files)
    hot = {
        prefix + rel: files[prefix + rel]
        for prefix, rec in git_state.items()
        for rel in (*rec["dirty"], *rec["untracked"])
        if prefix + rel in files
    }
    _write_atomic(
        head_path,
        marshal.dumps(
            {
                "v": RECORD_VERSION,
                "root": os.fspath(root),
                "token": token,
                "digest": digest,
                "git": git_state,
                "hot": hot,
                "sig": sig,
            }
        ),
    )
    return digest, files


def _write_table_and_digest(path: Path, token: str, files: dict[str, FileRec]) -> str:
    """Write the file table (its write and fsync on a thread) while the tree digest is made."""
    payload = marshal.dumps((token, files))
    failed: list[BaseException] = []

    def write() -> None:
        try:
            _write_atomic(path, payload)
        except BaseException as exc:
            failed.append(exc)

    writer = threading.Thread(target=write, name="rocmforge-tree-table")
    writer.start()
    try:
        digest = _tree_digest(files)
    finally:
        writer.join()
    if failed:
        raise failed[0]
    return digest


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
