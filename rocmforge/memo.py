"""The realize memo: a cache hit in a few milliseconds, before any heavy import.

A successful ``realize`` records, per recipe file, every file whose change could change the input
hash — the recipe and its ``extends`` chain, patches, the toolchain's executables, the requirement
wheels, and for a path source every directory and file of the tree — with its stat signature.
The next ``rocmforge realize RECIPE`` checks those signatures and, if none moved and the entry is
still in the store, answers at once. Anything unusual (other flags, a changed file, a missing
entry) falls through to the full pipeline, which recomputes the hash from scratch; the memo can
make a run faster, never different.

Deliberately imports only ``os``, ``sys``, ``marshal`` and ``fcntl`` (~1 ms in total), plus
the import-free :mod:`rocmforge.store.layout` for the store's file names.
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import sys
from collections.abc import Iterable, Sequence

from rocmforge.store import layout

MEMO_FORMAT = 1
#: The sandbox level an option-less ``realize`` asks for; only entries built so are answered.
FAST_SANDBOX = "bwrap"
_ENV_KEYS = ("PATH", "PYENV_VERSION", "ROCMFORGE_STORE")
Sig = tuple[int, int, int, int, int]


def _sig(path: str, *, follow: bool = True) -> Sig | None:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def memo_path(store_root: str) -> str:
    """Return the memo file of the store at ``store_root``."""
    name = f"realize-memo-{sys.implementation.cache_tag}.marshal"
    return os.path.join(store_root, layout.CACHE, name)


def memo_key(recipe: str) -> str:
    """Return the memo key of a recipe path: the file, and the env that steers tool lookup."""
    env = "\0".join(os.environ.get(k, "") for k in _ENV_KEYS)
    return f"{MEMO_FORMAT}\0{os.path.abspath(recipe)}\0{env}"


def tree_guards(root: str) -> list[tuple[str, Sig | None, bool]] | None:
    """Return lstat guards of every directory and file below ``root`` (``.git`` excluded).

    Directory mtimes catch added and removed files; in a git work tree the index and
    ``info/exclude`` are guarded too, since they decide which files count. None if the tree is
    part of a work tree whose git dir is not a plain directory (worktrees, submodules).
    """
    guards: list[tuple[str, Sig | None, bool]] = []
    parent = os.path.abspath(root)
    while True:
        dotgit = os.path.join(parent, ".git")
        if os.path.lexists(dotgit):
            if not os.path.isdir(dotgit):
                return None
            for name in ("index", "HEAD", os.path.join("info", "exclude")):
                p = os.path.join(dotgit, name)
                guards.append((p, _sig(p), True))
            break
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    for dirpath, dirnames, filenames in os.walk(root):
        if ".git" in dirnames:
            dirnames.remove(".git")
        dirnames.sort()
        guards.append((dirpath, _sig(dirpath, follow=False), False))
        for name in filenames:
            p = os.path.join(dirpath, name)
            guards.append((p, _sig(p, follow=False), False))
    return guards


def record(
    store_root: str,
    recipe: str,
    *,
    files: Iterable[str],
    trees: Iterable[str],
    result: dict[str, object],
    depends: Iterable[str] = (),
) -> None:
    """Remember ``result`` for ``recipe`` while ``files`` and the ``trees`` stay unchanged.

    ``depends`` names the recipes ``recipe`` is built against: their remembered guards are
    guards of this result too (a dependency not remembered means nothing is recorded).
    """
    guards: list[tuple[str, Sig | None, bool]] = [(f, _sig(f), True) for f in files]
    for tree in trees:
        found = tree_guards(tree)
        if found is None:
            return
        guards.extend(found)
    path = memo_path(store_root)
    try:
        with open(path, "rb") as f:
            memo = marshal.load(f)
        if not isinstance(memo, dict):
            memo = {}
    except (OSError, EOFError, ValueError, TypeError):
        memo = {}
    for dep in depends:
        item = memo.get(memo_key(dep))
        if not isinstance(item, dict) or not isinstance(item.get("guards"), list):
            return
        guards.extend(item["guards"])
    guards = _unique(guards)  # a closure's guards overlap (shared dependencies)
    memo[memo_key(recipe)] = {"guards": guards, "result": result}
    tmp = f"{path}.{os.getpid()}.{id(guards)}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as out:
            marshal.dump(memo, out)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _unique(guards: list[tuple[str, Sig | None, bool]]) -> list[tuple[str, Sig | None, bool]]:
    """``guards`` without repeats (the first guard of each path and mode stays)."""
    seen: dict[tuple[str, bool], tuple[str, Sig | None, bool]] = {}
    for g in guards:
        seen.setdefault((g[0], g[2]), g)
    return list(seen.values())


def record_stack(store_root: str, stack: str, recipes: Sequence[str]) -> None:
    """Remember a stack file: its own stat guard plus every member's remembered guards and result.

    Records nothing if a member is not remembered (its realize could not be memoised).
    """
    path = memo_path(store_root)
    try:
        with open(path, "rb") as f:
            memo = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        return
    if not isinstance(memo, dict):
        return
    guards: list[tuple[str, Sig | None, bool]] = [(os.path.abspath(stack), _sig(stack), True)]
    results = []
    for recipe in recipes:
        item = memo.get(memo_key(recipe))
        if not isinstance(item, dict) or _valid(item) is None:
            return
        guards.extend(item["guards"])
        results.append(item["result"])
    memo[memo_key(stack)] = {"guards": _unique(guards), "results": results}
    tmp = f"{path}.{os.getpid()}.{id(guards)}.tmp"
    try:
        with open(tmp, "wb") as out:
            marshal.dump(memo, out)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def touch_used(store_root: str, hash: str) -> None:
    """Record a use of entry ``hash`` now: set the mtime of ``used/<hash>`` (gc reads it).

    Best effort and cheap (one ``utime``, or one ``open`` the first time); never raises.
    """
    path = os.path.join(store_root, layout.USED, hash)
    try:
        os.utime(path)
    except FileNotFoundError:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        except OSError:
            pass
    except OSError:
        pass


def _valid(item: object) -> dict[str, object] | None:
    """Return the remembered result if every guard still holds; None for anything malformed."""
    if not isinstance(item, dict):
        return None
    try:
        for path, sig, follow in item["guards"]:
            if not isinstance(path, str) or _sig(path, follow=bool(follow)) != sig:
                return None
        result = item["result"]
    except (KeyError, TypeError, ValueError):  # a damaged memo is only a missed shortcut
        return None
    if not isinstance(result, dict):
        return None
    wheels = result.get("wheels")
    if not (isinstance(wheels, list) and all(isinstance(w, str) for w in wheels)):
        return None
    if not all(isinstance(result.get(k), str) for k in ("path", "hash", "name", "version")):
        return None
    return result


def _parse(argv: Sequence[str]) -> tuple[list[str], str] | None:
    if not argv or argv[0] != "realize":
        return None
    recipes: list[str] = []
    store = os.environ.get("ROCMFORGE_STORE") or "store"
    args = list(argv[1:])
    while args:
        a = args.pop(0)
        if a == "--store" and args:
            store = args.pop(0)
        elif a.startswith("--store="):
            store = a.split("=", 1)[1]
        elif a.startswith("-"):
            return None  # any other option: the full CLI handles it
        else:
            recipes.append(a)
    return (recipes, store) if recipes else None


def fast_realize(argv: Sequence[str]) -> int | None:
    """Answer ``realize RECIPE... [--store DIR]`` from the memo, or return None to fall through."""
    parsed = _parse(argv)
    if parsed is None:
        return None
    recipes, store = parsed
    try:
        with open(memo_path(store), "rb") as f:
            memo = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not isinstance(memo, dict):
        return None
    results = []
    for recipe in recipes:
        item = memo.get(memo_key(recipe))
        if isinstance(item, dict) and "results" in item:  # a stack: one guard set, many results
            members = item["results"]
            held = isinstance(members, list) and members and _valid(
                {"guards": item.get("guards"), "result": members[0]}
            )
            found = [_valid({"guards": [], "result": r}) for r in members] if held else None
        else:
            found = [_valid(item)]
        for result in found or [None]:
            # Without options a realize asks for bwrap: an entry built under a weaker sandbox
            # (or remembered before the level was) goes to the full pipeline, which rebuilds it.
            if result is None or result.get("sandbox") != FAST_SANDBOX:
                return None
            results.append(result)
    try:
        lock = os.open(os.path.join(store, layout.GC_LOCK), os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_SH)  # gc cannot delete what we are about to print
        lines = []
        for r in results:
            wheels = r["wheels"]
            assert isinstance(wheels, list)
            if not os.path.isfile(os.path.join(str(r["path"]), layout.META)) or not all(
                os.path.isfile(w) for w in wheels
            ):
                return None
            lines.append((r, wheels))
        for r, _ in lines:
            touch_used(store, str(r["hash"]))
        for r, _ in lines:
            sys.stderr.write(f"rocmforge: {r['name']} {r['version']} {r['hash']} cached\n")
        sys.stdout.write("".join(f"{w}\n" for _, wheels in lines for w in wheels))
        sys.stdout.flush()
        return 0
    finally:
        os.close(lock)
