"""``rocmforge farm trust HASH``: what a Slurm job runs on its node before it pushes.

The job realizes into a scratch store kept on its node, where an earlier job may have left the
entry signed by a key the submitter no longer trusts. ``farm trust`` makes it signed by one the
submitter trusts (``$ROCMFORGE_TRUSTED_KEYS``, exported by the job script) with this node's
signing key, or removes it so the job builds it again (exit 10), or, on a node without a key,
records the digest of what the job built for the submitter to sign (``--record``), or says why
it must not be pushed (exit 1). See :mod:`rocmforge.executor.nodejob` and docs/cluster.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_store_option, open_store


def register(sub: Any) -> None:
    """Add the ``farm`` command."""
    p = sub.add_parser(
        "farm",
        help=COMMANDS["farm"],
        description="Run by a Slurm job of realize --executor slurm on its node (docs/cluster.md): "
        "trust HASH makes the scratch store's entry signed by a key the submitter trusts "
        "($ROCMFORGE_TRUSTED_KEYS) with this node's signing key; exit 10: removed, build it "
        "again (also on a node without a key); with --record on a node without a key, the "
        "digest of what this job built is recorded for the submitter to sign; exit 1: not to "
        "be pushed (the message says which key to trust).",
    )
    p.add_argument("action", choices=("trust",), help="trust: settle the entry's signature")
    p.add_argument("hash", metavar="HASH", help="the input hash the job built")
    p.add_argument(
        "--rebuilt", action="store_true",
        help="this job built the entry (again, or first): never remove it",
    )  # fmt: skip
    p.add_argument(
        "--record", metavar="FILE", type=Path,
        help="on a node without a signing key: write the built entry's provenance digest to "
        "FILE (in the job directory) for the submitter to sign the pushed copy",
    )  # fmt: skip
    add_store_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge farm trust HASH``: one line on stderr; exit 0, 10 (rebuild it) or 1."""
    import sys

    from rocmforge.executor.nodejob import REBUILD_EXIT, settle_trust
    from rocmforge.trust.signing import store_signing_key, trusted_keys

    store = open_store(args)
    entry = store.resolve(args.hash)
    fix = settle_trust(store, entry, trusted=trusted_keys(), key=store_signing_key(store.root),
                       rebuilt=args.rebuilt, record=args.record)  # fmt: skip
    print(f"rocmforge: {fix.message}", file=sys.stderr)
    return REBUILD_EXIT if fix.status == "rebuild" else 0
