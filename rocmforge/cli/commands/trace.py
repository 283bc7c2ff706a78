"""``rocmforge trace TARGET -o FILE``: a build's timeline as Chrome trace-event JSON.

Opens in Perfetto (ui.perfetto.dev) and ``chrome://tracing``: rocmforge's phases, the recipe's
steps, every ninja edge on its slot, memory and compile jobs as counters
(:mod:`rocmforge.observe.trace`). An entry without telemetry is exit 1, saying so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_store_option, open_store, write_output


def register(sub: Any) -> None:
    """Add the ``trace`` command."""
    p = sub.add_parser("trace", help=COMMANDS["trace"])
    p.add_argument("target", metavar="TARGET", help="input hash (prefix), entry name or path")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="write the JSON here")
    add_store_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge trace TARGET -o FILE``: write the entry's trace; print where."""
    from rocmforge.observe.record import read_record
    from rocmforge.observe.trace import trace_events

    entry = open_store(args).resolve(args.target)
    doc = trace_events(read_record(entry.path), name=entry.path.name)
    out = Path(args.output)
    write_output(out, json.dumps(doc, separators=(",", ":")).encode())
    edges = sum(1 for e in doc["traceEvents"] if e.get("cat") == "edge")
    print(
        f"{out}: {len(doc['traceEvents'])} trace events ({edges} ninja edges) of {entry.path.name}"
    )
    return 0
