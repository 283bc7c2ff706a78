"""Where rocmforge's configuration files are, as plain strings: the one place the names live.

:mod:`rocmforge.config` (the full reader, with ``tomllib`` and dataclasses) and
:mod:`rocmforge.trust.signing` find their files here, and the read commands' readers
(:mod:`rocmforge.store.readers`) ask the same functions whether any configuration file exists
before they answer a command that the configuration could change. Imports only ``os``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: The project file's name, looked for in each directory from the recipe's upward.
PROJECT_FILE = "rocmforge.toml"
#: The user file's name inside ``$XDG_CONFIG_HOME/rocmforge``.
USER_FILE = "config.toml"
#: The trusted public keys file inside ``$XDG_CONFIG_HOME/rocmforge``.
TRUSTED_KEYS_FILE = "trusted-keys"
#: The environment variable whose keys, when set, replace the trusted-keys file and config keys.
TRUSTED_KEYS_ENV = "ROCMFORGE_TRUSTED_KEYS"


def config_home(environ: Mapping[str, str] | None = None) -> str:
    """Return rocmforge's per-user configuration directory (``$XDG_CONFIG_HOME/rocmforge``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".config"
    )
    return os.path.join(base, "rocmforge")


def find_project_config(starts: Iterable[str]) -> str | None:
    """Return the first ``rocmforge.toml`` at or above any of ``starts`` (directories), or None."""
    for start in dict.fromkeys(os.path.abspath(s) for s in starts):
        here = start
        while True:
            candidate = os.path.join(here, PROJECT_FILE)
            if os.path.isfile(candidate):
                return candidate
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
    return None
