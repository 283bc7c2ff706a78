"""What every command shares: the store option, opening the store, JSON output, progress."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocmforge.store.store import Store


def add_store_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--store DIR`` to a command's parser."""
    parser.add_argument(
        "--store", metavar="DIR", help="store directory (default: $ROCMFORGE_STORE or ./store)"
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--json`` to a command's parser."""
    parser.add_argument("--json", action="store_true", help="print a JSON report on stdout")


def count(text: str) -> int:
    """argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def store_root(args: argparse.Namespace) -> Path:
    """Return the store directory chosen by ``--store``, ``$ROCMFORGE_STORE`` or the default."""
    return Path(args.store or os.environ.get("ROCMFORGE_STORE") or "store")


def open_store(args: argparse.Namespace) -> Store:
    """Open (creating if needed) the store chosen on the command line."""
    from rocmforge.store.store import open_store as _open

    return _open(store_root(args))


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON with sorted keys."""
    print(json.dumps(data, indent=2, sort_keys=True))


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
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except OSError:
            width = 0
        width = width if width >= 20 else 100
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


def is_recipe_target(target: str) -> bool:
    """Whether ``target`` names a recipe or stack file (a ``.toml`` file), not a store entry."""
    return target.endswith(".toml") and os.path.isfile(target)


def stack_entries(store: Store, target: str) -> list[tuple[str, Any]]:
    """The cached entries of a recipe or stack file and its closure: ``(package name, Entry)``.

    Every node must be built: one that is not (or is provisional) raises
    :class:`~rocmforge.errors.UsageError` naming it.
    """
    from rocmforge.errors import UsageError
    from rocmforge.graph import load_graph, plan_graph

    graph = load_graph([target])
    out = []
    for node in plan_graph(graph, store=store, fetcher=None):
        if node.path is None:
            raise UsageError(
                f"{target}: {node.name} {node.version} ({node.recipe.name}) is not built in "
                f"{store.root}; run `rocmforge realize {target}` first"
            )
        out.append((node.name, store.load(node.path)))
    return out


def resolve_targets(store: Store, target: str) -> list[Any]:
    """The entries a TARGET names: a store entry (hash, prefix, path) or, for a recipe or stack
    file, every entry of its closure (see :func:`stack_entries`)."""
    if is_recipe_target(target):
        return [entry for _, entry in stack_entries(store, target)]
    return [store.resolve(target)]
