"""What a command imports at start-up: only its own sub-parser, nothing it does not use.

Each case runs the real CLI in a fresh interpreter and lists the modules loaded by the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("command", ["list", "pins", "du"])
def test_a_read_command_registers_only_its_own_sub_parser(command: str, store: Path) -> None:
    from rocmforge.store.store import open_store

    open_store(store).close()  # read commands never create a store: make an empty one
    mods = _loaded(command, "--store", store)
    commands = {m for m in mods if m.startswith("rocmforge.cli.commands.") and m[23:] != "_common"}
    assert commands <= {f"rocmforge.cli.commands.{command}", "rocmforge.cli.commands.query"}


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
