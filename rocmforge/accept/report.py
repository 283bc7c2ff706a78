"""What an acceptance run found: each check's outcome and the run's verdict (plain data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"
NOT_RUN = "not run"


@dataclass(frozen=True, slots=True)
class Check:
    """One check's outcome: status (passed, failed, skipped, not run), seconds, figures, and a
    line saying what it found."""

    name: str
    status: str
    seconds: float = 0.0
    figures: Mapping[str, Any] = field(default_factory=dict)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """The check as JSON (``--json`` and the attestation)."""
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 3),
                "figures": dict(self.figures), "detail": self.detail}  # fmt: skip


@dataclass(frozen=True, slots=True)
class AcceptanceReport:
    """What one run of a tier found: its checks, the node's facts, the verdict."""

    tier: str
    python: str
    checks: tuple[Check, ...]
    node: Mapping[str, Any]
    started: str
    seconds: float
    sandbox: str

    @property
    def result(self) -> str:
        """PASSED, WARNED (something skipped) or FAILED, as the in-toto test-result predicate
        spells it."""
        if any(c.status in (FAILED, NOT_RUN) for c in self.checks) or not self.checks:
            return "FAILED"
        return "WARNED" if any(c.status == SKIPPED for c in self.checks) else "PASSED"

    @property
    def exit_code(self) -> int:
        """0 when every check passed or was skipped, else 1."""
        return 0 if self.result != "FAILED" else 1

    def to_json(self) -> dict[str, Any]:
        """The report as JSON."""
        return {"tier": self.tier, "python": self.python, "result": self.result,
                "started": self.started, "seconds": round(self.seconds, 3),
                "sandbox": self.sandbox, "node": dict(self.node),
                "checks": [c.to_json() for c in self.checks]}  # fmt: skip
