"""docs/cli.md against the real parser: every command is named, and every option a synopsis
line of its ``sh`` block gives a command is one that command's parser has."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _synopses() -> list[tuple[str, str]]:
    """(verb, the line's text before its comment) for each synopsis of the first sh block; a
    continuation line (indented, no ``rocmforge``) belongs to the verb above."""
    block = DOC.read_text().split("```sh\n", 1)[1].split("```", 1)[0]
    out: list[tuple[str, str]] = []
    for line in block.splitlines():
        text = line.split("  #", 1)[0].split(" # ", 1)[0]
        m = re.match(r"rocmforge (\S+)", text)
        if m:
            out.append((m.group(1), text))
        elif text.startswith(" ") and text.strip() and out:
            out.append((out[-1][0], text))
    return out


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from rocmforge.cli.main import build_parser

    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _options(p: argparse.ArgumentParser) -> set[str]:
    found = {o for a in p._actions for o in a.option_strings}
    for a in p._actions:  # a sub-verb's own options (cache ls, key generate)
        if isinstance(a, argparse._SubParsersAction):
            for child in a.choices.values():
                found |= _options(child)
    return found


def test_every_command_is_named() -> None:
    from rocmforge.cli.commands import COMMANDS

    text = DOC.read_text()
    missing = [c for c in COMMANDS if not re.search(rf"(rocmforge|\|) {c}\b", text)]
    assert missing == [], missing


def test_each_synopsis_names_only_options_its_command_has() -> None:
    parsers = _parsers()
    wrong = []
    for verb, text in _synopses():
        assert verb in parsers, f"docs/cli.md names rocmforge {verb}, which is no command"
        have = _options(parsers[verb])
        for alt in text.split(" | "):  # "pin NAME TARGET | unpin NAME | pins"
            m = re.match(r"\s*(?:rocmforge )?(\w+)\b", alt)
            p = parsers.get(m.group(1)) if m else None
            opts = _options(p) if p is not None else have
            for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", alt):
                if flag not in opts and flag not in have:
                    wrong.append(f"{verb}: {flag} ({alt.strip()})")
    assert wrong == [], wrong


def test_farm_is_named_as_the_parser_has_it() -> None:
    farm = _parsers()["farm"]
    [action] = [a for a in farm._actions if a.dest == "action"]
    lines = [t for v, t in _synopses() if v == "farm"]
    assert lines, "docs/cli.md names no rocmforge farm line"
    for choice in action.choices or ():
        assert any(f"farm {choice} HASH" in t for t in lines), lines
    documented = set(re.findall(r"--[\w-]+", " ".join(lines)))
    assert documented == _options(farm) - {"-h", "--help"}, documented
