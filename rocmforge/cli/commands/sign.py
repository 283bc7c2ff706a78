"""``rocmforge sign [TARGET...]``: add the signing key's signature to entries in the store.

For entries built before ``rocmforge key generate``, substituted under another builder's key, or
after a key rotation: each entry's DSSE envelope gets the key's signature beside those there
(none dropped), and the entry is re-published in place, atomically, with nothing rebuilt
(:mod:`rocmforge.trust.resign`). Without TARGETs every sound entry is signed; a TARGET (recipe,
stack, hash, entry name, path) brings its closure unless ``--no-closure``, as ``push`` does.
``--key FILE`` signs with another key file than the signing key.
"""

from __future__ import annotations

import argparse
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


def register(sub: Any) -> None:
    """Add the ``sign`` command."""
    p = sub.add_parser(
        "sign",
        help=COMMANDS["sign"],
        description="Add the signing key's signature to store entries (by recipe, hash, entry "
        "name or path; default: all), beside the signatures there; nothing is rebuilt. "
        "See docs/sharing.md.",
    )
    p.add_argument("targets", nargs="*", metavar="TARGET", help="entries to sign (default: all)")
    p.add_argument(
        "--closure",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="sign what each TARGET was built against too (default: on)",
    )
    p.add_argument("--key", metavar="FILE", help="key file (default: the signing key)")
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge sign [TARGET...]``; exit 1 when an entry could not be signed."""
    from pathlib import Path

    from rocmforge.cache.push import with_closure
    from rocmforge.errors import UsageError
    from rocmforge.trust.resign import sign_entries
    from rocmforge.trust.signing import (
        inside_store,
        read_secret_key,
        signing_key_path,
        store_signing_key,
    )

    store = open_store(args)
    if args.key and inside_store(Path(args.key)) is not None:
        raise UsageError(f"sign --key {args.key}: inside a store; keep the signing key outside it")
    key = read_secret_key(Path(args.key)) if args.key else store_signing_key(store.root)
    if key is None:
        where = signing_key_path()
        raise UsageError(
            f"sign: no signing key ({where if where else '$ROCMFORGE_SIGNING_KEY is empty'}); "
            "run `rocmforge key generate` or give --key FILE"
        )
    with store.shared_lock():
        if not args.targets:
            entries = list(store.sound_entries())
        elif args.closure:
            entries = [e for t in args.targets for e in resolve_targets(store, t)]
        else:
            entries = [entry_of(store, t) for t in args.targets]
        if args.closure:
            entries = with_closure(store, entries)
        results = sign_entries(store, entries, key)
    skipped = [r for r in results if r.status == "skipped"]
    if args.json:
        emit_json({"key": key.public.describe(), "entries": [r.to_json() for r in results]})
        return 1 if skipped else 0
    for r in results:
        head = f"{r.name} {r.version} {r.hash}"
        if r.status == "skipped":
            print(f"{head}: not signed: {r.detail}")
            continue
        how = "signed" if r.status == "signed" else "already signed"
        print(f"{head}: {how}; signers: {', '.join(s.describe() for s in r.signers)}")
    signed = sum(r.status == "signed" for r in results)
    print(f"signed {signed} of {len(results)} entries with {key.public.describe()}")
    return 1 if skipped else 0
