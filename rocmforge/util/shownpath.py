"""How a hint names a file: the way the user would type it here."""

from __future__ import annotations

import os


def shown_path(path: str | os.PathLike[str]) -> str:
    """Return ``path`` relative to the current directory when it lies below it (``recipes/x.toml``),
    else absolute: what a hint such as ``rocmforge lock PATH`` should say."""
    absolute = os.path.abspath(path)
    try:
        rel = os.path.relpath(absolute)
    except ValueError:  # no current directory to be relative to
        return absolute
    return absolute if rel == ".." or rel.startswith(".." + os.sep) else rel
