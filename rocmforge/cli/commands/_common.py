"""What every command shares: the store option, opening the store, JSON output.

Imported by every command, the read commands included: only ``argparse``, ``os`` and ``sys`` at
the top; the rest (the store, the configuration, ``json``) where a function needs it.
"""

from __future__ import annotations

import argparse
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

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
    from pathlib import Path

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
    from pathlib import Path

    root, how = store_where(args)
    return Path(root), how


def store_where(args: argparse.Namespace) -> tuple[str, str]:
    """:func:`store_choice` as a plain string, for the read commands (no :mod:`pathlib`)."""
    from rocmforge.store.locate import find_store

    return find_store(getattr(args, "store", None), recipes=_recipes_of(args))


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
    from rocmforge.errors import NoStoreError
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
    from pathlib import Path

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


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON with sorted keys."""
    import json

    print(json.dumps(data, indent=2, sort_keys=True))




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


def print_read(
    args: argparse.Namespace,
    read: Callable[[str, str], str | bytes | tuple[str, str] | None],
) -> bool:
    """Print what ``read(root, how)`` (one of :mod:`rocmforge.store.readers`) answers for the
    store the command uses (``root``, chosen ``how``: see :func:`store_where`); return whether
    it answered. An answer is stdout's text or bytes, or the pair (stderr, stdout).

    It answers only when that store is healthy (it needs no creation, repair or indexing) and
    ``read`` does not return None. Anything unexpected on the way (a damaged file, a name
    stdout cannot encode) counts as no answer: the command's full branch then runs from the
    start and reports it, so this can make a command faster, never different.
    """
    from rocmforge.store.readers import healthy

    try:
        root, how = store_where(args)
        answer = read(root, how) if healthy(root) else None
        err, out = answer if isinstance(answer, tuple) else ("", answer)
        for text in (err, out):
            if isinstance(text, str):
                text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict")
    except Exception:
        return False
    if out is None:
        return False
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()
    buffer = getattr(sys.stdout, "buffer", None)  # None: a text stream (a test's capture)
    if isinstance(out, bytes) and buffer is not None:
        sys.stdout.flush()
        buffer.write(out)
        buffer.flush()
    else:
        sys.stdout.write(out if isinstance(out, str) else out.decode(errors="replace"))
    return True


def write_output(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; a UsageError naming it when that fails."""
    from rocmforge.errors import UsageError
    from rocmforge.util.fsutil import write_atomic

    try:
        write_atomic(path, data, durable=False)
    except OSError as exc:
        raise UsageError(f"-o {path}: cannot write it: {exc.strerror or exc}") from None


def add_entry_output_parser(sub: Any, name: str, what: str) -> argparse.ArgumentParser:
    """The parser of a command that writes one file about one store entry (``trace``,
    ``report``): TARGET, ``-o FILE`` (``what`` goes there), ``--store`` and ``--json``."""
    from rocmforge.cli.commands import COMMANDS

    p: argparse.ArgumentParser = sub.add_parser(name, help=COMMANDS[name])
    p.add_argument("target", metavar="TARGET", help="input hash (prefix), entry name or path")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help=f"write {what} here")
    add_store_option(p)
    add_json_option(p)
    return p


def wrote_output(args: argparse.Namespace, entry: Entry, size: int, text: str) -> None:
    """Say that ``args.output`` (``size`` bytes) was written for ``entry``: ``text`` after the
    file's name, or with ``--json`` an object naming the file, the entry and the size."""
    if getattr(args, "json", False):
        emit_json({"output": str(args.output), "entry": entry.path.name,
                   "hash": entry.hash, "bytes": size})  # fmt: skip
    else:
        print(f"{args.output}: {text}")
