"""The reporting protocol the core uses to tell the CLI about long work. Only the CLI prints."""

from __future__ import annotations

from typing import Protocol


class Reporter(Protocol):
    """Receives progress from long-running core functions."""

    def phase(self, name: str) -> None:
        """A new phase started (``fetch``, ``build``, ``check``, ``publish`` ...)."""
        ...

    def log_line(self, line: str) -> None:
        """One line of build output."""
        ...

    def warning(self, message: str) -> None:
        """Something the user should know that does not stop the work."""
        ...


class NullReporter:
    """A reporter that drops everything (library use, tests)."""

    def phase(self, name: str) -> None:
        """Ignore the phase."""

    def log_line(self, line: str) -> None:
        """Ignore the line."""

    def warning(self, message: str) -> None:
        """Ignore the warning."""
