"""The command line: parse, call one core function, render text or ``--json``, map errors.

Only the CLI prints. Each verb lives in ``rocmforge/cli/commands/NAME.py`` and is listed in the
verb table :data:`~rocmforge.cli.commands.COMMANDS`; a command line imports only the module of
the verb it runs. Exit codes: 0 ok, 1 build or check failed, 2 bad input (recipe, usage),
3 environment (store, sandbox, fetch), 4 internal error.

Start-up is part of every read command's time: this module imports ``argparse``, ``os`` and
``sys``; the error classes (``dataclasses``, ``pathlib``) load only when something is raised, and
the parser holds the sub-parsers of the verbs the command line names (:func:`parse`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from rocmforge import __version__
from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_global_options
from rocmforge.cli.parser import Incomplete, Parser, PartialParser

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from rocmforge.errors import RocmforgeError

EXIT_BROKEN_PIPE = 141


def build_parser(
    argv: Sequence[str] | None = None, *, complete: bool | None = None
) -> argparse.ArgumentParser:
    """Return the argument parser of the ``rocmforge`` command.

    With ``argv``, only the verbs named by one of its words get their module imported and their
    full sub-parser (the verb run is always one of them). The others are left out unless the
    parser is ``complete`` (the default where ``argv`` names no verb or asks for ``--help``),
    in which case each is listed with its summary from the verb table, so that ``--help`` and
    a mistyped verb show them all. A parser that is not complete raises
    :class:`~rocmforge.cli.parser.Incomplete` on a usage error: see :func:`parse`.
    """
    named = {n for n in COMMANDS if argv is not None and n in argv}
    if complete is None:
        complete = argv is None or not named or "-h" in argv or "--help" in argv
    parser = (Parser if complete else PartialParser)(
        prog="rocmforge", description="Reproducible, content-addressed builds of Python wheels."
    )
    parser.add_argument("--version", action="version", version=f"rocmforge {__version__}")
    add_global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", prog="rocmforge")
    for name, summary in COMMANDS.items():
        if name in named or argv is None:
            importlib.import_module(f"rocmforge.cli.commands.{name}").register(sub)
        elif complete:
            sub.add_parser(name, help=summary, add_help=False)
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse a command line; a usage error exits 2 with argparse's message, as ever.

    The parser first holds only the verbs ``argv`` names; on a usage error the complete parser
    parses again, so that the message is the one it gives.
    """
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except Incomplete:
        parser = build_parser(argv, complete=True)
        args = parser.parse_args(argv)
    if args.json and not getattr(args, "json_supported", False):
        build_parser(argv, complete=True).error(f"{args.command} has no --json")
    return args


MAX_PROBLEM_CHARS = 500


def _short(text: str) -> str:
    """Cut one problem to :data:`MAX_PROBLEM_CHARS` (a recipe can quote a 100k-character key)."""
    if len(text) <= MAX_PROBLEM_CHARS:
        return text
    return f"{text[:MAX_PROBLEM_CHARS]}... ({len(text) - MAX_PROBLEM_CHARS} more characters)"


def _recipe_named(exc: RocmforgeError, args: argparse.Namespace) -> str | None:
    """For bad input that does not name it, the recipe the user ran (absolute), else None."""
    from rocmforge.errors import EXIT_BAD_INPUT

    if exc.exit_code != EXIT_BAD_INPUT or getattr(exc, "note", None) or not exc.about_recipe:
        return None
    recipe: Path | str | None = exc.recipe_file
    if recipe is None:
        given = getattr(args, "recipes", None) or [getattr(args, "recipe", None)]
        recipe = given[0] if len(given) == 1 else None
    if recipe is None:
        return None
    shown = os.path.abspath(recipe)
    text = "\n".join([str(exc), *map(str, getattr(exc, "problems", ()))])
    return None if shown in text else shown


def _render_error(exc: RocmforgeError, args: argparse.Namespace | None = None) -> None:
    from rocmforge.errors import BuildError, RecipeError

    recipe = _recipe_named(exc, args) if args is not None else None
    if isinstance(exc, RecipeError):
        if recipe:  # e.g. a problem found in a base recipe by a later stage
            exc.note = f"in recipe {recipe}"
        for problem in exc.problems:
            print(f"error: {_short(str(problem))}", file=sys.stderr)
        for problem in getattr(exc, "warnings", ()):  # a lint error's warnings, shown at once
            print(f"warning: {_short(str(problem))}", file=sys.stderr)
        if exc.note:
            print(f"note: {exc.note}", file=sys.stderr)
        return
    print(f"error: {recipe + ': ' if recipe else ''}{exc}", file=sys.stderr)
    note = getattr(exc, "note", None)
    if note:
        print(f"note: {note}", file=sys.stderr)
    if isinstance(exc, BuildError):
        if exc.log_tail:
            print(f"--- last {len(exc.log_tail)} lines of the build log ---", file=sys.stderr)
            for line in exc.log_tail:
                print(line, file=sys.stderr)
            print("---", file=sys.stderr)
        for d in exc.diagnosis:
            where = f" (log line {d.line})" if d.line else ""
            print(f"cause: {d.cause}{where}", file=sys.stderr)
            print(f"  fix: {d.fix}", file=sys.stderr)
        if exc.log_path:
            print(f"full log: {exc.log_path}  (rocmforge log FILE or zstdcat)", file=sys.stderr)
        if exc.kept_dir:
            print(f"build directory kept: {exc.kept_dir}", file=sys.stderr)


def _store_of(args: argparse.Namespace) -> Path:
    from rocmforge.cli.commands._common import store_root

    return store_root(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv``; return the exit code."""
    try:
        if argv is None:
            argv = sys.argv[1:]
        return _run(parse(argv))
    except BrokenPipeError:
        return quiet_broken_pipe()


def quiet_broken_pipe() -> int:
    """The reader of stdout went away (``| head``): stop quietly, like other Unix tools.

    stdout is pointed at ``/dev/null`` so the interpreter's final flush does not complain again.
    Returns 141 (128 + SIGPIPE), what a shell reports for a tool killed by SIGPIPE.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        return _failed(exc, args)


def _failed(exc: Exception, args: argparse.Namespace) -> int:
    """Report what the command raised; return its exit code."""
    from rocmforge.errors import DiskFullError, RocmforgeError
    from rocmforge.util.fsutil import disk_full_error, is_disk_full

    if isinstance(exc, RocmforgeError):
        if is_disk_full(exc) and not isinstance(exc, DiskFullError):
            exc = disk_full_error(exc, store=_store_of(args), what=str(exc))
        _render_error(exc, args)
        return exc.exit_code
    if not isinstance(exc, OSError) or not is_disk_full(exc):
        return _internal(exc)
    full = disk_full_error(exc, store=_store_of(args))
    _render_error(full)
    return full.exit_code


def _internal(exc: Exception) -> int:
    """Report an unexpected exception (re-raise it under ``ROCMFORGE_DEBUG``)."""
    from rocmforge.errors import EXIT_INTERNAL

    if os.environ.get("ROCMFORGE_DEBUG"):
        raise exc
    print(
        f"internal error: {type(exc).__name__}: {exc} (set ROCMFORGE_DEBUG=1 for a traceback)",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def main_entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
