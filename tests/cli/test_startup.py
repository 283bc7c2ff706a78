"""What a command imports at start-up: only its own verb's module, nothing it does not use.

Each case runs the real CLI in a fresh interpreter and lists the modules loaded by the end. The
read verbs answer a healthy store from the import-light readers (:mod:`rocmforge.store.readers`):
no store classes, no ``dataclasses``, ``pathlib``, ``typing`` or ``json`` (issue 27: one path per
command, their speed kept without a second dispatcher).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import build_tiny_entry

PROBE = """\
import contextlib, io, json, sys
from rocmforge.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _loaded(*argv: str | Path) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, argv)], capture_output=True, text=True, check=True
    )
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["code"] == 0, proc.stderr
    return set(out["modules"])


def test_plan_of_a_path_source_needs_no_filelock_and_no_doctor(
    tiny_recipe: Path, store: Path
) -> None:
    mods = _loaded("plan", tiny_recipe, "--store", store)
    assert "rocmforge.plan.resolve" in mods  # it did plan
    assert "filelock" not in mods
    assert "rocmforge.build.doctor" not in mods


def _verbs_loaded(mods: set[str]) -> set[str]:
    """The verb modules among ``mods`` (not the commands' private helpers)."""
    prefix = "rocmforge.cli.commands."
    return {m[len(prefix) :] for m in mods if m.startswith(prefix) and m[len(prefix)] != "_"}


@pytest.mark.parametrize("verb", sorted(__import__("rocmforge.cli.commands").cli.commands.COMMANDS))
def test_a_verb_imports_only_its_own_module(verb: str) -> None:
    """The verb table: ``rocmforge VERB --help`` builds one full sub-parser and imports one
    verb module; the others are listed from the table."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE_HELP, verb], capture_output=True, text=True, check=True
    )
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["code"] == 0, proc.stderr
    assert _verbs_loaded(set(out["modules"])) == {verb}


#: Run the real command line with stdout a real file (the log verb writes bytes to it); print
#: the exit code and the modules loaded to the file named by $PROBE_OUT.
PROBE_REAL = """\
import os, sys
from rocmforge.console import main_entry
try:
    main_entry()
except SystemExit as e:
    code = e.code
modules = sorted(sys.modules)
import json
with open(os.environ["PROBE_OUT"], "w") as f:
    json.dump({"code": code, "modules": modules}, f)
"""

PROBE_HELP = """\
import contextlib, io, json, sys
from rocmforge.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        code = main([sys.argv[1], "--help"])
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

HEAVY = {"dataclasses", "pathlib", "typing", "json", "inspect", "rocmforge.errors",
         "rocmforge.store.store", "rocmforge.store.index", "sqlite3", "zstandard",
         # argparse's own help formatter imports shutil (zlib, bz2, lzma) for the terminal's
         # width; the realize memo is for realize and plan only
         "shutil", "rocmforge.pipeline.memo"}  # fmt: skip


def _run_real(tmp_path: Path, *argv: str | Path) -> tuple[str, set[str]]:
    """(stdout, modules loaded) of ``rocmforge ARGV`` run as the console script runs it."""
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE_REAL, *map(str, argv)],
        capture_output=True, text=True, check=False, env={**os.environ, "PROBE_OUT": str(out)},
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert data["code"] in (0, None), proc.stderr
    return proc.stdout, set(data["modules"])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store holding one real entry (the tiny project, built by the real CLI)."""
    return build_tiny_entry(tmp_path_factory.mktemp("startup"))


def _read_argv(built: dict[str, Any], verb: str) -> list[str | Path]:
    entry = built["entry"]
    operand = {
        "show": [entry[:12]], "log": [entry[:12]],
        "audit": [built["store"] / "entries" / entry / built["wheel"]],
        "query": ["--name", "tiny"], "du": ["--top", "3"],
    }.get(verb, [])  # fmt: skip
    return [verb, *operand, "--store", built["store"]]


READ_VERBS = ["list", "pins", "query", "show", "du", "log", "audit"]


@pytest.mark.parametrize("verb", READ_VERBS)
def test_a_read_verb_answers_a_healthy_store_without_the_store_classes(
    verb: str, built: dict[str, Any], tmp_path: Path
) -> None:
    out, mods = _run_real(tmp_path, *_read_argv(built, verb))
    assert not mods & HEAVY, sorted(mods & HEAVY)
    assert _verbs_loaded(mods) == {verb}
    if verb != "pins":  # no pins: an empty answer
        assert built["entry"][:12] in out or "tiny" in out, out


@pytest.mark.parametrize("verb", READ_VERBS)
def test_a_read_verb_on_a_store_that_needs_work_takes_its_full_branch(
    verb: str, built: dict[str, Any], tmp_path: Path
) -> None:
    """An entry published but not yet indexed (a publish that died before indexing): the full
    branch opens the store, which indexes it, and answers the same question."""
    copy = tmp_path / "store"
    shutil.copytree(built["store"], copy, symlinks=True)
    (copy / "index.sqlite").unlink()  # a store whose index must be rebuilt first
    (copy / "pending" / built["entry"]).touch()  # ... and an entry waiting to be indexed
    argv = [a if a != built["store"] else copy for a in _read_argv(built, verb)]
    if verb == "audit":
        argv[1] = copy / "entries" / built["entry"] / built["wheel"]
    out, mods = _run_real(tmp_path, *argv)
    assert "rocmforge.store.store" in mods  # the full branch ran
    if verb != "pins":
        assert built["entry"][:12] in out or "tiny" in out, out


def test_help_still_lists_every_command() -> None:
    from rocmforge.cli.commands import COMMANDS

    proc = subprocess.run(
        [sys.executable, "-m", "rocmforge", "--help"], capture_output=True, text=True, check=True
    )
    for name in COMMANDS:
        assert name in proc.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "rocmforge", "lsit"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "list" in bad.stderr


def _rf(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocmforge", *argv], capture_output=True, text=True,
        env={**os.environ, **env},
    )  # fmt: skip


def test_usage_errors_are_the_complete_parsers() -> None:
    """The parser holds only the verbs the command line names; a usage error is reported by
    the complete one, so that its message is argparse's own (every verb among the choices)."""
    from rocmforge.cli.commands import COMMANDS

    wrong = _rf("frobnicate", "list")  # names a verb, but not as the command
    assert wrong.returncode == 2, wrong.stderr
    choices = wrong.stderr.split("choose from ", 1)[1]
    assert all(f"'{name}'" in choices for name in COMMANDS), wrong.stderr
    bogus = _rf("list", "--bogus")
    assert bogus.returncode == 2 and "unrecognized arguments: --bogus" in bogus.stderr
    missing = _rf("show")  # the verb's own parser: a required operand missing
    assert missing.returncode == 2 and "usage: rocmforge show" in missing.stderr
    assert "the following arguments are required: TARGET" in missing.stderr, missing.stderr
    nojson = _rf("--json", "unpin", "x")  # the global --json, before a verb that has none
    assert nojson.returncode == 2 and "unpin has no --json" in nojson.stderr, nojson.stderr
    assert nojson.stderr.count("usage:") == 1


def test_help_is_laid_out_as_argparse_lays_it_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The help formatter that spares ``shutil`` wraps at the same width as argparse's own."""
    import argparse

    from rocmforge.cli.parser import HelpFormatter, RawDescriptionHelpFormatter

    def helptext(formatter: type[argparse.HelpFormatter]) -> str:
        p = argparse.ArgumentParser(prog="x", formatter_class=formatter, epilog="a\n  b c " * 9)
        p.add_argument("--store", metavar="DIR", help="the store directory, " * 6)
        return p.format_help()

    for columns in ("44", "120"):
        monkeypatch.setenv("COLUMNS", columns)
        assert helptext(HelpFormatter) == helptext(argparse.HelpFormatter)
        raw = helptext(RawDescriptionHelpFormatter)
        assert raw == helptext(argparse.RawDescriptionHelpFormatter)
        assert "\n  b c" in raw
    narrow = _rf("show", "--help", COLUMNS="50")
    assert narrow.returncode == 0
    assert max(map(len, narrow.stdout.splitlines())) <= 50, narrow.stdout
