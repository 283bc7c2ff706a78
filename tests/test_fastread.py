"""The console's read path (rocmforge.cli.fastread): the same bytes as the full CLI, faster.

Each case runs the real console entry (``python -m rocmforge``) and the full CLI
(``rocmforge.cli.main.main``) in fresh interpreters on the same store and compares stdout, stderr
and
the exit code; the console's run also reports which modules it loaded, so a case says whether
the read path answered (no ``rocmforge.cli.main``) or fell through.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import pip_args, rf, synthetic_store
from test_enclosing import make_repo

CONSOLE = """\
import atexit, sys
atexit.register(lambda: sys.stderr.write("\\nMODULES " + " ".join(sorted(sys.modules))))
sys.argv[0] = "rocmforge"
from rocmforge.console import main_entry
main_entry()
"""
FULL = """\
import sys
from rocmforge.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _run(
    code: str, argv: list[str], cwd: Path, extra: dict[str, str] | None = None
) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ROCMFORGE_STORE", "MAX_JOBS")}
    env.update(extra or {})
    p = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd, env=env
    )
    return p.returncode, p.stdout, p.stderr


def _console(
    argv: list[str], cwd: Path, extra: dict[str, str] | None = None
) -> tuple[bool, tuple[int, str, str]]:
    """Run ``argv`` through the console entry: (read path answered, (exit code, out, err))."""
    code, out, err = _run(CONSOLE, argv, cwd, extra)
    err, _, mods = err.rpartition("\nMODULES ")
    return "rocmforge.cli.main" not in mods.split(), (code, out, err)


def _both(argv: list[str], cwd: Path) -> tuple[bool, tuple[int, str, str]]:
    """Run ``argv`` both ways; assert they agree; return (read path answered, the result)."""
    fast, (code, out, err) = _console(argv, cwd)
    full = _run(FULL, argv, cwd)
    assert (code, out, err) == full, argv
    return fast, full


@pytest.fixture
def roomy_store(tmp_path: Path) -> Path:
    """A store with 300 indexed entries, a pin, a dangling pin and a registered result link."""
    s = synthetic_store(tmp_path / "store")
    root = s.root
    target = root / "entries" / (f"{7:04x}" * 8 + "-p.2x0-1.7")
    target.mkdir(parents=True)
    pins = root / "roots" / "pins"
    pins.mkdir(parents=True)
    (pins / "keep").symlink_to(f"../../entries/{target.name}")
    (pins / "gone").symlink_to("../../entries/nothing-here")
    auto = root / "roots" / "auto"
    auto.mkdir()
    link = tmp_path / "result"
    link.symlink_to(target)
    (auto / "x").symlink_to(link)
    return root


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["pins"],
        ["query", "--name", "P-1X4"],  # names compare as pip compares them
        ["query", "--name=p.2x2", "--version", "1.3"],
        ["query", "--version=1.7"],
        ["query"],
        ["query", "--name", "nothing"],
    ],
)
def test_read_path_prints_what_the_full_cli_prints(roomy_store: Path, argv: list[str]) -> None:
    fast, (code, out, _) = _both([*argv, "--store", str(roomy_store)], roomy_store.parent)
    assert fast and code == 0 and out
    # the store found by walking up from the current directory, the option before the command
    assert _both(argv, roomy_store.parent)[0]
    assert _both(["--store", str(roomy_store), *argv], Path("/"))[0]


def test_the_table_shows_roots_and_last_use(roomy_store: Path) -> None:
    _, (_, out, _) = _both(["list", "--store", str(roomy_store)], roomy_store.parent)
    line = next(x for x in out.splitlines() if x.startswith(f"{7:04x}" * 3))
    assert line.endswith("  2"), line  # the pin and the result link
    used = next(x for x in out.splitlines() if x.startswith(f"{5:04x}" * 3))
    assert "2027-01-15 08:00" in used  # used/<hash> is newer than the index's last use
    _, (_, pins, _) = _both(["pins", "--store", str(roomy_store)], roomy_store.parent)
    target = f"{7:04x}" * 8 + "-p.2x0-1.7"
    assert pins == f"gone -> (dangling)\nkeep -> {target}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--json"],
        ["--json", "pins"],
        ["query", "--env", "A=1"],
        ["query", "--nam", "x"],  # argparse's abbreviations are the full CLI's business
        ["query", "--name"],
        ["list", "extra"],
        ["list", "-h"],
        ["pins", "--store"],
    ],
)
def test_other_forms_fall_through_to_the_full_cli(roomy_store: Path, argv: list[str]) -> None:
    fast, _ = _both([*argv, "--store", str(roomy_store)] if argv[-1] != "--store" else argv,
                    roomy_store.parent)  # fmt: skip
    assert not fast


def test_a_store_that_needs_work_falls_through(roomy_store: Path, tmp_path: Path) -> None:
    argv = ["list", "--store", str(roomy_store)]
    assert _both(argv, tmp_path)[0]
    # entries waiting to be indexed: the full CLI indexes them first
    pending = roomy_store / "pending" / f"{999:032x}-late-1.0"
    pending.parent.mkdir(exist_ok=True)
    pending.touch()
    assert not _both(argv, tmp_path)[0]
    pending.unlink(missing_ok=True)  # the full CLI settled it
    # a damaged index: the full CLI sets it aside and rebuilds it, with a warning
    index = roomy_store / "index.sqlite"
    index.write_bytes(b"not a database" * 100)
    for suffix in ("-wal", "-shm"):  # the pages still in the write-ahead log would answer
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    fast, (code, _, err) = _console(argv, tmp_path)
    assert not fast and code == 0 and "set aside" in err
    # no store there: the full CLI's error (exit 3), created nothing
    fast, (code, _, err) = _both(["list", "--store", str(tmp_path / "none")], tmp_path)
    assert not fast and code == 3 and not (tmp_path / "none").exists()


def test_the_read_path_imports_almost_nothing(roomy_store: Path) -> None:
    """What made a read command 5x ``python -c pass``: argparse, dataclasses, typing, re,
    pathlib, json and the store's classes. None of them loads on the read path."""
    code, _, err = _run(CONSOLE, ["list", "--store", str(roomy_store)], roomy_store.parent)
    mods = set(err.rpartition("\nMODULES ")[2].split())
    assert code == 0
    heavy = {"argparse", "dataclasses", "typing", "re", "pathlib", "json", "contextlib",
             "rocmforge.cli.main", "rocmforge.errors", "rocmforge.store.store"}  # fmt: skip
    assert not heavy & mods, heavy & mods


PLAN_RECIPE = """\
schema = 1
[package]
name = "vendored"
version = "1.0"
[source]
path = "vendor/vendored"
[build]
steps = ["mkdir vendored && echo 'V = 1' > vendored/__init__.py",
         "python mkwheel.py $OUT vendored 1.0"]
[check]
import = "vendored"
"""


@pytest.mark.slow
def test_plan_of_a_remembered_recipe_is_answered_from_the_memo(tmp_path: Path) -> None:
    """The full ``plan`` of a cached recipe records what it printed (warnings included); the
    next ``plan`` prints the same bytes from the memo while its guards and the host's lint
    facts hold, and falls through to the full CLI when any of them moves."""
    repo = make_repo(tmp_path)  # an enclosing .gitignore leaves lib/ out: a warning to replay
    recipe = repo / "vendored.toml"
    recipe.write_text(PLAN_RECIPE)
    store = tmp_path / "store"
    built = rf("realize", recipe, "--store", store)
    assert built.returncode == 0, built.stderr
    argv = ["plan", str(recipe), "--store", str(store)]
    env = {"ROCMFORGE_PIP_ARGS": pip_args()}
    first = _run(FULL, argv, tmp_path, env)
    assert first[0] == 0 and "cached:  yes" in first[1] and "left out" in first[2]
    fast, again = _console(argv, tmp_path, env)
    assert fast and again == first
    assert not _console([*argv, "--json"], tmp_path, env)[0]
    fast, again = _console([*argv, "--rehash"], tmp_path, env)  # a full resolve, same answer
    assert not fast and again == first
    # another MAX_JOBS on the host: the lints might say otherwise
    fast, again = _console(argv, tmp_path, {**env, "MAX_JOBS": "64"})
    assert not fast and again == first
    # a wheel that moved since publish: the full CLI checks the entry
    wheel = next((store / "entries").glob("*/*.whl"))
    os.utime(wheel, (1.6e9, 1.6e9))
    assert not _console(argv, tmp_path, env)[0]
    # a changed recipe: a new hash, not cached
    recipe.write_text(PLAN_RECIPE + "[env]\nX = \"1\"\n")
    fast, (code, out, _) = _console(argv, tmp_path, env)
    assert not fast and code == 0 and "cached:  no" in out
