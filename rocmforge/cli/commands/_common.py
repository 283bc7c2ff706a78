"""What every command shares: the store option, opening the store, JSON output, progress."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rocmforge.errors import StoreError
from rocmforge.pipeline.options import HEARTBEAT_SECONDS

if TYPE_CHECKING:
    from rocmforge.config import Settings
    from rocmforge.store.entry import Entry
    from rocmforge.store.store import Store
    from rocmforge.trust.signing import PublicKey


STORE_HELP = (
    "store directory (default: the first store found walking up from the recipe's directory, "
    "then the current one; else $ROCMFORGE_STORE; else $XDG_DATA_HOME/rocmforge/store)"
)

JSON_HELP = "print a JSON report on stdout"


def add_store_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--store DIR`` to a command's parser (also accepted before the command).

    The default is suppressed so that a ``--store`` given before the command (on the main
    parser) is not overwritten by the command's own unset option.
    """
    parser.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=STORE_HELP)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--json`` to a command's parser (also accepted before the command)."""
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP
    )
    parser.set_defaults(json_supported=True)


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """Add the options every command also accepts before its name (``rocmforge --store X ...``)."""
    parser.add_argument("--store", metavar="DIR", default=None, help=STORE_HELP)
    parser.add_argument("--json", action="store_true", default=False, help=JSON_HELP)


CONFIG_HELP = (
    "the project configuration file (default: the first rocmforge.toml walking up from the "
    "recipe's directory, then the current one; '' reads none); see docs/sharing.md"
)


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE`` (the project configuration file) to a command's parser."""
    parser.add_argument("--config", metavar="FILE", default=None, help=CONFIG_HELP)


def settings_of(
    args: argparse.Namespace,
    *,
    caches: list[str] | None = None,
    substitute: bool | None = None,
    require_substitute: bool | None = None,
) -> Settings:
    """Return the effective configuration of the command (flags given here, the environment,
    the project file, the user file) and print its notes as warnings."""
    from rocmforge.config import effective_settings

    config = getattr(args, "config", None)
    starts = [os.path.dirname(os.path.abspath(r)) for r in _recipes_of(args)]
    starts.append(os.getcwd())
    settings = effective_settings(
        caches=caches or (),
        substitute=substitute,
        require_substitute=require_substitute,
        starts=starts,
        project=Path(config) if config else None,
        no_project=config == "",
    )
    for note in settings.notes:
        _warn(note)
    return settings


def add_substitute_options(parser: argparse.ArgumentParser, *, require: bool = True) -> None:
    """Add ``--cache``, ``--no-substitute``/``--offline``, ``--substitute``, ``--config`` and
    (with ``require``) ``--require-substitute``: which binary caches a command asks."""
    parser.add_argument(
        "--cache",
        action="append",
        metavar="URL",
        help="on a miss, substitute from this binary cache (file://DIR, oci://HOST/REPO); "
        "repeatable, asked before $ROCMFORGE_CACHES and the configuration files' caches",
    )
    parser.add_argument(
        "--no-substitute",
        "--offline",
        dest="substitute",
        action="store_false",
        default=None,
        help="ask no binary cache: build every miss here",
    )
    parser.add_argument(
        "--substitute",
        dest="substitute",
        action="store_true",
        help="ask the binary caches even if a configuration file says substitute = false",
    )
    if require:
        parser.add_argument(
            "--require-substitute",
            action="store_true",
            default=None,
            help="fail (exit 1) instead of building when no cache provides a missing entry",
        )
    add_config_option(parser)


def substitution_of(
    args: argparse.Namespace,
) -> tuple[Settings, list[str], dict[str, PublicKey] | None]:
    """Return the settings, the cache URLs to ask (none when substitution is off) and the
    trusted keys (None when no cache is asked) of a command with :func:`add_substitute_options`.
    """
    from rocmforge.errors import UsageError

    require = getattr(args, "require_substitute", None)
    if args.substitute is False and require:
        raise UsageError("--require-substitute and --no-substitute/--offline contradict")
    settings = settings_of(
        args,
        caches=args.cache,
        substitute=args.substitute,
        # --offline on the command line also turns off a configured require-substitute
        require_substitute=False if args.substitute is False else require,
    )
    if settings.require_substitute and not settings.substitute:
        raise UsageError(
            "require-substitute and substitute = false contradict (from "
            f"{settings.origins.get('require_substitute')} and "
            f"{settings.origins.get('substitute')})"
        )
    if not settings.substitute:
        return settings, [], None
    trusted = trusted_of(settings) if settings.caches or settings.require_substitute else None
    return settings, list(settings.caches), trusted


def trusted_of(settings: Settings) -> dict[str, PublicKey]:
    """The trusted keys of ``settings`` (with the trusted-keys file; the environment wins)."""
    from rocmforge.trust.signing import trusted_keys

    return trusted_keys(settings.trusted_keys)


def count(text: str) -> int:
    """argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def _recipes_of(args: argparse.Namespace) -> list[str]:
    """The files named on the command line where the store search starts: recipes, and wheels
    or entry paths (a wheel in ``store/entries/...`` finds its own store)."""
    given = [*(getattr(args, "recipes", None) or []), *(getattr(args, "wheels", None) or []),
             *(getattr(args, a, None) for a in ("recipe", "target", "a", "b"))]  # fmt: skip
    return [str(r) for r in given if r and (os.path.isfile(r) or os.path.isdir(r))]


def store_choice(args: argparse.Namespace) -> tuple[Path, str]:
    """Return the store directory the command uses and how it was chosen
    (:func:`rocmforge.store.locate.find_store`)."""
    from rocmforge.store.locate import find_store

    root, how = find_store(getattr(args, "store", None), recipes=_recipes_of(args))
    return Path(root), how


def store_root(args: argparse.Namespace) -> Path:
    """Return the store directory the command uses (see :func:`store_choice`)."""
    return store_choice(args)[0]


def _warn(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")  # one write per line (see ConsoleReporter._say)


def open_store(args: argparse.Namespace, *, create: bool = False) -> Store:
    """Open the store chosen on the command line.

    Only commands that build or fetch (``create=True``: realize, plan, lock) make a new store,
    and say where on stderr; every other command raises :class:`NoStoreError` (exit 3) naming
    the directory it looked at, and creates nothing. Repairs the store makes on its own are
    printed as warnings; entries whose publish died before indexing them are indexed now (cheap
    when there are none).
    """
    from rocmforge.store.locate import BY_OPTION, is_store
    from rocmforge.store.store import open_store as _open

    root, how = store_choice(args)
    if not is_store(str(root)):
        if not create:
            raise NoStoreError(root, how)
        if how != BY_OPTION:  # a store found by the search: say where it goes
            print(f"rocmforge: creating a new store at {root} ({how})", file=sys.stderr)
    store = _open(root, on_warning=_warn)
    store.heal_pending()
    return store


def entry_of(store: Store, target: str) -> Entry:
    """Return the entry a TARGET names: a recipe (the entry of its current input hash), an input
    hash (prefix), an entry name or a path in the store. The one place commands resolve targets.
    """
    if not is_recipe_target(target):
        return store.resolve(target)
    from rocmforge.errors import RequirementError, UsageError
    from rocmforge.pipeline.realize import plan
    from rocmforge.recipe.load import load_recipe

    try:
        report = plan(load_recipe(target), store=store, fetcher=None)
    except RequirementError as exc:
        raise UsageError(f"{target}: never built here ({exc})") from exc
    if report.path is None:
        raise UsageError(
            f"{target}: its input hash {report.hash} is not built in {store.root} "
            "(rocmforge realize builds it)"
        )
    return store.load(Path(report.path))


class NoStoreError(StoreError):
    """A command that only reads found no store where it looked (and created none)."""

    def __init__(self, root: Path, how: str) -> None:
        super().__init__(
            f"no rocmforge store at {root} ({how}); nothing was created. Pass --store DIR of "
            "an existing store, or build something there first (rocmforge realize creates it)"
        )
        self.root = root


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON with sorted keys."""
    print(json.dumps(data, indent=2, sort_keys=True))




class ConsoleReporter:
    """Progress on stderr: one live status line on a TTY, plain phase lines otherwise.

    Off a terminal (CI logs, nohup, Slurm) a heartbeat line every ``heartbeat`` seconds says the
    work is alive: phase, elapsed time, the size of the build output so far and its last line.
    """

    def __init__(
        self,
        stream: IO[str],
        *,
        label: str,
        verbose: bool = False,
        heartbeat: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.stream = stream
        self.label = label
        self.verbose = verbose
        self.heartbeat = heartbeat
        self.log_bytes = 0
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
        elif heartbeat > 0:
            self._ticker = threading.Thread(target=self._beat, daemon=True)
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

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            self.beat()

    def beat(self) -> None:
        """Print one heartbeat line (off a terminal): phase, elapsed, output size, last line."""
        size = self.log_bytes
        shown = (f"{size / 1024**2:.1f} MB" if size >= 1024**2
                 else f"{size / 1024:.1f} kB" if size >= 1024 else f"{size} B")  # fmt: skip
        last = f"; last: {self.last[:200]}" if self.last else ""
        with self._lock:
            self._say(
                f"rocmforge: {self.label}: {self.current} still running (+{self._elapsed()}); "
                f"output {shown}{last}"
            )
            self.stream.flush()

    def phase(self, name: str) -> None:
        """Show that a new phase started."""
        self.current = name
        if self.tty:
            self._draw()
        else:
            self._say(f"rocmforge: {self.label}: {name} (+{self._elapsed()})")

    def log_line(self, line: str) -> None:
        """Remember (TTY) or echo (``--verbose``) one line of build output."""
        self.last = line.strip()
        self.log_bytes += len(line.encode("utf-8", "replace")) + (not line.endswith("\n"))
        if self.tty:
            if time.monotonic() - self._drawn > 0.1:
                self._draw()
        elif self.verbose:
            self._say(f"  | {line.rstrip()}")

    def warning(self, message: str) -> None:
        """Print a warning on its own line."""
        self.clear()
        self._say(f"warning: {message}")

    def _say(self, line: str) -> None:
        # One write per line: with PYTHONUNBUFFERED print() writes the text and its newline in
        # two calls, and the children of `realize -j` share one stderr, so another child's
        # line could start in the middle of this one.
        self.stream.write(line + "\n")

    def clear(self) -> None:
        """Erase the live status line."""
        if self.tty:
            with self._lock:
                self.stream.write("\r\x1b[K")
                self.stream.flush()

    def close(self) -> None:
        """Stop the ticker (or heartbeat) and erase the status line."""
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
    from rocmforge.plan.graph import load_graph, plan_graph

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
