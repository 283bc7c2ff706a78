"""``rocmforge gc``: delete unrooted store entries and unused source caches, by policy."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    count,
    emit_json,
    open_store,
)
from rocmforge.errors import UsageError


def register(sub: Any) -> None:
    """Add the ``gc`` command."""
    p = sub.add_parser(
        "gc",
        help=COMMANDS["gc"],
        description=(
            "Delete store entries no root keeps (result links of realize -o, pins, running "
            "realizes and builds), then the source caches no kept entry uses. --keep-last and "
            "--older-than keep what either of them keeps; --max-size then deletes the least "
            "recently used unrooted entries until the entries fit. No policy: every unrooted "
            "entry goes."
        ),
    )
    add_store_option(p)
    p.add_argument(
        "--keep-last", type=count, metavar="N", help="keep the newest N entries of each package"
    )
    p.add_argument(
        "--older-than", metavar="DURATION", help="delete entries not used for DURATION (30d, 12h)"
    )
    p.add_argument(
        "--max-size", metavar="SIZE", help="delete least recently used until <= SIZE (500M, 20G)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="show what would go and why; delete nothing"
    )
    p.add_argument(
        "--keep-sources", action="store_true", help="keep git mirrors, wheels and tree caches"
    )
    p.add_argument(
        "--failed",
        action="store_true",
        help="instead: delete what failed builds left (--keep-failed build dirs, failed/ logs); "
        "with --older-than only those not touched for that long",
    )
    p.add_argument(
        "--compiler-cache",
        nargs="?",
        const="trim",
        choices=("trim", "clear"),
        metavar="trim|clear",
        help="only the compiler cache: trim each toolchain's cache to its max size (default), "
        "or clear it",
    )
    p.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="TARGET",
        help="also keep this stack's (or recipe's, or entry's) entries in this run; repeatable",
    )
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge gc``: plan, delete (unless ``--dry-run``) and report entries and bytes."""
    from rocmforge.sources.refs import entry_refs
    from rocmforge.store.gc import Policies, collect_garbage, parse_size
    from rocmforge.util.sizes import format_size

    if args.compiler_cache is not None:
        return _compiler_cache(args)

    older = None
    if args.older_than is not None:
        from rocmforge.recipe.model import parse_duration

        try:
            older = parse_duration(args.older_than)
        except ValueError as exc:
            raise UsageError(f"--older-than: {exc}") from exc
    try:
        size = parse_size(args.max_size) if args.max_size is not None else None
    except ValueError as exc:
        raise UsageError(f"--max-size: {exc}") from exc
    store = open_store(args)
    if args.failed:
        return _run_failed(args, store, older)
    policies = Policies(keep_last=args.keep_last, older_than=older, max_size=size)
    from rocmforge.cli.commands._common import resolve_targets

    extra: dict[str, list[str]] = {}
    for target in args.keep:
        for entry in resolve_targets(store, target):
            extra.setdefault(entry.hash, []).append(f"--keep {target}")
    report = collect_garbage(
        store,
        policies,
        entry_refs=entry_refs,
        dry_run=args.dry_run,
        keep_sources=args.keep_sources,
        extra_roots=extra,
    )
    if args.json:
        emit_json(report.to_json())
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    for d in report.plan.delete:
        e = d.entry
        print(f"{verb} {e.dirname}  {format_size(e.size)}  ({'; '.join(d.reasons)})")
    for s in report.sources:
        print(f"{verb} {s.kind} sources/{s.rel}  {format_size(s.size)}  (no kept entry uses it)")
    for line in kept_lines(report.plan.keep):
        print(line)
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if report.sources_kept_because and not args.keep_sources:
        print(f"note: source caches kept: {report.sources_kept_because}", file=sys.stderr)
    if report.plan.over_by:
        print(
            f"note: the kept entries exceed --max-size by {format_size(report.plan.over_by)} "
            "(the rest is rooted)",
            file=sys.stderr,
        )
    kept = len(report.plan.keep)
    print(
        f"{'would free' if report.dry_run else 'freed'} {format_size(report.freed)}: "
        f"{len(report.plan.delete)} entries, {len(report.sources)} source caches; "
        f"{kept} entries kept ({format_size(report.plan.size_after)})"
    )
    return 0


#: At most this many kept entries are listed in gc's text (``--json`` lists every one).
KEPT_SHOWN = 20


def kept_lines(keep: Any, limit: int = KEPT_SHOWN) -> list[str]:
    """``kept DIR  SIZE  (why)`` for each kept entry, rooted ones first, at most ``limit``: a
    result link that roots an entry says how to let it go (a leftover ``-o`` link keeps an old
    build for as long as it points at it)."""
    from rocmforge.util.sizes import format_size

    def why(reason: str) -> str:
        if reason.startswith("rooted: link "):
            return f"{reason}: rm it or point it elsewhere to let gc delete the entry"
        if reason.startswith("rooted: pin "):
            return f"{reason}: `rocmforge unpin {reason.removeprefix('rooted: pin ')}` lets it go"
        return reason

    ordered = sorted(keep, key=lambda d: not any(r.startswith("rooted:") for r in d.reasons))
    lines = [
        f"kept {d.entry.dirname}  {format_size(d.entry.size)}  ({'; '.join(map(why, d.reasons))})"
        for d in ordered[:limit]
    ]
    if len(ordered) > limit:
        lines.append(f"... and {len(ordered) - limit} more kept (gc --json lists every one)")
    return lines


def _run_failed(args: argparse.Namespace, store: Any, older: float | None) -> int:
    """``gc --failed``: delete kept build directories and failed logs (by age if asked)."""
    from rocmforge.store.failed import collect_failed
    from rocmforge.util.sizes import format_size

    if args.keep_last is not None or args.max_size is not None:
        raise UsageError("--failed takes only --older-than (entries are not touched)")
    gone = collect_failed(store, older_than=older, dry_run=args.dry_run)
    freed = sum(i.size for i in gone)
    if args.json:
        emit_json({"dry_run": args.dry_run, "freed": freed, "failed": [i.to_json() for i in gone]})
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    for i in gone:
        print(f"{verb} {i.kind} {i.name}  {format_size(i.size)}")
    print(f"{'would free' if args.dry_run else 'freed'} {format_size(freed)}: {len(gone)} items")
    return 0


def _compiler_cache(args: argparse.Namespace) -> int:
    """``gc --compiler-cache [trim|clear]``: ccache --cleanup (or --clear) on every namespace."""
    from rocmforge.build.ccache import maintain, settings, usage
    from rocmforge.util.sizes import format_size

    cache = settings(open_store(args).root)
    before = usage(cache)
    after = maintain(cache, clear=args.compiler_cache == "clear")
    if args.json:
        emit_json({"action": args.compiler_cache, "before": before.to_json(),
                   "after": after.to_json()})  # fmt: skip
        return 0
    verb = "cleared" if args.compiler_cache == "clear" else f"trimmed to {cache.max_size} each"
    print(
        f"compiler cache {verb}: {format_size(before.bytes)} -> {format_size(after.bytes)} "
        f"({after.files} files) at {cache.root}"
    )
    return 0
