"""Lean measures of a store directory and the text ``rocmforge du`` prints.

The one implementation of ``du``'s sums and text, shared by the full command
(:mod:`rocmforge.cli.commands.du` through :mod:`rocmforge.store.usage`,
:mod:`rocmforge.store.failed` and :mod:`rocmforge.build.ccache`) and the read commands' readers
(:mod:`rocmforge.store.readers`), which must answer ``du`` before anything heavy loads. So this
module takes paths as strings, imports only ``os`` and the import-free
:mod:`rocmforge.store.layout` (:mod:`rocmforge.util.leanjson` inside the one function that reads
JSON), and raises plain :class:`OSError` / :class:`ValueError`: callers turn those into their own
errors.
"""

from __future__ import annotations

import os

from rocmforge.store import layout
from rocmforge.util.sizes import format_age, format_size, tree_size

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Protocol, TypeVar

    class SizedEntry(Protocol):
        """What :func:`summarize` reads of an entry (gc's ``EntryInfo`` has it)."""

        @property
        def hash(self) -> str: ...  # noqa: D102
        @property
        def name(self) -> str: ...  # noqa: D102
        @property
        def dirname(self) -> str: ...  # noqa: D102
        @property
        def size(self) -> int: ...  # noqa: D102
        @property
        def last_used(self) -> float: ...  # noqa: D102

    E = TypeVar("E", bound=SizedEntry)


#: A shared compiler cache directory for a cluster's builders (NFS, say); default
#: ``<store>/ccache``.
CCACHE_ENV_DIR = "ROCMFORGE_COMPILER_CACHE_DIR"
#: The maximum size of each compiler cache namespace (``CCACHE_MAXSIZE``).
CCACHE_ENV_SIZE = "ROCMFORGE_COMPILER_CACHE_SIZE"

#: The areas of the store measured by walking them (entries and sources are measured by gc).
AREAS = (
    layout.CACHE,
    layout.FAILED,
    layout.TMP,
    layout.TRASH,
    layout.USED,
    layout.ROOTS,
    layout.LOCKS,
)

#: What ``du`` and ``gc`` call each kind of source cache, by its directory under ``sources/``.
SOURCE_KINDS = {
    layout.SOURCES_GIT: "git mirror",
    layout.SOURCES_WHEELS: "requirement wheel",
    layout.SOURCES_TREES: "tree stat cache",
    layout.SOURCES_GIT_RESOLVED: "git resolve cache",
    layout.SOURCES_WHEELS_UNPACKED: "unpacked wheel",
    layout.SOURCES_ROCM_SDK: "unpacked ROCm SDK",
}


def source_kind(rel: str) -> str:
    """The kind of the source cache ``rel`` (relative to ``sources/``), e.g. ``git mirror``."""
    top = rel.split("/", 1)[0]
    return SOURCE_KINDS.get(top, top)


def scan_sources(root: str) -> list[tuple[str, int, str | None]]:
    """Return ``(path relative to sources/, bytes, commit)`` of every collectable source cache
    of the store at ``root``: git mirrors, requirement wheels, unpacked wheels and SDKs, tree
    stat caches (the ``.head`` and ``.files`` pair as one) and git resolve caches (with the
    commit they resolved to; an unreadable one is left out)."""
    from rocmforge.util.leanjson import loads

    src = os.path.join(root, layout.SOURCES)
    items: list[tuple[str, int, str | None]] = []

    def names(sub: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(os.path.join(src, sub)) if not n.startswith("."))
        except FileNotFoundError:
            return []

    def walked(sub: str, n: str) -> tuple[str, int, None]:
        return f"{sub}/{n}", tree_size(os.path.join(src, sub, n)), None

    git, wheels = layout.SOURCES_GIT, layout.SOURCES_WHEELS
    trees_dir, resolved = layout.SOURCES_TREES, layout.SOURCES_GIT_RESOLVED
    items.extend(walked(git, n) for n in names(git) if n.endswith(".git"))
    for n in names(wheels):
        if n.endswith((layout.WHEEL_SUFFIX, layout.SDIST_SUFFIX)):
            items.append((f"{wheels}/{n}", os.lstat(os.path.join(src, wheels, n)).st_size, None))
    unpacked = layout.SOURCES_WHEELS_UNPACKED
    items.extend(
        walked(unpacked, n)
        for n in names(unpacked)
        if n.rpartition(".")[0].endswith(layout.WHEEL_SUFFIX)
    )
    sdk = layout.SOURCES_ROCM_SDK
    items.extend(walked(sdk, n) for n in names(sdk) if layout.is_hex(n))
    trees: dict[str, int] = {}
    for n in names(trees_dir):
        stem, dot, ext = n.rpartition(".")
        if dot and "." + ext in (layout.TREE_HEAD_SUFFIX, layout.TREE_FILES_SUFFIX):
            trees[stem] = trees.get(stem, 0) + tree_size(os.path.join(src, trees_dir, n))
    items.extend((f"{trees_dir}/{s}", size, None) for s, size in sorted(trees.items()))
    for n in names(resolved):
        if n.endswith(".json"):
            try:
                with open(os.path.join(src, resolved, n), "rb") as f:
                    raw = f.read()
                data = loads(raw)
            except (OSError, ValueError):
                continue
            commit = data.get("commit") if isinstance(data, dict) else None
            if isinstance(commit, str):
                items.append((f"{resolved}/{n}", len(raw), commit))
    return items


def _mtime(path: str) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def scan_failed(root: str) -> list[tuple[str, str, tuple[str, ...], int, float]]:
    """Return ``(kind, name, paths, bytes, mtime)`` of the kept build directories (``kept
    build``; one still locked is a build in progress, not listed) and the failed logs with
    their diagnoses (``failed log``) of the store at ``root``, biggest first."""
    tmp, failed = os.path.join(root, layout.TMP), os.path.join(root, layout.FAILED)
    tmp_names = set(os.listdir(tmp)) if os.path.isdir(tmp) else set()
    failed_names = sorted(os.listdir(failed)) if os.path.isdir(failed) else []
    items: list[tuple[str, str, tuple[str, ...], int, float]] = []
    for n in sorted(tmp_names):
        if layout.parse_build_dir_name(n) and f"{n}{layout.LOCK_SUFFIX}" not in tmp_names:
            d = os.path.join(tmp, n)
            items.append(("kept build", n, (d,), tree_size(d), _mtime(d)))
    logs: dict[str, list[str]] = {}
    for n in failed_names:
        stem = n.removesuffix(layout.FAILED_LOG_SUFFIX).removesuffix(".json")
        if stem != n:
            logs.setdefault(stem, []).append(os.path.join(failed, n))
    for stem, paths in sorted(logs.items()):
        size = sum(tree_size(p) for p in paths)
        items.append(("failed log", stem, tuple(paths), size, max(_mtime(p) for p in paths)))
    return sorted(items, key=lambda i: (-i[3], i[1]))


def compiler_cache_root(store_root: str, env: Mapping[str, str]) -> str | None:
    """Return the compiler cache directory: ``$ROCMFORGE_COMPILER_CACHE_DIR`` or
    ``<store>/ccache``; None if that variable is set but not absolute (an error)."""
    shared = env.get(CCACHE_ENV_DIR, "").strip()
    if shared and not os.path.isabs(shared):
        return None
    return shared or os.path.join(store_root, layout.CCACHE)


def compiler_cache_usage(cache_root: str) -> tuple[int, int, int, int]:
    """Return ``(namespaces, files, cached results, bytes)`` of the compiler cache directory
    ``cache_root``: every namespace (one directory per toolchain) walked, allocated blocks."""
    files = size = spaces = entries = 0
    if os.path.isdir(cache_root):
        for n in os.listdir(cache_root):
            ns = os.path.join(cache_root, n)
            if not os.path.isdir(ns):
                continue
            spaces += 1
            for dirpath, _dirs, names in os.walk(ns):
                for name in names:
                    try:
                        st = os.lstat(os.path.join(dirpath, name))
                    except OSError:
                        continue
                    files += 1
                    entries += name.endswith(("R", "M")) and dirpath != ns
                    size += st.st_blocks * 512
    return spaces, files, entries, size


class EntryUsage:
    """What ``du`` shows of one entry (:func:`read_entries`; the full command reads gc's
    ``EntryInfo``, which has the same fields)."""

    __slots__ = ("dirname", "hash", "last_used", "name", "size")

    def __init__(self, hash: str, name: str, dirname: str, size: int, last_used: float) -> None:
        self.hash, self.name, self.dirname = hash, name, dirname
        self.size, self.last_used = size, last_used


def read_entries(
    root: str, indexed: Mapping[str, float], used: Mapping[str, float]
) -> list[EntryUsage]:
    """Return every entry of ``entries/`` of the store at ``root`` as gc counts it: its bytes
    (``meta.json``'s ``size`` plus ``meta.json`` itself) and its last use (the latest of its
    creation, the index's ``last_used`` in ``indexed`` and its ``used/`` mark in ``used``).
    Raise ValueError for a damaged entry (the full command leaves it out with a warning)."""
    from rocmforge.store.scan import entry_meta

    d = os.path.join(root, layout.ENTRIES)
    out: list[EntryUsage] = []
    for n in sorted(n for n in os.listdir(d) if layout.is_entry_name(n)):
        path = os.path.join(d, n)
        try:
            with open(os.path.join(path, layout.META), "rb") as f:
                raw = f.read()
        except OSError:
            if os.path.islink(path) or not os.path.isdir(path):
                continue  # not an entry (gc skips it too)
            raise ValueError(f"damaged entry {path}") from None
        fields = entry_meta(raw, n)[1]
        h = fields["hash"]
        last = max(float(fields["created"]), indexed.get(h, 0.0), used.get(h, 0.0))
        out.append(EntryUsage(h, fields["name"], n, fields["size"] + len(raw), last))
    return out


def summarize(
    root: str,
    entries: Iterable[E],
    sources: Iterable[tuple[str, int]],
    roots: Mapping[str, Sequence[str]],
) -> tuple[
    tuple[tuple[str, int], ...],
    tuple[tuple[str, int, int], ...],
    tuple[tuple[E, tuple[str, ...]], ...],
]:
    """Return ``du``'s sums for the store at ``root``, given its ``entries``, its ``sources``
    (``(path relative to sources/, bytes)``) and its roots (hash -> reasons): ``(areas,
    packages, entries)``. ``areas``: ``(area, bytes)`` of entries, sources by kind, the other
    areas and the index with its write-ahead log, biggest first, empty areas left out;
    ``packages``: ``(name, entries, bytes)``, biggest first; ``entries``: each with its root
    reasons, biggest first."""
    entries = list(entries)
    areas: dict[str, int] = {layout.ENTRIES: sum(e.size for e in entries)}
    for rel, size in sources:
        key = f"sources: {source_kind(rel)}s"
        areas[key] = areas.get(key, 0) + size
    for name in AREAS:
        areas[name] = tree_size(os.path.join(root, name))
    index = os.path.join(root, layout.INDEX)
    areas["index"] = sum(os.lstat(p).st_size for p in (index, f"{index}-wal") if os.path.lexists(p))
    pkgs: dict[str, list[int]] = {}
    for e in entries:
        c_s = pkgs.setdefault(e.name, [0, 0])
        c_s[0] += 1
        c_s[1] += e.size
    return (
        tuple(sorted(((a, s) for a, s in areas.items() if s), key=lambda x: -x[1])),
        tuple(sorted(((n, c, s) for n, (c, s) in pkgs.items()), key=lambda x: (-x[2], x[0]))),
        tuple(
            (e, tuple(roots.get(e.hash, ())))
            for e in sorted(entries, key=lambda e: (-e.size, e.dirname))
        ),
    )


def format_du(
    areas: Sequence[tuple[str, int]],
    packages: Sequence[tuple[str, int, int]],
    entries: Sequence[tuple[SizedEntry, Sequence[str]]],
    failed: Sequence[tuple[str, str, tuple[str, ...], int, float]],
    cache: tuple[str, tuple[int, int, int, int]],
    *,
    top: int,
    now: float,
) -> str:
    """Return the text of ``rocmforge du``: the total and each area, the compiler cache
    (``(directory, compiler_cache_usage)``), the packages, the ``top`` biggest entries and the
    failed builds' leftovers (:func:`scan_failed`), ages counted back from ``now``."""
    cache_root, (spaces, files, _, cache_bytes) = cache
    out = [f"total {format_size(sum(size for _, size in areas))}\n"]
    out.extend(f"  {format_size(size):>10}  {area}\n" for area, size in areas)
    out.append(
        f"compiler cache {format_size(cache_bytes)} ({files} files, {spaces} toolchains) at "
        f"{cache_root}\n"
    )
    if packages:
        out.append("packages:\n")
        out.extend(f"  {format_size(s):>10}  {n} ({c} entries)\n" for n, c, s in packages)
    if entries and top > 0:
        out.append(f"biggest entries (of {len(entries)}):\n")
        for e, roots in entries[:top]:
            rooted = f"  rooted: {'; '.join(roots)}" if roots else ""
            out.append(
                f"  {format_size(e.size):>10}  {e.dirname}  used {format_age(now - e.last_used)}"
                f" ago{rooted}\n"
            )
    if failed:
        total = sum(i[3] for i in failed)
        out.append(f"failed builds ({format_size(total)}; rocmforge gc --failed deletes them):\n")
        for kind, name, _, size, mtime in failed[: max(top, 1)]:
            out.append(
                f"  {format_size(size):>10}  {kind}: {name}  {format_age(now - mtime)} old\n"
            )
    return "".join(out)
