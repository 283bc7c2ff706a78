"""lock writes a pin right after the key it belongs to, whatever tomlkit version is installed.

tomlkit 0.15 dropped the private ``Container._insert_after`` that lock used: ``rev`` then went
to the end of ``[source]`` (and ``sha256`` after ``subdir``), which CI caught on a fresh machine.
"""

from __future__ import annotations

import tomlkit

from rocmforge.lock.locker import insert_after

RECIPE = """\
[source]
git = "https://example.org/x.git"
ref = "v1.0"     # a tag: lock pins it
# where the sources live
subdir = "python"

[env]
A = "1"
"""


def _lines(doc: tomlkit.TOMLDocument) -> list[str]:
    return tomlkit.dumps(doc).splitlines()


def test_inserted_right_after_its_key_with_comments_kept() -> None:
    doc = tomlkit.parse(RECIPE)
    insert_after(doc["source"], "ref", "rev", "0" * 40)
    lines = _lines(doc)
    assert lines[2:5] == ['ref = "v1.0"     # a tag: lock pins it', f'rev = "{"0" * 40}"',
                          "# where the sources live"]  # fmt: skip
    assert tomlkit.parse(tomlkit.dumps(doc))["env"]["A"] == "1"


def test_missing_anchor_appends() -> None:
    doc = tomlkit.parse(RECIPE)
    insert_after(doc["source"], "url", "sha256", "f" * 64)
    assert list(tomlkit.parse(tomlkit.dumps(doc))["source"])[-1] == "sha256"


def test_after_the_last_key() -> None:
    doc = tomlkit.parse('[requirements]\nbuild = ["x==1"]   # c\n')
    insert_after(doc["requirements"], "build", "digests", {"x==1": "sha256:0"})
    assert list(tomlkit.parse(tomlkit.dumps(doc))["requirements"]) == ["build", "digests"]
    assert "# c" in tomlkit.dumps(doc)
