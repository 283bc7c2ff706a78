"""The README's install and quick start, run as written: ``pip install .`` in a fresh clone of
this repository (into a new venv, offline), then the quick start's recipe and three commands
with that rocmforge, on a copy of the demo project."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import REPO, WHEELHOUSE, pip_args


def _quick_start() -> tuple[str, list[str]]:
    """The recipe and the commands of the README's "Quick start" section."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    toml = re.search(r"```toml\n(.*?)```", section, re.S)
    sh = re.search(r"```sh\n(.*?)```", section, re.S)
    assert toml and sh, "the quick start has a recipe and a shell block"
    commands = [ln.split("  #", 1)[0].strip() for ln in sh.group(1).splitlines() if ln.strip()]
    return toml.group(1), commands


def _installed_from_a_fresh_clone(tmp_path: Path) -> Path:
    """``git clone`` this repository and run the README's ``pip install .`` in it, in a new
    venv (offline: the dependencies from scripts/test.sh's wheelhouse); return its bin/."""
    from test_pythons import deps_dir

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    clone, tool = tmp_path / "clone", tmp_path / "rocmforge-venv"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    venv.create(tool, with_pip=True)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not deps_dir(here).is_dir():
        pytest.skip(f"no {deps_dir(here)}: run scripts/test.sh (it fetches rocmforge's deps)")
    readme = (clone / "README.md").read_text()
    install = next(ln.split("#", 1)[0].strip() for ln in readme.splitlines()
                   if ln.startswith("pip install ."))  # fmt: skip
    assert install == "pip install .", install
    offline = f"--no-index --find-links {deps_dir(here)} --find-links {WHEELHOUSE}"
    proc = subprocess.run(f"{tool}/bin/{install} -q {offline}", shell=True, cwd=clone,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tool / "bin" / "rocmforge").is_file()
    return tool / "bin"


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
    path = f"{_installed_from_a_fresh_clone(tmp_path)}:{os.environ['PATH']}"
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
