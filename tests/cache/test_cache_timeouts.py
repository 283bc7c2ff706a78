"""Every read from a cache has a deadline (issue 34 point 5).

A ``file://`` cache on a hung mount is a real FUSE mount whose reads never return
(tests/hungfs.py, in a private mount namespace: a blob read or even the manifest's open waits
in the kernel); an ``oci://`` registry that accepts and never answers is a real socket. Each
ends, with ``ROCMFORGE_CACHE_TIMEOUT=2``, in one line naming the cache, not a hang.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, pip_args, rf
from test_cache_untrusted import _signed_push, _substitute

from rocmforge.util.deadline import DeadlineReader, Stalled, call

HUNGFS = REPO / "tests" / "hungfs.py"


def test_a_read_that_never_returns_is_abandoned_at_its_deadline() -> None:
    """The seam itself, on a pipe nobody writes to (a read of it blocks as a hung mount's)."""
    r, w = os.pipe()
    try:
        reader = DeadlineReader(os.fdopen(r, "rb", buffering=0), 0.3, what="reading the pipe")
        start = time.monotonic()
        with pytest.raises(Stalled, match=r"^reading the pipe: no data within 0.3 s$"):
            reader.readinto(bytearray(10))
        assert 0.25 < time.monotonic() - start < 5
        with pytest.raises(Stalled, match="an earlier read never returned"):
            reader.read(10)
        reader.close()
        os.write(w, b"late")  # the abandoned read returns; the worker closes the pipe's end
        with pytest.raises(Stalled):
            call(lambda: time.sleep(5), 0.2, what="sleeping")
        assert call(lambda: 42, 1.0) == 42
        with pytest.raises(ZeroDivisionError):
            call(lambda: 1 // 0, 1.0)
    finally:
        os.close(w)
    ok_r, ok_w = os.pipe()
    os.write(ok_w, b"data")
    os.close(ok_w)
    with DeadlineReader(os.fdopen(ok_r, "rb", buffering=0), 1.0) as reader:
        assert reader.read() == b"data"


def _hung(mode: str, real: Path, mnt: Path, env: dict[str, str], *args: str | Path):
    """Run the rocmforge CLI with ``real`` seen at ``mnt`` through a FUSE mount where ``mode``
    hangs (tests/hungfs.py); skipped where FUSE cannot be mounted (not root, no /dev/fuse)."""
    mnt.mkdir()
    full = {**os.environ, "ROCMFORGE_PIP_ARGS": pip_args(), "ROCMFORGE_CACHE_TIMEOUT": "2", **env}
    full.pop("ROCMFORGE_STORE", None)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, HUNGFS, mode, real, mnt, "--", sys.executable, "-m", "rocmforge",
         *map(str, args)],
        env=full, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if proc.returncode == 125:
        if os.environ.get("CI") == "true":
            pytest.fail(f"FUSE cannot be mounted on CI: {proc.stderr}")
        pytest.skip(f"FUSE cannot be mounted here: {proc.stderr.strip()}")
    return proc, time.monotonic() - start


@pytest.mark.slow  # a real run of seconds: the quick tier stays under a minute
@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse")
@pytest.mark.parametrize("mode", ["read", "all"])
def test_a_file_cache_on_a_hung_mount_fails_naming_the_cache(
    tiny_recipe: Path, tmp_path: Path, mode: str
) -> None:
    """read: a blob's read never returns (the manifest answers); all: nothing answers, not
    even the manifest's open. Before the deadline reads, both hung forever."""
    real = tmp_path / "cache"
    built, env_b = _signed_push(tiny_recipe, tmp_path, f"file://{real}")
    mnt = tmp_path / "mnt"
    proc, took = _hung(mode, real, mnt, env_b, "realize", tiny_recipe, "--store",
                       tmp_path / "store-b", "--cache", f"file://{mnt}",
                       "--require-substitute")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert took < 60, took
    assert "never answered" in proc.stderr  # the mount did hang the read
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert f"cache file://{mnt}: file://{mnt}: no answer within 2 s " in line, line
    if mode == "read":
        assert f"reading {mnt}/blobs/sha256/" in line, line
    else:
        assert f"reading {mnt}/entries/{built['hash']}.json" in line, line
    assert "a hung NFS or FUSE mount?" in line and "ROCMFORGE_CACHE_TIMEOUT=SECONDS" in line
    assert "Traceback" not in proc.stderr


@pytest.fixture
def silent_registry() -> Iterator[str]:
    """A TCP listener that accepts connections and never answers: a hung registry."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"oci://127.0.0.1:{srv.getsockname()[1]}/rocmforge/hung"
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


@pytest.mark.slow
def test_an_oci_registry_that_never_answers_fails_naming_it(
    tiny_recipe: Path, tmp_path: Path, silent_registry: str
) -> None:
    start = time.monotonic()
    proc = _substitute(tiny_recipe, tmp_path / "store", {"ROCMFORGE_CACHE_TIMEOUT": "2"},
                       silent_registry, timeout=90)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert time.monotonic() - start < 60
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert f"cache {silent_registry}: {silent_registry}: the registry did not answer within 2 s" \
        in line, line
    bad = rf("realize", tiny_recipe, "--store", tmp_path / "store", "--cache", silent_registry,
             env={"ROCMFORGE_CACHE_TIMEOUT": "soon"})  # fmt: skip
    assert bad.returncode == 2 and "$ROCMFORGE_CACHE_TIMEOUT: expected seconds" in bad.stderr
