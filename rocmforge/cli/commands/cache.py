"""``rocmforge cache ls|gc CACHE``: list and prune a binary cache (docs/sharing.md)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_config_option, add_json_option, emit_json


def register(sub: Any) -> None:
    """Add the ``cache`` command with its ``ls`` and ``gc`` actions."""
    p = sub.add_parser("cache", help=COMMANDS["cache"])
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser(
        "ls", help="list the entries a cache holds, newest first (default: every configured cache)"
    )
    ls.add_argument("cache", metavar="CACHE", nargs="?")
    add_config_option(ls)
    add_json_option(ls)
    gc = actions.add_parser(
        "gc",
        help="delete cache entries neither --keep-last nor --older-than keeps, then unused blobs",
    )
    gc.add_argument("cache", metavar="CACHE")
    gc.add_argument("--keep-last", type=int, metavar="N", help="keep the newest N per package")
    gc.add_argument(
        "--older-than", metavar="DURATION", help="keep entries pushed within DURATION (30d, 12h)"
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")
    add_json_option(gc)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge cache ls|gc CACHE``."""
    from rocmforge.cache.prune import list_cache, prune_cache
    from rocmforge.cache.urls import open_backend
    from rocmforge.errors import UsageError
    from rocmforge.util.sizes import format_size

    if args.action == "ls":
        if args.cache:
            urls = [args.cache]
        else:
            from rocmforge.cli.commands._common import settings_of

            urls = list(settings_of(args).caches)
            if not urls:
                raise UsageError(
                    "cache ls: no CACHE given and none configured (--cache flags aside: "
                    "$ROCMFORGE_CACHES, rocmforge.toml, the user config.toml)"
                )
        listed = []
        for url in urls:
            backend = open_backend(url)
            listed.append((backend.url, list_cache(backend, signers=True)))
        if args.json:
            caches = [{"cache": u, "entries": [e.to_json() for e in es]} for u, es in listed]
            emit_json(caches[0] if args.cache else {"caches": caches})
            return 0
        for url, entries in listed:
            for e in entries:
                when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(e.pushed))
                if e.signers:
                    sig = "signed by " + ", ".join(s.describe() for s in e.signers)
                else:
                    sig = "signed (unreadable envelope)" if e.signed else "unsigned"
                print(
                    f"{e.hash}  {e.name} {e.version}  {format_size(e.size)}  {when} UTC  {sig}"
                )
            print(f"{len(entries)} entries in {url}")
        return 0
    backend = open_backend(args.cache)
    if args.keep_last is None and args.older_than is None:
        raise UsageError("cache gc: give --keep-last N and/or --older-than DURATION")
    if args.keep_last is not None and args.keep_last < 0:
        raise UsageError(f"--keep-last: must be 0 or more, not {args.keep_last}")
    older = None
    if args.older_than is not None:
        from rocmforge.recipe.model import parse_duration

        try:
            older = parse_duration(args.older_than)
        except ValueError as exc:
            raise UsageError(f"--older-than: {exc}") from exc
    report = prune_cache(backend, keep_last=args.keep_last, older_than=older, dry_run=args.dry_run)
    if args.json:
        emit_json({"cache": backend.url, **report.to_json()})
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    for e in report.deleted:
        print(f"{verb} {e.hash}  {e.name} {e.version}")
    print(
        f"{verb} {len(report.deleted)} entries and {report.blobs} unused blobs "
        f"({format_size(report.blob_bytes)}); kept {report.kept}"
    )
    return 0
