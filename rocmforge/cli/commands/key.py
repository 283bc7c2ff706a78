"""``rocmforge key generate|public``: the ed25519 key that signs the store's provenance.

``generate`` writes a new key outside the store (``$ROCMFORGE_SIGNING_KEY`` or
``$XDG_CONFIG_HOME/rocmforge/signing.key`` unless ``--out`` says otherwise), never overwriting one,
and prints its public key ``NAME:BASE64`` on stdout; ``--trust`` also adds that public key to the
trusted keys ``audit`` checks signatures with. ``public`` prints the public key of a key file.
"""

from __future__ import annotations

import argparse
import socket
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
    gen.add_argument("--name", help="key name (default: HOSTNAME-rocmforge-1)")
    gen.add_argument("--out", metavar="FILE", help="key file (default: the signing key path)")
    gen.add_argument("--trust", action="store_true", help="add the public key to trusted-keys")
    add_json_option(gen)
    pub = actions.add_parser("public", help="print the public key of a signing key file")
    pub.add_argument("--key", metavar="FILE", help="key file (default: the signing key path)")
    add_json_option(pub)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge key generate|public``."""
    from rocmforge.errors import UsageError
    from rocmforge.trust.signing import generate_key, read_secret_key, signing_key_path, trust_key

    default = signing_key_path()
    chosen = getattr(args, "out", None) or getattr(args, "key", None)
    if chosen is None and default is None:
        raise UsageError("signing is turned off ($ROCMFORGE_SIGNING_KEY is empty); give a file")
    path = Path(chosen) if chosen else default
    assert path is not None
    trusted = None
    if args.action == "generate":
        name = args.name or f"{socket.gethostname()}-rocmforge-1"
        key = generate_key(path, name)
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
                "public_key": key.public.text(),
                "key_file": str(path),
                "trusted_keys": str(trusted) if trusted else None,
            }
        )
    else:
        print(key.public.text())
    return 0
