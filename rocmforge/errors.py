"""The exception hierarchy: one root, specific subclasses carrying context.

Every error a user can cause or meet derives from :class:`RocmforgeError`. The CLI maps the
``exit_code`` of each class to the process exit status; anything else is an internal error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocmforge.diagnose import Diagnosis

EXIT_BUILD_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_INTERNAL = 4


class RocmforgeError(Exception):
    """Root of every error rocmforge raises on purpose."""

    exit_code: int = EXIT_ENVIRONMENT


class UsageError(RocmforgeError):
    """The command line itself is wrong (unknown target, bad flag value)."""

    exit_code = EXIT_BAD_INPUT


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One problem in a recipe: which file, which key path, which line, and what is wrong."""

    file: Path
    key: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else str(self.file)
        key = f" {self.key}:" if self.key else ""
        return f"{where}:{key} {self.message}"


class RecipeError(RocmforgeError):
    """A recipe could not be loaded; carries every problem found, not just the first."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class SourceError(RocmforgeError):
    """A source could not be fetched, identified or materialised (bad commit, missing path)."""

    exit_code = EXIT_BAD_INPUT


class PatchError(SourceError):
    """A patch did not apply; names the patch file."""


class ToolchainError(RocmforgeError):
    """The toolchain named by a recipe is missing or does not match what was declared."""

    exit_code = EXIT_BAD_INPUT


class RequirementError(RocmforgeError):
    """A build requirement is unpinned or could not be fetched."""

    exit_code = EXIT_BAD_INPUT


class SandboxError(RocmforgeError):
    """The requested sandbox level is not available on this machine."""


class StoreError(RocmforgeError):
    """The store is damaged, locked in a way we cannot wait for, or an entry is missing."""


class DiskFullError(RocmforgeError):
    """A write failed for lack of space (ENOSPC, EDQUOT); names the path and what to free."""


class FetchError(SourceError):
    """A source could not be downloaded or cloned (unreachable host, missing repository)."""

    exit_code = EXIT_ENVIRONMENT


class BuildError(RocmforgeError):
    """The build ran and failed (non-zero exit, timeout, no wheel, check failed).

    ``diagnosis`` holds the known failures recognised in the log (cause and fix), if any.
    """

    exit_code = EXIT_BUILD_FAILED

    def __init__(
        self,
        message: str,
        *,
        log_tail: tuple[str, ...] = (),
        log_path: Path | None = None,
        kept_dir: Path | None = None,
    ) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.log_path = log_path
        self.kept_dir = kept_dir
        self.diagnosis: tuple[Diagnosis, ...] = ()


class BuildTimeout(BuildError):
    """The build exceeded ``[build].timeout``; its whole process tree was killed."""


class CheckError(BuildError):
    """The built wheel failed its check (install or import in a fresh venv, version mismatch)."""
