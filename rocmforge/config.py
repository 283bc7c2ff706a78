"""Configuration files: per user and per project, for binary caches and trust (and, later, Slurm).

Two files, both TOML, both optional:

- the **user** file ``$XDG_CONFIG_HOME/rocmforge/config.toml`` (``~/.config/...``);
- the **project** file ``rocmforge.toml``, found walking up from each recipe's directory, then
  from the current directory (the way the store is found), or named with ``--config FILE``.
  A project file owned by another user (not you, not root) is ignored with a note: a file
  planted in a shared directory above your recipes must not choose your caches.

Keys (all optional)::

    caches = ["oci://registry.example.org/team/wheels", "file:///shared/cache"]
    trusted-keys = ["ci-builder-1:BASE64...", "keys/ci-builder-1.pub"]   # a key or a key file
    substitute = true             # false: ask no cache (like --no-substitute)
    require-substitute = false    # true: fail instead of building a miss
    trust-project-keys = false    # user file only: honour a project file's trusted-keys

    [slurm]                       # the Slurm executor's options (issue 17 reads this table)

Precedence: command-line flags, then the environment (``$ROCMFORGE_CACHES``,
``$ROCMFORGE_TRUSTED_KEYS``), then the project file, then the user file. ``caches`` from every
source are asked in that order (duplicates once); a scalar is taken from the first source that
sets it. Trusted keys are the union of the user's keys (``trusted-keys`` file and config) and,
only when the user file says ``trust-project-keys = true``, the project's; a set
``$ROCMFORGE_TRUSTED_KEYS`` replaces them all (see :mod:`rocmforge.trust.signing`).

Imports nothing of rocmforge but :mod:`rocmforge.errors` and :mod:`rocmforge.util.configpaths`
(where the files are), so every layer may read it.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rocmforge.errors import EXIT_BAD_INPUT, RocmforgeError
from rocmforge.util import configpaths
from rocmforge.util.configpaths import PROJECT_FILE as PROJECT_FILE
from rocmforge.util.configpaths import USER_FILE as USER_FILE

#: The URL schemes of binary caches (rocmforge/cache/urls.py opens them); a plain path is a
#: ``file://`` cache.
CACHE_SCHEMES = ("file", "oci")
#: Tables other subsystems own: parsed as plain tables here, validated by their owner.
RESERVED_TABLES = ("slurm",)

_LISTS = ("caches", "trusted-keys")
_BOOLS = ("substitute", "require-substitute", "trust-project-keys")
_USER_ONLY = ("trust-project-keys",)


class ConfigError(RocmforgeError):
    """A configuration file is unreadable or has a bad key or value (exit 2: fix the file)."""

    exit_code = EXIT_BAD_INPUT
    about_recipe = False


@dataclass(frozen=True, slots=True)
class KeyText:
    """One trusted key as written (``NAME:BASE64``) and where it was read (for error messages)."""

    text: str
    where: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """One configuration file, parsed; None (or empty) for what it does not set."""

    file: Path | None = None
    caches: tuple[str, ...] = ()
    trusted_keys: tuple[KeyText, ...] = ()
    substitute: bool | None = None
    require_substitute: bool | None = None
    trust_project_keys: bool | None = None
    #: The ``[slurm]`` table as written (issue 17 validates it); empty when absent.
    slurm: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def config_home(environ: Mapping[str, str] | None = None) -> Path:
    """Return rocmforge's per-user configuration directory (``$XDG_CONFIG_HOME/rocmforge``)."""
    return Path(configpaths.config_home(environ))


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Return the user configuration file (it may not exist)."""
    return config_home(environ) / USER_FILE


def _key_file(path: Path, *, file: Path) -> list[KeyText]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"{file}: trusted-keys: cannot read key file {path}: {reason}") from None
    words = [w for line in text.splitlines() for w in line.split("#", 1)[0].split()]
    return [KeyText(w, f"{file}: trusted-keys: {path}") for w in words]


def _looks_like_key(item: str) -> bool:
    """``NAME:BASE64`` rather than a path: a colon with no slash before it."""
    name, sep, rest = item.partition(":")
    return bool(sep and name and rest) and "/" not in name


def parse_config(text: str, file: Path, *, user: bool) -> Config:
    """Parse the TOML ``text`` of the configuration ``file``; :class:`ConfigError` names the
    file and key of the first problem. ``user`` says whether it is the user file (only that one
    may set ``trust-project-keys``). Relative key-file paths are read relative to ``file``.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    known = (*_LISTS, *_BOOLS, *RESERVED_TABLES)
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"{file}: {key}: unknown key (known: {', '.join(sorted(known))})")
        if key in _LISTS and not (
            isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)
        ):
            raise ConfigError(f"{file}: {key}: expected a list of non-empty strings, got {value!r}")
        if key in _BOOLS and not isinstance(value, bool):
            raise ConfigError(f"{file}: {key}: expected true or false, got {value!r}")
        if key in RESERVED_TABLES and not isinstance(value, dict):
            raise ConfigError(f"{file}: {key}: expected a table ([{key}]), got {value!r}")
        if key in _USER_ONLY and not user:
            raise ConfigError(
                f"{file}: {key}: only the user file ({USER_FILE}) may set this, not a project"
            )
    for url in data.get("caches", []):
        scheme = url.split("://", 1)[0] if "://" in url else "file"
        if scheme not in CACHE_SCHEMES:
            supported = ", ".join(f"{s}://" for s in CACHE_SCHEMES)
            raise ConfigError(
                f"{file}: caches: {url}: unsupported scheme {scheme!r} (supported: {supported})"
            )
    keys: list[KeyText] = []
    for item in data.get("trusted-keys", []):
        item = item.strip()
        if _looks_like_key(item):
            keys.append(KeyText(item, f"{file}: trusted-keys"))
        else:
            path = Path(os.path.expanduser(item))
            keys.extend(_key_file(path if path.is_absolute() else file.parent / path, file=file))
    return Config(
        file=file,
        caches=tuple(c.strip() for c in data.get("caches", [])),
        trusted_keys=tuple(keys),
        substitute=data.get("substitute"),
        require_substitute=data.get("require-substitute"),
        trust_project_keys=data.get("trust-project-keys"),
        slurm=MappingProxyType(dict(data.get("slurm", {}))),
    )


def load_config(path: Path, *, user: bool) -> Config:
    """Read and parse the configuration file at ``path`` (an empty Config if it is absent)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"{path}: cannot read: {reason}") from None
    return parse_config(text, path, user=user)


def find_project_config(starts: Iterable[str | Path]) -> Path | None:
    """Return the first ``rocmforge.toml`` at or above any of ``starts`` (directories), or None."""
    found = configpaths.find_project_config(os.fspath(s) for s in starts)
    return Path(found) if found is not None else None


def _owned_by_other(path: Path) -> int | None:
    """The owner's uid when ``path`` belongs to another user than us and root, else None."""
    try:
        uid = os.stat(path).st_uid
    except OSError:
        return None
    return uid if uid not in (os.getuid(), 0) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The effective settings of one command: flags over environment over project over user."""

    caches: tuple[str, ...] = ()
    #: Trusted keys from configuration files (``$ROCMFORGE_TRUSTED_KEYS`` still replaces them).
    trusted_keys: tuple[KeyText, ...] = ()
    substitute: bool = True
    require_substitute: bool = False
    user_file: Path | None = None
    project_file: Path | None = None
    #: Things the CLI should warn about once (an ignored project file, ignored project keys).
    notes: tuple[str, ...] = ()
    slurm: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: Where each setting came from: ``{"caches": ["--cache", "$ROCMFORGE_CACHES", path]}``.
    origins: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def to_json(self) -> dict[str, Any]:
        """Return the settings as JSON-ready data (keys as ``NAME:BASE64`` texts)."""
        return {
            "caches": list(self.caches),
            "trusted_keys": [{"key": k.text, "from": k.where} for k in self.trusted_keys],
            "substitute": self.substitute,
            "require_substitute": self.require_substitute,
            "user_file": str(self.user_file) if self.user_file else None,
            "project_file": str(self.project_file) if self.project_file else None,
            "notes": list(self.notes),
            "slurm": dict(self.slurm),
            "origins": dict(self.origins),
        }


#: Environment variable with cache URLs (space-separated), asked after ``--cache`` flags.
CACHES_ENV = "ROCMFORGE_CACHES"


def effective_settings(
    *,
    caches: Iterable[str] = (),
    substitute: bool | None = None,
    require_substitute: bool | None = None,
    starts: Iterable[str | Path] = (),
    project: Path | None = None,
    no_project: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Combine flags (the keyword arguments), the environment, the project file and the user
    file into :class:`Settings`.

    ``starts`` are the directories the project file is searched from (the recipes' directories,
    then the current directory); ``project`` names it instead (``--config``); ``no_project``
    reads none.
    """
    env = os.environ if environ is None else environ
    notes: list[str] = []
    user_path = user_config_path(env)
    user = load_config(user_path, user=True)
    proj = Config()
    if not no_project:
        path = project if project is not None else find_project_config(starts)
        if path is not None:
            if project is not None and not path.is_file():
                raise ConfigError(f"--config {path}: no such file")
            other = _owned_by_other(path) if project is None else None
            if other is not None:
                notes.append(
                    f"{path}: ignored: owned by uid {other}, not by you or root (pass --config "
                    f"{path} to use it anyway)"
                )
            else:
                proj = load_config(path, user=False)
    sources: list[tuple[str, Config]] = [("project", proj), ("user", user)]
    origins: dict[str, Any] = {}
    urls: list[tuple[str, str]] = [(u, "--cache") for u in caches]
    urls += [(u, f"${CACHES_ENV}") for u in env.get(CACHES_ENV, "").split()]
    for _, cfg in sources:
        urls += [(u, str(cfg.file)) for u in cfg.caches]
    ordered: dict[str, str] = {}
    for url, origin in urls:
        ordered.setdefault(url, origin)
    origins["caches"] = dict(ordered)

    def scalar(name: str, flag: bool | None, default: bool) -> bool:
        if flag is not None:
            origins[name] = "command line"
            return flag
        for _, cfg in sources:
            value = getattr(cfg, name)
            if value is not None:
                origins[name] = str(cfg.file)
                return bool(value)
        origins[name] = "default"
        return default

    keys = list(user.trusted_keys)
    if proj.trusted_keys:
        if user.trust_project_keys:
            keys += proj.trusted_keys
        else:
            notes.append(
                f"{proj.file}: trusted-keys ignored: a project's keys count only when "
                f"{user_path} says trust-project-keys = true"
            )
    return Settings(
        caches=tuple(ordered),
        trusted_keys=tuple(keys),
        substitute=scalar("substitute", substitute, True),
        require_substitute=scalar("require_substitute", require_substitute, False),
        user_file=user.file,
        project_file=proj.file,
        notes=tuple(notes),
        slurm=MappingProxyType({**user.slurm, **proj.slurm}),
        origins=MappingProxyType(origins),
    )
