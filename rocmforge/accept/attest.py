"""The proof of an acceptance run: an in-toto Statement with the test-result predicate.

Its subjects are the tested wheels (or, for an environment tested with ``--python``, the
RECORD files of its installed torch and triton), by sha256. The predicate
(``https://in-toto.io/attestation/test-result/v0.1``) holds the verdict, the passed, warned
and failed checks by name, and in ``configuration`` three kinds of resource descriptor, their
facts in ``annotations``: the run (tier, rocmforge version, when, how long, sandbox), the node
(GPU model and count, archs, driver and runtime versions), and one per check (status, seconds,
figures, detail).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rocmforge.accept.report import PASSED, SKIPPED, AcceptanceReport

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"


def subjects_of(files: Sequence[tuple[str, Path]]) -> list[dict[str, Any]]:
    """Resource descriptors ``{name, digest: {sha256}}`` of ``(name, file)`` pairs."""
    from rocmforge.util.hashing import file_sha256

    return [{"name": name, "digest": {"sha256": file_sha256(path)}} for name, path in files]


def statement(report: AcceptanceReport, subjects: list[dict[str, Any]]) -> dict[str, Any]:
    """The in-toto Statement of ``report`` about ``subjects``."""
    from rocmforge import __version__

    run = {"name": "rocmforge-acceptance", "annotations": {
        "tier": report.tier, "rocmforge": __version__, "started": report.started,
        "seconds": round(report.seconds, 3), "sandbox": report.sandbox, "python": report.python,
    }}  # fmt: skip
    node = {"name": "node", "annotations": dict(report.node)}
    checks = [{"name": f"check:{c.name}", "annotations": c.to_json()} for c in report.checks]
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "result": report.result,
            "configuration": [run, node, *checks],
            "passedTests": [c.name for c in report.checks if c.status == PASSED],
            "warnedTests": [c.name for c in report.checks if c.status == SKIPPED],
            "failedTests": [c.name for c in report.checks if c.status not in (PASSED, SKIPPED)],
        },
    }
