"""``rocmforge log TARGET``: print the build log of an entry, a failed build or a Slurm job.

A build running (or failed) on a cluster node (``realize --executor slurm``) has its log in the
shared job directory (``--job-dir``, default ``$ROCMFORGE_JOB_DIR``), readable while it runs; a
job that is recorded but has not started yet (Slurm creates the log when it starts) is answered
"not started yet", exit 0. A build that is in a binary cache but not in this store is read from
the cache (``--cache URL`` or the configured caches) without substituting it. ``--json`` gives
the answer as one object: where the log is, whether it exists yet, and its text.
"""

from __future__ import annotations

import argparse

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_config_option,
    add_json_option,
    add_store_option,
    print_read,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    """Add the ``log`` command."""
    p = sub.add_parser("log", help=COMMANDS["log"])
    p.add_argument(
        "target", metavar="TARGET", help="recipe file, input hash (prefix) or entry path"
    )
    add_store_option(p)
    p.add_argument(
        "--job-dir", metavar="DIR",
        help="also look for the log of a Slurm job there (default $ROCMFORGE_JOB_DIR)",
    )  # fmt: skip
    p.add_argument(
        "--cache", action="append", metavar="URL",
        help="also read the log of an entry from this binary cache (repeatable; the configured "
        "caches are asked after it); TARGET is then a recipe or a full input hash",
    )  # fmt: skip
    add_config_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge log TARGET``: print the build log of an entry or of the last failed build."""
    if not (args.json or args.job_dir or args.cache or args.config is not None):
        from rocmforge.store.readers import log_bytes

        if print_read(args, lambda root, _: log_bytes(root, args.target)):
            return 0
    from rocmforge.cli.commands._logfind import run_full

    return run_full(args)
