"""The Python interpreters on this host: where a recipe's ``[toolchain] python`` is found.

A recipe asks for a version (``python = "3.12"``); :func:`find_python` looks for ``python3.12``
in this order, without starting an interpreter (``realize`` resolves the toolchain on every
run):

1. each ``PATH`` directory in turn; a pyenv *shims* directory there stands for that pyenv's
   ``versions/*/bin`` (a shim picks its interpreter by the current directory's
   ``.python-version``, so the build would depend on where ``realize`` ran; a shim for a version
   pyenv has not selected does not run at all);
2. pyenv's versions (``$PYENV_ROOT``, else ``~/.pyenv``) even when pyenv is not on ``PATH``;
3. ``/usr/bin`` and ``/usr/local/bin`` (RHEL's ``python3.11``/``python3.12`` packages, Debian's
   and Ubuntu's ``python3.X``, ``make altinstall``).

Among several pyenv installs of one minor version, the one pyenv selects (``PYENV_VERSION``, else
``$PYENV_ROOT/version``) wins, else the newest. :func:`host_pythons` lists every interpreter
these places hold, and :func:`probe_pythons` asks each for its version and whether it can make a
venv and build a C extension (``doctor`` shows them).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^python(3\.\d+)$")
_PATCH = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
#: Where a Python is looked for when neither PATH nor pyenv has it.
SYSTEM_DIRS = ("/usr/bin", "/usr/local/bin")

_PROBE = (
    "import sys, os, sysconfig, importlib.util as u;"
    "print(sys.version.split()[0]);"
    "print(int(all(u.find_spec(m) is not None for m in ('venv', 'ensurepip'))));"
    "print(int(os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))))"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostPython:
    """One interpreter found on the host: ``short`` (``3.12``), where, and how it was found."""

    short: str
    path: Path
    found: str  # "PATH", "pyenv" or "system"
    #: The first of its version in the search: what ``python = "<short>"`` gets.
    chosen: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbedPython:
    """A :class:`HostPython` asked about itself: full version, venv and C-extension headers."""

    short: str
    path: Path
    found: str
    chosen: bool
    version: str | None  # None: it did not run
    venv: bool
    headers: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the interpreter as JSON-ready data."""
        return {
            "short": self.short,
            "version": self.version,
            "path": str(self.path),
            "found": self.found,
            "chosen": self.chosen,
            "venv": self.venv,
            "headers": self.headers,
            "error": self.error,
        }


def _version_key(name: str) -> tuple[int, ...]:
    m = _PATCH.match(name)
    return tuple(int(g) for g in m.groups()) if m else (-1,)


def pyenv_root(env: Mapping[str, str]) -> Path:
    """pyenv's root: ``$PYENV_ROOT``, else ``~/.pyenv``."""
    root = env.get("PYENV_ROOT")
    if root:
        return Path(root)
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".pyenv"


def _pyenv_selected(root: Path, env: Mapping[str, str]) -> list[str]:
    if env.get("PYENV_VERSION"):
        return env["PYENV_VERSION"].split(":")
    try:
        text = (root / "version").read_text()
    except OSError:
        return []
    return [w for w in text.split() if not w.startswith("#")]


def _pyenv_versions(root: Path, env: Mapping[str, str]) -> list[Path]:
    """pyenv's ``versions/*/bin`` directories: the selected ones first, then newest first."""
    try:
        names = [n for n in os.listdir(root / "versions") if not n.startswith(".")]
    except OSError:
        return []
    selected = [n for n in _pyenv_selected(root, env) if n in names]
    rest = sorted((n for n in names if n not in selected), key=_version_key, reverse=True)
    return [root / "versions" / n / "bin" for n in [*selected, *rest]]


def _is_shims(directory: str, root: Path) -> bool:
    return os.path.basename(directory.rstrip("/")) == "shims" and (
        Path(directory).parent == root or (Path(directory).parent / "versions").is_dir()
    )


def _search_dirs(env: Mapping[str, str]) -> list[tuple[Path, str]]:
    """The directories to look in, in order, each with how a Python there was found."""
    root = pyenv_root(env)
    out: list[tuple[Path, str]] = []
    pyenv_done = False
    for d in env.get("PATH", "").split(os.pathsep):
        if not d:
            continue
        if _is_shims(d, root):
            shims_root = Path(d).parent
            out += [(b, "pyenv") for b in _pyenv_versions(shims_root, env)]
            pyenv_done = pyenv_done or shims_root == root
        else:
            out.append((Path(d), "PATH"))
    if not pyenv_done:
        out += [(b, "pyenv") for b in _pyenv_versions(root, env)]
    out += [(Path(d), "system") for d in SYSTEM_DIRS]
    return out


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_python(short: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Return the ``python{short}`` a recipe asking for ``short`` (``"3.12"``) gets, or None."""
    env = os.environ if env is None else env
    for d, _ in _search_dirs(env):
        exe = d / f"python{short}"
        if _executable(exe):
            return exe
    return None


#: ``[toolchain] python = "3"``: whatever Python 3 the host has (the first ``python3`` found).
ANY = "3"


def concrete_version(declared: str, env: Mapping[str, str] | None = None) -> str:
    """The ``X.Y`` a declared ``[toolchain] python`` stands for: itself, or for :data:`ANY` the
    version of the ``python3`` :func:`find_python` finds (read from the name its symlinks end at,
    ``python3.12``; started once only when that name does not say). None found: ``ANY`` itself.
    """
    if declared != ANY:
        return declared
    found = find_python(ANY, env)
    if found is None:
        return declared
    m = _NAME.match(Path(os.path.realpath(found)).name)
    if m:
        return m.group(1)
    try:
        out = subprocess.run(
            [str(found), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return declared
    return out if re.fullmatch(r"3\.\d+", out) else declared


def host_pythons(env: Mapping[str, str] | None = None) -> list[HostPython]:
    """Every ``python3.X`` the search of :func:`find_python` can reach, one per interpreter.

    Sorted by version, each version's interpreters in search order: the first of each is the
    one a recipe asking for that version gets (``chosen``). A file reached twice (a symlink, a
    directory on PATH twice) is listed once.
    """
    env = os.environ if env is None else env
    found: list[HostPython] = []
    seen: set[str] = set()
    shorts: set[str] = set()
    for d, how in _search_dirs(env):
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            m = _NAME.match(name)
            exe = d / name
            if m is None or not _executable(exe):
                continue
            real = os.path.realpath(exe)
            if real in seen:
                continue
            seen.add(real)
            chosen = m.group(1) not in shorts
            shorts.add(m.group(1))
            found.append(HostPython(short=m.group(1), path=exe, found=how, chosen=chosen))
    return sorted(found, key=lambda p: _version_key(p.short + ".0"))  # stable: search order


def found_summary(env: Mapping[str, str] | None = None) -> str:
    """One line naming the versions found and where (for a 'not found' error)."""
    chosen = [p for p in host_pythons(env) if p.chosen]
    if not chosen:
        return "no python3.X found"
    return "found: " + ", ".join(f"{p.short} ({p.path})" for p in chosen)


def probe_python(p: HostPython) -> ProbedPython:
    """Start ``p`` once: its full version, whether it has ``venv`` + ``ensurepip`` and headers."""

    def probed(version: str | None, venv: bool, headers: bool, error: str | None) -> ProbedPython:
        return ProbedPython(short=p.short, path=p.path, found=p.found, chosen=p.chosen,
                            version=version, venv=venv, headers=headers, error=error)  # fmt: skip

    try:
        proc = subprocess.run(
            [str(p.path), "-I", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return probed(None, False, False, str(exc))
    lines = proc.stdout.split()
    if proc.returncode != 0 or len(lines) < 3:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        error = f"exited {proc.returncode}" + (f": {detail[-1]}" if detail else "")
        return probed(None, False, False, error)
    return probed(lines[0], lines[1] == "1", lines[2] == "1", None)


def probe_pythons(env: Mapping[str, str] | None = None) -> tuple[ProbedPython, ...]:
    """:func:`host_pythons`, each probed (in parallel: one short interpreter start each)."""
    from concurrent.futures import ThreadPoolExecutor

    pythons = host_pythons(env)
    if not pythons:
        return ()
    with ThreadPoolExecutor(max_workers=min(8, len(pythons))) as pool:
        return tuple(pool.map(probe_python, pythons))
