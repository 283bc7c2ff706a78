"""The command line: parse, call one core function, render text or ``--json``, map errors.

Only the CLI prints. Each command lives in ``rocmforge/commands/NAME.py``. Exit codes: 0 ok,
1 build or check failed, 2 bad input (recipe, usage), 3 environment (store, sandbox, fetch),
4 internal error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from rocmforge import __version__
from rocmforge.commands import COMMANDS
from rocmforge.errors import EXIT_INTERNAL, BuildError, RecipeError, RocmforgeError


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``rocmforge`` command."""
    parser = argparse.ArgumentParser(
        prog="rocmforge", description="Reproducible, content-addressed builds of Python wheels."
    )
    parser.add_argument("--version", action="version", version=f"rocmforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"rocmforge.commands.{name}").register(sub)
    return parser


def _render_error(exc: RocmforgeError) -> None:
    if isinstance(exc, RecipeError):
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        if exc.note:
            print(f"note: {exc.note}", file=sys.stderr)
        return
    print(f"error: {exc}", file=sys.stderr)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv``; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except RocmforgeError as exc:
        _render_error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("ROCMFORGE_DEBUG"):
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc} (set ROCMFORGE_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def main_entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
