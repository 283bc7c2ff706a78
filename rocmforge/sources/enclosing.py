"""A path source inside an enclosing git repository: what that repository's ignore rules remove.

Inside a git work tree a path source's listing is git's, so an ignore rule of the *enclosing*
repository (its top ``.gitignore`` ignoring ``lib/``, say) silently leaves files of the source
out. :func:`enclosing_ignored` lists exactly those (``plan`` prints them);
``[source] enclosing-ignores = false`` makes the listing honour only the source directory's own
ignore rules (:func:`own_rules_listing`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from rocmforge.errors import SourceError
from rocmforge.sources.git import git_env
from rocmforge.sources.gitlisting import find_gitdir, split_z


def _git(
    cwd: Path, args: list[str], *, stdin: bytes | None = None, ok: tuple[int, ...] = (0,)
) -> bytes:
    try:
        proc = subprocess.run(
            ["git", "-c", "safe.directory=*", "--no-optional-locks", *args],
            cwd=cwd,
            env=git_env(),
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    except OSError as exc:
        raise SourceError(f"{cwd}: cannot run git: {exc}") from exc
    if proc.returncode not in ok:
        line = proc.stderr.decode(errors="replace").strip().splitlines()[:1]
        raise SourceError(
            f"{cwd}: git {' '.join(args)} failed: {line[0] if line else proc.returncode}"
        )
    return proc.stdout


def work_tree_top(root: Path) -> Path | None:
    """Return the top of the git work tree holding ``root``, or None outside git."""
    if find_gitdir(root) is None:
        return None
    out = _git(root, ["rev-parse", "--show-toplevel"]).decode().strip()
    return Path(out) if out else None


def is_enclosed(root: Path) -> bool:
    """True if ``root`` lies inside a git work tree without being its top."""
    top = work_tree_top(root)
    return top is not None and os.path.realpath(top) != os.path.realpath(root)


def enclosing_ignored(root: Path) -> list[str]:
    """Return the paths below ``root`` (relative, directories ending in ``/``) that ignore rules
    from outside ``root`` leave out of its listing: rules of the enclosing repository's
    ``.gitignore`` files above ``root``, its ``info/exclude``. Empty unless ``root`` is enclosed."""
    root = Path(os.path.abspath(root))
    if not is_enclosed(root):
        return []
    ignored = split_z(
        _git(root, ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"])
    )
    if not ignored:
        return []
    out = _git(
        root,
        ["check-ignore", "-z", "-v", "--no-index", "--stdin"],
        stdin=b"".join(os.fsencode(p) + b"\0" for p in ignored),
        ok=(0, 1),
    )
    fields = split_z_keep(out)
    top = work_tree_top(root)
    assert top is not None
    inside = os.path.join(os.path.realpath(root), "")
    left: list[str] = []
    for i in range(0, len(fields) - 3, 4):
        source, _line, pattern, path = fields[i : i + 4]
        if not pattern or pattern.startswith("!"):
            continue
        rule_file = os.path.realpath(os.path.join(top, source))
        if not rule_file.startswith(inside):
            left.append(path)
    return sorted(left)


def split_z_keep(data: bytes) -> list[str]:
    """Split NUL-terminated git output into fields, keeping empty ones."""
    parts = data.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [os.fsdecode(x) for x in parts]


def own_rules_listing(root: Path) -> list[str]:
    """Return every file below ``root`` except ``.git`` and what ``root``'s own ``.gitignore``
    files ignore, as if ``root`` were the top of a repository of its own (no tracked files)."""
    root = Path(os.path.abspath(root))
    with tempfile.TemporaryDirectory(prefix="rocmforge-own-") as tmp:
        _git(Path(tmp), ["init", "-q", "--bare", tmp])
        out = _git(
            root,
            [f"--git-dir={tmp}", f"--work-tree={root}", "ls-files", "-z", "--others",
             "--exclude-standard"],
        )  # fmt: skip
    return [p for p in split_z(out) if not p.endswith("/")]
