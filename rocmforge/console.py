"""Console-script entry point: try the realize memo and the read path before the full CLI."""

from __future__ import annotations

import sys


def main_entry() -> None:
    """Run ``rocmforge``; a memoised cache hit, the plan of a remembered recipe and the plain
    read commands (:mod:`rocmforge.cli.fastread`) never import the rest of the package."""
    argv = sys.argv[1:]
    from rocmforge.pipeline.memo import fast_plan, fast_realize

    try:
        code = fast_realize(argv)
        if code is None:
            code = fast_plan(argv)
        if code is None:  # not on the memo's hit path
            from rocmforge.cli.fastread import fast_read

            code = fast_read(argv)
    except BrokenPipeError:
        from rocmforge.cli.main import quiet_broken_pipe

        code = quiet_broken_pipe()
    if code is None:
        from rocmforge.cli.main import main

        code = main(argv)
    sys.exit(code)
