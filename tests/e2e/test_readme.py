"""The README's quick start, run as written: its recipe and its three commands, on a copy of
the demo project."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import REPO, pip_args


def _quick_start() -> tuple[str, list[str]]:
    """The recipe and the commands of the README's "Quick start" section."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    toml = re.search(r"```toml\n(.*?)```", section, re.S)
    sh = re.search(r"```sh\n(.*?)```", section, re.S)
    assert toml and sh, "the quick start has a recipe and a shell block"
    commands = [ln.split("  #", 1)[0].strip() for ln in sh.group(1).splitlines() if ln.strip()]
    return toml.group(1), commands


@pytest.mark.slow
def test_the_readme_quick_start_builds_and_installs_an_own_package(tmp_path: Path) -> None:
    recipe, commands = _quick_start()
    assert len(commands) == 3 and commands[0].startswith("rocmforge lock"), commands
    project = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "demo", project)
    # the demo project is called rfdemo 1.0.0: the recipe's name and version must match it
    (project / "mypkg.toml").write_text(
        recipe.replace('"mypkg"', '"rfdemo"').replace('"0.1.0"', '"1.0.0"')
    )
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # rocmforge, as installed
    env = {**os.environ, "PATH": path, "ROCMFORGE_PIP_ARGS": pip_args(),
           "XDG_DATA_HOME": str(tmp_path / "xdg")}  # fmt: skip
    env.pop("ROCMFORGE_STORE", None)
    for command in commands:
        if command.startswith("pip "):  # the pip of a fresh venv, offline
            command = command.replace("pip install", f"{env_dir}/bin/pip install --no-index", 1)
        proc = subprocess.run(command, shell=True, cwd=project, env=env, capture_output=True,
                              text=True, check=False)  # fmt: skip
        assert proc.returncode == 0, (command, proc.stderr)
    assert (project / "mypkg.lock").is_file()
    done = subprocess.run([env_dir / "bin" / "python", "-c", "import rfdemo"], check=False)
    assert done.returncode == 0
