"""Asking git for the listing of a work tree: what a path source inside git holds.

A git work tree's listing is git's: tracked files plus untracked files that are not ignored, with
checked-out submodules recursed into. :class:`GitListing` makes it with three concurrent read-only
git queries (:data:`CACHED`, :data:`OTHERS`, :data:`DIRTY`) per work tree and keeps the git state
(index stat, dirty and untracked files, submodules) that the stat cache's fast path compares
against next time (see :mod:`rocmforge.sources.tree`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocmforge.errors import SourceError
from rocmforge.sources.git import git_env

# (size, mtime_ns, ino, ctime_ns) of the index file: a changed index means a changed listing.
IndexStat = tuple[int, int, int, int]


def find_gitdir(start: Path) -> Path | None:
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


def index_stat(gitdir: Path) -> IndexStat | None:
    """Return the stat facts of the git index file (size, mtime, inode, ctime), or None."""
    try:
        st = os.stat(gitdir / "index")
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


class GitRun:
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


def git_many(
    cwd: Path, commands: list[list[str]], meanwhile: Callable[[], object] | None = None
) -> list[bytes]:
    """Run several read-only git queries concurrently in ``cwd`` (and ``meanwhile`` here)."""
    run = GitRun(cwd, commands)
    try:
        if meanwhile is not None:
            meanwhile()
        return run.wait()
    finally:
        run.close()


def cached_paths(out: bytes) -> tuple[list[str], list[str]]:
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


def split_z(data: bytes) -> list[str]:
    """Split NUL-terminated git output into paths."""
    return [os.fsdecode(x) for x in data.split(b"\0") if x]


# The queries: files modified against the index; untracked files not ignored; every index entry.
DIRTY = ["diff-files", "-z", "--name-only", "--relative", "--ignore-submodules=all"]
OTHERS = ["ls-files", "-z", "--others", "--exclude-standard"]
CACHED = ["ls-files", "-z", "-s"]


class GitListing:
    """The listing of a git work tree and the git state its fast path compares against."""

    def __init__(self) -> None:
        self.rels: list[str] = []
        self.git: dict[str, dict[str, Any]] = {}
        self.worktrees: list[tuple[Path, str]] = []

    def add(
        self, wt: Path, prefix: str, meanwhile: Callable[[], object] | None = None
    ) -> None:
        """List the git work tree at ``wt`` (``prefix`` from root), submodules recursively."""
        gitdir = find_gitdir(wt)
        index = index_stat(gitdir) if gitdir is not None else None
        # All three at once: three git processes keep both cores busy while the listing is
        # made. A file git calls clean has the stat data of its index entry, so an edit at any
        # moment of the scan leaves it dirty (or the index changed) at the next check.
        cached, others, dirty = git_many(wt, [CACHED, OTHERS, DIRTY], meanwhile)
        tracked, links = cached_paths(cached)
        subs: list[tuple[str, bool]] = []
        for rel in links:
            checked_out = os.path.exists(os.path.join(wt, rel, ".git"))
            subs.append((rel, checked_out))
            if checked_out:
                self.add(wt / rel, prefix + rel + "/")
        untracked = [r for r in split_z(others) if not r.endswith("/")]
        listed = tracked + untracked
        self.rels.extend([prefix + r for r in listed] if prefix else listed)
        self.git[prefix] = {
            "index": index,
            "dirty": sorted(split_z(dirty)),
            "untracked": sorted(untracked),
            "subs": sorted(set(subs)),
        }
        self.worktrees.append((wt, prefix))
