"""Cache URLs: which backend serves a URL, and which caches a realize asks."""

from __future__ import annotations

import os
from pathlib import Path

from rocmforge.cache.backend import Backend, FileCache
from rocmforge.errors import UsageError

#: Environment variable with cache URLs (space-separated), asked in order after ``--cache``.
CACHES_ENV = "ROCMFORGE_CACHES"


def open_backend(url: str) -> Backend:
    """Return the backend for a cache ``url``: ``file://DIR`` (a bare path too) or ``oci://``."""
    if url.startswith("oci://"):
        from rocmforge.cache.oci import open_oci

        return open_oci(url)
    if url.startswith("file://"):
        path = url[len("file://") :]
    elif "://" in url:
        scheme = url.split("://", 1)[0]
        raise UsageError(f"cache {url}: unsupported scheme {scheme!r} (supported: file://, oci://)")
    else:
        path = url
    if not path:
        raise UsageError(f"cache {url!r}: no directory")
    root = Path(path).expanduser().absolute()
    return FileCache(root, f"file://{root}")


def configured_caches(flags: list[str] | None) -> list[str]:
    """Return the cache URLs to ask, in order: ``--cache`` flags, then ``$ROCMFORGE_CACHES``."""
    urls = list(flags or [])
    urls += os.environ.get(CACHES_ENV, "").split()
    seen: list[str] = []
    for u in urls:
        if u not in seen:
            seen.append(u)
    return seen
