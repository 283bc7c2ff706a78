"""The ``oci://`` binary cache against a real registry (Debian's docker-registry on loopback)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import rf, rf_in

REGISTRY = shutil.which("docker-registry")


class Registry:
    """A docker-registry process on 127.0.0.1 with its storage in a temporary directory."""

    def __init__(self, root: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.data = root / "data"
        root.mkdir(parents=True, exist_ok=True)
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {self.data}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n"
        )
        assert REGISTRY is not None
        self.proc = subprocess.Popen(
            [REGISTRY, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for _ in range(100):
            try:
                opener.open(f"http://127.0.0.1:{self.port}/v2/", timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("docker-registry did not start")

    def url(self, repo: str = "team/wheels") -> str:
        """The cache URL of ``repo`` in this registry."""
        return f"oci://127.0.0.1:{self.port}/{repo}"

    def stop(self) -> None:
        """Stop the registry (idempotent)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """A fresh registry for one test, stopped afterwards."""
    if REGISTRY is None:
        if os.environ.get("CI") == "true":
            pytest.fail("docker-registry is missing (scripts/test.sh installs it)")
        pytest.skip("docker-registry is not installed (scripts/test.sh installs it)")
    reg = Registry(tmp_path / "registry")
    yield reg
    reg.stop()


def _generate(env: dict[str, str], name: str) -> str:
    proc = rf("key", "generate", "--json", "--name", name, env=env)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["public_key"])


@pytest.mark.slow
def test_oci_push_substitute_audit_and_faults(registry: Registry, tiny_recipe: Path, tmp_path):
    env_a = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    public = _generate(env_a, "builder-a")
    store_a, store_b = tmp_path / "store-a", tmp_path / "store-b"
    proc = rf("realize", tiny_recipe, "--store", store_a, "--json", env=env_a)
    assert proc.returncode == 0, proc.stderr
    (built,) = json.loads(proc.stdout)
    url = registry.url()
    proc = rf("push", url, "--store", store_a, "--json", env=env_a)
    assert proc.returncode == 0, proc.stderr
    (entry,) = json.loads(proc.stdout)["entries"]
    assert not entry["present"] and entry["blobs"] >= 4
    again = rf("push", url, "--store", store_a, "--json", env=env_a)
    assert json.loads(again.stdout)["entries"][0]["present"] is True
    # The artifact: tagged with the input hash, an artifactType, files as titled layers.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(
        f"http://127.0.0.1:{registry.port}/v2/team/wheels/manifests/{built['hash']}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    doc = json.loads(opener.open(req).read())
    assert doc["artifactType"] == "application/vnd.rocmforge.entry.v1+json"
    titles = {la["annotations"]["org.opencontainers.image.title"] for la in doc["layers"]}
    assert "provenance.dsse.json" in titles and any(t.endswith(".whl") for t in titles)

    env_b = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"), "ROCMFORGE_TRUSTED_KEYS": public}
    # A truncated blob in the registry's storage: refused, nothing published, then built.
    wheel = next(la for la in doc["layers"] if la["mediaType"] and la["size"] > 1000)
    hexd = wheel["digest"].split(":", 1)[1]
    blob = registry.data / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"
    whole = blob.read_bytes()
    blob.write_bytes(whole[: len(whole) // 2])
    strict = rf(
        "realize",
        tiny_recipe,
        "--store",
        store_b,
        "--cache",
        url,
        "--require-substitute",
        env=env_b,
    )
    assert strict.returncode == 1, strict.stderr
    assert f"cache {url}" in strict.stderr
    assert not list((store_b / "entries").iterdir())
    blob.write_bytes(whole)

    proc = rf("realize", tiny_recipe, "--store", store_b, "--cache", url, "--json", env=env_b)
    assert proc.returncode == 0, proc.stderr
    (got,) = json.loads(proc.stdout)
    assert got["substituted"] == url and got["sandbox"] is None
    assert ": build (" not in proc.stderr
    assert Path(got["wheels"][0]).read_bytes() == Path(built["wheels"][0]).read_bytes()
    audit = rf("audit", got["wheels"][0], "--store", store_b, "--json", env=env_b)
    (report,) = json.loads(audit.stdout)
    assert report["status"] == "verified" and report["signature"]["keyid"] == "builder-a"
    assert report["origin"]["cache"] == url

    # The registry is gone: a warning naming the cache, then a build.
    registry.stop()
    store_c = tmp_path / "store-c"
    proc = rf("realize", tiny_recipe, "--store", store_c, "--cache", url, "--json", env=env_b)
    assert proc.returncode == 0, proc.stderr
    assert f"cache {url}: {url}: cannot reach the registry" in proc.stderr
    assert json.loads(proc.stdout)[0]["sandbox"] is not None


def test_oci_cache_ls_and_gc(registry: Registry, tmp_path: Path) -> None:
    from test_cache import _fake_entry

    from rocmforge.cache.urls import open_backend

    url = registry.url("team/gc")
    backend = open_backend(url)
    for version in ("1", "2", "3"):
        _fake_entry(backend, tmp_path, "a", version, version.encode() * 100)
    listed = json.loads(rf_in("cache", "ls", url, "--json").stdout)["entries"]
    assert sorted(e["version"] for e in listed) == ["1", "2", "3"]
    assert all(e["size"] == 100 for e in listed)
    proc = rf_in("cache", "gc", url, "--keep-last", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert len(report["deleted"]) == 2 and report["kept"] == 1
    assert len(json.loads(rf_in("cache", "ls", url, "--json").stdout)["entries"]) == 1
