"""The CLI's commands: one module each, with ``register(subparsers)`` and ``run(args) -> int``.

To add a command, write ``rocmforge/cli/commands/NAME.py`` and list it in :data:`COMMANDS`. Command
modules import the core lazily, inside ``run``, so parsing stays cheap.
"""

COMMANDS = (
    "realize",
    "plan",
    "log",
    "lock",
    "audit",
    "explain",
    "query",
    "list",
    "show",
    "verify",
    "doctor",
    "gc",
    "pin",
    "unpin",
    "pins",
    "du",
    "key",
    "export",
    "push",
    "cache",
    "config",
)
