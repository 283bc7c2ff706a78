"""Shared fixtures: a local wheelhouse, a tiny fast project, and running the real CLI."""

from __future__ import annotations

import base64
import compileall
import contextlib
import gc
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"

# tests/ mirrors the package: tests/<wing>/test_<module>.py for the units of rocmforge/<wing>/,
# tests/e2e/ for the end-to-end tests that need real processes (sandbox builds, Slurm, signals).
# The folders are not packages (a tests/wheel/ package would shadow ``import wheel``); test
# modules import each other and the helpers here by their basename (``from test_oci import
# Registry``), so every folder is on sys.path, as pytest puts tests/ there for this file, and
# basenames stay unique across folders (pytest refuses two of one name).
sys.path.extend(
    str(d)
    for d in sorted(TESTS.iterdir())
    if d.is_dir() and d.name not in ("data", "__pycache__") and str(d) not in sys.path
)
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
    # The per-user default store must never be the real one of whoever runs the tests.
    os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="rocmforge-test-xdg-")
    # ... nor its host cache; one for the whole session, shared like a user's: the system
    # manifest is scanned once, not once per test store.
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="rocmforge-test-xdg-cache-")
    os.environ.pop("ROCMFORGE_HOST_CACHE", None)


def host_cache_dir() -> Path:
    """The session's host cache (set in :func:`pytest_sessionstart`): tests that resolve the
    real host's toolchain share its system manifest instead of scanning /usr each."""
    from rocmforge.store.locate import host_cache

    return Path(host_cache())


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove the session's per-user directories (the suite leaves the host as it found it)."""
    for name in ("XDG_DATA_HOME", "XDG_CACHE_HOME"):
        where = os.environ.get(name, "")
        if os.path.basename(where).startswith("rocmforge-test-xdg-"):
            shutil.rmtree(where, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (scripts/test.sh), keep together the tests of a
    module that share a module- or session-scoped fixture of that module (a private Slurm, a
    built store, a cached Debian root): it is made once, on one worker, never twice at a time.
    Every other test goes to whichever worker is free."""
    for item in items:
        infos = getattr(item, "_fixtureinfo", None)
        defs = infos.name2fixturedefs.values() if infos is not None else ()
        module = item.nodeid.split("::", 1)[0]
        if any(
            d.scope in ("module", "session") and (d.baseid or "").startswith(module)
            for fixturedefs in defs
            for d in fixturedefs
        ):
            item.add_marker(pytest.mark.xdist_group(module))


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


def rf_in(
    *args: str | Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in this process (``rocmforge.cli.main.main``), as :func:`rf` runs it in a
    subprocess: the same environment (for the call only), ``cwd`` for the call only, and the
    output captured into the same fields.

    For the commands where a process adds nothing (plan, bad input, reads of a small store):
    it skips an interpreter start and the CLI's imports, ~0.1-0.2 s a call. It goes straight
    to ``cli.main.main``, not through the console's realize memo (the read verbs still answer
    from their import-light readers, as in a process).
    Keep :func:`rf` where the test is about the process: signals, closed pipes, exit on
    start-up, what is imported, environment isolation, or builds whose children matter.
    """
    from rocmforge.cli.main import main

    argv = [str(a) for a in args]
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    os.environ.setdefault("ROCMFORGE_PIP_ARGS", pip_args())
    os.environ.pop("ROCMFORGE_STORE", None)
    os.environ.update(env or {})
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse: usage errors, --help, --version
                if isinstance(exc.code, int) or exc.code is None:
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        # What a process's exit would release: the commands leave their store's SQLite index
        # open in reference cycles, and an open file under a mount keeps it busy (the
        # read-only bind mounts of tests/store/test_integrity.py could not be unmounted).
        gc.collect()
    return subprocess.CompletedProcess(
        ["rocmforge", *argv], code, stdout=out.getvalue(), stderr=err.getvalue()
    )


def tiny_wheel(directory: Path, name: str, version: str, body: str) -> Path:
    """Write a valid pure wheel ``name`` whose module holds ``body`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    di = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": body.encode(),
        f"{di}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{di}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for arcname, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arcname},sha256={digest},{len(data)}")
    files[f"{di}/RECORD"] = ("\n".join([*record, f"{di}/RECORD,,"]) + "\n").encode()
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        for arcname, data in files.items():
            z.writestr(arcname, data)
    os.replace(tmp, path)
    return path


def cxx_many(tmp: Path, tus: int) -> tuple[Path, Path]:
    """A copy of examples/cxx-many under ``tmp`` with ``tus`` generated translation units, and
    recipes/cxx-many.toml pointed at it: ``(recipe, source tree)``."""
    src = tmp / "cxx-src"
    shutil.copytree(
        REPO / "examples" / "cxx-many", src, ignore=shutil.ignore_patterns("build", "src")
    )
    subprocess.run([sys.executable, "gen.py", "src", str(tus)], cwd=src, check=True)
    text = (REPO / "recipes" / "cxx-many.toml").read_text()
    recipe = tmp / "cxx-many.toml"
    recipe.write_text(text.replace('path = "../examples/cxx-many"', f'path = "{src}"'))
    return recipe, src


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


# -- real dpkg packages and a private copy of the toolchain Python (test_hermetic, test_memo) --


VISIBLE_PKG = "rocmforge-test-visible"


HIDDEN_PKG = "rocmforge-test-hidden"


def make_deb(tmp_path: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """Build a real Debian package ``name`` ``version`` holding ``files`` with dpkg-deb."""
    root = tmp_path / f"{name}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: rocmforge tests <t@example.invalid>\nDescription: rocmforge test package\n"
    )
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    out = tmp_path / f"{name}_{version}_all.deb"
    subprocess.run(
        ["dpkg-deb", "--build", "--root-owner-group", str(root), str(out)],
        check=True,
        capture_output=True,
    )
    return out


def dpkg(*args: str) -> None:
    """Run dpkg (install, remove) and fail the test on error; wait out another dpkg's lock."""
    for _ in range(120):
        done = subprocess.run(
            ["dpkg", *args], capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode == 0 or "lock" not in done.stderr:
            break
        time.sleep(1)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def dpkg_root() -> None:
    """Root with dpkg. The test that takes it installs packages, so it runs inside a private
    root (``@isolated()``, tests/privroot.py) and calls :func:`purge_test_packages` first."""
    if os.geteuid() != 0 or shutil.which("dpkg-deb") is None:
        pytest.skip("needs root and dpkg")


def purge_test_packages() -> None:
    """Purge the test packages (left installed on a host by an older suite), inside a private
    root only."""
    dpkg("--purge", VISIBLE_PKG, HIDDEN_PKG)


def link_copy(src: Path, dst: Path) -> None:
    """Copy the Python prefix ``src`` to ``dst`` (no site-packages, no bytecode).

    Real copies, not hard links: a link changes the ctime of the host's interpreter, libpython
    and headers, which every realize memo on the machine guards, so a memo test on another
    worker missed while this ran (three CI failures, none reproduced alone)."""
    for dirpath, dirnames, filenames in os.walk(src):
        here = Path(dirpath)
        dirnames[:] = [
            d
            for d in dirnames
            if d not in ("__pycache__", "site-packages") and not (here / d).is_symlink()
        ]
        out = dst / here.relative_to(src)
        out.mkdir(parents=True, exist_ok=True)
        for name in [
            *filenames,
            *(d.name for d in here.iterdir() if d.is_symlink() and d.is_dir()),
        ]:
            s = here / name
            if s.is_symlink():
                (out / name).symlink_to(os.readlink(s))
            else:
                shutil.copy2(s, out / name)


def rewrite(path: Path, extra: bytes) -> None:
    """Give ``path`` new content without touching the inode it shares with the original."""
    data = path.read_bytes() + extra
    path.unlink()
    path.write_bytes(data)


@pytest.fixture
def python_copy(tmp_path: Path) -> Path:
    """A private copy of the toolchain Python's prefix (a Python no package owns)."""
    import sys

    prefix = Path(sys.base_prefix)
    if str(prefix).startswith("/usr/") and not str(prefix).startswith("/usr/local"):
        pytest.skip("the test Python is a system package; its coverage is the dpkg manifest")
    copy = tmp_path / "python"
    link_copy(prefix, copy)
    return copy


def make_tiny_project(base: Path, extra: str = "") -> Path:
    """Write the tiny project (``tiny-src/``) and its recipe ``tiny.toml`` (with ``extra``
    appended) under ``base``; return the recipe."""
    src = base / "tiny-src"
    (src / "tiny").mkdir(parents=True)
    shutil.copy(DATA / "mkwheel.py", src / "mkwheel.py")
    (src / "tiny" / "__init__.py").write_text("VALUE = 42\n")
    recipe = base / "tiny.toml"
    recipe.write_text(TINY_RECIPE.format(src=src) + extra)
    return recipe


def build_tiny_entry(base: Path) -> dict[str, Any]:
    """Build the tiny project into a new store under ``base`` with the real CLI; return the
    recipe, the store, the entry's directory name, the wheel's name and its blake3."""
    import json

    from rocmforge.util.hashing import file_blake3

    recipe = make_tiny_project(base)
    store = base / "store"
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    wheel = Path(report["wheels"][0])
    return {
        "recipe": recipe,
        "store": store,
        "entry": Path(report["path"]).name,
        "wheel": wheel.name,
        "blake3": file_blake3(wheel),
    }


def synthetic_store(root: Path, count: int = 300) -> Any:
    """Make a store whose index holds ``count`` entries (no files behind them) spanning many
    names, sizes and minutes, with one ``used/`` mark; return the open Store."""
    from rocmforge.store.entry import Entry, EntryMeta
    from rocmforge.store.store import open_store

    s = open_store(root)

    def entries() -> Iterator[tuple[Entry, dict[str, Any]]]:
        for i in range(count):
            h = f"{i:04x}" * 8  # distinct in the table's 12-digit prefix
            meta = {"hash": h, "name": ["p0", "P_1", "p.2"][i % 3] + f"x{i % 7}",
                    "version": f"1.{i % 11}", "created": 1.7e9 + i * 37,
                    "size": 3 ** (i % 25), "sandbox": "bwrap", "wheels": []}  # fmt: skip
            path = s.entries_dir / f"{h}-{meta['name']}-{meta['version']}"
            entry = Entry.from_meta(path, EntryMeta.from_json(meta, file=path / "meta.json"))
            yield entry, {"env": {}}

    s.index.rebuild(entries())
    (s.root / "used").mkdir(exist_ok=True)
    used = s.root / "used" / (f"{5:04x}" * 8)
    used.touch()
    os.utime(used, (1.8e9, 1.8e9))
    return s

