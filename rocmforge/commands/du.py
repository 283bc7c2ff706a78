"""``rocmforge du``: how big the store is and what dominates it."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rocmforge.commands._common import (
    add_json_option,
    add_store_option,
    count,
    emit_json,
    open_store,
)


def register(sub: Any) -> None:
    """Add the ``du`` command."""
    p = sub.add_parser("du", help="show the store's size by area, package and entry")
    p.add_argument("--top", type=count, default=10, metavar="N", help="show the N biggest entries")
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge du``: print sizes by area, by package and the biggest entries."""
    from rocmforge.ccache import settings
    from rocmforge.ccache import usage as cache_usage
    from rocmforge.store.failed import gather_failed
    from rocmforge.store.gc import format_age, format_size
    from rocmforge.store.usage import disk_usage

    store = open_store(args)
    usage = disk_usage(store)
    failed = gather_failed(store)
    cache = cache_usage(settings(store.root))
    if args.json:
        emit_json(
            {
                **usage.to_json(),
                "failed": [i.to_json() for i in failed],
                "compiler_cache": cache.to_json(),
            }
        )
        return 0
    print(f"total {format_size(usage.total)}")
    for area, size in usage.areas:
        print(f"  {format_size(size):>10}  {area}")
    print(
        f"compiler cache {format_size(cache.bytes)} ({cache.files} files, {cache.namespaces} "
        f"toolchains) at {cache.root}"
    )
    if usage.packages:
        print("packages:")
        for name, count, size in usage.packages:
            print(f"  {format_size(size):>10}  {name} ({count} entries)")
    if usage.entries and args.top > 0:
        print(f"biggest entries (of {len(usage.entries)}):")
        now = time.time()
        for e, roots in usage.entries[: args.top]:
            rooted = f"  rooted: {'; '.join(roots)}" if roots else ""
            print(
                f"  {format_size(e.size):>10}  {e.dirname}  used {format_age(now - e.last_used)}"
                f" ago{rooted}"
            )
    if failed:
        total = sum(i.size for i in failed)
        print(f"failed builds ({format_size(total)}; rocmforge gc --failed deletes them):")
        now = time.time()
        for i in failed[: max(args.top, 1)]:
            age = format_age(now - i.mtime)
            print(f"  {format_size(i.size):>10}  {i.kind}: {i.name}  {age} old")
    return 0
