"""Sources: identify a ``[source]`` (content hash or commits, plus patches); materialise a copy.

:func:`identify_source` returns what enters the derivation — never the URL or the local path, so a
mirror or a moved checkout does not cause a rebuild. :func:`materialize_source` writes a clean tree
(no ``.git``, no ignored files, patches applied, modes 0644/0755, every mtime at the source epoch).
The work is done by :mod:`rocmforge.sources.tree`, :mod:`rocmforge.sources.git` and
:mod:`rocmforge.sources.patches`; ``cache`` is the store's source cache directory.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.errors import SourceError
from rocmforge.recipe.model import SourceSpec
from rocmforge.sources.git import check_commit, materialize_git, mirror_path, resolve_tree
from rocmforge.sources.patches import apply_patches, patch_digests
from rocmforge.sources.tree import copy_tree, tree_digest, tree_listing
from rocmforge.store import layout
from rocmforge.util.fsutil import write_atomic
from rocmforge.util.hashing import blake3_hex, canonical_json

PATH_EPOCH = 315532800  # 1980-01-01, the earliest time a zip file can hold
_RESOLVED_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceIdentity:
    """What identifies a source's bytes: tree hash or commits, submodule commits, patch digests."""

    kind: str
    tree: str | None = None
    commit: str | None = None
    submodules: tuple[tuple[str, str], ...] = ()
    patches: tuple[tuple[str, str], ...] = ()
    epoch: int = PATH_EPOCH

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form that enters the derivation (no URL, no local path)."""
        return {
            "kind": self.kind,
            "tree": self.tree,
            "commit": self.commit,
            "submodules": [list(s) for s in self.submodules],
            "patches": [list(p) for p in self.patches],
            "epoch": self.epoch,
        }


def _resolved_path(
    spec_git: str, rev: str, submodules: bool, cache: Path, *, local: bool = False
) -> Path:
    # A resolution that allowed local submodule URLs must not answer a recipe that does not.
    key = f"{mirror_path(spec_git, cache).name}\0{rev}\0{int(submodules)}" + (
        "\0local-submodules" if local else ""
    )
    return cache / layout.SOURCES_GIT_RESOLVED / f"{blake3_hex(key.encode())[:32]}.json"


def _read_resolved(path: Path, rev: str) -> tuple[int, tuple[tuple[str, str], ...]] | None:
    try:
        data = json.loads(path.read_bytes())
        if data["v"] != _RESOLVED_VERSION or data["commit"] != rev:
            return None
        subs = tuple((str(p), str(c)) for p, c in data["submodules"])
        return int(data["epoch"]), subs
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_json_atomic(path: Path, value: Any) -> None:
    try:
        write_atomic(path, canonical_json(value))
    except OSError as exc:
        raise SourceError(f"cannot write {path}: {exc}") from exc


def _git_url(spec: SourceSpec) -> str:
    if not spec.git:
        raise SourceError("git source without a URL")
    return spec.git


def identify_source(spec: SourceSpec, *, cache: Path) -> SourceIdentity:
    """Return the identity of ``spec``: fetching git objects or hashing the tree only as needed."""
    patches = patch_digests(spec.patches)
    if spec.kind == "path":
        if spec.path is None:
            raise SourceError("path source without a path")
        own = not spec.enclosing_ignores
        digest = tree_digest(spec.path, cache=cache, own_ignores=own)
        return SourceIdentity(kind="path", tree=f"blake3:{digest}", patches=patches)
    if spec.kind == "git":
        url = _git_url(spec)
        rev = check_commit(spec.rev, url)
        resolved_file = _resolved_path(
            url, rev, spec.submodules, cache, local=spec.allow_local_submodules
        )
        resolved = _read_resolved(resolved_file, rev)
        if spec.locked is not None:  # the lock's record: nothing is fetched
            if resolved is not None and resolved != spec.locked:
                raise SourceError(_disagrees(url, rev, spec.locked, resolved))
            resolved = spec.locked
        if resolved is None:
            resolved = resolve_tree(
                url, rev, cache, submodules=spec.submodules,
                allow_local_submodules=spec.allow_local_submodules,
            )
            _write_json_atomic(
                resolved_file,
                {"v": _RESOLVED_VERSION, "commit": rev, "epoch": resolved[0],
                 "submodules": [list(s) for s in resolved[1]]},
            )
        epoch, subs = resolved
        return SourceIdentity(
            kind="git", commit=rev, submodules=subs, patches=patches, epoch=epoch
        )
    raise SourceError(f"unknown source kind {spec.kind!r}")


def _disagrees(
    url: str,
    rev: str,
    locked: tuple[int, tuple[tuple[str, str], ...]],
    found: tuple[int, tuple[tuple[str, str], ...]],
) -> str:
    """The message for a lock file whose ``[source]`` is not what the repository says."""
    what = []
    if locked[0] != found[0]:
        what.append(f"commit time {locked[0]} locked, {found[0]} in the repository")
    mine, theirs = dict(locked[1]), dict(found[1])
    for path in sorted(set(mine) | set(theirs)):
        if mine.get(path) != theirs.get(path):
            what.append(f"submodule {path}: {mine.get(path) or '(none)'} locked, "
                        f"{theirs.get(path) or '(none)'} in the repository")  # fmt: skip
    return (f"git source {url}@{rev}: the lock file's [source] disagrees with the repository "
            f"({'; '.join(what)}); run `rocmforge lock` again")  # fmt: skip


def is_remote_url(url: str) -> bool:
    """Return True if fetching ``url`` needs the network (not a local path or ``file://``)."""
    if url.startswith("file://"):
        return False
    return "://" in url or bool(re.match(r"^[^/@:]+@[^/:]+:", url))


def needs_fetch(spec: SourceSpec, *, cache: Path) -> bool:
    """Return True if identifying ``spec`` would download from the network (a remote git
    source whose commit and submodules are not resolved in the cache yet)."""
    if spec.kind != "git" or not spec.git or not is_remote_url(spec.git) or spec.rev is None:
        return False
    if spec.locked is not None:
        return False
    resolved = _resolved_path(
        spec.git, spec.rev, spec.submodules, cache, local=spec.allow_local_submodules
    )
    return _read_resolved(resolved, spec.rev) is None


def _prepare_dest(dest: Path) -> None:
    try:
        dest.mkdir(parents=True, exist_ok=True)
        if any(dest.iterdir()):
            raise SourceError(f"cannot materialise source into {dest}: directory is not empty")
    except OSError as exc:
        raise SourceError(f"cannot create {dest}: {exc}") from exc


def _normalize(dest: Path, epoch: int) -> None:
    """Set modes to 0644/0755 (keeping the exec bit) and every mtime to ``epoch``."""
    times = (epoch, epoch)
    try:
        for dirpath, dirnames, filenames in os.walk(dest):
            links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            for name in filenames + links:
                p = os.path.join(dirpath, name)
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode):
                    os.chmod(p, 0o755 if st.st_mode & 0o100 else 0o644)
                os.utime(p, times, follow_symlinks=False)
            os.chmod(dirpath, 0o755)
        for dirpath, _, _ in os.walk(dest, topdown=False):
            os.utime(dirpath, times)
    except OSError as exc:
        raise SourceError(f"cannot normalise {dest}: {exc}") from exc


def materialize_source(
    spec: SourceSpec, ident: SourceIdentity, dest: Path, *, cache: Path
) -> None:
    """Write a fresh copy of the source into ``dest`` (absent or empty) and apply the patches."""
    _prepare_dest(dest)
    if spec.kind == "path":
        if spec.path is None:
            raise SourceError("path source without a path")
        files = tree_listing(spec.path, cache=cache, own_ignores=not spec.enclosing_ignores)
        copy_tree(Path(os.path.abspath(spec.path)), files, dest)
    elif spec.kind == "git":
        url = _git_url(spec)
        rev = check_commit(spec.rev, url)
        if ident.commit != rev:
            raise SourceError(f"git source {url}: identity is for {ident.commit}, spec wants {rev}")
        subs = materialize_git(
            url, rev, dest, cache, submodules=spec.submodules,
            allow_local_submodules=spec.allow_local_submodules,
        )
        if spec.locked is not None:  # hashed from the lock: the fetched tree must be that one
            found = resolve_tree(url, rev, cache, submodules=False)[0], subs
            if found != spec.locked:
                raise SourceError(_disagrees(url, rev, spec.locked, found))
        if subs != ident.submodules:
            raise SourceError(
                f"git source {url}@{rev}: submodules found {subs} differ from the identity "
                f"{ident.submodules}"
            )
    else:
        raise SourceError(f"unknown source kind {spec.kind!r}")
    apply_patches(spec.patches, dest)
    _normalize(dest, ident.epoch)
