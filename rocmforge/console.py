"""Console-script entry point: try the realize memo before importing the full CLI."""

from __future__ import annotations

import sys


def main_entry() -> None:
    """Run ``rocmforge``; a memoised cache hit never imports the rest of the package."""
    argv = sys.argv[1:]
    from rocmforge.memo import fast_realize

    try:
        code = fast_realize(argv)
    except BrokenPipeError:
        from rocmforge.cli import quiet_broken_pipe

        code = quiet_broken_pipe()
    if code is None:
        from rocmforge.cli import main

        code = main(argv)
    sys.exit(code)
