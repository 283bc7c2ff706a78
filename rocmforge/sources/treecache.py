"""The stat cache of path-source tree hashes: its on-disk record, bucket files and signatures.

:mod:`rocmforge.sources.tree` hashes a tree; this module keeps what it found, so that a re-hash
reads again only what may have changed. The record under ``cache/trees`` keeps, per directory
of the tree, each file's ``(size, mtime_ns, ino, ctime_ns)`` with its digest, and that
directory's share of the hashed text already rendered; the directories are spread over bucket
files (``<id>.files/<k>``, about :data:`BUCKET_DIRS` directories each) and a small head
(``<id>.head``) holds the digest and, per directory, a blake3 signature of its stat facts
(:func:`dir_signature`). A re-hash reads and rewrites only the buckets of directories that
changed; of the others only the rendered text is read (``<k>``, not the records in ``<k>.r``).

What the hashed text is (how a directory's parts are rendered and how they make the digest) is
the hashing module's to say: :func:`commit` is handed both.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import blake3

from rocmforge.errors import SourceError
from rocmforge.store import layout
from rocmforge.util.fsutil import write_atomic
from rocmforge.util.hashing import blake3_hex

RECORD_VERSION = 4
# Directories per bucket file of the table, on average, and the most bucket files of one tree.
BUCKET_DIRS = 32
MAX_BUCKETS = 256

# rel -> (size, mtime_ns, ino, ctime_ns, kind, digest-or-link-target); size -1 marks "do not trust".
# Plain tuples (the table is marshal'd, and loads as tuples), read by these positions:
FileRec = tuple[int, int, int, int, str, str]
REC_SIZE: Final = 0
REC_MTIME: Final = 1
REC_INO: Final = 2
REC_CTIME: Final = 3
REC_KIND: Final = 4
REC_CONTENT: Final = 5
# A directory's share of the hashed text, in order: rendered lines (bytes) and child prefixes (str).
Parts = tuple[bytes | str, ...]
# What a scan found in one directory: prefix, stat signature (None: do not trust), its files'
# records by name, its subdirectory names (None in a listing: derived from the prefixes).
Dir = tuple[str, bytes | None, dict[str, FileRec], list[str] | None]
# How the hashing renders one directory's parts (prefix, its records, its child prefixes) and
# how it hashes the parts of every directory into the digest.
Render = Callable[[str, dict[str, FileRec], Iterable[str]], Parts]
DigestOf = Callable[[dict[str, Parts]], str]


def dir_signature(facts: list[tuple[str, int, int, int, int, int]], subs: list[str]) -> bytes:
    """Return the signature of one directory's stat facts and subdirectory names.

    marshal version 2 has neither references nor interning flags: equal facts, equal bytes in
    any process.
    """
    return blake3.blake3(marshal.dumps((facts, subs), 2)).digest()[:16]


def record_stem(root: Path, cache: Path) -> Path:
    """Return the stem of the stat cache record of the tree at ``root`` (``.head``, ``.files``)."""
    return cache / layout.SOURCES_TREES / blake3_hex(os.fsencode(os.path.abspath(root)))[:24]


def record_paths(root: Path, cache: Path, *, own: bool = False) -> tuple[Path, Path]:
    """Return the record's small head and the directory of its table's bucket files.

    ``own``: the record of the tree listed by its own ignore rules (inside an enclosing git work
    tree), kept apart from the record of the same tree listed as git lists it.
    """
    stem = record_stem(root, cache)
    head = stem.with_suffix(layout.TREE_HEAD_SUFFIX)
    files = stem.with_suffix(layout.TREE_FILES_SUFFIX)
    if own:
        head, files = (p.with_name(p.name + "-own") for p in (head, files))
    return head, files


def _load(path: Path) -> Any:
    """Return the marshal'd value in ``path``, or None if it cannot be read."""
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def load_head(path: Path, root: Path, mode: str) -> dict[str, Any]:
    """Return the head recorded at ``path`` for ``root`` listed in ``mode`` ({} if none fits)."""
    data = _load(path)
    if (
        not isinstance(data, dict)
        or data.get("v") != RECORD_VERSION
        or data.get("root") != os.fspath(root)
        or data.get("mode") != mode
    ):
        return {}
    return data


def _write_atomic(path: Path, payload: bytes) -> None:
    """Write one file of the record atomically; a failure is a :class:`SourceError`."""
    try:
        write_atomic(path, payload)
    except OSError as exc:
        raise SourceError(f"cannot write stat cache {path}: {exc}") from exc


def _parent(prefix: str) -> str:
    """Return the prefix of the directory above directory ``prefix`` (``"a/b/"`` -> ``"a/"``)."""
    return prefix[: prefix.rfind("/", 0, len(prefix) - 1) + 1]


def bucket_of(prefix: str, buckets: int) -> int:
    """Return the bucket, of ``buckets``, that holds directory ``prefix``."""
    return zlib.crc32(os.fsencode(prefix)) % buckets


class Table:
    """The recorded table of one tree, split by directory into bucket files read on demand.

    The head holds, per directory prefix, the signature of its stat facts (plain trees). Each
    bucket ``k`` is two files: ``k`` holds its directories' rendered parts of the hashed text
    (all a digest needs) and ``k.r`` their marshal'd file records (read only for directories
    that changed); a file whose token is not the head's is not used.
    """

    def __init__(self, head: dict[str, Any], files_dir: Path) -> None:
        self.head = head
        self.files_dir = files_dir
        self.sigs: dict[str, bytes | None] = head.get("dirs", {}) if head else {}
        self.buckets: int = head.get("buckets", 1) if head else 1
        self.tokens: list[str] = head.get("tokens", []) if head else []
        self._loaded: dict[str, dict[str, Any] | None] = {}

    def _file(self, name: str, k: int) -> dict[str, Any] | None:
        if name not in self._loaded:
            data = _load(self.files_dir / name)
            ok = (
                isinstance(data, tuple)
                and len(data) == 2
                and k < len(self.tokens)
                and data[0] == self.tokens[k]
                and isinstance(data[1], dict)
            )
            self._loaded[name] = data[1] if ok else None
        return self._loaded[name]

    def bucket(self, k: int) -> dict[str, Parts] | None:
        """Return the parts of bucket ``k`` (prefix -> parts), or None if unusable."""
        return self._file(f"{k}", k)

    def rec_bucket(self, k: int) -> dict[str, bytes] | None:
        """Return the records of bucket ``k`` (prefix -> marshal'd records), or None."""
        return self._file(f"{k}.r", k)

    def entry(self, prefix: str) -> Parts | None:
        """Return the recorded parts of directory ``prefix``, or None."""
        if prefix not in self.sigs:
            return None
        b = self.bucket(bucket_of(prefix, self.buckets))
        return None if b is None else b.get(prefix)

    def recs(self, prefix: str) -> dict[str, FileRec]:
        """Return the recorded file records of directory ``prefix`` by name ({} if none)."""
        if prefix not in self.sigs:
            return {}
        b = self.rec_bucket(bucket_of(prefix, self.buckets))
        blob = None if b is None else b.get(prefix)
        if blob is None:
            return {}
        try:
            recs = marshal.loads(blob)
        except (ValueError, EOFError, TypeError):
            return {}
        return recs if isinstance(recs, dict) else {}


class Stale(Exception):
    """A bucket the head relies on is missing or damaged: scan again from scratch."""


def _link_ancestors(dirs: dict[str, list[Any]], table: Table, complete: bool) -> None:
    """Give a listed tree's directories their children: every ancestor of a listed file is a
    directory of the table. ``complete``: ``dirs`` holds every directory with files; else only
    the changed ones, and a new directory is linked into its recorded ancestors."""
    if complete:
        kids: dict[str, set[str]] = {"": set()}
        for p in list(dirs):
            q = p
            while q:
                up = _parent(q)
                known = kids.setdefault(up, set())
                if q in known:
                    break
                known.add(q)
                q = up
        for p in kids:
            dirs.setdefault(p, [None, {}, None])
        for p, d in dirs.items():
            d[2] = sorted(kids.get(p, ()))
        return
    for p in [p for p in dirs if p not in table.sigs]:
        q = p
        while q:
            up = _parent(q)
            if up not in dirs:
                dirs[up] = [None, table.recs(up) if up in table.sigs else {}, None]
            d = dirs[up]
            if d[2] is None:
                entry = table.entry(up)
                if up in table.sigs and entry is None:
                    raise Stale
                d[2] = [x for x in entry if isinstance(x, str)] if entry else []
            if q not in d[2]:
                d[2].append(q)
            if up in table.sigs:
                break
            q = up


def commit(
    root: Path,
    table: Table,
    head_path: Path,
    files_dir: Path,
    mode: str,
    found: list[Dir],
    big: dict[str, FileRec],
    seen: list[str] | None,
    complete: bool,
    git_state: dict[str, dict[str, Any]],
    need_files: bool,
    *,
    render: Render,
    digest_of: DigestOf,
) -> tuple[str, dict[str, FileRec]]:
    """Fold what a scan found into the recorded table, write the buckets that changed and the
    head, and return the digest (and, with ``need_files``, every file's record).

    ``render`` makes a changed directory's parts of the hashed text, ``digest_of`` the digest of
    every directory's parts (both the hashing module's). Raises :class:`Stale` when a bucket the
    head relies on is missing or damaged."""
    head = table.head
    dirs: dict[str, list[Any]] = {}  # prefix -> [sig, recs, child prefixes or None]
    for prefix, sig, recs, subs in found:
        if prefix in dirs:  # a directory split between two shares of a listing
            dirs[prefix][1].update(recs)
            continue
        children = None if subs is None else [prefix + s + "/" for s in subs]
        dirs[prefix] = [sig, recs, children]
    for rel, rec in big.items():
        i = rel.rfind("/") + 1
        d = dirs[rel[:i]]
        d[1][rel[i:]] = rec
        if rec[REC_SIZE] < 0:
            d[0] = None
    removed: set[str] = set()
    if seen is not None and not complete:  # plain tree: a directory not seen is gone
        now = set(seen)
        removed = {p for p in table.sigs if p not in now}
    if mode != "plain":  # listed trees: the directories are the listed files' ancestors
        _link_ancestors(dirs, table, complete)
    racy = sorted(
        prefix + name for prefix, d in dirs.items() for name, rec in d[1].items() if rec[0] < 0
    )
    if not complete:  # records not looked at again keep their mark
        racy = sorted(
            {*racy, *(r for r in head.get("racy", ()) if r[: r.rfind("/") + 1] not in dirs)}
        )
    if (
        not complete
        and not (dirs or removed or need_files)
        and head.get("git", {}) == git_state
        and head.get("racy", []) == racy
    ):
        return str(head["digest"]), {}
    sigs: dict[str, bytes | None] = {} if complete else dict(table.sigs)
    for p in removed:
        del sigs[p]
    for p, d in dirs.items():
        sigs[p] = d[0]
    contents: dict[int, dict[str, Parts]]  # per bucket, its directories' parts
    rec_contents: dict[int, dict[str, bytes]]  # per bucket rewritten, its records
    if complete:
        want = max(1, min(MAX_BUCKETS, len(sigs) // BUCKET_DIRS))
        same = bool(head) and want // 2 <= table.buckets <= want * 2
        buckets = table.buckets if same else want
        tokens = list(table.tokens) if same and len(table.tokens) == buckets else [""] * buckets
        contents = {k: {} for k in range(buckets)}
        rec_contents = {k: {} for k in range(buckets)}
        touched = set(range(buckets))
    else:
        buckets, tokens = table.buckets, list(table.tokens)
        if len(tokens) != buckets:
            raise Stale
        touched = {bucket_of(p, buckets) for p in (*dirs, *removed)}
        contents, rec_contents = {}, {}
        for k in range(buckets):
            b = table.bucket(k)
            r = table.rec_bucket(k) if k in touched or need_files else {}
            if b is None or r is None:
                raise Stale  # the head names its directories; the record is not whole
            contents[k] = dict(b) if k in touched else b
            if k in touched or need_files:
                rec_contents[k] = dict(r) if k in touched else r
        for p in removed:
            contents[bucket_of(p, buckets)].pop(p, None)
            rec_contents[bucket_of(p, buckets)].pop(p, None)
    for p, (_, recs, children) in dirs.items():
        k = bucket_of(p, buckets)
        if children is None:  # a changed listed directory keeps the children it had
            prev = contents[k].get(p)
            children = [x for x in prev if isinstance(x, str)] if prev else []
        contents[k][p] = render(p, recs, children)
        rec_contents[k][p] = marshal.dumps(recs)
    digest = digest_of({p: parts for b in contents.values() for p, parts in b.items()})
    if complete and head:  # a full listing: rewrite only the buckets that differ
        touched = {
            k
            for k in touched
            if not tokens[k]
            or table.bucket(k) != contents[k]
            or table.rec_bucket(k) != rec_contents[k]
        }
    if touched and not files_dir.is_dir():
        # the one-file table of an older record; another process scanning the same tree may
        # have made the directory since the check (realize -j of two recipes on one source)
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            files_dir.unlink()
    for k in sorted(touched):
        tokens[k] = blake3_hex(os.urandom(16))
        _write_atomic(files_dir / f"{k}.r", marshal.dumps((tokens[k], rec_contents[k])))
        _write_atomic(files_dir / f"{k}", marshal.dumps((tokens[k], contents[k])))
    new_head = {
        "v": RECORD_VERSION,
        "root": os.fspath(root),
        "mode": mode,
        "digest": digest,
        "git": git_state,
        "racy": racy,
        "dirs": sigs,
        "buckets": buckets,
        "tokens": tokens,
    }
    if new_head != head:
        _write_atomic(head_path, marshal.dumps(new_head))
    files: dict[str, FileRec] = {}
    if need_files:
        for rb in rec_contents.values():
            for p, blob in rb.items():
                recs = marshal.loads(blob)
                files.update({p + n: r for n, r in recs.items()} if p else recs)
    return digest, files


