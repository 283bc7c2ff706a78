"""Patches: their identity (file name, blake3 of the bytes) and applying them with ``git apply``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from rocmforge.errors import PatchError, SourceError
from rocmforge.sources.git import git_env
from rocmforge.util.fsutil import read_bounded
from rocmforge.util.hashing import blake3_hex

MAX_PATCH_BYTES = 256 << 20
"""The largest patch file read (256 MiB): bounds a patch that names ``/dev/zero``."""


def patch_digests(patches: Sequence[Path]) -> tuple[tuple[str, str], ...]:
    """Return ``(file name, blake3 hex)`` of each patch, in application order."""
    out: list[tuple[str, str]] = []
    for patch in patches:
        try:
            data = read_bounded(Path(patch), MAX_PATCH_BYTES, what="a patch")
        except OSError as exc:
            raise SourceError(f"patch {patch}: cannot read: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise SourceError(f"patch {patch}: {exc}") from exc
        out.append((Path(patch).name, blake3_hex(data)))
    return tuple(out)


def apply_patches(patches: Sequence[Path], dest: Path) -> None:
    """Apply each patch in order to the tree at ``dest`` (``-p1``); the first failure raises."""
    for patch in patches:
        # The ceiling keeps git from treating an enclosing repository as the one to patch.
        env = git_env({"GIT_CEILING_DIRECTORIES": os.fspath(Path(dest).resolve().parent)})
        try:
            proc = subprocess.run(
                ["git", "apply", "-p1", "--whitespace=nowarn", os.fspath(Path(patch).resolve())],
                cwd=dest,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
            )
        except OSError as exc:
            raise PatchError(f"patch {patch}: cannot run git apply: {exc}") from exc
        if proc.returncode != 0:
            lines = [ln.strip() for ln in proc.stderr.decode(errors="replace").splitlines()]
            first = next((ln for ln in lines if ln), f"exit status {proc.returncode}")
            raise PatchError(f"patch {patch} does not apply: {first}")
