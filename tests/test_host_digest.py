"""scripts/host-digest.sh, CI's proof that the suite leaves the host as it found it (issue 26).

Run inside a private root (tests/privroot.py), so the changes it must catch are made to an
overlay, never to the host.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from privroot import private_root

pytestmark = pytest.mark.slow  # a find over /usr, twice a test

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "host-digest.sh"


def test_a_directory_added_anywhere_under_usr_is_named(tmp_path: Path) -> None:
    """Headless Chromium made /usr/lib/chromium/extensions: /usr/lib was not in the digest."""
    before = tmp_path / "before"
    with private_root(("/usr",)) as root:
        assert root.run(["bash", SCRIPT, "snapshot", before], check=False).returncode == 0
        same = root.run(["bash", SCRIPT, "check", before], capture_output=True, text=True)
        assert same.returncode == 0, same.stderr
        root.run(["mkdir", "/usr/lib/rocmforge-digest-probe"], check=True)
        changed = root.run(["bash", SCRIPT, "check", before], capture_output=True, text=True)
    assert changed.returncode == 1
    assert "added: /usr/lib/rocmforge-digest-probe" in changed.stderr, changed.stderr
    assert "changed: /usr/lib\n" in changed.stderr, changed.stderr


def test_bytecode_caches_do_not_count(tmp_path: Path) -> None:
    """Python writes __pycache__ files under /usr while tests run it: not a change."""
    before = tmp_path / "before"
    with private_root(("/usr",)) as root:
        root.run(["mkdir", "-p", "/usr/lib/rocmforge-digest-probe/__pycache__"], check=True)
        assert root.run(["bash", SCRIPT, "snapshot", before], check=False).returncode == 0
        root.run(["touch", "/usr/lib/rocmforge-digest-probe/__pycache__/m.pyc"], check=True)
        same = root.run(["bash", SCRIPT, "check", before], capture_output=True, text=True)
    assert same.returncode == 0, same.stderr
