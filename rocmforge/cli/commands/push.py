"""``rocmforge push CACHE [TARGET...]``: upload store entries to a binary cache.

Without TARGETs every sound entry of the store is pushed. A TARGET brings its closure (what it
was built against; for a graph recipe or a stack, every node), dependencies first, unless
``--no-closure``. Only what the cache lacks goes up (an entry whose manifest the cache has is
skipped without reading its files); blobs are written before the manifest, each with a
no-replace rename, so a concurrent push of the same hash is safe. Each entry's acceptance runs
go with it; an entry the cache has gets the runs its manifest lacks. ``--require-accepted [--on
ARCH]`` refuses the push, before anything goes up, when an entry has no passing run
(:func:`rocmforge.store.accepted.unaccepted`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    emit_json,
    entry_of,
    open_store,
    resolve_targets,
)
from rocmforge.cli.commands._progress import ConsoleReporter


def register(sub: Any) -> None:
    """Add the ``push`` command."""
    p = sub.add_parser(
        "push",
        help=COMMANDS["push"],
        description="Push entries (by recipe, hash, entry name or path; default: all) to CACHE "
        "(file://DIR or oci://HOST/REPO), with their signed provenance; see docs/sharing.md.",
    )
    p.add_argument("cache", metavar="CACHE", help="cache URL: file://DIR or oci://HOST[:PORT]/REPO")
    p.add_argument("targets", nargs="*", metavar="TARGET", help="entries to push (default: all)")
    p.add_argument(
        "--closure",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="push what each TARGET was built against too, dependencies first (default: on)",
    )
    add_accepted_options(p, "push")
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def add_accepted_options(p: Any, verb: str) -> None:
    """Add ``--require-accepted`` and ``--on ARCH`` (export has its own copy: a verb imports
    only its own module)."""
    p.add_argument(
        "--require-accepted",
        action="store_true",
        help=f"{verb} nothing unless every entry has a passing acceptance run (rocmforge test; a "
        "dependency counts when a passing run of an entry with it tested its wheels)",
    )
    p.add_argument(
        "--on",
        metavar="ARCH",
        help="with --require-accepted: the passing run must be on a node with this GPU arch "
        "(gfx942, sm_90)",
    )


def check_accepted(args: argparse.Namespace, store: Any, entries: Any, verb: str) -> None:
    """The ``--require-accepted [--on ARCH]`` gate: raise before anything is written."""
    if args.require_accepted:
        from rocmforge.store.accepted import require_accepted

        require_accepted(store.root, list(entries), args.on, verb=verb)


def run(args: argparse.Namespace) -> int:
    """``rocmforge push CACHE [TARGET...]``."""
    from rocmforge.cache.push import push_entries, unsigned_warning, with_closure
    from rocmforge.cache.urls import open_backend
    from rocmforge.trust.signing import store_signing_key

    if args.on and not args.require_accepted:
        from rocmforge.errors import UsageError

        raise UsageError(f"push --on {args.on}: --on goes with --require-accepted")
    backend = open_backend(args.cache)
    store = open_store(args)
    with store.shared_lock():
        if not args.targets:
            entries = list(store.sound_entries())
        elif args.closure:
            entries = [e for t in args.targets for e in resolve_targets(store, t)]
        else:
            entries = [entry_of(store, t) for t in args.targets]
        if args.closure:
            entries = with_closure(store, entries)
        check_accepted(args, store, entries, "push")
        key = store_signing_key(store.root)
        reporter = ConsoleReporter(sys.stderr, label="push")
        try:
            pushed = push_entries(backend, entries, reporter=reporter, key=key)
        finally:
            reporter.close()
    warning = unsigned_warning(pushed, has_key=key is not None)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        emit_json({"cache": backend.url, "entries": [p.to_json() for p in pushed]})
        return 0
    for p in pushed:
        print(f"{p.name} {p.version} {p.hash}: {describe_push(p)}")
    print(f"pushed {sum(not p.present for p in pushed)} of {len(pushed)} to {backend.url}")
    return 0


def describe_push(p: Any) -> str:
    """One entry's push in words: what went up and who signed the cache's copy."""
    how = "already there" if p.present else f"{p.blobs} blobs, {p.bytes} bytes"
    added = []
    if p.present and p.replaced and p.signature_added:
        added.append("signature added")
    if p.runs and p.present:
        added.append(f"{p.runs} acceptance run{'s' if p.runs > 1 else ''} added")
    if added:
        how += f" ({', '.join(added)})"
    if p.signers:
        how += "; signed by " + ", ".join(s.describe() for s in p.signers)
    elif not p.signed:
        how += "; unsigned"
    if p.note:
        how += f"; {p.note}"
    return str(how)
