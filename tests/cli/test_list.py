"""``list`` and ``query`` print one table, from plain index tuples, exactly right."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from conftest import synthetic_store


def test_list_text_is_the_table_of_the_listed_entries(tmp_path: Path) -> None:
    """``list`` prints from plain index tuples, caching each minute and size it formats: the
    table is the one a plain per-row rendering of the listed entries gives, used times and
    roots included, on a store whose rows span many sizes and minutes."""
    import argparse

    from rocmforge.cli.commands.list import run
    from rocmforge.store.query import list_entries
    from rocmforge.util.table import human_size, human_time

    s = synthetic_store(tmp_path / "store")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run(argparse.Namespace(json=False, store=str(s.root))) == 0
    rows = [
        ("HASH", "NAME", "VERSION", "SIZE", "CREATED (UTC)", "LAST USED (UTC)", "ROOTS"),
        *(
            (e.row.hash[:12], e.row.name, e.row.version, human_size(e.row.size),
             human_time(e.row.created), human_time(e.last_used), str(len(e.roots) or "-"))
            for e in list_entries(s)
        ),
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(7)]
    want = "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
        for r in rows
    )
    assert out.getvalue() == want
    assert len(want.splitlines()) == 301 and "2027-01-15 08:00" in want
