"""What ``audit`` prints, from plain values: the one renderer of its text, and its statuses.

The full command (:mod:`rocmforge.cli.commands.audit`) renders :meth:`AuditReport.to_json` dicts
with :func:`audit_text`; ``audit``'s import-light reader (:mod:`rocmforge.store.readers`) builds
the same dicts for verified wheels and calls the same function, so both print the same bytes.
:func:`audit_facts` is the one reading of a derivation and provenance statement into the report's
``facts``. Imports only :mod:`rocmforge.store.showtext` (and what it imports).
"""

from __future__ import annotations

from _collections_abc import Mapping

from rocmforge.store.showtext import describe_link, input_facts, run_facts, run_line

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

VERIFIED = "verified"
CLAIMED = "claimed"
TAMPERED = "tampered"
DIVERGED = "diverged"
UNKNOWN = "unknown"

#: Exit status of ``rocmforge audit`` per status; the worst wheel decides. Never 0 unless verified.
EXIT_CODES = {VERIFIED: 0, TAMPERED: 1, CLAIMED: 5, UNKNOWN: 6, DIVERGED: 7}
#: How bad a status is, for the worst of several wheels.
SEVERITY = {VERIFIED: 0, CLAIMED: 1, DIVERGED: 2, UNKNOWN: 3, TAMPERED: 4}

HEADLINE = {
    VERIFIED: "VERIFIED: byte-identical to a wheel rocmforge built in this store",
    CLAIMED: "CLAIMED (UNVERIFIED): not in this store; the facts below are the wheel's own claim",
    TAMPERED: "TAMPERED: the wheel, or the store entry it came from, was changed after it was "
    "made (see below)",
    DIVERGED: "DIVERGED: stamp and RECORD intact, but this store built the same input hash "
    "into other bytes",
    UNKNOWN: "UNKNOWN: no rocmforge stamp; nothing is known about how it was built",
}


def worst_status_code(statuses: Sequence[str]) -> int:
    """Return the exit status for several wheels: that of the least trustworthy one."""
    if not statuses:
        return 0
    return EXIT_CODES[max(statuses, key=SEVERITY.__getitem__)]


def banner(root: str, how: str, *, found: bool) -> str:
    """The line ``audit`` prints on stderr first: which store it checks against, and how it was
    chosen (``found`` False: there is no store there)."""
    return f"rocmforge: auditing against the store at {root} ({how})" + (
        "" if found else ": there is no store there, so nothing can be verified"
    )


def report_json(
    *,
    wheel: str,
    status: str,
    blake3: str,
    sha256: str,
    size: int,
    facts: Mapping[str, Any],
    problems: Sequence[str] = (),
    notes: Sequence[str] = (),
    input_hash: str | None = None,
    store_path: str | None = None,
    stamped_by: str | None = None,
    archs: Mapping[str, Any] | None = None,
    links: Sequence[Mapping[str, str]] = (),
    signature: Mapping[str, Any] | None = None,
    origin: Mapping[str, Any] | None = None,
    derivation: Mapping[str, Any] | None = None,
    built_against: Sequence[Mapping[str, Any]] = (),
    accepted: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """One wheel's audit report as JSON-ready data: what ``audit --json`` prints and what
    :func:`audit_text` renders (``AuditReport.to_json`` and the read path both build it here)."""
    return {
        "wheel": wheel,
        "status": status,
        "verified": status == VERIFIED,
        "blake3": blake3,
        "sha256": sha256,
        "size": size,
        "problems": list(problems),
        "notes": list(notes),
        "input_hash": input_hash,
        "store_path": store_path,
        "stamped_by": stamped_by,
        "facts": facts,
        "archs": dict(archs) if archs is not None else None,
        "links": [dict(link) for link in links],
        "signature": signature,
        "origin": dict(origin) if origin is not None else None,
        "derivation": dict(derivation) if derivation else None,
        "built_against": [dict(d) for d in built_against],
        "accepted": [dict(a) for a in accepted],
    }


def _table(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def audit_facts(
    derivation: Mapping[str, Any] | None, statement: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Return the traceability facts of a wheel: package, recipe, source, toolchain, env, run,
    from its derivation (the entry's or its stamp's) and provenance statement. A part of the
    wrong type counts as absent (the document may come from an untrusted wheel)."""
    drv = derivation or {}
    params: Mapping[str, Any] = {}
    deps: list[Any] = []
    if statement:
        bd = statement.get("predicate", {}).get("buildDefinition", {})
        params = bd.get("externalParameters", {})
        deps = bd.get("resolvedDependencies", [])
    source = dict(_table(drv.get("source")) or {})
    for dep in deps:
        if isinstance(dep, dict) and dep.get("name") == "source" and dep.get("uri"):
            source["uri"] = dep["uri"]
    internal = (
        statement.get("predicate", {}).get("buildDefinition", {}).get("internalParameters", {})
        if statement
        else {}
    )
    # Provenance keeps local paths relative to the recipe's repository; show them absolute.
    local = (internal.get("localPaths") or {}).get("paths") or {}
    extends = params.get("extends")
    if isinstance(extends, list):
        extends = [local.get(f"extends[{i}]", e) for i, e in enumerate(extends)]
    requirements = drv.get("requirements")
    return {
        "package": _table(drv.get("package")),
        "recipe": {
            "name": (params.get("recipe") or {}).get("package", {}).get("name"),
            "file": local.get("recipeFile", params.get("recipeFile")),
            "extends": extends,
        },
        "source": source,
        "toolchain": _table(drv.get("toolchain")),
        "env": _table(drv.get("env")),
        "passthrough": internal.get("passthrough"),
        "requirements": requirements if isinstance(requirements, list) else None,
        "inputs": input_facts(drv, deps),
        "build": _table(drv.get("build")),
        "run": run_facts(statement),
    }


def summary(value: Any, key: str = "") -> str:
    """One line for a toolchain component: its version if it has one, else its scalars."""
    if key == "packages" and isinstance(value, Mapping):
        return f"{len(value)} system packages (audit --json lists them)"
    if key == "rocm-sdk" and isinstance(value, list):  # the SDK wheels, listed below
        wheels = [w for w in value if isinstance(w, dict)]
        return ", ".join(f"{w.get('name')}=={w.get('version')}" for w in wheels)
    if key == "masked" and isinstance(value, list):
        return f"{len(value)} unowned directories hidden from the build"
    if isinstance(value, Mapping):
        if "version" in value:
            return str(value["version"])
        return " ".join(f"{k}={v}" for k, v in sorted(value.items()) if not isinstance(v, dict))
    return str(value)


def report_text(report: Mapping[str, Any]) -> str:
    """What ``audit`` prints about one wheel, from its JSON report (``AuditReport.to_json``)."""
    facts = report["facts"]
    rows: list[tuple[str, str]] = []

    def add(label: str, value: Any) -> None:
        if value not in (None, "", [], {}):
            rows.append((label, str(value)))

    lines = [f"{report['wheel']}: {HEADLINE[report['status']]}"]
    lines += [f"  ! {problem}" for problem in report["problems"]]
    lines += [f"  note: {note}" for note in report["notes"]]
    add("sha256", report["sha256"])
    add("blake3", report["blake3"])
    pkg = facts["package"] or {}
    add("package", f"{pkg.get('name', '?')} {pkg.get('version', '?')}" if pkg else None)
    add("input hash", report["input_hash"])
    recipe = facts["recipe"]
    if recipe.get("file"):
        add("recipe", f"{recipe.get('name')}  ({recipe['file']})")
        chain = recipe.get("extends") or []
        if len(chain) > 1:
            add("extends", " -> ".join(chain[:-1]))
    src = facts["source"] or {}
    if src:
        if src.get("kind") == "git":
            add("source", f"git {src.get('uri') or ''} commit {src.get('commit')}".strip())
        else:
            add("source", f"{src.get('kind')} {src.get('uri') or ''} {src.get('tree')}")
        for sub_path, commit in src.get("submodules") or []:
            add("  submodule", f"{sub_path} {commit}")
        for name, digest in src.get("patches") or []:
            add("  patch", f"{name} blake3:{digest}")
    for key, value in sorted((facts["toolchain"] or {}).items()):
        add("toolchain" if not any(r[0] == "toolchain" for r in rows) else "", f"{key}: "
            + summary(value, key))  # fmt: skip
    sdk = (facts["toolchain"] or {}).get("rocm-sdk")
    for w in sdk if isinstance(sdk, list) else []:
        if isinstance(w, dict):
            sdist = str(w.get("wheel", "")).endswith(".tar.gz")  # the rocm_sdk module's source
            label = "  sdk module" if sdist else "  sdk wheel"
            add(label, f"{w.get('wheel')} sha256:{w.get('sha256')}")
    env = facts["env"]
    if env is not None:
        add("env", " ".join(f"{k}={v!r}" for k, v in sorted(env.items())) or "(none)")
    add("passthrough", " ".join(facts["passthrough"] or []))
    reqs = facts["requirements"] or []
    add("requirements", ", ".join(f"{r['name']}=={r['version']}" for r in reqs))
    for inp in facts.get("inputs") or []:
        add("input", f"{inp['name']} ({inp['kind']}, ${inp['env']}) {inp.get('uri') or ''}".strip())
        add("  blake3", inp["blake3"])
        add("  sha256", inp.get("sha256"))
    build = facts["build"] or {}
    add("build", "; ".join(build.get("steps", [])) or ("PEP 517" if build else None))
    for dep in report["built_against"]:
        add("built on", f"{dep['name']} {dep['version']} {dep['hash']}")
        env = dep.get("env")
        add("", "  env " + (" ".join(f"{k}={v!r}" for k, v in sorted(env.items())) or "(none)")
            if env is not None else "  (not in this store)")  # fmt: skip
    run_ = facts["run"]
    add("sandbox", run_.get("sandbox"))
    if run_.get("started"):
        add("built", f"{run_['started']} .. {run_.get('finished')} on {run_.get('host')}")
    stamped_by = report["stamped_by"]
    add("stamped by", f"rocmforge {stamped_by}" if stamped_by else None)
    archs = report["archs"]
    if archs is not None:
        if not archs:
            add("gpu archs", "no HIP device code in any library")
        for lib, found in sorted(archs.items()):
            union, common = found.get("union", []), found.get("common", [])
            line = f"{lib}: {', '.join(union) or '-'} ({found.get('bundles', 0)} bundle(s)"
            if common != union:
                line += f"; in every bundle: {', '.join(common) or 'none'}"
            if found.get("mismatched"):
                line += f"; ELF machine contradicts id: {', '.join(found['mismatched'])}"
            add("gpu archs", line + ")")
    for link in report["links"]:
        add("links", describe_link(link))
    sig = report["signature"]
    if sig is not None:
        add("signature", f"{sig['status']}" + (f" (key {sig['keyid']})" if sig["keyid"] else "")
            + (f": {sig['detail']}" if sig["detail"] else ""))  # fmt: skip
    origin = report["origin"]
    if origin is not None:
        add("substituted", f"from {origin.get('cache')}"
            + (f", built on {origin['host']}" if origin.get("host") else ""))  # fmt: skip
    for run in report.get("accepted") or ():
        add("test run", run_line(run))
    add("store path", report["store_path"])
    lines += [f"  {label:<13}{value}" for label, value in rows]
    return "".join(f"{line}\n" for line in lines)


def audit_text(reports: Sequence[Mapping[str, Any]]) -> str:
    """What ``audit`` prints on stdout: each wheel's report, a blank line between two."""
    return "\n".join(report_text(r) for r in reports)
