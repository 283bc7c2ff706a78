"""``rocmforge plan TARGET``: the derivation, the input hash and whether the store has it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    add_substitute_options,
    emit_json,
    open_store,
    substitution_of,
)
from rocmforge.util.shownpath import shown_path


def register(sub: Any) -> None:
    """Add the ``plan`` command."""
    p = sub.add_parser("plan", help=COMMANDS["plan"])
    p.add_argument("recipe", metavar="TARGET", help="a recipe or a stack file")
    p.add_argument(
        "--graph",
        action="store_true",
        help="show the graph of recipes it is built against: each node's hash, cached or not",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="print the whole derivation (every system package) after the summary; --json "
        "gives it as data",
    )
    p.add_argument(
        "--rehash",
        action="store_true",
        help="resolve every input again even when the realize memo remembers the recipe (the "
        "memo's guards miss an in-place rewrite of a toolchain file: docs/hermetic.md)",
    )
    add_store_option(p)
    add_substitute_options(p, require=False)
    add_json_option(p)
    p.set_defaults(func=run)


SHOWN_LEFT_OUT = 10


def _left_out(recipe: Any, warn: Callable[[str], None]) -> list[str]:
    """Warn about the files an enclosing repository's ignore rules leave out of a path source,
    with the key that keeps them; return their paths."""
    from rocmforge.sources.enclosing import enclosing_ignored

    src = recipe.source
    if src.kind != "path" or src.path is None or not src.enclosing_ignores:
        return []
    left = enclosing_ignored(src.path)
    if left:
        shown = ", ".join(left[:SHOWN_LEFT_OUT]) + (", ..." if len(left) > SHOWN_LEFT_OUT else "")
        warn(
            f"source.path: {len(left)} path(s) in {src.path} are left out by the "
            f"ignore rules of the enclosing git repository: {shown}; set [source] "
            "enclosing-ignores = false to list the source by its own ignore rules only"
        )
    return left


def _offers(args: argparse.Namespace, missing: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Which binary cache would provide each missing ``(hash, name, version)``: one manifest
    request per entry and cache (none with ``--offline``); problems are printed as warnings."""
    if not missing:
        return {}
    _, caches, _ = substitution_of(args)
    if not caches:
        return {}
    from rocmforge.cache.substitute import Wanted, offers

    found = offers(caches, [Wanted(*m) for m in missing])
    for note in dict.fromkeys(n for o in found.values() for n in o.notes):
        print(f"warning: {note}", file=sys.stderr)
    return {h: o.cache for h, o in found.items()}


def run(args: argparse.Namespace) -> int:
    """``rocmforge plan TARGET``: show the derivation, the hash and whether it is cached."""
    from rocmforge.plan.graph import lint_facts_for, load_graph, plan_dependencies

    store = open_store(args, create=True)
    graph = load_graph([args.recipe])
    if args.graph or graph.stacks:
        return _graph(args, graph, store)
    from rocmforge.pipeline.realize import plan  # not before: `plan --graph` lints nothing
    from rocmforge.recipe.lints import describe
    from rocmforge.sources.requirements import PipFetcher
    [file] = graph.targets
    recipe = graph.recipes[file]
    deps = plan_dependencies(graph, file, store=store, fetcher=PipFetcher())
    facts = lint_facts_for(graph, file)
    report = plan(recipe, store=store, fetcher=PipFetcher(), dependencies=deps, facts=facts)
    warned: list[str] = []

    def warn(message: str) -> None:
        warned.append(f"warning: {message}\n")
        sys.stderr.write(warned[-1])

    for finding in report.lints:
        if finding.allowed is None:
            warn(describe(recipe, finding))
    left = _left_out(recipe, warn)
    missing = (
        [] if report.cached or report.provisional else [(report.hash, report.name, report.version)]
    )
    offered = _offers(args, missing)
    if args.json:
        emit_json({**report.to_json(), "left_out": left, "substitutable": offered.get(report.hash)})
        return 0
    partial = " (provisional: not everything could be resolved here)"
    head = [
        row("name", f"{report.name} {report.version}"),
        row("hash", report.hash + (partial if report.provisional else "")),
        row("cached", "yes, " + str(report.path) if report.cached else "no"),
    ]
    body = summary_text(report, recipe=shown_path(args.recipe), offered=offered, full=args.full)
    sys.stdout.write("".join(f"{line}\n" for line in head) + body)
    sys.stdout.flush()
    plain = not args.full  # the memo answers only the plain form (any option falls through)
    if plain and report.cached and not report.provisional and not _probes_the_toolchain(recipe):
        from rocmforge.pipeline.memo import RECIPE_MARK, record_plan

        kept = summary_text(report, recipe=RECIPE_MARK, offered=offered, full=False)
        record_plan(str(store.root), str(recipe.file), hash=report.hash,
                    warnings="".join(warned), text=kept)  # fmt: skip
    return 0


#: The width of the labels of ``plan``'s summary (``toolchain:`` and one space).
LABEL_WIDTH = 12


def row(label: str, text: str) -> str:
    """One summary line: ``label:`` padded to :data:`LABEL_WIDTH`, then ``text``."""
    return f"{label + ':':<{LABEL_WIDTH}}{text}"


def summary_text(report: Any, *, recipe: str, offered: dict[str, Any], full: bool) -> str:
    """What ``plan`` prints after its name, hash and cached lines: the provisional notes, the
    derivation in one line per part (:func:`rocmforge.plan.summary.summary_lines`), the nearest
    cached build on a miss by kind of difference, then the whole derivation (``full``) or the
    command that prints it; ``recipe`` is the recipe's path as the commands shown name it."""
    from rocmforge.plan.summary import difference_groups, summary_lines

    lines: list[str] = []
    if report.provisional:
        lines.extend(f"  - {note}" for note in report.provisional)
        lines.append("  `rocmforge realize` resolves these (or stops on them) before building")
    if report.hash in offered:
        where = offered[report.hash]
        lines.append(row("cache", "substitutable from " + where if where else
                         "in no configured cache"))  # fmt: skip
    lines.extend(row(label, text) for label, text in summary_lines(report.derivation))
    if report.nearest:
        near = report.nearest
        lines.append(f"nearest cached build {near.hash[:12]} ({near.name} {near.version}) "
                     "differs in:")  # fmt: skip
        lines.extend(f"  {g}" for g in difference_groups(near.differences))
        lines.append(f"  `rocmforge explain {near.hash[:12]} {recipe}` lists every key")
    drv = derivation_lines(report.derivation, indent=1)
    if full:
        lines.append("derivation:")
        lines.extend(drv)
    else:
        lines.append(row("derivation", f"{len(drv)} lines: `rocmforge plan {recipe} --full` "
                         "(--json for scripts)"))  # fmt: skip
    return "".join(f"{line}\n" for line in lines)


def _probes_the_toolchain(recipe: Any) -> bool:
    """True if linting ``recipe`` reads facts probed from its toolchain (the ROCm version at
    its root, the archs of its device libraries): such a plan is never answered from the memo,
    whose host facts (:func:`rocmforge.pipeline.memo.host_facts`) do not cover them."""
    tc = recipe.toolchain
    return bool(tc.kind == "rocm" or tc.hip_clang)


def derivation_lines(value: Any, *, indent: int = 0) -> list[str]:
    """Return a derivation as indented ``key: value`` lines (sorted keys, lists as ``- item``).

    Scalars are shown as JSON (strings quoted), so the text reads like the JSON of ``--json``
    without its braces; an empty table or list shows as ``{}`` / ``[]``.
    """
    pad = "  " * indent
    out: list[str] = []
    items: list[tuple[str, Any]] = (
        [(f"{k}:", v) for k, v in sorted(value.items())]
        if isinstance(value, dict)
        else [("-", v) for v in value]
    )
    for label, v in items:
        if isinstance(v, dict | list) and v:
            out.append(f"{pad}{label}")
            out.extend(derivation_lines(v, indent=indent + 1))
        else:
            out.append(f"{pad}{label} {json.dumps(v, sort_keys=True)}")
    return out


def _graph(args: argparse.Namespace, graph: Any, store: Any) -> int:
    """Print the DAG: one line per node (dependencies first), its edges indented below it."""
    from rocmforge.plan.graph import plan_graph
    from rocmforge.sources.requirements import PipFetcher

    nodes = plan_graph(graph, store=store, fetcher=PipFetcher())
    offered = _offers(
        args, [(n.hash, n.name, n.version) for n in nodes if not n.cached and not n.provisional]
    )
    if args.json:
        emit_json(
            {
                "targets": [str(t) for t in graph.targets],
                "stacks": [{"name": s.name, "file": str(s.file)} for s in graph.stacks],
                "nodes": [{**n.to_json(), "substitutable": offered.get(n.hash)} for n in nodes],
            }
        )
        return 0
    by_hash = {n.hash: n for n in nodes}
    lines = []
    for n in nodes:
        state = "cached" if n.cached else "missing"
        if offered.get(n.hash):
            state += f", substitutable from {offered[n.hash]}"
        if n.provisional:
            state += ", provisional"
        mark = "*" if n.target else " "
        lines.append(f"{mark} {n.hash} {n.name} {n.version} ({state}) {n.recipe.name}")
        lines.extend(f"    <- {by_hash[d].name} {d}" for d in n.deps)
    print("\n".join(lines))
    return 0
