"""The binary-cache backend interface and the ``file://DIR`` backend.

A cache holds content-addressed blobs (``blobs/sha256/<hex>``) and one manifest per input hash
(``entries/<hash>.json``). A backend only moves bytes: it never judges them (``substitute`` does).
The interface is small so that ``oci://`` and ``s3://`` backends can follow: a cheap manifest
lookup, a blob existence check, a streaming blob reader, idempotent atomic uploads, and one
replace of a manifest (a push adding acceptance runs to an entry the cache has).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from rocmforge.cache.transfer import copy_file, write_all
from rocmforge.errors import RocmforgeError

BLOBS = "blobs"
ENTRIES = "entries"
MANIFEST_SUFFIX = ".json"


class CacheError(RocmforgeError):
    """A cache could not be read or written (exit 3: the cache or the network is at fault)."""

    exit_code = 3


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


def _check_digest(sha256: str) -> None:
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise CacheError(f"not a sha256 digest: {sha256!r}")


class FileCache:
    """A cache in a shared directory (NFS, Lustre, a mounted bucket): ``file://DIR``."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url

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
            raise CacheError(f"{self.url}: cannot write {final}: {exc}") from None

    def get_manifest(self, hash: str) -> bytes | None:
        """Return the manifest for ``hash`` or None."""
        try:
            return self._manifest_path(hash).read_bytes()
        except FileNotFoundError:
            return None
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
            raise CacheError(f"{self.url}: cannot write {final}: {exc}") from None

    def has_blob(self, sha256: str) -> bool:
        """Return whether blob ``sha256`` is present."""
        return self._blob_path(sha256).is_file()

    def put_blob(self, sha256: str, path: Path) -> bool:
        """Copy ``path`` into the cache as blob ``sha256`` unless present (in the kernel:
        ``copy_file_range``; the digest is the entry's, not recomputed)."""
        final = self._blob_path(sha256)
        if final.exists():
            return False
        return self._write(final, lambda fd: copy_file(str(path), fd))

    def open_blob(self, sha256: str) -> BinaryIO:
        """Open blob ``sha256``."""
        try:
            return open(self._blob_path(sha256), "rb")
        except OSError as exc:
            raise CacheError(f"{self.url}: cannot read blob {sha256}: {exc}") from None

    def manifests(self) -> Iterator[ManifestInfo]:
        """List the manifests in ``entries/``."""
        d = self.root / ENTRIES
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise CacheError(f"{self.url}: cannot list {d}: {exc}") from None
        for n in names:
            if n.endswith(MANIFEST_SUFFIX) and not n.startswith("."):
                try:
                    st = os.stat(d / n)
                except FileNotFoundError:
                    continue
                yield ManifestInfo(n[: -len(MANIFEST_SUFFIX)], st.st_size, st.st_mtime)

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


def now() -> float:
    """Return the wall-clock time recorded in an entry's origin."""
    return time.time()
