"""The realize memo: a cache hit in a few milliseconds, before any heavy import.

A successful ``realize`` records, per recipe file, every file whose change could change the input
hash — the recipe and its ``extends`` chain, patches, the toolchain's executables, the requirement
wheels — with its stat signature, and for a path source (or tree input) the stat facts of every
directory's entries (a listing per directory: names, and each file's mode, size, mtime, ctime and
inode). The next ``rocmforge realize RECIPE`` checks them (a big tree in two processes) and, if
none moved and the entry is still in the store, answers at once. A realize during which a
guarded tree changed records nothing. Anything unusual (other flags, a changed file, a missing
entry) falls through to the full pipeline, which recomputes the hash from scratch; the memo can
make a run faster, never different.

Records are keyed by the store's identity (device and inode of its root), and the entry and
wheel paths are kept relative to the store root: a copied store (``cp -a``) never answers with
the original's paths, and a moved one answers with its new ones. Before answering, each wheel's
size and mtime are compared with what publish recorded in ``meta.json`` (the same cheap check as
:meth:`rocmforge.store.store.Store.lookup`); any difference falls through to the full pipeline.

Deliberately imports only ``os``, ``sys``, ``marshal`` and ``fcntl`` (~1 ms in total; not even
``contextlib`` or ``collections.abc``), plus the import-free :mod:`rocmforge.store.layout`
for the store's file names.
"""

from __future__ import annotations

import fcntl
import marshal
import os
import stat  # already loaded by os
import sys

from rocmforge.store import layout

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

MEMO_FORMAT = 3
#: The sandbox level an option-less ``realize`` asks for; only entries built so are answered.
FAST_SANDBOX = "bwrap"
#: ROCMFORGE_SYSTEM_MANIFEST picks what covers /usr (rocmforge.toolchain.manifest): another
#: choice is another hash, so a memo recorded under one never answers for another.
_ENV_KEYS = ("PATH", "PYENV_VERSION", "ROCMFORGE_STORE", "ROCMFORGE_SYSTEM_MANIFEST")
Sig = tuple[int, int, int, int, int]


def _sig(path: str, *, follow: bool = True) -> Sig | None:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _fnv64(text: str) -> str:
    """Return the 64-bit FNV-1a hex of ``text`` (a file name for a key; no hashlib import)."""
    h = 0xCBF29CE484222325
    for b in text.encode("utf-8", "surrogateescape"):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def memo_path(store_root: str, key: str) -> str:
    """Return the memo file of one recipe (its :func:`memo_key`) in the store at ``store_root``.

    One small file per recipe: a recipe with a huge tree (tens of thousands of guards) makes its
    own memo big, never the hits of other recipes slower. The file holds ``{key: record}``, so a
    (vanishingly rare) name collision is only a miss.
    """
    name = f"realize-memo-{sys.implementation.cache_tag}"
    return os.path.join(store_root, layout.CACHE, name, _fnv64(key) + ".marshal")


def store_identity(store_root: str) -> str | None:
    """Return the identity of the store at ``store_root`` (device and inode of its root
    directory), or None if it cannot be read. A copy of a store has another identity."""
    try:
        st = os.stat(store_root)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}"


def memo_key(recipe: str, store_root: str) -> str | None:
    """Return the memo key of a recipe path in a store: the file, the store's identity and the
    env that steers tool lookup (None when the store cannot be read)."""
    ident = store_identity(store_root)
    if ident is None:
        return None
    env = "\0".join(os.environ.get(k, "") for k in _ENV_KEYS)
    return f"{MEMO_FORMAT}\0{os.path.abspath(recipe)}\0{ident}\0{env}"


def _dir_facts(path: str) -> tuple[bytes, int, int]:
    """Return the marshal'd stat facts of one directory's entries in listing order (a
    subdirectory by its name alone: its own entries are facts of their own), how many entries
    it holds and their newest ctime. Raises OSError when it cannot be listed."""
    facts: list[object] = []
    newest = 0
    # Listed by descriptor, so each stat looks up one name, not the whole path again.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as it:
            entries = list(it)
        for e in entries:
            name = e.name
            if name == ".git":
                continue
            if e.is_dir(follow_symlinks=False):
                facts.append(name)
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            ctime = st.st_ctime_ns
            newest = ctime if ctime > newest else newest
            facts.append((name, st.st_mode, st.st_size, st.st_mtime_ns, ctime, st.st_ino))
    finally:
        os.close(fd)
    return marshal.dumps(facts, 2), len(facts), newest


# A tree guard: the tree's root and, per directory below it (relative prefix, "" for the root),
# the marshal'd stat facts of its entries; and how many entries they hold in all.
TreeGuard = tuple[str, list[tuple[str, bytes]], int]


def tree_guards(root: str) -> tuple[list[tuple[str, Sig | None, bool]], TreeGuard, int] | None:
    """Return the guards of the tree at ``root``: lstat guards of the git files that decide
    its listing (the index, ``HEAD`` and ``info/exclude`` of an enclosing work tree), and the
    stat facts of every directory's entries below ``root`` (``.git`` excluded), with the newest
    ctime among them.

    A listing catches added, removed and renamed entries, each entry's stat facts catch edits,
    and ctime moves on every change however mtime is set. None if the tree is part of a work
    tree whose git dir is not a plain directory (worktrees, submodules), or cannot be listed.
    """
    guards: list[tuple[str, Sig | None, bool]] = []
    parent = os.path.abspath(root)
    top = parent
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
    dirs: list[tuple[str, bytes]] = []
    total = newest = 0
    todo = [""]
    base = os.path.join(top, "")
    try:
        while todo:
            rel = todo.pop()
            facts, n, ctime = _dir_facts(base + rel)
            dirs.append((rel, facts))
            total += n
            newest = ctime if ctime > newest else newest
            for item in marshal.loads(facts):
                if isinstance(item, str):
                    todo.append(f"{rel}{item}/")
    except OSError:
        return None
    return guards, (top, dirs, total), newest


# A tree of at least this many entries is checked by two processes (this one and a fork).
PARALLEL_TREE_ENTRIES = 8192
# ctimes this close before the start of a realize may belong to a change made during it (file
# timestamps come from the kernel's coarse clock, which lags by up to one tick: <= 10 ms).
RACY_SLACK_NS = 20_000_000


def _tree_holds(base: str, dirs: list[tuple[str, bytes]]) -> bool:
    """Return whether every directory of ``dirs`` below ``base`` lists the recorded facts."""
    try:
        for rel, facts in dirs:
            if _dir_facts(base + rel)[0] != facts:
                return False
    except (OSError, TypeError):
        return False
    return True


def _trees_hold(trees: list[TreeGuard]) -> bool:
    """Return whether every tree guard still holds; a big tree is checked by two processes,
    since listing and stat'ing tens of thousands of entries is mostly system-call time."""
    shares: list[tuple[str, list[tuple[str, bytes]]]] = []
    total = 0
    for root, dirs, n in trees:
        shares.append((os.path.join(root, ""), dirs))
        total += n
    if total < PARALLEL_TREE_ENTRIES:
        return all(_tree_holds(base, dirs) for base, dirs in shares)
    try:
        pid = os.fork()
    except OSError:
        return all(_tree_holds(base, dirs) for base, dirs in shares)
    if pid == 0:  # the child checks every other directory, and says so by its exit status
        code = 1
        try:
            code = 0 if all(_tree_holds(base, dirs[1::2]) for base, dirs in shares) else 1
        finally:
            os._exit(code)
    ok = all(_tree_holds(base, dirs[0::2]) for base, dirs in shares)
    if not ok:
        try:  # noqa: SIM105 (contextlib: 1 ms of start-up)
            os.kill(pid, 9)
        except OSError:
            pass
    try:
        _, status = os.waitpid(pid, 0)
    except OSError:
        return False
    return ok and status == 0


def record(
    store_root: str,
    recipe: str,
    *,
    files: Iterable[str],
    trees: Iterable[str],
    result: dict[str, object],
    depends: Iterable[str] = (),
    since_ns: int | None = None,
) -> None:
    """Remember ``result`` for ``recipe`` while ``files`` and the ``trees`` stay unchanged.

    ``result`` holds ``hash``, ``name``, ``version``, ``path`` (the entry directory) and
    ``wheels`` relative to the store root, and ``sigs``: per wheel ``[size, mtime_ns]`` as
    recorded at publish. ``depends`` names the recipes ``recipe`` is built against: their
    remembered guards are guards of this result too (a dependency not remembered means nothing
    is recorded). ``since_ns`` is when the realize began (``time.time_ns()``): if an entry of
    one of the ``trees`` (sources edited by hand, maybe during a long build) changed since then
    (its ctime says so), the result may predate the change and nothing is recorded. (Files
    like the toolchain's are not held to this: running the build may touch them.)
    """
    key = memo_key(recipe, store_root)
    if key is None:
        return
    guards: list[tuple[str, Sig | None, bool]] = [(f, _sig(f), True) for f in files]
    tree_list: list[TreeGuard] = []
    newest = 0
    for tree in trees:
        found = tree_guards(tree)
        if found is None:
            return
        guards.extend(found[0])
        tree_list.append(found[1])
        newest = max(newest, found[2])
    if since_ns is not None and newest >= since_ns - RACY_SLACK_NS:
        return  # changed while this realize ran: the next realize hashes again
    for dep in depends:
        item = _load_item(store_root, dep)
        theirs = item.get("guards") if item is not None else None
        their_trees = item.get("trees", []) if item is not None else None
        if not isinstance(theirs, list) or not isinstance(their_trees, list):
            return
        guards.extend(theirs)
        tree_list.extend(their_trees)
    guards = _unique(guards)  # a closure's guards overlap (shared dependencies)
    _write_item(
        store_root,
        key,
        {"guards": guards, "trees": _unique_trees(tree_list), "result": result},
    )


def _unique_trees(trees: list[TreeGuard]) -> list[TreeGuard]:
    """``trees`` without repeats (the first guard of each root stays)."""
    seen: dict[str, TreeGuard] = {}
    for t in trees:
        seen.setdefault(t[0], t)
    return list(seen.values())


def _load_item(store_root: str, recipe: str) -> dict[str, object] | None:
    """Return the memo record of ``recipe`` in the store at ``store_root``, or None."""
    key = memo_key(recipe, store_root)
    if key is None:
        return None
    try:
        with open(memo_path(store_root, key), "rb") as f:
            memo = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    item = memo.get(key) if isinstance(memo, dict) else None
    return item if isinstance(item, dict) else None


def _write_item(store_root: str, key: str, item: dict[str, object]) -> None:
    """Write the memo file of ``key`` holding ``item`` atomically (best effort)."""
    path = memo_path(store_root, key)
    tmp = f"{path}.{os.getpid()}.{id(item)}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as out:
            marshal.dump({key: item}, out)
        os.replace(tmp, path)
    except OSError:
        try:  # noqa: SIM105 (contextlib: 1 ms of start-up)
            os.unlink(tmp)
        except OSError:
            pass


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
    key = memo_key(stack, store_root)
    if key is None:
        return
    guards: list[tuple[str, Sig | None, bool]] = [(os.path.abspath(stack), _sig(stack), True)]
    results = []
    trees: list[TreeGuard] = []
    for recipe in recipes:
        item = _load_item(store_root, recipe)
        if item is None or _valid(item) is None or not isinstance(item.get("guards"), list):
            return
        guards.extend(item["guards"])  # type: ignore[arg-type]
        trees.extend(item.get("trees", []))  # type: ignore[arg-type]
        results.append(item["result"])
    _write_item(
        store_root,
        key,
        {"guards": _unique(guards), "trees": _unique_trees(trees), "results": results},
    )

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
        trees = item.get("trees", [])
        if not isinstance(trees, list) or (trees and not _trees_hold(trees)):
            return None
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


def _parse(argv: Sequence[str], command: str = "realize") -> tuple[list[str], str] | None:
    """Split ``[--store DIR] COMMAND RECIPE... [--store DIR]`` into (recipes, store root); None
    for any other shape (the full CLI handles it)."""
    args = list(argv)
    store: str | None = None
    while args and args[0].startswith("--store"):  # a global option before the command
        if args[0] == "--store" and len(args) > 1:
            store = args[1]
            del args[:2]
        elif args[0].startswith("--store="):
            store = args.pop(0).split("=", 1)[1]
        else:
            return None
    if not args or args[0] != command:
        return None
    recipes: list[str] = []
    args = args[1:]
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
    if not recipes:
        return None
    from rocmforge.store.locate import find_store  # os only: the same store the CLI picks

    return recipes, find_store(store, recipes=recipes)[0]


def _gc_lock_shared(store: str) -> int | None:
    """Return a descriptor of the store's gc lock held shared (gc cannot delete what we are
    about to print), or None if it cannot be opened. Read-only is enough for a shared flock
    (and all a read-only store allows)."""
    try:
        lock = os.open(os.path.join(store, layout.GC_LOCK), os.O_RDONLY)
    except OSError:
        return None
    fcntl.flock(lock, fcntl.LOCK_SH)
    return lock


def _entry_wheels(root: str, result: dict[str, object]) -> list[str] | None:
    """Return the wheel paths of a remembered result if its entry is still there and each
    wheel has the size and mtime publish recorded (the cheap check of ``Store.lookup``)."""
    wheels, sigs = result.get("wheels"), result.get("sigs")
    if not (isinstance(wheels, list) and isinstance(sigs, list)):
        return None
    if len(wheels) != len(sigs) or not os.path.isfile(
        os.path.join(root, str(result["path"]), layout.META)
    ):
        return None
    paths = [os.path.join(root, str(w)) for w in wheels]
    for path, sig in zip(paths, sigs, strict=True):
        try:
            st = os.lstat(path)  # a wheel replaced by a symlink is damage, never a hit
        except OSError:
            return None
        if [st.st_size, st.st_mtime_ns] != sig or not stat.S_ISREG(st.st_mode):
            return None  # moved since publish: the full pipeline checks and repairs
    return paths


def host_facts() -> list[object]:
    """The facts of this machine that lints read beside the recipe and its toolchain: the
    host's ``MAX_JOBS``, the CPUs this process may use and the ``MemTotal`` line of
    ``/proc/meminfo`` (see :func:`rocmforge.toolchain.machine.lint_facts`)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except OSError:
        cpus = os.cpu_count() or 0
    try:
        with open("/proc/meminfo", "rb") as f:
            mem = f.readline()
    except OSError:
        mem = b""
    return [os.environ.get("MAX_JOBS"), cpus, mem]


#: Stands for the recipe's path in a remembered plan text: the memo answer puts in the path as
#: the command line names it (the plan may have been recorded from another directory).
RECIPE_MARK = "\x00RECIPE\x00"
#: The form of a remembered plan text: a record of another form (the whole derivation before
#: the summary) is never answered.
PLAN_FORM = 2


def record_plan(store_root: str, recipe: str, *, hash: str, warnings: str, text: str) -> None:
    """Remember what ``plan RECIPE`` printed for a cached ``hash``: its ``warnings`` (stderr)
    and the derivation ``text``, beside the realize memo's result for ``recipe``.

    Kept only while that result still holds and names ``hash`` (so under the same guards: the
    recipe, its sources, toolchain, requirements and dependencies), and answered only while
    :func:`host_facts` are unchanged. A later realize of the recipe rewrites the record
    without it; ``plan`` records it again.
    """
    key = memo_key(recipe, store_root)
    item = _load_item(store_root, recipe)
    if key is None or item is None or "results" in item:
        return
    result = _valid(item)
    if result is None or result.get("hash") != hash:
        return
    plan = {"hash": hash, "warnings": warnings, "text": text, "host": host_facts(),
            "form": PLAN_FORM}  # fmt: skip
    if item.get("plan") != plan:  # a plan --rehash of an unchanged recipe rewrites nothing
        item["plan"] = plan
        _write_item(store_root, key, item)


class MemoAnswer:
    """What the memo answers for a command, for its caller to print: ``rows`` (realize: per
    entry its name, version, hash and wheel paths) or ``plan`` (the remembered plan).

    The store's gc lock stays held shared until :meth:`close` (gc cannot delete what is about
    to be printed): the caller prints, then closes. A plain class: ``dataclasses`` costs
    start-up time.
    """

    __slots__ = ("_lock", "plan", "rows")

    def __init__(
        self,
        lock: int,
        *,
        rows: list[tuple[str, str, str, list[str]]] | None = None,
        plan: PlanAnswer | None = None,
    ) -> None:
        self._lock = lock
        self.rows = rows or []
        self.plan = plan

    def close(self) -> None:
        """Release the store's gc lock."""
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1


class PlanAnswer:
    """The remembered ``plan RECIPE`` of a cached recipe: its warnings (stderr), the entry
    and the derivation text."""

    __slots__ = ("hash", "name", "path", "recipe", "text", "version", "warnings")

    def __init__(
        self, *, name: str, version: str, hash: str, path: str, warnings: str, text: str,
        recipe: str = "",
    ) -> None:  # fmt: skip
        self.recipe = recipe
        self.name = name
        self.version = version
        self.hash = hash
        self.path = path
        self.warnings = warnings
        self.text = text


def fast_plan(argv: Sequence[str]) -> MemoAnswer | None:
    """Answer ``plan RECIPE [--store DIR]`` of a cached, remembered recipe from the memo, or
    return None to fall through to the full CLI."""
    parsed = _parse(argv, "plan")
    if parsed is None or len(parsed[0]) != 1:
        return None
    [recipe], store = parsed
    item = _load_item(store, recipe)
    if item is None or "results" in item:
        return None
    plan = item.get("plan")
    if not isinstance(plan, dict) or plan.get("form") != PLAN_FORM:
        return None
    if plan.get("host") != host_facts():
        return None
    warnings, text = plan.get("warnings"), plan.get("text")
    if not (isinstance(warnings, str) and isinstance(text, str)):
        return None
    result = _valid(item)
    if result is None or plan.get("hash") != result["hash"]:
        return None
    root = os.path.abspath(store)
    lock = _gc_lock_shared(store)
    if lock is None:
        return None
    if _entry_wheels(root, result) is None:
        os.close(lock)
        return None
    answer = PlanAnswer(
        name=str(result["name"]),
        version=str(result["version"]),
        hash=str(result["hash"]),
        path=os.path.join(root, str(result["path"])),
        warnings=warnings,
        text=text,
        recipe=recipe,
    )
    return MemoAnswer(lock, plan=answer)


def fast_realize(argv: Sequence[str]) -> MemoAnswer | None:
    """Answer ``realize RECIPE... [--store DIR]`` from the memo (recording each entry's use),
    or return None to fall through."""
    parsed = _parse(argv)
    if parsed is None:
        return None
    recipes, store = parsed
    results = []
    for recipe in recipes:
        item = _load_item(store, recipe)
        if item is not None and "results" in item:  # a stack: one guard set, many results
            members = item["results"]
            found = None
            if isinstance(members, list) and members:
                head = {
                    "guards": item.get("guards"),
                    "trees": item.get("trees", []),
                    "result": members[0],
                }
                if _valid(head):
                    found = [_valid({"guards": [], "result": r}) for r in members]
        else:
            found = [_valid(item)]
        for result in found or [None]:
            # Without options a realize asks for bwrap: an entry built under a weaker sandbox
            # (or remembered before the level was) goes to the full pipeline, which rebuilds it.
            if result is None or result.get("sandbox") != FAST_SANDBOX:
                return None
            results.append(result)
    root = os.path.abspath(store)
    lock = _gc_lock_shared(store)
    if lock is None:
        return None
    rows = []
    for r in results:
        paths = _entry_wheels(root, r)
        if paths is None:
            os.close(lock)
            return None
        rows.append((str(r["name"]), str(r["version"]), str(r["hash"]), paths))
    for row in rows:
        touch_used(store, row[2])
    return MemoAnswer(lock, rows=rows)
