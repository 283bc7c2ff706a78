"""A full disk names its side and the remedy (issue 34 point 5): the store during a
substitution (its gc), the registry during a push to ``oci://`` (the registry's storage and
its garbage collection), as a full ``file://`` cache names ``cache gc``
(tests/cache/test_cache_untrusted.py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import rf
from test_cache_untrusted import _signed_push, _substitute


@pytest.fixture
def small_store_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 16 MB tmpfs (root, as CI runs; skipped otherwise) for the substituting store."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(
        [shutil.which("mount") or "mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.slow
def test_a_full_store_during_substitution_names_the_store_and_gc(
    tiny_recipe: Path, tmp_path: Path, small_store_disk: Path
) -> None:
    """The store's disk fills while the entry is downloaded into it: the error names the
    store (not the cache) and gc; before, it said `cannot download HASH: the local disk is
    full`, blamed on the cache, with no way out."""
    cache = f"file://{tmp_path / 'cache'}"
    _, env_b = _signed_push(tiny_recipe, tmp_path, cache)
    store = small_store_disk / "store"
    proc = rf("realize", tiny_recipe, "--store", store, "--json", "--no-substitute", env=env_b)
    assert proc.returncode == 0, proc.stderr  # a store made (and its index), then filled up
    with open(small_store_disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    shutil.rmtree(store / "entries")  # the entry goes (not its index row): the next is a miss
    (store / "entries").mkdir()
    proc = _substitute(tiny_recipe, store, env_b, cache)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    err = proc.stderr[proc.stderr.index("error:"):]
    assert f"no space left on device: writing under the store {store}" in err, err
    assert "substituting tiny 0.1 " in err and f"from {cache}" in err, err
    assert f"`rocmforge gc` removes unrooted entries in {store}" in err, err
    assert "cache gc" not in err, err


class _SmallRegistry:
    """The real docker-registry, its storage a small tmpfs mounted in a private mount namespace
    of its own (``unshare -m``: the host never sees the mount, which goes with the process)."""

    def __init__(self, root: Path, size: str) -> None:
        from test_oci import REGISTRY

        if REGISTRY is None or shutil.which("unshare") is None:
            pytest.skip("docker-registry or unshare is missing (scripts/test.sh installs them)")
        import socket
        import time
        import urllib.request

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        data = root / "data"
        data.mkdir(parents=True)
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {data}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n"
        )
        script = f"mount -t tmpfs -o size={size} tmpfs {data} && exec {REGISTRY} serve {config}"
        self.proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for _ in range(200):
            if self.proc.poll() is not None:
                pytest.skip(f"cannot mount a tmpfs in a private namespace: {self.proc.stderr}")
            try:
                opener.open(f"http://127.0.0.1:{self.port}/v2/", timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("docker-registry did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def small_registry(tmp_path: Path) -> Iterator[str]:
    reg = _SmallRegistry(tmp_path / "registry", "32k")
    try:
        yield f"oci://127.0.0.1:{reg.port}/team/wheels"
    finally:
        reg.stop()


def test_a_full_registry_during_push_is_blamed_on_the_registry(
    tiny_recipe: Path, tmp_path: Path, small_registry: str
) -> None:
    """The registry's storage (32 KiB) fills while the entry's blobs go up: before, `HTTP 500
    (...no space left on device)` with no word of whose disk or what to do."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    store = tmp_path / "store-a"
    proc = rf("realize", tiny_recipe, "--store", store, env=env)
    assert proc.returncode == 0, proc.stderr
    proc = rf("push", small_registry, "--store", store, env=env)
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    head = f"error: the cache {small_registry} is full: the registry answered "
    assert line.startswith(head), line
    assert "(no space left on device) (the store is not what is full)" in line, line
    assert f"`rocmforge cache gc {small_registry} --keep-last N`" in line, line
    assert "docker-registry garbage-collect" in line, line
    assert "under the store" not in proc.stderr and "rocmforge gc " not in proc.stderr
    assert "Traceback" not in proc.stderr
