"""tests/privroot.py: what a test changes in a private root never reaches the host.

Real mount namespaces, real overlay mounts, a real ``dpkg -i``; each check looks at the host's
view from outside the namespace after the change was made inside it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import make_deb
from tests.privroot import PrivateRoot, PrivateRootError, isolated, private_root, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"{unavailable()}")


def test_files_made_inside_are_seen_inside_and_never_outside(tmp_path: Path) -> None:
    name = f"rf-privroot-{uuid.uuid4().hex[:8]}.h"
    header = Path("/usr/local/include") / name
    with private_root() as root:
        root.call(header.write_text, "#define X 1\n")
        assert not header.exists()  # the host's /usr/local is untouched
        # the command inherits the namespace (and the caller's working directory)
        seen = root.run(["cat", str(header)], capture_output=True, text=True, cwd=tmp_path)
        assert seen.returncode == 0 and seen.stdout == "#define X 1\n"
        assert root.run(["pwd"], capture_output=True, text=True, cwd=tmp_path).stdout.strip() == (
            str(tmp_path)
        )
        # outside the overlaid trees the host is shared both ways: tmp_path is the host's
        root.call((tmp_path / "out.txt").write_text, "from inside\n")
        assert (tmp_path / "out.txt").read_text() == "from inside\n"
    assert not header.exists()
    with private_root() as again:  # a new root starts from the host, not from the last one
        assert again.call(header.exists) is False


def test_a_failure_inside_fails_the_caller_with_its_traceback() -> None:
    def broken() -> None:
        assert 1 + 1 == 3, "arithmetic inside"

    with private_root() as root:
        with pytest.raises(PrivateRootError, match="arithmetic inside"):
            root.call(broken)
        assert root.call(lambda: 41 + 1) == 42  # the root still works after a failure


def test_skip_inside_skips_the_test() -> None:
    with private_root() as root, pytest.raises(pytest.skip.Exception, match="nothing here"):
        root.call(pytest.skip, "nothing here")


@isolated()
def test_isolated_runs_the_whole_body_inside(tmp_path: Path) -> None:
    marker = Path("/opt") / f"rf-privroot-{uuid.uuid4().hex[:8]}"
    marker.mkdir()  # only inside: see the next test, which checks none is left on the host
    (tmp_path / "marker").write_text(str(marker))
    assert marker.is_dir()


def test_nothing_is_left_by_isolated_tests() -> None:
    assert not list(Path("/opt").glob("rf-privroot-*"))
    assert not list(Path("/usr/local/include").glob("rf-privroot-*"))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_dpkg_install_inside_changes_neither_usr_nor_the_host_database(tmp_path: Path) -> None:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("needs dpkg")
    name = f"rocmforge-test-privroot-{uuid.uuid4().hex[:6]}"
    header = Path(f"/usr/include/{name}/probe.h")
    deb = make_deb(tmp_path, name, "1.0-1", {str(header): "#define V 1\n"})
    status = Path("/var/lib/dpkg/status")
    before = _digest(status)
    with private_root() as root:
        done = root.run(["dpkg", "-i", str(deb)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        query = ["dpkg-query", "-W", "-f=${Version}", name]
        assert root.run(query, capture_output=True, text=True).stdout == "1.0-1"
        assert root.call(header.read_text) == "#define V 1\n"
        assert not header.exists() and _digest(status) == before
        assert subprocess.run(query, capture_output=True, check=False).returncode != 0
    assert not header.parent.exists() and _digest(status) == before


def test_a_killed_holder_takes_the_changes_with_it(tmp_path: Path) -> None:
    name = f"rf-privroot-{uuid.uuid4().hex[:8]}"
    root = PrivateRoot().__enter__()
    assert root._holder is not None
    base = root._base
    root.call((Path("/usr/local") / name).write_text, "x")
    os.kill(root._holder.pid, signal.SIGKILL)  # no clean-up runs
    root._holder.wait(timeout=10)
    assert not (Path("/usr/local") / name).exists()
    assert os.listdir(base) == []  # the tmpfs with the upper layers was only inside
    root.__exit__(None, None, None)
    assert not Path(base).exists()
