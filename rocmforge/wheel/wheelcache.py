"""Requirement wheels installed once into the store and hard-linked into build venvs.

pypa/installer reads every member of a wheel, checks it against ``RECORD`` and writes it out:
for ``setuptools`` that is ~1,000 files on every build. Here each requirement wheel is installed
once — by the same installer call, with the same RECORD check, scripts, entry points and
``INSTALLER`` file — into a venv-shaped tree ``sources/wheels-unpacked/<wheel>.<key>/`` laid out
like the build venv (``lib/pythonX.Y/site-packages``, ``bin``, ``include``, data at the root).
Later builds hard-link that tree's files into their fresh venv, which gives the venv byte for
byte what a direct install gives, RECORD included.

The key is the wheel's sha256, the venv's ``X.Y`` and the shebang interpreter (scripts embed it),
so a tree is only reused where a direct install would produce identical files. Sharing is safe
because the build venv is mounted read-only in the sandbox; the tree's files are made read-only
too. A runner that does not mount the venv read-only (no sandbox) installs directly instead.
The tree is built in ``sources/tmp`` and renamed into place, so concurrent builds never see a
half-written tree; gc collects a tree together with the requirement wheel it came from.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmforge.errors import RequirementError
from rocmforge.store import layout
from rocmforge.util.fsutil import make_tree_once

#: Bumped when the tree's layout or the installer call changes: old trees are then not reused.
_FORMAT = "1"


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkedWheel:
    """One requirement wheel linked into a venv: its tree and whether it was just unpacked."""

    wheel: Path
    tree: Path
    unpacked: bool
    files: int


def tree_name(wheel: Path, sha256: str, *, python_xy: str, interpreter: str) -> str:
    """Return ``<wheel file name>.<key>``, the directory name of ``wheel``'s installed tree."""
    key = hashlib.sha256(
        "\0".join((_FORMAT, sha256, python_xy, interpreter)).encode()
    ).hexdigest()[:24]
    return f"{wheel.name}.{key}"


def _install_tree(wheel: Path, prefix: Path, *, xy: str, interpreter: str) -> None:
    """Install ``wheel`` into the venv-shaped tree ``prefix`` with pypa/installer."""
    from rocmforge.wheel.install import install_wheel

    install_wheel(wheel, prefix, xy=xy, interpreter=interpreter, error=RequirementError)


def _seal_files(prefix: Path) -> int:
    """Make every regular file below ``prefix`` read-only (keeping x bits); return their count."""
    count = 0
    for dirpath, _dirs, files in os.walk(prefix):
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o222)
                count += 1
    return count


def ensure_tree(
    sources_dir: Path, wheel: Path, sha256: str, *, python_xy: str, interpreter: str
) -> tuple[Path, bool]:
    """Return ``wheel``'s installed tree under ``sources_dir``, installing it first if missing.

    The second value is True when this call installed it. Raises RequirementError.
    """
    name = tree_name(wheel, sha256, python_xy=python_xy, interpreter=interpreter)
    final = sources_dir / layout.SOURCES_WHEELS_UNPACKED / name

    def fill(prefix: Path) -> None:
        (prefix / "bin").mkdir()
        (prefix / "lib" / f"python{python_xy}" / "site-packages").mkdir(parents=True)
        _install_tree(wheel, prefix, xy=python_xy, interpreter=interpreter)
        _seal_files(prefix)

    tmp_root = sources_dir / layout.SOURCES_TMP
    try:
        made = make_tree_once(final, tmp_root, f"unpack.{wheel.name}.", fill, final.is_dir)
    except OSError as exc:
        raise RequirementError(f"{wheel}: cannot unpack into {final}: {exc}") from exc
    return final, made


#: Files of a tree above which :func:`link_tree` links with threads (a torch-sized tree holds
#: ~14,000): a link is one syscall, and threads overlap the file system's waits, as uv's
#: parallel install does.
LINK_THREADS_ABOVE = 2000
LINK_THREADS = 8


def link_tree(tree: Path, venv: Path) -> int:
    """Hard-link every file of ``tree`` into ``venv`` (directories made, symlinks copied).

    A file that already exists in ``venv`` is an error, as pypa/installer makes it. Falls back to
    copying across file systems. Returns the number of files. Raises OSError or FileExistsError.
    """
    pairs: list[tuple[str, str]] = []
    stack = [(os.fspath(tree), os.fspath(venv))]
    while stack:  # scandir's entry types need no stat per file (a torch tree: ~14,000)
        src_dir, dst_dir = stack.pop()
        with os.scandir(src_dir) as it:
            for entry in it:
                dst = os.path.join(dst_dir, entry.name)
                if entry.is_symlink():
                    os.symlink(os.readlink(entry.path), dst)
                elif entry.is_dir():
                    os.makedirs(dst, exist_ok=True)
                    stack.append((entry.path, dst))
                else:
                    pairs.append((entry.path, dst))
    if len(pairs) <= LINK_THREADS_ABOVE:
        for src, dst in pairs:
            _link(src, dst)
    else:
        from concurrent.futures import ThreadPoolExecutor

        step = -(-len(pairs) // (LINK_THREADS * 4))
        chunks = [pairs[i : i + step] for i in range(0, len(pairs), step)]
        with ThreadPoolExecutor(LINK_THREADS) as pool:
            for _ in pool.map(_link_all, chunks):  # re-raises the first error
                pass
    return len(pairs)


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:  # another file system: copy instead
            raise
        shutil.copy2(src, dst)


def _link_all(pairs: list[tuple[str, str]]) -> None:
    for src, dst in pairs:
        _link(src, dst)


def install_linked(
    requirements: Sequence[tuple[Path, str]],
    venv: Path,
    *,
    sources_dir: Path,
    python_xy: str,
    interpreter: str,
) -> list[LinkedWheel]:
    """Install each ``(wheel, sha256)`` into ``venv`` by hard-linking its installed tree.

    ``interpreter`` is the shebang of generated scripts (the venv's python as the sandbox sees
    it). Raises RequirementError naming the wheel.
    """
    out: list[LinkedWheel] = []
    for wheel, sha256 in requirements:
        tree, fresh = ensure_tree(
            sources_dir, wheel, sha256, python_xy=python_xy, interpreter=interpreter
        )
        try:
            n = link_tree(tree, venv)
        except FileExistsError as exc:
            raise RequirementError(
                f"{wheel}: cannot install into {venv}: {exc.filename} already exists"
                " (installed by an earlier requirement)"
            ) from exc
        except OSError as exc:
            raise RequirementError(f"{wheel}: cannot link {tree} into {venv}: {exc}") from exc
        out.append(LinkedWheel(wheel=wheel, tree=tree, unpacked=fresh, files=n))
    return out
