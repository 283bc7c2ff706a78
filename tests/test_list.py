"""``list`` prints from plain index tuples, exactly the table of the listed entries."""

from __future__ import annotations

from pathlib import Path


def test_list_text_is_the_table_of_the_listed_entries(tmp_path: Path) -> None:
    """``list`` prints from plain index tuples: the same table as ``print_table`` of the rows,
    used times and roots included, on a store whose rows span many sizes and minutes."""
    import contextlib
    import io
    import os

    from rocmforge.commands.list import _print_summary
    from rocmforge.commands.query import print_table
    from rocmforge.store.entry import Entry, EntryMeta
    from rocmforge.store.query import list_entries, list_summary
    from rocmforge.store.store import open_store

    s = open_store(tmp_path / "store")

    def entries() -> object:
        for i in range(300):
            h = f"{i:032x}"
            meta = {"hash": h, "name": f"p{i % 7}", "version": f"1.{i}", "created": 1.7e9 + i * 37,
                    "size": 3 ** (i % 25), "sandbox": "bwrap", "wheels": []}  # fmt: skip
            path = s.entries_dir / f"{h}-p{i % 7}-1.{i}"
            drv = {"env": {}}
            yield Entry.from_meta(path, EntryMeta.from_json(meta, file=path / "meta.json")), drv

    s.index.rebuild(entries())  # type: ignore[arg-type]
    (s.root / "used").mkdir()
    used = s.root / "used" / f"{5:032x}"
    used.touch()
    os.utime(used, (1.8e9, 1.8e9))
    a, b = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(a):
        print_table(list_entries(s))
    with contextlib.redirect_stdout(b):
        _print_summary(list_summary(s))
    assert b.getvalue() == a.getvalue()
    assert len(b.getvalue().splitlines()) == 301 and "2027-01-15 08:00" in b.getvalue()
