"""Sandboxed process runner: bubblewrap, unshare, or a clean environment only.

(Interface fixed; implementation in progress.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    """A host directory made visible in the sandbox at ``inside`` (bwrap relocates it there)."""

    host: Path
    inside: str
    writable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """How one sandboxed command ended."""

    returncode: int
    timed_out: bool
    seconds: float


class Runner(Protocol):
    """Runs a command isolated from the host; ``level`` is recorded in provenance."""

    level: str

    def sandbox_path(self, mount: Mount) -> str:
        """Return where ``mount`` is seen inside the sandbox (``inside`` or the host path)."""
        ...

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        mounts: Sequence[Mount],
        timeout: float | None,
        log: BinaryIO,
    ) -> RunResult:
        """Run ``argv`` with exactly ``env``, stdout+stderr appended to ``log``."""
        ...
