"""Console-script entry point: try the realize memo before the command line."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from rocmforge.pipeline.memo import MemoAnswer


def main_entry() -> None:
    """Run ``rocmforge``: a memoised cache hit and the plan of a remembered recipe are answered
    by the realize memo (:mod:`rocmforge.pipeline.memo`), before the command line loads; every
    other command line goes to :func:`rocmforge.cli.main.main`."""
    argv = sys.argv[1:]
    code = None
    try:
        answer = None
        if "realize" in argv or "plan" in argv:  # the memo answers nothing else (~1 ms to load)
            from rocmforge.pipeline.memo import fast_plan, fast_realize

            answer = fast_realize(argv) or fast_plan(argv)
        if answer is not None:
            try:
                code = render_memo(answer)
            finally:
                answer.close()
    except BrokenPipeError:
        from rocmforge.cli.main import quiet_broken_pipe

        code = quiet_broken_pipe()
    if code is None:
        from rocmforge.cli.main import main

        code = main(argv)
    sys.exit(code)


def render_memo(answer: MemoAnswer) -> int:
    """Print the memo's answer as the full ``realize`` or ``plan`` prints it; return 0."""
    plan = answer.plan
    if plan is not None:
        sys.stderr.write(plan.warnings)
        sys.stderr.flush()
        from rocmforge.pipeline.memo import RECIPE_MARK
        from rocmforge.util.shownpath import shown_path

        text = plan.text.replace(RECIPE_MARK, shown_path(plan.recipe))
        sys.stdout.write(
            f"name:       {plan.name} {plan.version}\n"
            f"hash:       {plan.hash}\n"
            f"cached:     yes, {plan.path}\n{text}"
        )
        sys.stdout.flush()
        return 0
    for name, version, hash, _ in answer.rows:
        sys.stderr.write(f"rocmforge: {name} {version} {hash} cached\n")
    sys.stdout.write("".join(f"{w}\n" for *_, wheels in answer.rows for w in wheels))
    sys.stdout.flush()
    return 0
