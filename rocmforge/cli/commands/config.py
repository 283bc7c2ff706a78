"""``rocmforge config``: the effective configuration and where each setting came from.

Reads the user file, the project file (``rocmforge.toml`` found from the current directory, or
``--config FILE``) and the environment the way ``realize`` does (docs/sharing.md).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_config_option, add_json_option, emit_json


def register(sub: Any) -> None:
    """Add the ``config`` command."""
    p = sub.add_parser(
        "config",
        help=COMMANDS["config"],
    )
    p.add_argument(
        "recipes", nargs="*", metavar="RECIPE", help="find the project file from these recipes"
    )
    add_config_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge config``: print the effective settings."""
    from rocmforge.cli.commands._common import settings_of, trusted_of
    from rocmforge.trust.signing import TRUSTED_KEYS_ENV, trusted_keys_path

    settings = settings_of(args)
    keys = trusted_of(settings)
    if TRUSTED_KEYS_ENV in os.environ:
        keys_from = f"${TRUSTED_KEYS_ENV} (replaces the files)"
    else:
        keys_from = f"{trusted_keys_path()} and the configuration files"
    if args.json:
        emit_json(
            {
                **settings.to_json(),
                "trusted_key_names": sorted({k.name for k in keys.values()}),
                "trusted": sorted(
                    ({"name": k.name, "fingerprint": k.fingerprint} for k in keys.values()),
                    key=lambda k: (k["name"], k["fingerprint"]),
                ),
                "keys_from": keys_from,
            }
        )
        return 0

    def file(path: Any, what: str) -> str:
        return f"{what:<20}{path if path else '(none)'}"

    print(file(settings.user_file, "user file:"))
    print(file(settings.project_file, "project file:"))
    origins = settings.origins
    print(f"{'substitute:':<20}{str(settings.substitute).lower()} ({origins['substitute']})")
    print(
        f"{'require-substitute:':<20}{str(settings.require_substitute).lower()} "
        f"({origins['require_substitute']})"
    )
    print("caches (asked in this order):" if settings.caches else "caches:             (none)")
    for url in settings.caches:
        print(f"  {url}  (from {origins['caches'][url]})")
    shown = ", ".join(sorted(k.describe() for k in keys.values()))
    print(f"trusted keys:       {shown or '(none)'}  (from {keys_from})")
    if settings.slurm:
        print(f"[slurm]:            {', '.join(sorted(settings.slurm))}")
    return 0
