"""The declared view's farm: hard links, except the toolchain's guarded files, which are copied."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rocmforge.toolchain.view import prepare_view

HEADER = "/usr/include/yaml.h"
ARCHIVE = "/usr/lib/x86_64-linux-gnu/libyaml.a"


def test_guarded_files_are_copied_so_their_ctime_stays(tmp_path: Path) -> None:
    """A hard link moves the linked file's ctime, which every realize memo guarding it checks:
    a view build must not make the memos of other recipes miss (issue 26: tests did)."""
    if shutil.which("dpkg-query") is None or not (Path(HEADER).exists() and Path(ARCHIVE).exists()):
        pytest.skip("needs libyaml-dev from dpkg")
    before = os.stat(HEADER)
    usr = prepare_view({"libyaml-dev": "any"}, {}, cache_dir=tmp_path, copies=[HEADER])
    farm_header = os.stat(usr / "include" / "yaml.h")
    farm_archive = os.stat(usr / "lib" / "x86_64-linux-gnu" / "libyaml.a")
    after = os.stat(HEADER)
    assert farm_header.st_ino != before.st_ino  # a copy
    assert Path(usr / "include" / "yaml.h").read_bytes() == Path(HEADER).read_bytes()
    assert after.st_ctime_ns == before.st_ctime_ns and after.st_nlink == before.st_nlink
    assert farm_archive.st_ino == os.stat(ARCHIVE).st_ino  # the rest stays hard links
