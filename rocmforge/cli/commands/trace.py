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

from rocmforge.cli.commands._common import (
    add_entry_output_parser,
    open_store,
    write_output,
    wrote_output,
)


def register(sub: Any) -> None:
    """Add the ``trace`` command."""
    add_entry_output_parser(sub, "trace", "the JSON").set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge trace TARGET -o FILE``: write the entry's trace; say where."""
    from rocmforge.observe.record import read_record
    from rocmforge.observe.trace import trace_events

    entry = open_store(args).resolve(args.target)
    doc = trace_events(read_record(entry.path), name=entry.path.name)
    data = json.dumps(doc, separators=(",", ":")).encode()
    write_output(Path(args.output), data)
    edges = sum(1 for e in doc["traceEvents"] if e.get("cat") == "edge")
    text = f"{len(doc['traceEvents'])} trace events ({edges} ninja edges) of {entry.path.name}"
    wrote_output(args, entry, len(data), text)
    return 0
