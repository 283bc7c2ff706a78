"""Which store a command uses: found the way git finds ``.git``, never created by a reader.

Order (the first that applies wins):

1. ``--store DIR``;
2. walking up from each recipe's directory, then from the current directory, the first
   directory that is a store or holds one named ``store`` (a store carries the
   :data:`~rocmforge.store.layout.MARKER` file; a store made before the marker existed is
   recognised by its ``entries/`` and ``gc.lock``);
3. ``$ROCMFORGE_STORE``;
4. the per-user store ``$XDG_DATA_HOME/rocmforge/store`` (``~/.local/share/rocmforge/store``).

Imports only ``os`` and the import-free layout module: the realize memo's fast path
(:mod:`rocmforge.pipeline.memo`) must pick the same store as the full CLI, before anything heavy
loads.
"""

from __future__ import annotations

import os

from rocmforge.store import layout

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: How a store was chosen, as :func:`find_store` reports it.
BY_OPTION = "--store"
BY_WALK = "found above"
BY_ENV = "$ROCMFORGE_STORE"
BY_USER = "per-user default"


def is_store(path: str) -> bool:
    """True if ``path`` is a rocmforge store (its marker, or an older store's layout)."""
    if os.path.isfile(os.path.join(path, layout.MARKER)):
        return True
    return os.path.isdir(os.path.join(path, layout.ENTRIES)) and os.path.isfile(
        os.path.join(path, layout.GC_LOCK)
    )


def _walk_up(start: str) -> str | None:
    """The first store at or above ``start`` (the directory itself, or its ``store/``)."""
    here = os.path.abspath(start)
    while True:
        for candidate in (here, os.path.join(here, layout.DEFAULT_NAME)):
            if is_store(candidate):
                return candidate
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def user_store(environ: Mapping[str, str]) -> str:
    """The per-user default store: ``$XDG_DATA_HOME/rocmforge/store``."""
    data = environ.get("XDG_DATA_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(os.path.abspath(data), "rocmforge", layout.DEFAULT_NAME)


#: Where host facts are cached when ``$ROCMFORGE_HOST_CACHE`` does not say.
HOST_CACHE_ENV = "ROCMFORGE_HOST_CACHE"


def host_cache(environ: Mapping[str, str] | None = None) -> str:
    """The per-user cache of host facts: ``$ROCMFORGE_HOST_CACHE``, else
    ``$XDG_CACHE_HOME/rocmforge/host`` (``~/.cache/rocmforge/host``).

    The toolchain probe, the system package manifest, the toolchain Python's prefix and the
    bwrap trial describe this machine, not a store: every store of the user shares them (a
    fresh store no longer rescans /usr, about 2 s with 1,000 packages). Each value is guarded
    by the stat signatures of what it read (:class:`~rocmforge.util.statcache.StatCache`), so
    a shared home seen from several hosts costs rescans, never a wrong answer.
    """
    env = os.environ if environ is None else environ
    explicit = env.get(HOST_CACHE_ENV)
    if explicit:
        return os.path.abspath(explicit)
    base = env.get("XDG_CACHE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".cache"
    )
    return os.path.join(os.path.abspath(base), "rocmforge", "host")


def find_store(
    explicit: str | None,
    *,
    recipes: Iterable[str] = (),
    cwd: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """Return ``(absolute store root, how it was chosen)`` (one of the ``BY_*`` words).

    The root may not exist (``--store`` of a new store, or the per-user default before the
    first ``realize``); whether to create it is the caller's choice.
    """
    env = os.environ if environ is None else environ
    if explicit:
        return os.path.abspath(explicit), BY_OPTION
    starts = [os.path.dirname(os.path.abspath(r)) for r in recipes]
    starts.append(cwd or os.getcwd())
    for start in dict.fromkeys(starts):
        found = _walk_up(start)
        if found is not None:
            return found, BY_WALK
    if env.get("ROCMFORGE_STORE"):
        return os.path.abspath(env["ROCMFORGE_STORE"]), BY_ENV
    return user_store(env), BY_USER
