"""Moving cache blobs: one-pass copy with digests, kernel copies, keep-alive registry client."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import blake3
import pytest
from test_oci import REGISTRY, Registry, registry  # noqa: F401 (the fixture)

from rocmforge.cache import oci
from rocmforge.cache.backend import FileCache
from rocmforge.cache.transfer import CHUNK, copy_file, copy_hashing


def _copy(tmp_path: Path, src: object, *, limit: int, b3: bool) -> tuple[object, bytes]:
    out = tmp_path / "out"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        copied = copy_hashing(src, fd, limit=limit, blake3=b3)
    finally:
        os.close(fd)
    return copied, out.read_bytes()


@pytest.mark.parametrize("size", [0, 100, CHUNK, 9 * CHUNK + 17])
def test_copy_hashing_writes_what_it_hashes(tmp_path: Path, size: int) -> None:
    # Small streams are copied inline, large ones with sha256 in a worker thread: same result.
    data = os.urandom(size)
    copied, written = _copy(tmp_path, io.BytesIO(data), limit=size, b3=True)
    assert written == data
    assert copied.size == size  # type: ignore[attr-defined]
    assert copied.sha256 == hashlib.sha256(data).hexdigest()  # type: ignore[attr-defined]
    assert copied.blake3 == blake3.blake3(data).hexdigest()  # type: ignore[attr-defined]


def test_copy_hashing_stops_reading_past_the_limit(tmp_path: Path) -> None:
    data = os.urandom(9 * CHUNK)
    src = io.BytesIO(data)
    copied, written = _copy(tmp_path, src, limit=2 * CHUNK, b3=False)
    size = copied.size  # type: ignore[attr-defined]
    assert 2 * CHUNK < size <= 3 * CHUNK and src.tell() < len(data)  # not read to the end
    assert copied.blake3 is None  # type: ignore[attr-defined]
    assert written == data[: len(written)] and len(written) <= 2 * CHUNK


def test_copy_hashing_reads_a_stream_without_readinto(tmp_path: Path) -> None:
    data = os.urandom(5 * CHUNK + 3)

    class Chunky:
        def __init__(self) -> None:
            self.at = 0

        def read(self, n: int) -> bytes:
            n = min(n, 70000)  # short reads, as a socket gives them
            piece = data[self.at : self.at + n]
            self.at += len(piece)
            return piece

    copied, written = _copy(tmp_path, Chunky(), limit=len(data), b3=False)
    assert written == data and copied.sha256 == hashlib.sha256(data).hexdigest()  # type: ignore[attr-defined]


def test_copy_file_and_file_cache_put_blob(tmp_path: Path) -> None:
    data = os.urandom(3 * CHUNK + 5)
    src = tmp_path / "src"
    src.write_bytes(data)
    fd = os.open(tmp_path / "copy", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        copy_file(str(src), fd)
    finally:
        os.close(fd)
    assert (tmp_path / "copy").read_bytes() == data
    cache = FileCache(tmp_path / "cache", f"file://{tmp_path / 'cache'}")
    digest = hashlib.sha256(data).hexdigest()
    assert cache.put_blob(digest, src) is True
    assert cache.put_blob(digest, src) is False  # present: nothing written
    with cache.open_blob(digest) as f:
        assert f.read() == data
    blob = tmp_path / "cache" / "blobs" / "sha256" / digest
    assert blob.stat().st_mode & 0o777 == 0o644
    assert not list(blob.parent.glob(".tmp-*"))


def test_empty_config_digest_is_the_sha256_of_its_bytes() -> None:
    assert "sha256:" + hashlib.sha256(oci.EMPTY).hexdigest() == oci.EMPTY_DIGEST


@pytest.mark.slow
def test_oci_blobs_over_one_keep_alive_connection(
    registry: Registry,  # noqa: F811
    tmp_path: Path,
) -> None:
    backend = oci.open_oci(registry.url("team/transfer"))
    data = os.urandom(6 * CHUNK + 11)
    path = tmp_path / "blob"
    path.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    assert backend.has_blob(digest) is False
    conn = backend._conn
    assert conn is not None
    assert backend.put_blob(digest, path) is True  # POST + one PUT, sendfile from the file
    assert backend.has_blob(digest) is True and backend.put_blob(digest, path) is False
    assert backend._conn is conn  # every request so far on the first connection
    with backend.open_blob(digest) as f:
        assert f.read() == data
    assert backend._conn is conn
    # A blob left half read: its connection is dropped, the next request opens another.
    with backend.open_blob(digest) as f:
        assert f.read(10) == data[:10]
    assert backend._conn is None
    assert backend.get_manifest("0" * 32) is None
    # The registry restarted meanwhile: the stale keep-alive connection is reopened once.
    assert backend._conn is not None
    registry.stop()
    registry.proc = subprocess.Popen(
        [str(REGISTRY), "serve", str(registry.data.parent / "config.yml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(100):
        try:
            opener.open(f"http://127.0.0.1:{registry.port}/v2/", timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    assert backend.has_blob(digest) is True
