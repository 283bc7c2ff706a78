"""Provenance: an in-toto Statement v1 with a SLSA Provenance v1 predicate for each store entry.

The statement is written as ``provenance.json`` into the staged entry before it is published, so
it is fsynced, sealed read-only and renamed into ``entries/`` together with the wheels. Its subjects
are the (stamped, normalized) wheels with their sha256 and blake3 digests.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge import __version__
from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.entry import DerivationDoc, WheelRecord
from rocmforge.util.fsutil import json_bytes, read_json_object, write_atomic
from rocmforge.util.hashing import blake3_hex, canonical_json

if TYPE_CHECKING:
    from rocmforge.resolve import Resolved

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://rocmforge.dev/build/v1"
BUILDER_ID = "https://rocmforge.dev/builder/v1"


def rfc3339(ts: float) -> str:
    """Return ``ts`` (seconds since the epoch) as an RFC 3339 UTC time with a ``Z`` suffix."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _url(git: str) -> str:
    """Return a git location as a URI: local paths become ``file://`` URIs."""
    if "://" in git or "@" in git.split("/", 1)[0]:
        return git
    return Path(git).as_uri() if os.path.isabs(git) else git


def _source_dependencies(resolved: Resolved) -> list[dict[str, Any]]:
    spec, ident = resolved.recipe.source, resolved.source
    deps: list[dict[str, Any]] = []
    if ident.kind == "git":
        deps.append(
            {
                "name": "source",
                "uri": f"git+{_url(spec.git or '')}@{ident.commit}",
                "digest": {"gitCommit": ident.commit},
                "annotations": {"submodules": {p: c for p, c in ident.submodules}},
            }
        )
        for sub_path, commit in ident.submodules:
            deps.append(
                {"name": f"source.submodules/{sub_path}", "digest": {"gitCommit": commit}}
            )
    else:
        tree = (ident.tree or "").removeprefix("blake3:")
        dep: dict[str, Any] = {"name": "source", "digest": {"blake3": tree}}
        if spec.path is not None:
            dep["uri"] = Path(spec.path).as_uri()
        deps.append(dep)
    for name, digest in ident.patches:
        deps.append({"name": f"source.patches/{name}", "digest": {"blake3": digest}})
    return deps


def make_statement(
    resolved: Resolved,
    *,
    wheels: Sequence[WheelRecord],
    sandbox: str,
    started: float,
    finished: float,
    host: str | None = None,
) -> dict[str, Any]:
    """Return the in-toto statement for a build of ``resolved`` that produced ``wheels``.

    ``wheels`` are the records (file, sha256, blake3) of the staged wheels.
    """
    recipe, drv = resolved.recipe, resolved.derivation
    host = host or socket.gethostname()
    fingerprint = dict(resolved.toolchain.fingerprint)
    deps = _source_dependencies(resolved)
    deps.append(
        {
            "name": "toolchain",
            "digest": {"blake3": blake3_hex(canonical_json(fingerprint))},
            "annotations": fingerprint,
        }
    )
    for req in resolved.requirements:
        deps.append(
            {
                "name": f"requirements/{req.name}",
                "uri": f"pkg:pypi/{req.name}@{req.version}",
                "digest": {"sha256": req.sha256, "blake3": req.blake3},
                "annotations": {"wheel": req.wheel.name},
            }
        )
    deps.extend(dependency_records(resolved))
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": w.file, "digest": {"sha256": w.sha256, "blake3": w.blake3}}
            for w in wheels
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "recipe": dict(recipe.resolved),
                    "recipeFile": str(recipe.file),
                    "extends": [str(p) for p in recipe.extends_chain],
                },
                "internalParameters": {
                    "inputHash": drv.hash,
                    "builder": DerivationDoc(drv.data).builder,
                    "sandbox": sandbox,
                    "host": host,
                    "buildSeconds": round(finished - started, 3),
                    "passthrough": list(recipe.build.passthrough),
                },
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"rocmforge": __version__}},
                "metadata": {
                    "invocationId": f"{drv.hash}@{host}:{started:.6f}",
                    "startedOn": rfc3339(started),
                    "finishedOn": rfc3339(finished),
                },
                "byproducts": [{"name": layout.BUILD_LOG}],
            },
        },
    }


def dependency_records(resolved: Resolved) -> list[dict[str, Any]]:
    """One ``resolvedDependencies`` record per wheel of each entry this build was built against.

    Named ``recipes/<name>``, with the dependency's input hash and version, and the digest of
    the wheel that was installed into the build venv.
    """
    out: list[dict[str, Any]] = []
    for dep in resolved.dependencies:
        for wheel in dep.wheels:
            with open(wheel, "rb") as f:
                sha = hashlib.file_digest(f, "sha256").hexdigest()
            out.append(
                {
                    "name": f"recipes/{dep.name}",
                    "uri": f"rocmforge:{dep.hash}",
                    "digest": {"sha256": sha},
                    "annotations": {
                        "version": dep.version,
                        "inputHash": dep.hash,
                        "wheel": wheel.name,
                    },
                }
            )
    return out


def write_statement(path: Path, statement: Mapping[str, Any]) -> None:
    """Write ``statement`` as JSON to ``path`` atomically (temp file, fsync, rename)."""
    try:
        write_atomic(path, json_bytes(statement))
    except OSError as exc:
        raise StoreError(f"cannot write provenance {path}: {exc}") from exc


def read_statement(path: Path) -> dict[str, Any] | None:
    """Return the statement stored at ``path``, or None if the entry has none (older builds)."""
    return read_json_object(path, what="provenance")


def run_facts(statement: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return ``{"host", "sandbox", "started", "finished", "seconds"}`` read from a statement."""
    if not statement:
        return {}
    pred = statement.get("predicate", {})
    meta = pred.get("runDetails", {}).get("metadata", {})
    run = pred.get("buildDefinition", {}).get("internalParameters", {})
    return {
        "host": run.get("host"),
        "sandbox": run.get("sandbox"),
        "started": meta.get("startedOn"),
        "finished": meta.get("finishedOn"),
        "seconds": run.get("buildSeconds"),
    }
