"""The exception hierarchy: one root, specific subclasses carrying context.

Every error a user can cause or meet derives from :class:`RocmforgeError`. The CLI maps the
``exit_code`` of each class to the process exit status; anything else is an internal error.
The values errors carry (:class:`Problem`, :class:`Diagnosis`) are defined here too, so this
module imports nothing else of rocmforge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

EXIT_BUILD_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_INTERNAL = 4


class RocmforgeError(Exception):
    """Root of every error rocmforge raises on purpose."""

    exit_code: int = EXIT_ENVIRONMENT
    #: The recipe the command was working on when this was raised, if the error does not name it
    #: itself: the CLI then names it (set by the command that ran the recipe).
    recipe_file: Path | None = None
    #: False for errors about configuration (a config or key file): the CLI never prefixes them
    #: with the recipe the command ran.
    about_recipe: bool = True


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
    """A recipe could not be loaded; carries every problem found, not just the first.

    ``note`` is an optional hint the CLI prints after the problems (how to fix or acknowledge).
    """

    exit_code = EXIT_BAD_INPUT
    note: str | None

    def __init__(
        self, problems: list[Problem] | tuple[Problem, ...], *, note: str | None = None
    ) -> None:
        self.problems = tuple(problems)
        self.note = note
        super().__init__("\n".join(str(p) for p in self.problems))


class SourceError(RocmforgeError):
    """A source could not be fetched, identified or materialised (bad commit, missing path)."""

    exit_code = EXIT_BAD_INPUT


class PatchError(SourceError):
    """A patch did not apply; names the patch file."""


class ToolchainError(RocmforgeError):
    """The toolchain named by a recipe is missing or does not match what was declared."""

    exit_code = EXIT_BAD_INPUT


class SystemDatabaseError(ToolchainError):
    """This machine has no package database the system manifest can read (exit 3: the
    machine, not the recipe; the message names what was looked for and the way out)."""

    exit_code = EXIT_ENVIRONMENT


class RequirementError(RocmforgeError):
    """A build requirement is unpinned or could not be fetched."""

    exit_code = EXIT_BAD_INPUT


class SandboxError(RocmforgeError):
    """The requested sandbox level is not available on this machine."""


class StoreError(RocmforgeError):
    """The store is damaged, locked in a way we cannot wait for, or an entry is missing."""


class NoStoreError(StoreError):
    """A command that only reads found no store where it looked (and created none)."""

    def __init__(self, root: Path, how: str) -> None:
        super().__init__(
            f"no rocmforge store at {root} ({how}); nothing was created. Pass --store DIR of "
            "an existing store, or build something there first (rocmforge realize creates it)"
        )
        self.root = root


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """A recognised failure: which pattern, its cause and fix, and the log line that showed it."""

    id: str
    cause: str
    fix: str
    evidence: str
    line: int | None

    def to_json(self) -> dict[str, Any]:
        """Return the diagnosis as JSON-ready data."""
        return {
            "id": self.id,
            "cause": self.cause,
            "fix": self.fix,
            "evidence": self.evidence,
            "line": self.line,
        }


class DiskFullError(RocmforgeError):
    """A write failed for lack of space (ENOSPC, EDQUOT); names the path and what to free."""


class FetchError(SourceError):
    """A source could not be downloaded or cloned (unreachable host, missing repository)."""

    exit_code = EXIT_ENVIRONMENT


class BuildError(RocmforgeError):
    """The build ran and failed (non-zero exit, timeout, no wheel, check failed).

    Where the build stage raises it, it has no log yet; the stage then raises it again through
    :meth:`with_log`, built whole with the last lines of the log (``log_tail``), the stored log
    (``log_path``), the kept build directory (``kept_dir``) and ``diagnosis``: the known failures
    recognised in the log (cause and fix), if any.
    """

    exit_code = EXIT_BUILD_FAILED

    def __init__(
        self,
        message: str,
        *,
        log_tail: Sequence[str] = (),
        log_path: Path | None = None,
        kept_dir: Path | None = None,
        diagnosis: Sequence[Diagnosis] = (),
    ) -> None:
        super().__init__(message)
        self.log_tail: tuple[str, ...] = tuple(log_tail)
        self.log_path = log_path
        self.kept_dir = kept_dir
        self.diagnosis: tuple[Diagnosis, ...] = tuple(diagnosis)

    def with_log(
        self,
        *,
        log_tail: Sequence[str],
        log_path: Path | None,
        kept_dir: Path | None,
        diagnosis: Sequence[Diagnosis],
    ) -> Self:
        """Return a new error of the same class and message, with the failed build's log."""
        return type(self)(
            str(self),
            log_tail=log_tail,
            log_path=log_path,
            kept_dir=kept_dir,
            diagnosis=diagnosis,
        )


class BuildTimeout(BuildError):
    """The build exceeded ``[build].timeout``; its whole process tree was killed."""


class BuildStalled(BuildTimeout):
    """A build step finished no edge for ``--stall-timeout``; its process tree was killed and
    the message names what was still running."""


class CheckError(BuildError):
    """The built wheel failed its check (install or import in a fresh venv, version mismatch)."""


class NoGpuError(RocmforgeError):
    """A GPU test found no GPU it could use (no device node, none visible)."""

    exit_code = EXIT_ENVIRONMENT
