"""Cache URLs: which backend serves a URL (which caches a command asks: :mod:`rocmforge.config`)."""

from __future__ import annotations

from pathlib import Path

from rocmforge.cache.backend import Backend, FileCache
from rocmforge.errors import UsageError


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
