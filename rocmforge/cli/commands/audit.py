"""``rocmforge audit WHEEL...``: what produced this wheel, on one screen.

Exit status: 0 every wheel verified, 1 a wheel is tampered, 5 a wheel is only claimed (its stamp is
unverified), 6 a wheel is unknown (no stamp), 7 a wheel diverged (honest, but this store built its
input hash into other bytes), 2 bad input (no such file).
"""

from __future__ import annotations

import argparse
import sys

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_config_option,
    add_json_option,
    add_store_option,
    emit_json,
    open_store,
    print_read,
    settings_of,
    store_choice,
    trusted_of,
)
from rocmforge.cli.parser import RawDescriptionHelpFormatter
from rocmforge.store.audittext import audit_text, banner

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

EPILOG = """\
statuses:
  verified  its digest is in this store's index: byte-identical to what rocmforge built here
  claimed   not in the index, but stamped by rocmforge: the facts are the wheel's own, unverified
  diverged  stamp and RECORD intact, but this store built the same input hash into other
            bytes: a reproducibility failure or an input the hash does not cover
  tampered  stamped, but RECORD or the stamp does not match
  unknown   no rocmforge stamp (built elsewhere) or not a readable wheel
exit status: 0 all verified, 1 tampered, 5 claimed, 7 diverged, 6 unknown (the worst wheel
             decides, in the order verified < claimed < diverged < unknown < tampered),
             2 bad input
"""


def register(sub: Any) -> None:
    """Add the ``audit`` command."""
    p = sub.add_parser(
        "audit",
        help=COMMANDS["audit"],
        epilog=EPILOG,
        formatter_class=RawDescriptionHelpFormatter,
    )
    p.add_argument("wheels", nargs="+", metavar="WHEEL")
    add_store_option(p)
    add_config_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge audit WHEEL...``: print one screen per wheel; exit by the worst status."""
    if not args.json and args.config is None and _verified_by_the_index(args):
        return 0
    from pathlib import Path

    from rocmforge.store.locate import is_store
    from rocmforge.trust.audit import audit_wheel, worst_exit_code

    root, how = store_choice(args)
    store = open_store(args) if is_store(str(root)) else None  # a reader never creates one
    print(banner(str(root), how, found=store is not None), file=sys.stderr)
    trusted = trusted_of(settings_of(args))  # the keys of the config files count here too
    reports = [audit_wheel(Path(w), store=store, trusted=trusted) for w in args.wheels]
    if args.json:
        emit_json([r.to_json() for r in reports])
    else:
        sys.stdout.write(audit_text([r.to_json() for r in reports]))
    return worst_exit_code(reports)


def _verified_by_the_index(args: argparse.Namespace) -> bool:
    """Print the audit of wheels that are all verified by the index of a healthy store, with no
    configuration file or trusted key to consult (:func:`rocmforge.store.readers.audit_texts`);
    return whether it did. Anything else is the full branch's."""
    from rocmforge.store.readers import audit_texts

    wheels = list(args.wheels)
    return print_read(args, lambda root, how: audit_texts(root, how, wheels))
