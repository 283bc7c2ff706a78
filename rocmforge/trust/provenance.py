"""Provenance: an in-toto Statement v1 with a SLSA Provenance v1 predicate for each store entry.

The statement is written as ``provenance.json`` into the staged entry before it is published, so
it is fsynced, sealed read-only and renamed into ``entries/`` together with the wheels. Its subjects
are the (stamped, normalized) wheels with their sha256 and blake3 digests.

It is meant to pass a standard verifier: every resource descriptor has a digest or a URI, every
digest set holds sha256 (blake3, the store's own hash, sits beside it), byproducts carry their
digests, and ``externalParameters`` holds no absolute local path: paths inside the recipe's
repository (the nearest directory above the recipe holding ``.git``, else the recipe's directory)
are made relative to it, and the absolute forms are kept in ``internalParameters.localPaths``.
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
from rocmforge.store.coverage import ENTRY_FILES, entry_files
from rocmforge.store.entry import DerivationDoc, WheelRecord
from rocmforge.util.fsutil import json_bytes, read_json_object, write_atomic
from rocmforge.util.hashing import blake3_hex, canonical_json

if TYPE_CHECKING:
    from rocmforge.plan.resolve import Resolved
    from rocmforge.recipe.model import Recipe

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


def sha256_hex(data: bytes) -> str:
    """Return the hex sha256 of ``data`` (hashlib imported lazily: builds only)."""
    import hashlib

    return hashlib.sha256(data).hexdigest()


def recipe_repository(recipe_file: Path) -> Path:
    """Return the recipe's repository: the nearest directory above it holding ``.git``.

    A recipe outside any git work tree has its own directory as its repository.
    """
    start = Path(os.path.abspath(recipe_file)).parent
    for d in (start, *start.parents):
        if os.path.lexists(d / ".git"):
            return d
    return start


def _relative(value: Any, repo: Path, key: str, absolute: dict[str, str]) -> Any:
    """Return ``value`` with absolute paths under ``repo`` made relative, noted in ``absolute``."""
    if isinstance(value, dict):
        return {k: _relative(v, repo, f"{key}.{k}", absolute) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, repo, f"{key}[{i}]", absolute) for i, v in enumerate(value)]
    if isinstance(value, str) and os.path.isabs(value):
        try:
            rel = Path(value).relative_to(repo)
        except ValueError:
            return value
        absolute[key] = value
        return rel.as_posix() or "."
    return value


def external_parameters(recipe: Recipe) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return ``(externalParameters, localPaths)`` for ``recipe``.

    Paths under the recipe's repository become relative to it; ``localPaths`` holds the
    repository's absolute path and the absolute form of every path that was rewritten.
    """
    repo = recipe_repository(recipe.file)
    absolute: dict[str, str] = {}
    params = {
        "recipe": _relative(dict(recipe.resolved), repo, "recipe", absolute),
        "recipeFile": _relative(str(recipe.file), repo, "recipeFile", absolute),
        "extends": _relative([str(p) for p in recipe.extends_chain], repo, "extends", absolute),
    }
    return params, {"repository": str(repo), "paths": absolute}


def _file_digest(path: Path) -> dict[str, str]:
    from rocmforge.util.hashing import file_digests

    b3, sha = file_digests(path)
    return {"sha256": sha, "blake3": b3}


def _source_dependencies(resolved: Resolved, cache: Path | None) -> list[dict[str, Any]]:
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
            if cache is not None:
                from rocmforge.sources.treesha import tree_sha256

                dep["digest"] = {"sha256": tree_sha256(spec.path, cache=cache), "blake3": tree}
        deps.append(dep)
    patch_files = {p.name: p for p in spec.patches}
    for name, digest in ident.patches:
        dep = {"name": f"source.patches/{name}", "digest": {"blake3": digest}}
        patch = patch_files.get(name)
        if patch is not None and patch.is_file():
            dep["digest"] = {"sha256": sha256_hex(patch.read_bytes()), "blake3": digest}
        deps.append(dep)
    return deps


def _input_dependencies(resolved: Resolved, cache: Path | None) -> list[dict[str, Any]]:
    """One resolved dependency per ``[inputs.NAME]``: blake3 (as hashed) and sha256."""
    from rocmforge.sources.inputs import input_sha256

    deps = []
    for inp in resolved.inputs:
        digest = {"blake3": inp.digest.removeprefix("blake3:")}
        if inp.sha256 is not None or cache is not None:
            digest["sha256"] = input_sha256(inp, cache=cache or Path())
        spec = resolved.recipe.inputs.get(inp.name)
        dep: dict[str, Any] = {"name": f"inputs/{inp.name}", "digest": digest}
        if spec is not None and (spec.url or spec.path):
            dep["uri"] = spec.url or Path(spec.path or "").as_uri()
        dep["annotations"] = {"kind": inp.kind, "env": inp.env, "subdir": inp.subdir}
        if inp.crates:
            dep["annotations"]["crates"] = True
        deps.append(dep)
    return deps


def make_statement(
    resolved: Resolved,
    *,
    wheels: Sequence[WheelRecord],
    sandbox: str,
    started: float,
    finished: float,
    host: str | None = None,
    links: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    cache: Path | None = None,
    byproducts: Sequence[Path] = (),
    entry_dir: Path | None = None,
) -> dict[str, Any]:
    """Return the in-toto statement for a build of ``resolved`` that produced ``wheels``.

    ``wheels`` are the records (file, sha256, blake3) of the staged wheels; ``cache`` (the
    store's source cache) lets a path source get its sha256 tree digest and a tree input's
    sha256 be computed from its cached listing; ``byproducts`` are files of the entry (the build
    log) listed with their digests; ``links`` (wheel file -> the libraries its ELF files link and
    who provides them) becomes one ``links/<wheel>`` byproduct per wheel; ``entry_dir`` (the
    staged entry, all its files written) gives :data:`ENTRY_FILES`, the complete file list.
    """
    recipe, drv = resolved.recipe, resolved.derivation
    host = host or socket.gethostname()
    fingerprint = dict(resolved.toolchain.fingerprint)
    deps = _source_dependencies(resolved, cache)
    fp_bytes = canonical_json(fingerprint)
    deps.append(
        {
            "name": "toolchain",
            "digest": {"sha256": sha256_hex(fp_bytes), "blake3": blake3_hex(fp_bytes)},
            "annotations": fingerprint,
        }
    )
    for sdk in resolved.toolchain.sdk:  # a ROCm SDK made of wheels: each one, by digest
        deps.append(
            {
                "name": f"toolchain/rocm-sdk/{sdk.name}",
                "uri": f"pkg:pypi/{sdk.name}@{sdk.version}",
                "digest": {"sha256": sdk.sha256},
                "annotations": {"wheel": sdk.wheel.name},
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
    deps.extend(_input_dependencies(resolved, cache))
    deps.extend(dependency_records(resolved))
    external, local_paths = external_parameters(recipe)
    made = {p.name: _file_digest(p) for p in byproducts}
    internal: dict[str, Any] = {}
    if entry_dir is not None:
        known = {w.file: w.sha256 for w in wheels} | {n: d["sha256"] for n, d in made.items()}
        internal[ENTRY_FILES] = entry_files(entry_dir, known)
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
                "externalParameters": external,
                "internalParameters": {
                    "localPaths": local_paths,
                    "inputHash": drv.hash,
                    "builder": DerivationDoc(drv.data).builder,
                    "sandbox": sandbox,
                    "host": host,
                    "buildSeconds": round(finished - started, 3),
                    "passthrough": list(recipe.build.passthrough),
                    **internal,
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
                "byproducts": [
                    *({"name": n, "digest": d} for n, d in made.items()),
                    *(
                        {
                            "name": f"links/{wheel}",
                            # A descriptor needs a digest: that of the record it annotates.
                            "digest": {
                                "sha256": sha256_hex(canonical_json(list(found))),
                                "blake3": blake3_hex(canonical_json(list(found))),
                            },
                            "annotations": {"links": list(found)},
                        }
                        for wheel, found in sorted((links or {}).items())
                    ),
                ],
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


def write_statement(path: Path, statement: Mapping[str, Any], *, durable: bool = True) -> None:
    """Write ``statement`` as JSON to ``path`` atomically (temp file, fsync if ``durable``,
    rename)."""
    try:
        write_atomic(path, json_bytes(statement), durable=durable)
    except OSError as exc:
        raise StoreError(f"cannot write provenance {path}: {exc}") from exc


def read_statement(path: Path) -> dict[str, Any] | None:
    """Return the statement stored at ``path``, or None if the entry has none (older builds)."""
    return read_json_object(path, what="provenance")
