"""``rocmforge du``: how big the store is and what dominates it."""

from __future__ import annotations

import argparse
import sys
import time

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    count,
    emit_json,
    open_store,
    print_read,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    """Add the ``du`` command."""
    p = sub.add_parser("du", help=COMMANDS["du"])
    p.add_argument("--top", type=count, default=10, metavar="N", help="show the N biggest entries")
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge du``: print sizes by area, by package and the biggest entries."""
    if not args.json:
        from rocmforge.store.readers import du_text

        if print_read(args, lambda root, _: du_text(root, args.top)):
            return 0
    from rocmforge.build.ccache import settings
    from rocmforge.build.ccache import usage as cache_usage
    from rocmforge.store.failed import gather_failed
    from rocmforge.store.measure import format_du
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
    text = format_du(  # rocmforge.store.readers.du_text prints it from the same function
        usage.areas,
        usage.packages,
        usage.entries,
        [(i.kind, i.name, tuple(map(str, i.paths)), i.size, i.mtime) for i in failed],
        (str(cache.root), (cache.namespaces, cache.files, cache.entries, cache.bytes)),
        top=args.top,
        now=time.time(),
    )
    sys.stdout.write(text)
    return 0
