"""``rocmforge key generate|public``: the ed25519 key that signs the store's provenance.

``generate`` writes a new key outside the store (``$ROCMFORGE_SIGNING_KEY`` or
``$XDG_CONFIG_HOME/rocmforge/signing.key`` unless ``--out`` says otherwise), never overwriting one
unless ``--force`` (which keeps the old key beside it), prints its public key ``NAME:BASE64`` on
stdout and on stderr where it went, with its fingerprint; ``--trust`` also adds that public key to
the trusted keys ``audit`` checks signatures with. The default name ``HOST-rocmforge-N`` takes N
one above the names of the key it replaces and of the trusted keys, so a new key is named apart
from the old. ``public`` prints the public key of a key file.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from pathlib import Path
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_json_option, emit_json
from rocmforge.cli.parser import RawDescriptionHelpFormatter

EPILOG = """\
realize signs every new entry's provenance (provenance.dsse.json) when the signing key exists;
audit checks the signature when its key is trusted: $ROCMFORGE_TRUSTED_KEYS (NAME:BASE64 ...)
or $XDG_CONFIG_HOME/rocmforge/trusted-keys (one per line). See docs/traceability.md.
"""


def register(sub: Any) -> None:
    """Add the ``key`` command with its ``generate`` and ``public`` actions."""
    p = sub.add_parser(
        "key",
        help=COMMANDS["key"],
        epilog=EPILOG,
        formatter_class=RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    gen = actions.add_parser("generate", help="create a new signing key; print its public key")
    gen.add_argument(
        "--name",
        help="key name (default: HOSTNAME-rocmforge-N, N above the old key's and trusted keys')",
    )
    gen.add_argument("--out", metavar="FILE", help="key file (default: the signing key path)")
    gen.add_argument("--trust", action="store_true", help="add the public key to trusted-keys")
    gen.add_argument(
        "--force",
        action="store_true",
        help="replace an existing key file (the old key is kept as FILE.<fingerprint>.old)",
    )
    add_json_option(gen)
    pub = actions.add_parser("public", help="print the public key of a signing key file")
    pub.add_argument("--key", metavar="FILE", help="key file (default: the signing key path)")
    add_json_option(pub)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge key generate|public``."""
    from rocmforge.errors import UsageError
    from rocmforge.trust.signing import (
        make_key,
        read_secret_key,
        signing_key_path,
        trust_key,
    )

    default = signing_key_path()
    chosen = getattr(args, "out", None) or getattr(args, "key", None)
    if chosen is None and default is None:
        raise UsageError("signing is turned off ($ROCMFORGE_SIGNING_KEY is empty); give a file")
    path = Path(chosen) if chosen else default
    assert path is not None
    trusted = replaced = kept = None
    if args.action == "generate":
        name = args.name or _default_name(path)
        made = make_key(path, name, force=args.force)
        key, replaced, kept = made.key, made.replaced, made.kept_old
        if args.trust:
            trusted = trust_key(key.public)
    else:
        if not path.exists():
            raise UsageError(f"{path}: no signing key; run `rocmforge key generate`")
        key = read_secret_key(path)
    if args.json:
        emit_json(
            {
                "name": key.name,
                "fingerprint": key.public.fingerprint,
                "public_key": key.public.text(),
                "key_file": str(path),
                "trusted_keys": str(trusted) if trusted else None,
                "replaced": replaced.text() if replaced else None,
                "old_key_file": str(kept) if kept else None,
            }
        )
        return 0
    if args.action == "generate":
        said = f"wrote the signing key {key.public.describe()} to {path}"
        if kept is not None:
            old = replaced.describe() if replaced else "an unreadable key"
            said += f", replacing {old} (kept as {kept})"
        if trusted is not None:
            said += f"; trusted it in {trusted}"
        print(said, file=sys.stderr)
    print(key.public.text())
    return 0


def _default_name(path: Path) -> str:
    """``HOST-rocmforge-N``, named apart from the key at ``path`` and the trusted keys."""
    from rocmforge.trust.signing import (
        SigningKeyError,
        default_key_name,
        read_secret_key,
        trusted_keys,
    )

    taken: list[str] = []
    with contextlib.suppress(SigningKeyError):  # a broken trusted-keys file must not stop it
        taken += [k.name for k in trusted_keys().values()]
    if path.exists():
        with contextlib.suppress(SigningKeyError):
            taken.append(read_secret_key(path).name)
    return default_key_name(socket.gethostname(), taken)
