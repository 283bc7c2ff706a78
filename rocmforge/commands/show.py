"""``rocmforge show TARGET``: everything about one store entry."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rocmforge.commands._common import add_json_option, add_store_option, emit_json, open_store

if TYPE_CHECKING:
    from rocmforge.store.query import EntryDetails


def register(sub: Any) -> None:
    """Add the ``show`` command."""
    p = sub.add_parser("show", help="show everything about one store entry")
    p.add_argument(
        "target", metavar="TARGET", help="input hash (prefix), entry name or path, or a wheel"
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge show TARGET``: print the entry's identity, files, inputs and run facts."""
    from rocmforge.audit import input_facts
    from rocmforge.commands.audit import describe_link
    from rocmforge.explain import flatten, show_value
    from rocmforge.provenance import run_facts
    from rocmforge.util.table import human_size, human_time

    info = _show(args)
    if args.json:
        emit_json(info.to_json())
        return 0
    entry, meta = info.entry, info.entry.meta
    run = run_facts(info.provenance)
    print(f"{entry.name} {entry.version}  {entry.hash}")
    print(f"  path         {entry.path}")
    print(f"  size         {human_size(meta.size)}")
    print(f"  created      {human_time(meta.created)} UTC")
    print(f"  last used    {human_time(info.last_used)} UTC")
    print(f"  roots        {', '.join(info.roots) or '-'}")
    print(f"  indexed      {'yes' if info.indexed else 'no (run rocmforge verify)'}")
    print(f"  sandbox      {meta.sandbox if meta.sandbox is not None else '-'}")
    if meta.compiler_cache is not None:
        from rocmforge.ccache import stats_from_json

        cc = stats_from_json(meta.compiler_cache)
        print(f"  compiler     {cc.summary()} of {cc.compiles} calls")
    if run.get("started"):
        print(f"  built        {run['started']} .. {run['finished']} on {run['host']}")
    for t in meta.steps or ():
        print(f"  {t.label:<13}{_duration(t.seconds):>9}  {t.command}")
    for w in meta.wheels:
        print(f"  wheel        {w.file} ({human_size(w.size or 0)})")
        print(f"    sha256     {w.sha256}")
        print(f"    blake3     {w.blake3}")
    for wheel, links in sorted((meta.links or {}).items()):
        for link in links:
            print(f"  links        {wheel}: {describe_link(link)}")
    for p in meta.portability or ():
        print(f"  not portable {p.get('file')}: {p.get('flag')} (host-specific code generation)")
    for inp in input_facts(info.derivation or {}, _deps(info.provenance)):
        print(f"  input        {inp['name']} ({inp['kind']}, ${inp['env']})")
        print(f"    blake3     {inp['blake3']}")
        if inp.get("sha256"):
            print(f"    sha256     {inp['sha256']}")
    if info.derivation:
        print("  derivation")
        drv = dict(info.derivation)
        tc = dict(drv.get("toolchain") or {})
        if isinstance(tc.get("packages"), dict):  # hundreds of lines: counted here, all in --json
            tc["packages"] = f"{len(tc['packages'])} system packages (show --json lists them)"
        if isinstance(tc.get("masked"), list):
            tc["masked"] = f"{len(tc['masked'])} unowned directories hidden from the build"
        if tc:
            drv["toolchain"] = tc
        for key, value in sorted(flatten(drv).items()):
            print(f"    {key} = {show_value(key, value) if key.startswith('env.') else value}")
    return 0


def _duration(seconds: float) -> str:
    """``4.2 s``, ``12m05s`` or ``3h02m``: a step's duration as ``show`` prints it."""
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f} s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s // 60 % 60:02d}m"


def _deps(statement: Any) -> list[Any]:
    """The resolved dependencies of a provenance statement (empty if none)."""
    if not isinstance(statement, dict):
        return []
    deps = statement.get("predicate", {}).get("buildDefinition", {}).get("resolvedDependencies")
    return deps if isinstance(deps, list) else []


def _show(args: argparse.Namespace) -> EntryDetails:
    from rocmforge.store.query import show_entry

    return show_entry(open_store(args), args.target)
