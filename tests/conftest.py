"""Shared fixtures: a local wheelhouse, a tiny fast project, and running the real CLI."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
WHEELHOUSE = Path(os.environ.get("ROCMFORGE_TEST_WHEELHOUSE", REPO / ".ci" / "wheelhouse"))

TINY_RECIPE = """\
schema = 1

[package]
name = "tiny"
version = "0.1"

[source]
path = "{src}"

[build]
steps = ["python mkwheel.py $OUT tiny 0.1"]

[check]
import = "tiny"
"""


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile the package first, as pip leaves it installed (see scripts/setup.sh).

    The tests run the CLI hundreds of times; with PYTHONDONTWRITEBYTECODE set and stale or
    missing caches, every one of those runs would compile the package again.
    """
    compileall.compile_dir(REPO / "rocmforge", quiet=1)


def pip_args(*extra_dirs: Path) -> str:
    """Return ROCMFORGE_PIP_ARGS that make pip use only local wheel directories."""
    links = " ".join(f"--find-links {d}" for d in (WHEELHOUSE, *extra_dirs))
    return f"--no-index {links}"


def rf(
    *args: str | Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Run the real ``rocmforge`` CLI in a subprocess and capture its output."""
    full = dict(os.environ)
    full.setdefault("ROCMFORGE_PIP_ARGS", pip_args())
    full.pop("ROCMFORGE_STORE", None)
    if env:
        full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "rocmforge", *map(str, args)],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def wheelhouse() -> Path:
    """The local wheelhouse holding setuptools for PEP 517 builds (filled by scripts/test.sh)."""
    if not list(WHEELHOUSE.glob("setuptools-75.6.0-*.whl")):
        pytest.skip(f"no setuptools 75.6.0 wheel in {WHEELHOUSE}; run scripts/test.sh")
    return WHEELHOUSE


@pytest.fixture
def tiny_src(tmp_path: Path) -> Path:
    """A compiler-free project whose build step writes a wheel with mkwheel.py."""
    src = tmp_path / "tiny-src"
    (src / "tiny").mkdir(parents=True)
    shutil.copy(DATA / "mkwheel.py", src / "mkwheel.py")
    (src / "tiny" / "__init__.py").write_text("VALUE = 42\n")
    return src


@pytest.fixture
def tiny_recipe(tmp_path: Path, tiny_src: Path) -> Path:
    """A recipe file for the tiny project."""
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_RECIPE.format(src=tiny_src))
    return path


@pytest.fixture(autouse=True)
def _provenance_is_valid(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, validate every provenance statement it left in its ``tmp_path``."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is not None:
        from provenance_check import validate_statements_under

        validate_statements_under(tmp)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """An empty store directory."""
    return tmp_path / "store"


GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` with a fixed identity and no user config; return stdout."""
    env = dict(os.environ, **GIT_ENV)
    proc = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    """Commit everything in ``repo`` and return the new commit id."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")
