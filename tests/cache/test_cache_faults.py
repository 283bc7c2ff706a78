"""Faults while substituting, with real parts: a registry connection cut in the middle of a blob
(a loopback HTTP server in front of the real docker-registry), a full local disk (a real tmpfs of
a few MB under the store) and a truncated blob in a ``file://`` cache. Each leaves no partial
entry, says which cache and why, and falls back to building (or fails with
``--require-substitute``). Two stores substituting one entry at once: here through the CLI from
the registry, and test_cache.py in-process from a ``file://`` cache."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import rf
from test_cache import _signed_synthetic_entry
from test_oci import Registry, registry  # noqa: F401  (the fixture)

from rocmforge.util.progress import NullReporter


class Warnings(NullReporter):
    """A reporter that keeps the warnings."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def warning(self, message: str) -> None:
        self.said.append(message)


def _leftovers(store: Path) -> list[str]:
    """What a substitution left in the store's tmp/ (lock files of finished builds aside)."""
    return [n for n in os.listdir(store / "tmp") if not n.endswith(".lock")]


class CutProxy:
    """A loopback HTTP server in front of a registry: it forwards each request and answers a
    blob GET with the registry's headers (the full Content-Length) but only the first ``cut``
    bytes of the body, then closes the connection, as a registry dying mid-download does."""

    def __init__(self, upstream: int, cut: int) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.cuts = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{upstream}{self.path}",
                    method=self.command,
                    headers={"Accept": self.headers.get("Accept", "*/*")},
                )
                try:
                    resp = opener.open(req, timeout=10)
                except urllib.error.HTTPError as exc:
                    resp = exc
                body = resp.read()
                self.send_response(resp.status if resp.status is not None else 502)
                for k, v in resp.headers.items():
                    if k.lower() not in ("connection", "transfer-encoding", "date", "server"):
                        self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command == "HEAD":
                    return
                if "/blobs/" in self.path and len(body) > cut:
                    proxy.cuts += 1
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

            do_GET = do_HEAD = _forward

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def pushed_by_a(registry: Registry, recipe: Path, tmp_path: Path) -> tuple[str, str]:  # noqa: F811
    """Builder A (its own signing key) realizes ``recipe`` and pushes it to the registry; return
    A's public key and the cache URL."""
    env_a = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    proc = rf("key", "generate", "--json", "--name", "builder-a", env=env_a)
    public = json.loads(proc.stdout)["public_key"]
    url = registry.url()
    proc = rf("realize", recipe, "--store", tmp_path / "a", "--push", url, env=env_a)
    assert proc.returncode == 0, proc.stderr
    return public, url


@pytest.fixture
def cut_proxy(registry: Registry) -> Iterator[CutProxy]:  # noqa: F811
    proxy = CutProxy(registry.port, cut=100)
    yield proxy
    proxy.close()


@pytest.mark.slow
def test_registry_dying_mid_blob(
    registry: Registry,  # noqa: F811
    cut_proxy: CutProxy,
    tiny_recipe: Path,
    tmp_path: Path,
) -> None:
    public, url = pushed_by_a(registry, tiny_recipe, tmp_path)
    env_b = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"), "ROCMFORGE_TRUSTED_KEYS": public}
    cut = f"oci://127.0.0.1:{cut_proxy.port}/team/wheels"
    store_b = tmp_path / "b"
    strict = rf("realize", tiny_recipe, "--store", store_b, "--cache", cut, "--require-substitute",
                env=env_b)  # fmt: skip
    assert strict.returncode == 1, strict.stderr
    assert cut_proxy.cuts >= 1
    # http.client returns the short body at the close: the size check names it
    assert f"cache {cut}: refused tiny 0.1" in strict.stderr, strict.stderr
    assert "is truncated (100 of" in strict.stderr
    assert not list((store_b / "entries").iterdir()) and not _leftovers(store_b)
    proc = rf("realize", tiny_recipe, "--store", store_b, "--cache", cut, "--json", env=env_b)
    assert proc.returncode == 0, proc.stderr
    assert f"cache {cut}: refused" in proc.stderr and "building instead" in proc.stderr
    (got,) = json.loads(proc.stdout)
    assert got["substituted"] is None and got["sandbox"] is not None  # built
    # The same registry without the cut serves it (the control).
    store_c = tmp_path / "c"
    proc = rf("realize", tiny_recipe, "--store", store_c, "--cache", url, "--json", env=env_b)
    assert json.loads(proc.stdout)[0]["substituted"] == url, proc.stderr


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 12 MB tmpfs mounted under tmp_path (needs root, as CI runs; skipped otherwise)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    mount = shutil.which("mount")
    proc = subprocess.run(
        [mount or "mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@pytest.mark.slow
def test_full_local_disk_during_import(small_disk: Path, tmp_path: Path, monkeypatch) -> None:
    from rocmforge.cache.substitute import substitute
    from rocmforge.errors import DiskFullError
    from rocmforge.store.store import open_store

    url = f"file://{tmp_path / 'cache'}"
    want, public = _signed_synthetic_entry(url, tmp_path, 16 << 20)  # larger than the disk
    monkeypatch.setenv("ROCMFORGE_TRUSTED_KEYS", public)
    store = open_store(small_disk / "store")
    before = _used(small_disk)
    reporter = Warnings()
    # The store's disk, named with its gc: not a warning blamed on the cache followed by a
    # build that would fill the same disk (issue 34 point 5).
    for require in (False, True):
        with pytest.raises(DiskFullError) as caught:
            substitute(store, [url], want, reporter, require=require)
        text = str(caught.value)
        assert f"no space left on device: writing under the store {store.root}" in text, text
        assert f"substituting syn 1.0 ({want.hash}) from {url}" in text, text
        assert f"`rocmforge gc` removes unrooted entries in {store.root}" in text, text
        assert not reporter.said, reporter.said
        assert not list((small_disk / "store" / "entries").iterdir())
        assert not _leftovers(small_disk / "store")
        assert _used(small_disk) - before < 1 << 20  # the partial download is gone


def test_truncated_blob_in_a_file_cache(tmp_path: Path, monkeypatch) -> None:
    from rocmforge.cache.substitute import substitute
    from rocmforge.store.store import open_store

    url = f"file://{tmp_path / 'cache'}"
    want, public = _signed_synthetic_entry(url, tmp_path, 64 << 10)
    monkeypatch.setenv("ROCMFORGE_TRUSTED_KEYS", public)
    blobs = sorted(
        (tmp_path / "cache" / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size
    )
    biggest = blobs[-1]
    whole = biggest.read_bytes()
    os.chmod(biggest, 0o644)
    biggest.write_bytes(whole[:1000])
    store = open_store(tmp_path / "store")
    reporter = Warnings()
    assert substitute(store, [url], want, reporter) is None
    (said,) = reporter.said
    assert said.startswith(f"cache {url}: refused syn 1.0 ({want.hash}): blob of ")
    assert f"is truncated (1000 of {len(whole)} bytes)" in said
    assert not list((tmp_path / "store" / "entries").iterdir()) and not _leftovers(
        tmp_path / "store"
    )
    biggest.write_bytes(whole)  # the control: the whole blob is substituted
    assert substitute(store, [url], want, Warnings()) is not None


@pytest.mark.slow
def test_stores_substituting_one_entry_at_once_from_a_registry(
    registry: Registry,  # noqa: F811
    tiny_recipe: Path,
    tmp_path: Path,
) -> None:
    """Three realizes at once, two on one store and one on another, all from the registry."""
    import sys

    from conftest import pip_args

    public, url = pushed_by_a(registry, tiny_recipe, tmp_path)
    env = {
        **os.environ,
        "ROCMFORGE_PIP_ARGS": pip_args(),
        "XDG_CONFIG_HOME": str(tmp_path / "config-b"),
        "ROCMFORGE_TRUSTED_KEYS": public,
    }
    env.pop("ROCMFORGE_STORE", None)
    stores = [tmp_path / "b", tmp_path / "b", tmp_path / "c"]
    argv = [sys.executable, "-m", "rocmforge", "realize", str(tiny_recipe), "--cache", url,
            "--require-substitute", "--json", "--store"]  # fmt: skip
    procs = [
        subprocess.Popen(
            [*argv, str(s)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for s in stores
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert json.loads(out)[0]["sandbox"] is None  # nothing was built
    paths = [json.loads(out)[0]["path"] for out, _ in outs]
    assert paths[0] == paths[1] and paths[2] != paths[0]
    for s in (tmp_path / "b", tmp_path / "c"):
        assert len(list((s / "entries").iterdir())) == 1 and not _leftovers(s)
