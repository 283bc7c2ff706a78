"""A sha256 digest of a path source's tree, for provenance a standard verifier can check.

The store identifies a path source by the blake3 tree hash of :mod:`rocmforge.sources.tree`;
blake3 is not one of in-toto's predefined digest algorithms, so provenance adds a sha256 over the
same listing: for every listed file in POSIX byte order of its relative path, ``rel NUL kind NUL
sha256 NUL`` (``kind`` ``f``/``x``/``l``; for a symlink the sha256 of its target), the whole
prefixed with :data:`TREE_SHA256_TAG`. It reads every file once, so only a build computes it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rocmforge.errors import SourceError
from rocmforge.sources.tree import tree_listing
from rocmforge.sources.treecache import REC_CONTENT, REC_KIND

TREE_SHA256_TAG = b"rocmforge-tree-sha256-v1\0"
_CHUNK = 1 << 20


def _file_sha256(path: str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def tree_sha256(root: Path, *, cache: Path) -> str:
    """Return the sha256 hex of the tree at ``root`` (the file set the blake3 tree hash covers)."""
    files = tree_listing(root, cache=cache)
    base = os.path.abspath(root)
    out = hashlib.sha256(TREE_SHA256_TAG)
    try:
        for rel in sorted(files, key=os.fsencode):
            rec = files[rel]
            kind = rec[REC_KIND]
            if kind == "l":
                digest = hashlib.sha256(os.fsencode(rec[REC_CONTENT])).hexdigest()
            else:
                digest = _file_sha256(os.path.join(base, rel))
            out.update(os.fsencode(f"{rel}\0{kind}\0{digest}\0"))
    except OSError as exc:
        raise SourceError(f"cannot hash path source {root}: {exc}") from exc
    return out.hexdigest()
