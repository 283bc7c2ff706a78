"""Validate a provenance statement the way an outside verifier would.

Three checks: the official in-toto attestation library parses the statement into its protobuf
types (unknown fields fail) and validates it and every resource descriptor; a JSON schema written
from the in-toto Statement v1 / SLSA Provenance v1 specs (``data/slsa-provenance-v1.schema.json``)
holds; and rocmforge's own promises: every digest set has sha256, and ``externalParameters`` holds
no absolute path inside the recipe's repository.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parent / "data" / "slsa-provenance-v1.schema.json"


@cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _descriptors(statement: dict[str, Any]) -> list[dict[str, Any]]:
    pred = statement["predicate"]
    return [
        *statement["subject"],
        *pred["buildDefinition"].get("resolvedDependencies", []),
        *pred["runDetails"].get("byproducts", []),
    ]


def validate_statement(statement: dict[str, Any]) -> None:
    """Raise (ValueError, ParseError, ValidationError, AssertionError) unless it passes."""
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    pb = json_format.ParseDict(statement, statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()
    pred = json_format.ParseDict(statement["predicate"], provenance_pb2.Provenance())
    for rd in [*pb.subject, *pred.build_definition.resolved_dependencies,
               *pred.run_details.byproducts]:
        ResourceDescriptor.copy_from_pb(rd).validate()
    _validator().validate(statement)
    for rd in _descriptors(statement):
        assert "uri" in rd or "digest" in rd or "content" in rd, rd
        if "digest" in rd and "gitCommit" not in rd["digest"]:
            assert "sha256" in rd["digest"], f"{rd.get('name')}: no sha256 in {rd['digest']}"
    bd = statement["predicate"]["buildDefinition"]
    repo = bd["internalParameters"]["localPaths"]["repository"]
    for text in _strings(bd["externalParameters"]):
        assert not (os.path.isabs(text) and (text + "/").startswith(repo.rstrip("/") + "/")), (
            f"absolute path inside the recipe's repository in externalParameters: {text}"
        )


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def validate_statements_under(root: Path) -> int:
    """Validate each ``entries/*/provenance.json`` of every store under ``root``; count them."""
    count = 0
    for pattern in ("entries/*/provenance.json", "*/entries/*/provenance.json",
                    "*/*/entries/*/provenance.json"):
        for path in root.glob(pattern):
            try:
                validate_statement(json.loads(path.read_text()))
            except Exception as exc:
                raise AssertionError(f"{path}: not valid SLSA provenance: {exc}") from exc
            count += 1
    return count
