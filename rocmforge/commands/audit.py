"""``rocmforge audit WHEEL...``: what produced this wheel, on one screen.

Exit status: 0 every wheel verified, 1 a wheel is tampered, 5 a wheel is only claimed (its stamp is
unverified), 6 a wheel is unknown (no stamp), 7 a wheel diverged (honest, but this store built its
input hash into other bytes), 2 bad input (no such file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocmforge.commands._common import (
    add_config_option,
    add_json_option,
    add_store_option,
    emit_json,
    open_store,
    settings_of,
    store_choice,
    trusted_of,
)
from rocmforge.store.showtext import describe_link

EPILOG = """\
statuses:
  verified  its digest is in this store's index: byte-identical to what rocmforge built here
  claimed   not in the index, but stamped by rocmforge: the facts are the wheel's own, unverified
  diverged  stamp and RECORD intact, but this store built the same input hash into other
            bytes: a reproducibility failure or an input the hash does not cover
  tampered  stamped, but RECORD or the stamp does not match
  unknown   no rocmforge stamp (built elsewhere) or not a readable wheel
exit status: 0 all verified, 1 tampered, 5 claimed, 7 diverged, 6 unknown (the worst wheel
             decides, in the order verified < claimed < diverged < unknown < tampered),
             2 bad input
"""

_HEADLINE = {
    "verified": "VERIFIED: byte-identical to a wheel rocmforge built in this store",
    "claimed": "CLAIMED (UNVERIFIED): not in this store; the facts below are the wheel's own claim",
    "tampered": "TAMPERED: the wheel does not match its own stamp or RECORD",
    "diverged": "DIVERGED: stamp and RECORD intact, but this store built the same input hash "
    "into other bytes",
    "unknown": "UNKNOWN: no rocmforge stamp; nothing is known about how it was built",
}


def register(sub: Any) -> None:
    """Add the ``audit`` command."""
    p = sub.add_parser(
        "audit",
        help="tell what produced a wheel (verified / claimed / diverged / tampered / unknown)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("wheels", nargs="+", metavar="WHEEL")
    add_store_option(p)
    add_config_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge audit WHEEL...``: print one screen per wheel; exit by the worst status."""
    from rocmforge.audit import audit_wheel, worst_exit_code
    from rocmforge.store.locate import is_store

    root, how = store_choice(args)
    store = open_store(args) if is_store(str(root)) else None  # a reader never creates one
    print(
        f"rocmforge: auditing against the store at {root} ({how})"
        + ("" if store else ": there is no store there, so nothing can be verified"),
        file=sys.stderr,
    )
    trusted = trusted_of(settings_of(args))  # the keys of the config files count here too
    reports = [audit_wheel(Path(w), store=store, trusted=trusted) for w in args.wheels]
    if args.json:
        emit_json([r.to_json() for r in reports])
    else:
        for i, report in enumerate(reports):
            if i:
                print()
            _print(report)
    return worst_exit_code(reports)


def _summary(value: Any, key: str = "") -> str:
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


def _print(report: Any) -> None:
    facts = report.facts()
    rows: list[tuple[str, str]] = []

    def add(label: str, value: Any) -> None:
        if value not in (None, "", [], {}):
            rows.append((label, str(value)))

    print(f"{report.wheel}: {_HEADLINE[report.status]}")
    for problem in report.problems:
        print(f"  ! {problem}")
    for note in report.notes:
        print(f"  note: {note}")
    add("sha256", report.sha256)
    add("blake3", report.blake3)
    pkg = facts["package"] or {}
    add("package", f"{pkg.get('name', '?')} {pkg.get('version', '?')}" if pkg else None)
    add("input hash", report.input_hash)
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
            + _summary(value, key))
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
    for dep in report.dependencies:
        add("built on", f"{dep['name']} {dep['version']} {dep['hash']}")
        env = dep.get("env")
        add("", "  env " + (" ".join(f"{k}={v!r}" for k, v in sorted(env.items())) or "(none)")
            if env is not None else "  (not in this store)")  # fmt: skip
    run_ = facts["run"]
    add("sandbox", run_.get("sandbox"))
    if run_.get("started"):
        add("built", f"{run_['started']} .. {run_.get('finished')} on {run_.get('host')}")
    add("stamped by", f"rocmforge {report.stamped_by}" if report.stamped_by else None)
    if report.archs is not None:
        if not report.archs:
            add("gpu archs", "no HIP device code in any library")
        for lib, found in sorted(report.archs.items()):
            union, common = found.get("union", []), found.get("common", [])
            line = f"{lib}: {', '.join(union) or '-'} ({found.get('bundles', 0)} bundle(s)"
            if common != union:
                line += f"; in every bundle: {', '.join(common) or 'none'}"
            if found.get("mismatched"):
                line += f"; ELF machine contradicts id: {', '.join(found['mismatched'])}"
            add("gpu archs", line + ")")
    for link in report.links:
        add("links", describe_link(link))
    sig = report.signature
    if sig is not None:
        add("signature", f"{sig.status}" + (f" (key {sig.keyid})" if sig.keyid else "")
            + (f": {sig.detail}" if sig.detail else ""))
    origin = report.origin
    if origin is not None:
        add("substituted", f"from {origin.get('cache')}"
            + (f", built on {origin['host']}" if origin.get("host") else ""))
    add("store path", report.entry_path)
    for label, value in rows:
        print(f"  {label:<13}{value}")
