"""Git sources: bare mirror caches per URL, submodule resolution, and clean checkouts without .git.

A mirror lives at ``cache/git/<blake3(url)[:20]>.git`` and is only fetched when the wanted commit is
missing, so a second commit of the same repository fetches only new objects. Every git process runs
with an isolated configuration (no system or global config, no prompts) so that a user's settings
can neither change the bytes of a checkout nor hang on a credential prompt.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmforge.errors import FetchError, SourceError
from rocmforge.store import layout
from rocmforge.util.hashing import blake3_hex

_COMMIT_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
# The recipe's own URL may be local (a path or file://), which git >= 2.38 refuses for clones
# made by `git submodule`; set on every call. Submodule URLs are checked by rocmforge first (a
# local one only with allow-local-submodules); command transports (ext::) are never allowed.
_BASE_CONFIG = (
    "-c", "protocol.file.allow=always", "-c", "protocol.ext.allow=never",
    "-c", "safe.directory=*",
)  # fmt: skip


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment for git: the caller's minus GIT_* and user config, no prompts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        XDG_CONFIG_HOME=os.path.join(os.devnull, "none"),
        LC_ALL="C",
    )
    if extra:
        env.update(extra)
    return env


def _first_line(data: bytes) -> str:
    for line in data.decode(errors="replace").splitlines():
        if line.strip():
            return line.strip()
    return ""


def run_git(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env_extra: dict[str, str] | None = None,
    what: str = "",
) -> bytes:
    """Run ``git ARGS`` and return its stdout; a failure becomes a SourceError saying what."""
    cmd = ["git", *_BASE_CONFIG, *[os.fspath(a) for a in args]]
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=git_env(env_extra),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    except OSError as exc:
        raise SourceError(f"cannot run git{': ' + what if what else ''}: {exc}") from exc
    if proc.returncode != 0:
        shown = " ".join(cmd[len(_BASE_CONFIG) + 1 :])
        raise SourceError(
            f"{what + ': ' if what else ''}git {shown} failed (exit {proc.returncode}): "
            f"{_first_line(proc.stderr)}"
        )
    return proc.stdout


def git_ok(args: Sequence[str | os.PathLike[str]], *, cwd: Path | None = None) -> bool:
    """Run a git query whose only answer is its exit status (e.g. ``cat-file -e``)."""
    try:
        proc = subprocess.run(
            ["git", *_BASE_CONFIG, *[os.fspath(a) for a in args]],
            cwd=cwd,
            env=git_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    except OSError as exc:
        raise SourceError(f"cannot run git: {exc}") from exc
    return proc.returncode == 0


def check_commit(rev: str | None, url: str) -> str:
    """Return ``rev`` if it is a full commit id, else raise SourceError naming the URL."""
    if rev is None or not _COMMIT_RE.match(rev):
        raise SourceError(f"git source {url}: rev must be a full commit id, got {rev!r}")
    return rev


def mirror_path(url: str, cache: Path) -> Path:
    """Return where the bare mirror of ``url`` lives inside ``cache``."""
    return cache / layout.SOURCES_GIT / f"{blake3_hex(url.encode())[:20]}.git"


def _has_commit(mirror: Path, rev: str) -> bool:
    return git_ok(["--git-dir", mirror, "cat-file", "-e", f"{rev}^{{commit}}"])


def ensure_mirror(url: str, rev: str, cache: Path) -> Path:
    """Return a bare mirror of ``url`` holding commit ``rev``; clone or fetch only if needed."""
    mirror = mirror_path(url, cache)
    mirror.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock  # here: plan and path sources never need it (~20 ms import)

    with FileLock(os.fspath(mirror.with_suffix(layout.LOCK_SUFFIX))):
        if not mirror.exists():
            tmp = Path(tempfile.mkdtemp(prefix=".clone-", dir=mirror.parent))
            try:
                run_git(
                    ["clone", "--mirror", "--quiet", "--", url, tmp / "m.git"],
                    what=f"cannot clone {url}",
                )
                os.replace(tmp / "m.git", mirror)
            except SourceError as exc:  # unreachable host, missing repository: environment
                raise FetchError(str(exc)) from exc
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        elif _has_commit(mirror, rev):
            return mirror
        else:
            try:
                run_git(
                    ["--git-dir", mirror, "fetch", "--quiet", "--prune", "origin"],
                    what=f"cannot fetch {url}",
                )
            except SourceError as exc:
                raise FetchError(str(exc)) from exc
        if not _has_commit(mirror, rev):
            # Servers that allow fetching any reachable commit (GitHub does) can still serve it.
            git_ok(["--git-dir", mirror, "fetch", "--quiet", "origin", rev])
            if not _has_commit(mirror, rev):
                raise SourceError(f"git source {url}: commit {rev} not found (after fetching)")
    return mirror


def is_local_url(url: str) -> bool:
    """Return True if git would read ``url`` from this machine: a path or a ``file:`` URL.

    Git's rules: ``scheme://...`` is a URL, ``host:path`` with the colon before any slash is
    scp-like ssh, anything else (``/srv/repo``, ``../x``, ``-x``) is a local path.
    """
    if url.lower().startswith("file:"):
        return True
    if "://" in url:
        return False
    colon, slash = url.find(":"), url.find("/")
    scp_like = colon > 0 and (slash == -1 or colon < slash)
    return not scp_like


def check_submodule_url(sub_url: str, *, where: str, path: str, allow_local: bool) -> None:
    """Refuse a submodule URL that points at this machine unless the recipe allows it.

    Only the recipe may name a local repository: a ``.gitmodules`` written by someone else must
    not make rocmforge copy ``/srv/private_repo`` (or any other host repository) into a build.
    """
    if sub_url.startswith("-"):
        raise SourceError(
            f"{where}: submodule {path!r} has the URL {sub_url!r}, which starts with '-': "
            "refused (git would read it as an option)"
        )
    if "::" in sub_url.split("/", 1)[0]:
        raise SourceError(
            f"{where}: submodule {path!r} uses the command transport {sub_url!r}; refused"
        )
    if is_local_url(sub_url) and not allow_local:
        raise SourceError(
            f"{where}: submodule {path!r} has the local URL {sub_url!r}; only the recipe may "
            "name a repository on this machine. If you trust this repository's .gitmodules, "
            "set allow-local-submodules = true in [source]"
        )


def resolve_url(base: str, url: str) -> str:
    """Resolve a submodule URL (``../foo.git``, ``./bar``) against the superproject's URL."""
    if not (url.startswith("./") or url.startswith("../")):
        return url
    base = base.rstrip("/")
    scp = re.match(r"^([^/:]+@[^/:]+|[^/:]+):(?!//)(.*)$", base) if "://" not in base else None
    if scp:
        prefix, path = scp.group(1) + ":", scp.group(2)
    elif "://" in base:
        scheme, rest = base.split("://", 1)
        host, _, path = rest.partition("/")
        prefix, path = f"{scheme}://{host}/", path
    else:
        prefix, path = "", base
    parts = path.split("/") if path else []
    for comp in url.split("/"):
        if comp == "..":
            if not parts:
                raise SourceError(f"cannot resolve submodule URL {url!r} against {base!r}")
            parts.pop()
        elif comp not in (".", ""):
            parts.append(comp)
    return prefix + "/".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Submodule:
    """One submodule of a commit: its path from the superproject, resolved URL and commit."""

    path: str
    url: str
    commit: str


def submodules_at(mirror: Path, commit: str, url: str) -> list[Submodule]:
    """List the direct submodules recorded at ``commit`` (``.gitmodules`` plus gitlinks)."""
    if not git_ok(["--git-dir", mirror, "cat-file", "-e", f"{commit}:.gitmodules"]):
        return []
    try:
        raw = subprocess.run(
            ["git", *_BASE_CONFIG, "--git-dir", os.fspath(mirror), "config", "-z",
             "--blob", f"{commit}:.gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$"],
            env=git_env(), stdin=subprocess.DEVNULL, capture_output=True, check=False,
        )
    except OSError as exc:
        raise SourceError(f"cannot run git: {exc}") from exc
    if raw.returncode not in (0, 1):  # 1 = no matching keys
        raise SourceError(f"{url}@{commit}: bad .gitmodules: {_first_line(raw.stderr)}")
    paths: dict[str, str] = {}
    urls: dict[str, str] = {}
    for rec in raw.stdout.decode().split("\0"):
        if not rec:
            continue
        key, _, value = rec.partition("\n")
        name, _, field = key[len("submodule."):].rpartition(".")
        (paths if field == "path" else urls)[name] = value
    by_path = {p: n for n, p in paths.items()}
    if not by_path:
        return []
    out = run_git(
        ["--git-dir", mirror, "ls-tree", "-z", commit, "--", *sorted(by_path)],
        what=f"{url}@{commit}: cannot list submodules",
    )
    subs: list[Submodule] = []
    for rec in out.decode().split("\0"):
        if not rec:
            continue
        meta, _, path = rec.partition("\t")
        _mode, kind, sha = meta.split(" ")
        if kind != "commit" or path not in by_path:
            continue
        name = by_path[path]
        if name not in urls:
            raise SourceError(f"{url}@{commit}: submodule {path!r} has no url in .gitmodules")
        subs.append(Submodule(path=path, url=resolve_url(url, urls[name]), commit=sha))
    return sorted(subs, key=lambda s: s.path)


def resolve_tree(
    url: str, rev: str, cache: Path, *, submodules: bool, allow_local_submodules: bool = False
) -> tuple[int, tuple[tuple[str, str], ...]]:
    """Fetch what is needed and return ``(committer time, ((sub path, commit), ...))``.

    A submodule with a local URL is refused unless ``allow_local_submodules``.
    """
    mirror = ensure_mirror(url, rev, cache)
    epoch_out = run_git(
        ["--git-dir", mirror, "show", "-s", "--format=%ct", rev],
        what=f"{url}@{rev}: cannot read commit time",
    )
    epoch = int(epoch_out.decode().strip())
    found: list[tuple[str, str]] = []
    if submodules:
        _walk_submodules(
            mirror, url, rev, "", cache, found, materialize_to=None,
            allow_local=allow_local_submodules,
        )
    return epoch, tuple(sorted(found))


def _walk_submodules(
    mirror: Path,
    url: str,
    commit: str,
    prefix: str,
    cache: Path,
    found: list[tuple[str, str]],
    *,
    materialize_to: Path | None,
    allow_local: bool,
) -> None:
    for sub in submodules_at(mirror, commit, url):
        full = prefix + sub.path
        check_submodule_url(sub.url, where=f"{url}@{commit}", path=full, allow_local=allow_local)
        sub_mirror = ensure_mirror(sub.url, sub.commit, cache)
        found.append((full, sub.commit))
        if materialize_to is not None:
            checkout(sub_mirror, sub.commit, materialize_to / full, cache)
        _walk_submodules(
            sub_mirror, sub.url, sub.commit, full + "/", cache, found,
            materialize_to=materialize_to, allow_local=allow_local,
        )


def checkout(mirror: Path, commit: str, dest: Path, cache: Path) -> None:
    """Write the tree of ``commit`` into ``dest`` (no .git) through a throwaway index."""
    dest.mkdir(parents=True, exist_ok=True)
    tmp = cache / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    fd, index = tempfile.mkstemp(prefix="index-", dir=tmp)
    os.close(fd)
    os.unlink(index)
    env = {"GIT_INDEX_FILE": index}
    try:
        base = ["--git-dir", os.fspath(mirror), "--work-tree", os.fspath(dest)]
        run_git([*base, "read-tree", commit], env_extra=env, what=f"cannot check out {commit}")
        run_git([*base, "checkout-index", "-a", "-f"], env_extra=env,
                what=f"cannot check out {commit}")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index)


def materialize_git(
    url: str,
    rev: str,
    dest: Path,
    cache: Path,
    *,
    submodules: bool,
    allow_local_submodules: bool = False,
) -> tuple[tuple[str, str], ...]:
    """Check out ``rev`` and (if asked) every submodule into ``dest``; return the submodules.

    A submodule with a local URL is refused unless ``allow_local_submodules``.
    """
    mirror = ensure_mirror(url, rev, cache)
    checkout(mirror, rev, dest, cache)
    found: list[tuple[str, str]] = []
    if submodules:
        _walk_submodules(
            mirror, url, rev, "", cache, found, materialize_to=dest,
            allow_local=allow_local_submodules,
        )
    return tuple(sorted(found))
