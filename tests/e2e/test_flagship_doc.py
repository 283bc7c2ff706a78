"""docs/flagship.md matches the code: every ``rocmforge`` command on it parses with rocmforge's
own parser, and each next step doctor prints for the flagship stack is on the page."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import rf_in

from rocmforge.cli.main import parse

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "flagship.md"


def _commands(text: str) -> list[str]:
    """The shell lines of the ```sh blocks (continuations joined) and the inline commands."""
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        out += [ln.split("  #")[0].strip() for ln in joined.splitlines() if ln.strip()]
    inline = re.sub(r"\n\s*", " ", text)  # a command in backticks may wrap
    out += re.findall(r"`(rocmforge [^`]+)`", inline)
    return out


def test_every_rocmforge_command_on_the_page_parses() -> None:
    commands = [c for c in _commands(DOC.read_text()) if c.startswith("rocmforge ")]
    assert len(commands) >= 12, commands
    for command in commands:
        argv = shlex.split(command)[1:]
        if "COMMAND" in argv:  # the placeholder of `rocmforge COMMAND --help`
            continue
        parse(argv)  # a usage error exits 2: the page names an option the code does not have


@pytest.mark.slow  # a real run of seconds: the quick tier stays under a minute
def test_doctors_next_steps_for_the_stack_are_on_the_page(tmp_path: Path) -> None:
    proc = rf_in("doctor", "recipes/mi300x-stack.toml", "--store", tmp_path / "s",
                 cwd=REPO, env={"ROCMFORGE_SDK_ARGS": ""})  # fmt: skip
    out = proc.stdout.splitlines()
    steps = out[out.index("next steps:") + 1 :]
    on_page = " ".join(_commands(DOC.read_text()))
    for line in steps:
        line = line.strip()
        m = re.match(r"\d\. (rocmforge .+?)(\s+#|$)", line)
        if m:
            command = m.group(1).strip()
            head = " ".join(shlex.split(command)[:3])  # verb and target; the page adds options
            assert head in on_page, command
        elif line.startswith("uv pip install"):
            assert line in on_page, line
        elif line.startswith("pip takes the sha256"):
            first, second = line.split(": ", 1)[1].split(", then ")
            assert first in on_page and second in on_page, line
