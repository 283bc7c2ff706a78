"""The binary-cache backend interface and the ``file://DIR`` backend.

A cache holds content-addressed blobs (``blobs/sha256/<hex>``) and one manifest per input hash
(``entries/<hash>.json``). A backend only moves bytes: it never judges them (``substitute`` does).
The interface is small so that ``oci://`` and ``s3://`` backends can follow: a cheap manifest
lookup, a blob existence check, a streaming blob reader, idempotent atomic uploads, and one
replace of a manifest (a push adding acceptance runs to an entry the cache has).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar, cast

from rocmforge.cache.transfer import copy_file, write_all
from rocmforge.errors import DiskFullError, RocmforgeError
from rocmforge.util import deadline
from rocmforge.util.fsutil import open_regular, read_bounded

T = TypeVar("T")

BLOBS = "blobs"
ENTRIES = "entries"
MANIFEST_SUFFIX = ".json"
#: How old a ``.tmp-*`` file in a ``file://`` cache must be before a push or ``cache gc``
#: takes it for the leftover of an interrupted push (one being written has a fresh mtime).
TMP_GRACE = 3600.0
#: The largest manifest a ``file://`` cache is read for (one lists a few dozen files).
MAX_MANIFEST = 64 << 20
#: Seconds a cache may take to answer one read (a ``file://`` open, stat, listing or read of
#: at most 1 MiB; an ``oci://`` connect, send or receive) before the command gives up on it,
#: naming the cache; ``$ROCMFORGE_CACHE_TIMEOUT`` overrides it.
DEFAULT_TIMEOUT = 30.0
TIMEOUT_ENV = "ROCMFORGE_CACHE_TIMEOUT"


def cache_timeout() -> float:
    """The per-read deadline of a cache: ``$ROCMFORGE_CACHE_TIMEOUT`` seconds, else
    :data:`DEFAULT_TIMEOUT`; a value that is not a positive number is a usage error."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        from rocmforge.errors import UsageError

        raise UsageError(f"${TIMEOUT_ENV}: expected seconds (a positive number), not {raw!r}")
    return value


class CacheError(RocmforgeError):
    """A cache could not be read or written (exit 3: the cache or the network is at fault)."""

    exit_code = 3


class CacheFullError(CacheError, DiskFullError):
    """The cache's disk is full (or over quota) while a push writes to it: the cache is named,
    never the store (exit 3)."""

    exit_code = 3


def cache_full_error(url: str, root: Path, path: Path, exc: OSError) -> CacheFullError:
    """The :class:`CacheFullError` for ``exc`` writing ``path`` into the cache ``url`` at
    ``root``: the free space there and what frees it (the cache's gc, not the store's)."""
    try:
        st = os.statvfs(root)
        free = f"; {st.f_bavail * st.f_frsize / 2**20:.1f} MiB free there"
    except OSError:
        free = ""
    return CacheFullError(
        f"the cache {url} is full: {exc.strerror or 'no space left on device'} writing {path}"
        f"{free} (the store is not what is full); free space in the cache with "
        f"`rocmforge cache gc {url} --keep-last N` (or --older-than), or push to a larger one"
    )




@dataclass(frozen=True, slots=True)
class ManifestInfo:
    """One manifest a cache holds: its input hash, size and when it was written."""

    hash: str
    size: int
    mtime: float


class Backend(Protocol):
    """What a binary cache must do; every method raises :class:`CacheError` on failure."""

    url: str

    def get_manifest(self, hash: str) -> bytes | None:
        """Return the manifest for input ``hash`` (one cheap request), or None when absent."""
        ...

    def put_manifest(self, hash: str, data: bytes) -> bool:
        """Store the manifest for ``hash`` atomically unless present; return True if written."""
        ...

    def replace_manifest(self, hash: str, data: bytes) -> None:
        """Store the manifest for ``hash`` atomically, replacing one present: how a push adds
        acceptance runs to a cached entry, merges its signatures into the entry's envelope, or
        replaces an unsigned copy with a signed one. The caller keeps the other files of the
        manifest present (the first manifest wins for them)."""
        ...

    def has_blob(self, sha256: str) -> bool:
        """Return whether the blob with this digest is present."""
        ...

    def put_blob(self, sha256: str, path: Path) -> bool:
        """Upload the file ``path`` as blob ``sha256`` atomically unless present."""
        ...

    def open_blob(self, sha256: str) -> BinaryIO:
        """Open blob ``sha256`` for streaming (the caller checks its digest while reading)."""
        ...

    def manifests(self) -> Iterator[ManifestInfo]:
        """List the manifests the cache holds."""
        ...

    def delete_manifest(self, hash: str) -> None:
        """Remove the manifest of ``hash`` (its blobs stay until :meth:`prune_blobs`)."""
        ...

    def prune_blobs(self, referenced: set[str], *, grace: float, dry_run: bool) -> tuple[int, int]:
        """Delete blobs no manifest references and older than ``grace`` seconds.

        Return (count, bytes). A backend whose store collects its own garbage returns (0, 0).
        """
        ...

    def clean_interrupted(self, *, grace: float = TMP_GRACE) -> int:
        """Remove what interrupted pushes left (temp files older than ``grace`` seconds);
        return how many. A backend whose uploads leave nothing behind returns 0."""
        ...


def _check_digest(sha256: str) -> None:
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise CacheError(f"not a sha256 digest: {sha256!r}")


class FileCache:
    """A cache in a shared directory (NFS, Lustre, a mounted bucket): ``file://DIR``."""

    def __init__(self, root: Path, url: str, *, timeout: float | None = None) -> None:
        self.root = root
        self.url = url
        #: the deadline of each read (:func:`cache_timeout`): a hung mount is named, not waited on
        self.timeout = cache_timeout() if timeout is None else timeout

    def _stalled(self, what: str, path: Path) -> CacheError:
        return CacheError(
            f"{self.url}: no answer within {self.timeout:g} s {what} {path}: the cache's "
            "filesystem does not respond (a hung NFS or FUSE mount?); the read was abandoned "
            f"(${TIMEOUT_ENV}=SECONDS waits longer)"
        )

    def _read(self, fn: Callable[[], T], what: str, path: Path) -> T:
        """``fn()`` (a read of the cache's filesystem) within :attr:`timeout`."""
        try:
            return deadline.call(fn, self.timeout, what=what)
        except deadline.Stalled:
            raise self._stalled(what, path) from None

    def _manifest_path(self, hash: str) -> Path:
        if not hash or any(c not in "0123456789abcdef" for c in hash):
            raise CacheError(f"{self.url}: not an input hash: {hash!r}")
        return self.root / ENTRIES / f"{hash}{MANIFEST_SUFFIX}"

    def _blob_path(self, sha256: str) -> Path:
        _check_digest(sha256)
        return self.root / BLOBS / "sha256" / sha256

    def _write(self, final: Path, fill: Callable[[int], None]) -> bool:
        """Write ``final`` via a temp file (``fill`` writes into its descriptor), fsync and a
        no-replace link; False if present."""
        if final.exists():
            return False
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".tmp-")
            try:
                try:
                    fill(fd)
                    os.fsync(fd)
                    os.fchmod(fd, 0o644)
                finally:
                    os.close(fd)
                try:
                    os.link(tmp, final)  # fails if another pusher won: never replaces
                except FileExistsError:
                    return False
                return True
            finally:
                os.unlink(tmp)
        except OSError as exc:
            raise self._write_error(final, exc) from None

    def _write_error(self, final: Path, exc: OSError) -> CacheError:
        """The error for ``exc`` writing ``final``: a full cache disk says so (naming the
        cache), anything else names the file."""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return cache_full_error(self.url, self.root, final, exc)
        return CacheError(f"{self.url}: cannot write {final}: {exc}")

    def clean_interrupted(self, *, grace: float = TMP_GRACE) -> int:
        """Remove the ``.tmp-*`` files of interrupted pushes (kill -9 between the temp file
        and its link) older than ``grace`` seconds from ``entries/`` and ``blobs/sha256/``;
        return how many. A file that vanishes meanwhile (another cleaner) is skipped."""
        removed = 0
        limit = time.time() - grace
        for d in (self.root / ENTRIES, self.root / BLOBS / "sha256"):
            try:
                names = [n for n in os.listdir(d) if n.startswith(".tmp-")]
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise CacheError(f"{self.url}: cannot list {d}: {exc}") from None
            for n in names:
                try:
                    if os.lstat(d / n).st_mtime > limit:
                        continue
                    os.unlink(d / n)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise CacheError(f"{self.url}: cannot remove {d / n}: {exc}") from None
                removed += 1
        return removed

    def get_manifest(self, hash: str) -> bytes | None:
        """Return the manifest for ``hash`` or None."""
        path = self._manifest_path(hash)
        try:
            return self._read(
                lambda: read_bounded(path, MAX_MANIFEST, what="a manifest"), "reading", path
            )
        except FileNotFoundError:
            return None
        except ValueError as exc:  # a FIFO or a device in its place: never opened blocking
            raise CacheError(f"{self.url}: the manifest of {hash} is {exc}") from None
        except OSError as exc:
            raise CacheError(f"{self.url}: cannot read the manifest of {hash}: {exc}") from None

    def put_manifest(self, hash: str, data: bytes) -> bool:
        """Write the manifest for ``hash`` unless present."""
        return self._write(self._manifest_path(hash), lambda fd: write_all(fd, data))

    def replace_manifest(self, hash: str, data: bytes) -> None:
        """Write the manifest for ``hash`` via a temp file and a rename over the present one
        (a reader sees the old manifest or the new, never a part)."""
        final = self._manifest_path(hash)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".tmp-")
            try:
                try:
                    write_all(fd, data)
                    os.fsync(fd)
                    os.fchmod(fd, 0o644)
                finally:
                    os.close(fd)
                os.replace(tmp, final)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            raise self._write_error(final, exc) from None

    def has_blob(self, sha256: str) -> bool:
        """Return whether blob ``sha256`` is present."""
        path = self._blob_path(sha256)
        return self._read(path.is_file, "looking up", path)

    def put_blob(self, sha256: str, path: Path) -> bool:
        """Copy ``path`` into the cache as blob ``sha256`` unless present (in the kernel:
        ``copy_file_range``; the digest is the entry's, not recomputed)."""
        final = self._blob_path(sha256)
        if final.exists():
            return False
        return self._write(final, lambda fd: copy_file(str(path), fd))

    def open_blob(self, sha256: str) -> BinaryIO:
        """Open blob ``sha256``."""
        path = self._blob_path(sha256)
        try:
            f = self._read(lambda: open_regular(path), "opening", path)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise CacheError(f"{self.url}: cannot read blob {sha256}: {why}") from None
        return cast(BinaryIO, _CacheReader(f, self, path))

    def manifests(self) -> Iterator[ManifestInfo]:
        """List the manifests in ``entries/``."""
        d = self.root / ENTRIES

        def listing() -> list[ManifestInfo]:
            out = []
            for n in sorted(os.listdir(d)):
                if n.endswith(MANIFEST_SUFFIX) and not n.startswith("."):
                    try:
                        st = os.stat(d / n)
                    except FileNotFoundError:
                        continue
                    out.append(ManifestInfo(n[: -len(MANIFEST_SUFFIX)], st.st_size, st.st_mtime))
            return out

        try:
            infos = self._read(listing, "listing", d)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise CacheError(f"{self.url}: cannot list {d}: {exc}") from None
        yield from infos

    def delete_manifest(self, hash: str) -> None:
        """Unlink ``entries/<hash>.json``."""
        try:
            os.unlink(self._manifest_path(hash))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise CacheError(f"{self.url}: cannot delete the manifest of {hash}: {exc}") from None

    def prune_blobs(self, referenced: set[str], *, grace: float, dry_run: bool) -> tuple[int, int]:
        """Unlink unreferenced blobs older than ``grace`` seconds (a push in flight writes its
        blobs before its manifest: the grace keeps them)."""
        d = self.root / BLOBS / "sha256"
        count = size = 0
        limit = time.time() - grace
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            return 0, 0
        except OSError as exc:
            raise CacheError(f"{self.url}: cannot list {d}: {exc}") from None
        for n in names:
            if n in referenced or n.startswith("."):
                continue
            try:
                st = os.stat(d / n)
                if st.st_mtime > limit:
                    continue
                if not dry_run:
                    os.unlink(d / n)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise CacheError(f"{self.url}: cannot delete blob {n}: {exc}") from None
            count += 1
            size += st.st_size
        return count, size


class _CacheReader(deadline.DeadlineReader):
    """A blob of a ``file://`` cache: each read within the cache's timeout, else a
    :class:`CacheError` naming the cache and the blob."""

    def __init__(self, raw: BinaryIO, cache: FileCache, path: Path) -> None:
        super().__init__(raw, cache.timeout, what=f"reading {path}")
        self._cache = cache
        self._path = path

    def readinto(self, buf: Any) -> int:
        """Read into ``buf``; :class:`CacheError` when the filesystem does not answer."""
        try:
            return super().readinto(buf)
        except deadline.Stalled:
            raise self._cache._stalled("reading", self._path) from None


def now() -> float:
    """Return the wall-clock time recorded in an entry's origin."""
    return time.time()
