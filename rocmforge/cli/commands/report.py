"""``rocmforge report TARGET -o FILE.html``: a build's one self-contained HTML page.

The timeline, the 20 slowest edges, the compiler-cache hit rate, the memory curve and the
wheel's size by library (:mod:`rocmforge.observe.report`); no script, no network. An entry
without telemetry is exit 1, saying so.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rocmforge.cli.commands._common import (
    add_entry_output_parser,
    open_store,
    write_output,
    wrote_output,
)


def register(sub: Any) -> None:
    """Add the ``report`` command."""
    add_entry_output_parser(sub, "report", "the page").set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge report TARGET -o FILE.html``: write the page; say where."""
    from rocmforge.observe.record import read_record
    from rocmforge.observe.report import report_html

    entry = open_store(args).resolve(args.target)
    page = report_html(
        read_record(entry.path), entry.meta.to_json(), entry.wheels, name=entry.path.name
    ).encode()
    write_output(Path(args.output), page)
    wrote_output(args, entry, len(page), f"the report of {entry.path.name} ({len(page)} bytes)")
    return 0
