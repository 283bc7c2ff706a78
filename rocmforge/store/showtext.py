"""What ``show`` prints about one entry, from plain values: the one renderer of its text.

The full command (:mod:`rocmforge.cli.commands.show`) and the read commands' readers
(:mod:`rocmforge.store.readers`) both call :func:`show_text`; so do the facts it is made of wherever
else they are printed or reported: :func:`input_facts` (``audit``), :func:`flatten` and
:func:`show_value` (``explain``), :func:`run_facts` (provenance), :func:`describe_link`
(``audit``'s links), :func:`cache_summary` (``realize``'s compiler-cache counters). Everything
takes the JSON forms (``meta.json``, ``derivation.json``, the provenance statement) as dicts
and lists, and imports only :mod:`rocmforge.util.table` and :mod:`rocmforge.util.leanjson`
(``re`` and ``json`` load only for a digest or a non-string value :func:`show_value` must render,
which ``show`` never asks for).
"""

from __future__ import annotations

from _collections_abc import Mapping

from rocmforge.util.leanjson import dumps_str
from rocmforge.util.sizes import memory_size, usage_line
from rocmforge.util.table import human_size, human_time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    import re
    from collections.abc import Sequence
    from typing import Any


class _Absent:
    """The value of a key one side does not have."""

    def __repr__(self) -> str:
        return "(absent)"


#: The value of a key one side of a comparison does not have (``explain``).
ABSENT: Any = _Absent()

_digest: list[re.Pattern[str]] = []  # compiled on first use: ``re`` is 4 ms of start-up


def show_value(key: str, value: Any) -> str:
    """Render one value for text output: quoted env values, shortened digests."""
    if value is ABSENT:
        return "(absent)"
    if isinstance(value, str):
        if key.startswith("env.") or not value or " " in value:
            return dumps_str(value)
        if not _digest:
            import re

            _digest.append(re.compile(r"((?:blake3|sha256):)?([0-9a-f]{32,})"))
        m = _digest[0].fullmatch(value)
        return f"{m.group(1) or ''}{m.group(2)[:12]}.." if m else value
    import json

    return json.dumps(value, sort_keys=True)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten a derivation (or any part of one) into ``{dotted key path: scalar}``."""
    out: dict[str, Any] = {}
    if isinstance(value, Mapping):
        if not value and prefix:
            out[prefix] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list) and prefix in ("source.submodules", "source.patches"):
        for item in value:
            if isinstance(item, list) and len(item) == 2:
                out[f"{prefix}.{item[0]}"] = item[1]
    elif isinstance(value, list) and prefix == "recipes":
        for item in value:
            if isinstance(item, Mapping) and "name" in item:
                out[f"recipes.{item['name']}"] = item.get("hash")
                out[f"recipes.{item['name']}.version"] = item.get("version")
    elif isinstance(value, list) and prefix in ("requirements", "toolchain.rocm-sdk"):
        for item in value:
            if isinstance(item, Mapping) and "name" in item:
                key = f"{prefix}.{item['name']}"
                out[key] = item.get("version")
                for k, v in item.items():
                    if k not in ("name", "version"):
                        out[f"{key}.{k}"] = v
    elif isinstance(value, list):
        if not value and prefix:
            out[prefix] = []
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{i}]"))
    else:
        out[prefix] = value
    return out


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


def statement_deps(statement: Any) -> list[Any]:
    """The resolved dependencies of a provenance statement (empty if none)."""
    if not isinstance(statement, dict):
        return []
    deps = statement.get("predicate", {}).get("buildDefinition", {}).get("resolvedDependencies")
    return deps if isinstance(deps, list) else []


def input_facts(derivation: Mapping[str, Any], deps: Sequence[Any]) -> list[dict[str, Any]]:
    """Return each ``[inputs.NAME]`` of a build: name, kind, env, subdir and digests (blake3
    from the derivation; sha256 and uri from the provenance when it has them)."""
    traced = {
        d["name"].removeprefix("inputs/"): d
        for d in deps
        if isinstance(d, dict) and str(d.get("name", "")).startswith("inputs/")
    }
    inputs = derivation.get("inputs")
    out = []
    for name, ident in sorted(inputs.items() if isinstance(inputs, Mapping) else []):
        if not isinstance(ident, Mapping):
            continue
        dep = traced.get(name, {})
        digest = dep.get("digest", {}) if isinstance(dep.get("digest"), Mapping) else {}
        out.append(
            {
                "name": name,
                "kind": ident.get("kind"),
                "env": ident.get("env"),
                "subdir": ident.get("subdir"),
                "blake3": str(ident.get("digest", "")).removeprefix("blake3:"),
                "sha256": digest.get("sha256"),
                "uri": dep.get("uri"),
            }
        )
    return out


def link_text(
    soname: str, provider: str, package: str = "", version: str = "", path: str = ""
) -> str:
    """Return ``links libyaml-0.so.2 from libyaml-0-2 0.2.5-1`` (or ``from the wheel`` ...)."""
    if provider == "package":
        return f"links {soname} from {package} {version}"
    if provider == "wheel":
        return f"links {soname} from the wheel ({path})"
    if provider == "rocm-sdk":
        return f"links {soname} from the ROCm SDK wheels ({path})"
    if provider in ("rocm", "python"):
        return f"links {soname} from the toolchain's {provider} root ({path})"
    if provider == "system":
        return f"links {soname} from {path} (content-hashed: no package database)"
    if provider == "missing":
        return f"links {soname} (not found on the build machine)"
    return f"links {soname} from {path} (no package owns it: not hashed)"


def _member_link(member: str, **link: str) -> str:
    return f"{member}: " + link_text(**link)


def describe_link(link: Mapping[str, str]) -> str:
    """``member: links libyaml-0.so.2 from libyaml-0-2 0.2.5-1`` for a recorded link (a
    ``meta.json`` ``links`` item; TypeError for one with other fields)."""
    return _member_link(**link)


def cache_summary(hits: int, misses: int, uncacheable: int) -> str:
    """Return the one-line form: ``ccache 120/121 hits (99%), 1 miss, 3 uncacheable``."""
    done = hits + misses
    rate = f" ({hits / done:.0%})" if done else ""
    return (
        f"ccache {hits}/{done} hits{rate}, {misses} "
        f"miss{'es' if misses != 1 else ''}, {uncacheable} uncacheable"
    )


def duration(seconds: float) -> str:
    """``4.2 s``, ``12m05s`` or ``3h02m``: a step's duration as ``show`` prints it."""
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f} s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s // 60 % 60:02d}m"


#: the verdicts of the test-result predicate that make an entry accepted
PASSING = ("PASSED", "WARNED")


def run_line(facts: Mapping[str, Any]) -> str:
    """One acceptance run (``AcceptedRun.facts``), as ``show`` and ``audit`` print it:
    ``accepted: 1x NVIDIA H200 (sm_90), 2026-12-02, smoke tier PASSED (signature valid)``, or
    ``FAILED: ...``."""
    head = "accepted" if facts.get("result") in PASSING else str(facts.get("result", "FAILED"))
    return f"{head}: {facts.get('headline', '')} (signature {facts.get('signature', '?')})"


def show_text(
    path: str,
    meta: Mapping[str, Any],
    derivation: Mapping[str, Any] | None,
    provenance: Mapping[str, Any] | None,
    *,
    indexed: bool,
    last_used: float,
    roots: Sequence[str],
    accepted: Sequence[Mapping[str, Any]] = (),
) -> str:
    """Return what ``show`` prints about the entry at ``path``: its identity, files, inputs and
    run facts. ``meta`` is the ``meta.json`` object (as :meth:`EntryMeta.to_json` gives it),
    ``derivation`` and ``provenance`` the entry's documents (None: none)."""
    lines: list[str] = []
    add = lines.append
    run = run_facts(provenance)
    sandbox = meta.get("sandbox")
    add(f"{meta['name']} {meta['version']}  {meta['hash']}")
    add(f"  path         {path}")
    add(f"  size         {human_size(meta['size'])}")
    add(f"  created      {human_time(meta['created'])} UTC")
    add(f"  last used    {human_time(last_used)} UTC")
    add(f"  roots        {', '.join(roots) or '-'}")
    add(f"  indexed      {'yes' if indexed else 'no (run rocmforge verify)'}")
    add(f"  sandbox      {sandbox if sandbox is not None else '-'}")
    cc = meta.get("compiler_cache")
    if cc is not None:
        counts = [int(cc.get(k, 0)) for k in ("compiles", "hits", "misses", "uncacheable")]
        add(f"  compiler     {cache_summary(*counts[1:])} of {counts[0]} calls")
    if run.get("started"):
        add(f"  built        {run['started']} .. {run['finished']} on {run['host']}")
    tel = meta.get("telemetry")
    used = {}
    if isinstance(tel, dict):
        ninja = tel.get("ninja") or {}
        edges = ""
        if ninja.get("edges"):
            versions = "/".join(f"v{v}" for v in ninja.get("versions") or ())
            edges = f"; {ninja['edges']} ninja edges (log {versions})"
        stalls = f"; {tel['stalls']} stall warning(s)" if tel.get("stalls") else ""
        add(f"  telemetry    {usage_line(tel)}{edges}{stalls}")
        used = {s.get("label"): s for s in tel.get("steps") or () if isinstance(s, dict)}
    for t in meta.get("steps") or ():
        add(f"  {t['label']:<13}{duration(t['seconds']):>9}  {t['command']}")
        u = used.get(t["label"])
        if u is not None and (u.get("peak_rss") or u.get("cpu_seconds")):
            cpu = u.get("cpu_seconds")
            largest = memory_size(u.get("job_peak_rss") or 0)
            jobs = (
                f", {u['jobs_peak']} compile jobs at most (largest {largest})"
                if u.get("jobs_peak")
                else ""
            )
            cpu_text = f"CPU {cpu:.1f} s, " if isinstance(cpu, (int, float)) else ""
            add(f"    usage      {cpu_text}peak RSS {memory_size(u.get('peak_rss') or 0)}{jobs}")
    for w in meta["wheels"]:
        add(f"  wheel        {w['file']} ({human_size(w.get('size') or 0)})")
        add(f"    sha256     {w['sha256']}")
        add(f"    blake3     {w['blake3']}")
    for test_run in accepted:
        add(f"  test run     {run_line(test_run)}")
        add(f"    file       {test_run.get('file')}")
    for wheel, links in sorted((meta.get("links") or {}).items()):
        for link in links:
            add(f"  links        {wheel}: {describe_link(link)}")
    for p in meta.get("portability") or ():
        add(f"  not portable {p.get('file')}: {p.get('flag')} (host-specific code generation)")
    for inp in input_facts(derivation or {}, statement_deps(provenance)):
        add(f"  input        {inp['name']} ({inp['kind']}, ${inp['env']})")
        add(f"    blake3     {inp['blake3']}")
        if inp.get("sha256"):
            add(f"    sha256     {inp['sha256']}")
    if derivation:
        add("  derivation")
        drv = dict(derivation)
        tc = dict(drv.get("toolchain") or {})
        if isinstance(tc.get("packages"), dict):  # hundreds of lines: counted here, all in --json
            tc["packages"] = f"{len(tc['packages'])} system packages (show --json lists them)"
        if isinstance(tc.get("masked"), list):
            tc["masked"] = f"{len(tc['masked'])} unowned directories hidden from the build"
        if tc:
            drv["toolchain"] = tc
        for key, value in sorted(flatten(drv).items()):
            add(f"    {key} = {show_value(key, value) if key.startswith('env.') else value}")
    return "".join(line + "\n" for line in lines)
