"""A build log read from a binary cache without substituting its entry (``log --cache``).

A colleague's build, or a cluster node's, is in the shared cache long before anyone substitutes
it: its ``build.log.zst`` is one blob of the entry's manifest. The blob is checked against the
manifest's sha256 and size while it is copied; the log is not covered by the entry's signature.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rocmforge.cache.backend import CacheError
from rocmforge.cache.manifest import ManifestProblem, parse_manifest
from rocmforge.cache.transfer import copy_hashing
from rocmforge.cache.urls import open_backend
from rocmforge.store import layout


def fetch_log(urls: Sequence[str], hash: str, dest: Path) -> str | None:
    """Copy the build log of input ``hash`` from the first cache in ``urls`` that has it into
    ``dest`` (zstd-compressed, as stored); return that cache's URL, or None if none has it.

    Raises :class:`CacheError` naming the cache when its manifest or blob is bad.
    """
    for url in urls:
        backend = open_backend(url)
        raw = backend.get_manifest(hash)
        if raw is None:
            continue
        try:
            manifest = parse_manifest(raw)
        except ManifestProblem as exc:
            raise CacheError(f"cache {url}: the manifest of {hash} is bad: {exc}") from None
        if manifest.hash != hash:
            raise CacheError(f"cache {url}: asked for {hash}, it answered with {manifest.hash}")
        ref = next((f for f in manifest.files if f.name == layout.BUILD_LOG), None)
        if ref is None:
            continue
        with backend.open_blob(ref.sha256) as src:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                copied = copy_hashing(src, fd, limit=ref.size, blake3=False)
            finally:
                os.close(fd)
        if copied.size != ref.size or copied.sha256 != ref.sha256:
            dest.unlink(missing_ok=True)
            raise CacheError(f"cache {url}: the build log of {hash} does not match its digest")
        return url
    return None
