"""The argument parser classes of the command line: argparse, less what a read command pays.

Two costs of a plain :class:`argparse.ArgumentParser` fall on every command line, and a read
command (``list``, ``show``, ...) answers in about the time a bare interpreter takes to start,
so they matter there:

- every ``add_argument`` builds a help formatter to check the metavar, and the formatter
  imports ``shutil`` (with ``zlib``, ``bz2`` and ``lzma``: ~3 ms) to ask for the terminal's
  width. :class:`HelpFormatter` asks ``os`` the same question, the way ``shutil`` does.
- each sub-parser translates its headings through ``gettext`` (a lookup of message catalogues
  per call). The command line therefore builds the sub-parsers of the verbs it names only;
  a parser made that way raises :class:`Incomplete` where argparse would report a usage error,
  and the caller parses again with every verb listed, so that the message (a mistyped verb's
  "choose from ..." included) is the one the complete parser gives.
"""

from __future__ import annotations

import argparse
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import NoReturn


def terminal_columns() -> int:
    """The terminal's width in columns, as :func:`shutil.get_terminal_size` computes it.

    ``$COLUMNS`` first, then the terminal on stdout, else 80.
    """
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help formatter, its width found without importing ``shutil``."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        if width is None:
            width = terminal_columns() - 2  # what argparse subtracts from shutil's answer
        super().__init__(prog, indent_increment, max_help_position, width)


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """:class:`HelpFormatter` that keeps the line breaks of descriptions and epilogs."""


class Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose help formatter is :class:`HelpFormatter`.

    Sub-parsers are made of the same class (argparse's default), so a command's own parser
    inherits this; a command that wants another layout passes one of this module's formatters.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


class Incomplete(Exception):
    """A parser that lists only some verbs met a usage error: parse again with all of them."""


class PartialParser(Parser):
    """A :class:`Parser` built with only the verbs the command line names.

    Where argparse would print a usage error and exit, it raises :class:`Incomplete` instead,
    from itself and from its sub-parsers alike (they are made of its class).
    """

    def error(self, message: str) -> NoReturn:
        """Raise :class:`Incomplete` (the complete parser reports the error)."""
        raise Incomplete(message)
