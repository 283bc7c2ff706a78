"""The command line: parse, call one core function, render text or ``--json``, map errors.

Only this module prints. Exit codes: 0 ok, 1 build or check failed, 2 bad input (recipe, usage),
3 environment (store, sandbox, fetch), 4 internal error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from rocmforge import __version__
from rocmforge.errors import (
    EXIT_INTERNAL,
    BuildError,
    RecipeError,
    RocmforgeError,
    UsageError,
)


class ConsoleReporter:
    """Progress on stderr: one live status line on a TTY, plain phase lines otherwise."""

    def __init__(self, stream: IO[str], *, label: str, verbose: bool = False) -> None:
        self.stream = stream
        self.label = label
        self.verbose = verbose
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.current = "resolve"
        self.last = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._drawn = 0.0
        self._ticker: threading.Thread | None = None
        if self.tty:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.started)
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"

    def _draw(self) -> None:
        width = os.get_terminal_size(self.stream.fileno()).columns if self.tty else 100
        text = f"[{self.label} {self.current} {self._elapsed()}] {self.last}"
        with self._lock:
            self.stream.write("\r\x1b[K" + text[: max(10, width - 1)])
            self.stream.flush()
            self._drawn = time.monotonic()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def phase(self, name: str) -> None:
        """Show that a new phase started."""
        self.current = name
        if self.tty:
            self._draw()
        else:
            print(f"rocmforge: {self.label}: {name} (+{self._elapsed()})", file=self.stream)

    def log_line(self, line: str) -> None:
        """Remember (TTY) or echo (``--verbose``) one line of build output."""
        self.last = line.strip()
        if self.tty:
            if time.monotonic() - self._drawn > 0.1:
                self._draw()
        elif self.verbose:
            print(f"  | {line.rstrip()}", file=self.stream)

    def warning(self, message: str) -> None:
        """Print a warning on its own line."""
        self.clear()
        print(f"warning: {message}", file=self.stream)

    def clear(self) -> None:
        """Erase the live status line."""
        if self.tty:
            with self._lock:
                self.stream.write("\r\x1b[K")
                self.stream.flush()

    def close(self) -> None:
        """Stop the ticker and erase the status line."""
        self._stop.set()
        self.clear()


def _store_root(args: argparse.Namespace) -> Path:
    return Path(args.store or os.environ.get("ROCMFORGE_STORE") or "store")


def _open_store(args: argparse.Namespace) -> Any:
    from rocmforge.store import open_store

    return open_store(_store_root(args))


def _emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def cmd_plan(args: argparse.Namespace) -> int:
    """``rocmforge plan RECIPE``: show the derivation, the hash and whether it is cached."""
    from rocmforge.realize import plan
    from rocmforge.recipe_load import load_recipe
    from rocmforge.requirements import PipFetcher

    store = _open_store(args)
    report = plan(load_recipe(args.recipe), store=store, fetcher=PipFetcher())
    if args.json:
        _emit_json(report.to_json())
        return 0
    print(json.dumps(report.derivation, indent=2, sort_keys=True))
    print(f"name:    {report.name} {report.version}")
    print(f"hash:    {report.hash}")
    print(f"cached:  {'yes, ' + str(report.path) if report.cached else 'no'}")
    return 0


def cmd_realize(args: argparse.Namespace) -> int:
    """``rocmforge realize RECIPE...``: build (or fetch from the store) and print wheel paths."""
    from rocmforge.realize import realize
    from rocmforge.recipe_load import load_recipe
    from rocmforge.requirements import PipFetcher

    recipes = [load_recipe(p) for p in args.recipes]  # every recipe is checked before any build
    store = _open_store(args)
    fetcher = PipFetcher()

    def runner_factory() -> Any:
        from rocmforge.sandbox import detect_runner

        return detect_runner(args.sandbox)

    reports = []
    for i, recipe in enumerate(recipes):
        link = None
        if args.out_link:
            link = Path(args.out_link if i == 0 else f"{args.out_link}-{i + 1}")
        reporter = ConsoleReporter(sys.stderr, label=recipe.package.name, verbose=args.verbose)
        try:
            report = realize(
                recipe,
                store=store,
                fetcher=fetcher,
                runner_factory=runner_factory,
                reporter=reporter,
                keep_failed=args.keep_failed,
                link=link,
            )
        finally:
            reporter.close()
        reports.append(report)
        if not args.json:
            how = (
                "cached" if report.cached else f"built in {report.seconds:.1f} s ({report.sandbox})"
            )
            print(f"rocmforge: {report.name} {report.version} {report.hash} {how}", file=sys.stderr)
    if args.json:
        _emit_json([r.to_json() for r in reports])
    else:
        for r in reports:
            for w in r.wheels:
                print(w)
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    """``rocmforge log TARGET``: print the build log of an entry or of the last failed build."""
    import zstandard

    store = _open_store(args)
    path = _find_log(store, args.target)
    out = sys.stdout.buffer
    with open(path, "rb") as f:
        zstandard.ZstdDecompressor().copy_stream(f, out)
    out.flush()
    return 0


def _find_log(store: Any, target: str) -> Path:
    from rocmforge.errors import RequirementError

    if target.endswith(".toml") or os.path.isfile(target):
        from rocmforge.realize import plan
        from rocmforge.recipe_load import load_recipe

        try:
            report = plan(load_recipe(target), store=store, fetcher=None)
        except RequirementError as exc:
            raise UsageError(f"{target}: never built here ({exc})") from exc
        h, name, version = report.hash, report.name, report.version
        if report.path is not None:
            return Path(report.path) / "build.log.zst"
        failed = Path(store.failed_log_path(h, name, version))
        if failed.exists():
            return failed
        raise UsageError(f"{target}: no build log (hash {h} was never built in {store.root})")
    try:
        entry = store.resolve(target)
        return Path(entry.path) / "build.log.zst"
    except UsageError:
        failed_logs = sorted(Path(store.failed_dir).glob(f"{target}*.log.zst"))
        if len(failed_logs) == 1:
            return failed_logs[0]
        raise


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``rocmforge`` command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store", metavar="DIR", help="store directory (default: $ROCMFORGE_STORE or ./store)"
    )
    parser = argparse.ArgumentParser(
        prog="rocmforge", description="Reproducible, content-addressed builds of Python wheels."
    )
    parser.add_argument("--version", action="version", version=f"rocmforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "realize", parents=[common], help="build a recipe (or reuse the cached build)"
    )
    p.add_argument("recipes", nargs="+", metavar="RECIPE")
    p.add_argument("-o", "--out-link", metavar="LINK", help="make LINK point at the store entry")
    p.add_argument(
        "--keep-failed", action="store_true", help="keep the build dir of a failed build"
    )
    p.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "unshare", "none"),
        default=None,
        help="sandbox level (default: the best available)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="echo build output (non-TTY)")
    p.add_argument("--json", action="store_true", help="print a JSON report on stdout")
    p.set_defaults(func=cmd_realize)

    p = sub.add_parser("plan", parents=[common], help="show the derivation and input hash")
    p.add_argument("recipe", metavar="RECIPE")
    p.add_argument("--json", action="store_true", help="print a JSON report on stdout")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("log", parents=[common], help="print the build log of a build")
    p.add_argument(
        "target", metavar="TARGET", help="recipe file, input hash (prefix) or entry path"
    )
    p.set_defaults(func=cmd_log)
    return parser


def _render_error(exc: RocmforgeError) -> None:
    if isinstance(exc, RecipeError):
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return
    print(f"error: {exc}", file=sys.stderr)
    if isinstance(exc, BuildError):
        if exc.log_tail:
            print(f"--- last {len(exc.log_tail)} lines of the build log ---", file=sys.stderr)
            for line in exc.log_tail:
                print(line, file=sys.stderr)
            print("---", file=sys.stderr)
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
