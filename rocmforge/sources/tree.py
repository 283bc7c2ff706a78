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
"""

from __future__ import annotations

import marshal
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import blake3

from rocmforge.errors import SourceError
from rocmforge.sources.git import git_env
from rocmforge.util.fsutil import write_atomic
from rocmforge.util.hashing import blake3_hex

RECORD_VERSION = 2
TREE_TAG = b"rocmforge-tree-v1\0"
BIG_FILE = 1 << 22
# Timestamps this close to the scan start may hide a same-tick rewrite; such digests are not reused.
RACY_SLACK_NS = 50_000_000
# Below this many entries a scan stays in this process: a fork costs more than it saves.
PARALLEL_MIN_ENTRIES = 4096
MAX_WORKERS = 8
_MSG_MAX = select.PIPE_BUF - 4

# rel -> (size, mtime_ns, ino, ctime_ns, kind, digest-or-link-target); size -1 marks "do not trust".
FileRec = tuple[int, int, int, int, str, str]
# What a scan records of one file before reading it: (rel, size, mtime_ns, ino, ctime_ns, mode).
_Stat = tuple[str, int, int, int, int, int]
_T = TypeVar("_T")

_local = threading.local()
_IN_WORKER = False


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
        h = blake3.blake3(max_threads=1 if _IN_WORKER else blake3.blake3.AUTO)
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
    return cache / "trees" / blake3_hex(os.fsencode(os.path.abspath(root)))[:24]


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
    if not head or not isinstance(data, tuple) or len(data) != 2 or data[0] != head["token"]:
        return {}
    files: dict[str, FileRec] = data[1]
    return files


def _write_atomic(path: Path, payload: bytes) -> None:
    try:
        write_atomic(path, payload)
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


class _GitRun:
    """Read-only git queries running concurrently in one directory."""

    def __init__(self, cwd: Path, commands: list[list[str]]) -> None:
        self.cwd = cwd
        self.commands = commands
        self.procs: list[subprocess.Popen[bytes]] = []
        env = git_env()
        try:
            for args in commands:
                self.procs.append(
                    subprocess.Popen(
                        ["git", "-c", "safe.directory=*", "--no-optional-locks", *args],
                        cwd=cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                    )
                )
        except OSError as exc:
            self.close()
            raise SourceError(f"{cwd}: cannot run git: {exc}") from exc

    def wait(self) -> list[bytes]:
        """Return each query's output; raise SourceError naming the first that failed."""
        outs = []
        try:
            for args, p in zip(self.commands, self.procs, strict=True):
                out, err = p.communicate()
                if p.returncode != 0:
                    line = err.decode(errors="replace").strip().splitlines()[:1]
                    raise SourceError(
                        f"{self.cwd}: git {' '.join(args)} failed: "
                        f"{line[0] if line else p.returncode}"
                    )
                outs.append(out)
        except OSError as exc:
            raise SourceError(f"{self.cwd}: cannot run git: {exc}") from exc
        finally:
            self.close()
        return outs

    def close(self) -> None:
        """Kill and reap whatever still runs."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()


def _git_many(
    cwd: Path, commands: list[list[str]], meanwhile: Callable[[], object] | None = None
) -> list[bytes]:
    """Run several read-only git queries concurrently in ``cwd`` (and ``meanwhile`` here)."""
    run = _GitRun(cwd, commands)
    try:
        if meanwhile is not None:
            meanwhile()
        return run.wait()
    finally:
        run.close()


def _cached_paths(out: bytes) -> tuple[list[str], list[str]]:
    """Split ``git ls-files -z -s`` output into tracked paths and gitlink (submodule) paths.

    Each record is ``<6-digit mode> <object name> <stage>\t<path>``: the metadata has one width
    per repository, so paths are sliced out rather than parsed one by one.
    """
    recs = os.fsdecode(out).split("\0")
    recs.pop()  # after the last NUL
    if not recs:
        return [], []
    width = recs[0].index("\t") + 1
    paths = [r[width:] for r in recs]
    if any(r[width - 1] != "\t" for r in recs):  # never seen; parse the slow, sure way
        paths = [r.partition("\t")[2] for r in recs]
    links = [p for r, p in zip(recs, paths, strict=True) if r.startswith("160000 ")]
    if links:
        gone = set(links)
        paths = [p for p in paths if p not in gone]
    return list(dict.fromkeys(paths)), links  # unmerged paths appear once per stage


def _split_z(data: bytes) -> list[str]:
    return [os.fsdecode(x) for x in data.split(b"\0") if x]


_DIRTY = ["diff-files", "-z", "--name-only", "--relative", "--ignore-submodules=all"]
_OTHERS = ["ls-files", "-z", "--others", "--exclude-standard"]
_CACHED = ["ls-files", "-z", "-s"]


def _workers() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_WORKERS))


def _run_in_worker(fn: Callable[[_T], Any], part: _T, w: int) -> NoReturn:
    """Body of a forked worker: run ``fn(part)``, send the marshal'd outcome, leave at once."""
    global _IN_WORKER
    _IN_WORKER = True
    code = 1
    try:
        try:
            out: tuple[str, Any] = ("ok", fn(part))
        except SourceError as exc:
            out = ("source", str(exc))
        except BaseException as exc:
            out = ("bug", f"{type(exc).__name__}: {exc}")
        view = memoryview(marshal.dumps(out))
        while view:
            view = view[os.write(w, view):]
        code = 0
    finally:
        os._exit(code)


def _collect(pid: int, r: int) -> Any:
    chunks = []
    while chunk := os.read(r, 1 << 20):
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if status != 0 or not chunks:
        raise SourceError(f"path scan worker {pid} failed (wait status {status})")
    kind, value = marshal.loads(b"".join(chunks))
    if kind == "source":
        raise SourceError(value)
    if kind != "ok":
        raise RuntimeError(f"path scan worker {pid}: {value}")
    return value


def _spawn(fn: Callable[[_T], Any], part: _T, close: tuple[int, ...] = ()) -> tuple[int, int]:
    """Fork a worker running ``fn(part)``; return its pid and the read end of its result pipe."""
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        raise
    if pid == 0:
        os.close(r)
        for fd in close:
            os.close(fd)
        _run_in_worker(fn, part, w)
    os.close(w)
    return pid, r


def _reap(kids: dict[int, int]) -> None:
    """Stop and reap workers whose results were not collected (only after an error)."""
    for pid, r in kids.items():
        os.close(r)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass


def _fork_map(fn: Callable[[_T], Any], parts: list[_T]) -> list[Any]:
    """Return ``[fn(p) for p in parts]``: the first part here, each other one in a forked child.

    Threads cannot help (the per-file work is Python code under the GIL); ``fork`` gives each
    part a core without pickling the inputs. Children use no threads, run no atexit handlers and
    return their result marshal'd through a pipe.
    """
    if len(parts) <= 1:
        return [fn(p) for p in parts]
    kids: dict[int, int] = {}
    try:
        for part in parts[1:]:
            pid, r = _spawn(fn, part)
            kids[pid] = r
        results = [fn(parts[0])]
        for pid in list(kids):
            r = kids.pop(pid)
            try:
                results.append(_collect(pid, r))
            finally:
                os.close(r)
        return results
    except OSError as exc:
        raise SourceError(f"path scan: cannot run a worker: {exc}") from exc
    finally:
        _reap(kids)


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


# sig, racy seen, rels, their records, big files left to hash (stat + kind)
_PartResult = tuple[bytes, bool, list[str], list[FileRec], list[tuple[_Stat, str]]]
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
                and prev[0] == size
                and prev[1] == mtime
                and prev[2] == ino
                and prev[3] == ctime
                and prev[4] == kind
            ):
                rels.append(rel)
                recs.append(prev)
                continue
        racy = (mtime if mtime > ctime else ctime) >= cutoff
        racy_seen = racy_seen or racy
        if kind != "l" and size >= BIG_FILE:
            msg = marshal.dumps((fact, kind))
            if big_fd is not None and len(msg) <= _MSG_MAX:
                os.write(big_fd, len(msg).to_bytes(4, "little") + msg)
            else:
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
                pid, r = _spawn(scan, job, close=(r_big,))
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
            while len(data) >= 4 and len(data) >= 4 + (n := int.from_bytes(data[:4], "little")):
                pending.append(marshal.loads(bytes(data[4 : 4 + n])))
                del data[: 4 + n]
            if pending:
                fact, kind = pending.popleft()
                big[fact[0]] = _big_rec(base, fact, kind, cutoff, blake3.blake3.AUTO if eof else 1)
            elif eof:
                break
            else:
                select.select([r_big], [], [])
        results = []
        for pid in list(kids):
            r = kids.pop(pid)
            try:
                results.append(_collect(pid, r))
            finally:
                os.close(r)
        return results, big
    except OSError as exc:
        raise SourceError(f"path scan: cannot run a worker: {exc}") from exc
    finally:
        os.close(r_big)
        _reap(kids)


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


class _GitListing:
    """The listing of a git work tree and the git state its fast path compares against."""

    def __init__(self) -> None:
        self.rels: list[str] = []
        self.git: dict[str, dict[str, Any]] = {}
        self.worktrees: list[tuple[Path, str]] = []

    def add(
        self, wt: Path, prefix: str, meanwhile: Callable[[], object] | None = None
    ) -> None:
        """List the git work tree at ``wt`` (``prefix`` from root), submodules recursively."""
        gitdir = _find_gitdir(wt)
        index = _index_stat(gitdir) if gitdir is not None else None
        # All three at once: three git processes keep both cores busy while the listing is
        # made. A file git calls clean has the stat data of its index entry, so an edit at any
        # moment of the scan leaves it dirty (or the index changed) at the next check.
        cached, others, dirty = _git_many(wt, [_CACHED, _OTHERS, _DIRTY], meanwhile)
        tracked, links = _cached_paths(cached)
        subs: list[tuple[str, bool]] = []
        for rel in links:
            checked_out = os.path.exists(os.path.join(wt, rel, ".git"))
            subs.append((rel, checked_out))
            if checked_out:
                self.add(wt / rel, prefix + rel + "/")
        untracked = [r for r in _split_z(others) if not r.endswith("/")]
        listed = tracked + untracked
        self.rels.extend([prefix + r for r in listed] if prefix else listed)
        self.git[prefix] = {
            "index": index,
            "dirty": sorted(_split_z(dirty)),
            "untracked": sorted(untracked),
            "subs": sorted(set(subs)),
        }
        self.worktrees.append((wt, prefix))


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
    text = "".join([f"{rel}\0{files[rel][4]}\0{files[rel][5]}\0" for rel in rels])
    return str(blake3.blake3(TREE_TAG + os.fsencode(text)).hexdigest())


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


def _jobs(
    base: str, shares: list[tuple[list[str], list[str]]], *, full: bool,
    old: dict[str, FileRec], cutoff: int,
) -> list[_Job]:
    return [
        _Job(base=base, loose=loose, dirs=dirs, full=full, old=old, cutoff=cutoff)
        for loose, dirs in shares
    ]


def _signature(results: list[_PartResult]) -> str:
    return blake3_hex(b"".join(r[0] for r in results))


def _scan_tree(root: Path, cache: Path, *, need_files: bool) -> tuple[str, dict[str, FileRec]]:
    try:
        st = os.stat(root)
    except OSError as exc:
        raise SourceError(f"path source {root}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise SourceError(f"path source {root}: not a directory")
    root = Path(os.path.abspath(root))
    base = os.path.join(os.fspath(root), "")
    head_path, files_path = _record_paths(root, cache)
    head = _load_head(head_path, root)
    in_git = _find_gitdir(root) is not None
    workers = _workers()
    cutoff = time.time_ns() - RACY_SLACK_NS
    listing: _GitListing | None = None
    files: dict[str, FileRec]
    old_files: dict[str, FileRec] = {}

    def load_old() -> None:
        old_files.update(_load_files(files_path, head))

    if in_git:
        if head and _git_unchanged(root, head, "", root):
            files = _load_files(files_path, head) if need_files else {}
            if files or not need_files:
                return head["digest"], files
        listing = _GitListing()
        listing.add(root, "", meanwhile=load_old)  # the table loads while git lists
        rels = listing.rels
        n = workers if len(rels) >= PARALLEL_MIN_ENTRIES else 1
        shares: list[tuple[list[str], list[str]]] = [(rels[k::n], []) for k in range(n)]
    else:
        shares = _plan_walk(base, workers)
        if head.get("sig"):
            # Plain tree: stat everything but load no file table; equal stat facts, same tree.
            quick = _fork_map(_scan_part, _jobs(base, shares, full=False, old={}, cutoff=cutoff))
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
    racy_seen = any(r[0] < 0 for r in files.values())
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
