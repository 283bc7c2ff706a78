"""Binary caches (issue 16): miss cost, substitution and push throughput, file:// and oci://.

A synthetic signed entry (one wheel of random bytes, a derivation, a provenance statement signed
with a fresh ed25519 key) is pushed and substituted through the real backends: a file:// cache
in a temp directory and Debian's docker-registry on 127.0.0.1 (skipped when not installed).
Figures, each a pair and its ratio:
  1. a cache miss (one manifest lookup) vs nothing: target <= 30 ms extra;
  2. substituting the entry (download, sha256 while streaming, signature, publish) vs `cp` of
     the wheel: target >= 80% of cp speed (file://), >= 200 MB/s (loopback registry);
  3. pushing it: >= 200 MB/s to the registry; a second push (manifest present): <= 100 ms.
Usage: python bench/bench_cache.py [--mb 500] [--quick]  (--quick: 50 MB)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rocmforge.cache.manifest import FileRef, Manifest  # noqa: E402
from rocmforge.cache.substitute import Wanted, substitute  # noqa: E402
from rocmforge.cache.urls import open_backend  # noqa: E402
from rocmforge.signing import PublicKey, SecretKey, sign_payload  # noqa: E402
from rocmforge.store.entry import input_hash  # noqa: E402
from rocmforge.store.store import open_store  # noqa: E402
from rocmforge.util.progress import NullReporter  # noqa: E402


def make_entry(d: Path, mb: int) -> tuple[Wanted, dict[str, Path], str]:
    """Write a signed synthetic entry's files into ``d``; return (identity, files, public key)."""
    from nacl.signing import SigningKey

    d.mkdir(parents=True)
    wheel = d / "bench-1.0-py3-none-any.whl"
    with open(wheel, "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    derivation = {
        "package": {"name": "bench", "version": "1.0"},
        "env": {"NONCE": os.urandom(8).hex()},
        "toolchain": {},
    }
    (d / "derivation.json").write_text(json.dumps(derivation))
    h = input_hash(derivation)
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": wheel.name, "digest": {"sha256": sha}}],
        "predicate": {
            "buildDefinition": {
                "internalParameters": {"inputHash": h, "sandbox": "bwrap", "host": "bench"}
            }
        },
    }
    payload = json.dumps(statement).encode()
    (d / "provenance.json").write_bytes(payload)
    seed = os.urandom(32)
    pub = bytes(SigningKey(seed).verify_key)
    key = SecretKey("bench", seed, PublicKey("bench", pub))
    (d / "provenance.dsse.json").write_text(json.dumps(sign_payload(payload, key)))
    files = {p.name: p for p in d.iterdir()}
    return Wanted(h, "bench", "1.0"), files, "bench:" + base64.b64encode(pub).decode()


def push(backend, want: Wanted, files: dict[str, Path]) -> float:
    """Upload the entry's blobs and manifest; return seconds."""
    t = time.perf_counter()
    refs = []
    for name, p in sorted(files.items()):
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        refs.append(FileRef(name, digest, p.stat().st_size))
        if not backend.has_blob(digest):
            backend.put_blob(digest, p)
    if backend.get_manifest(want.hash) is None:
        backend.put_manifest(
            want.hash, Manifest(want.hash, want.name, want.version, tuple(refs), {}).to_bytes()
        )
    return time.perf_counter() - t


def second_push(backend, want: Wanted) -> float:
    """What push does for an entry the cache has: one manifest lookup."""
    t = time.perf_counter()
    assert backend.get_manifest(want.hash) is not None
    return time.perf_counter() - t


def start_registry(root: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    """Start docker-registry on loopback with storage in ``root``; None when not installed."""
    exe = shutil.which("docker-registry")
    if exe is None:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root.mkdir(parents=True)
    (root / "config.yml").write_text(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {root}/data\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [exe, "serve", str(root / "config.yml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(100):
        try:
            opener.open(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
            return proc, f"oci://127.0.0.1:{port}/bench/cache"
        except OSError:
            time.sleep(0.05)
    proc.terminate()
    return None


def main() -> None:
    """Run the figures and print each pair with its ratio."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--quick", action="store_true", help="50 MB")
    args = ap.parse_args()
    mb = 50 if args.quick else args.mb
    with tempfile.TemporaryDirectory(prefix="bench-cache-", dir=os.environ.get("TMPDIR")) as tmp:
        t = Path(tmp)
        want, files, public = make_entry(t / "entry", mb)
        os.environ["ROCMFORGE_TRUSTED_KEYS"] = public
        wheel = files["bench-1.0-py3-none-any.whl"]
        t0 = time.perf_counter()
        shutil.copyfile(wheel, t / "cp.whl")
        with open(t / "cp.whl", "rb+") as f:
            os.fsync(f.fileno())
        cp = time.perf_counter() - t0
        print(f"cp of {mb} MB (with fsync): {cp:.3f} s ({mb / cp:.0f} MB/s)")
        urls = [f"file://{t / 'cache'}"]
        reg = start_registry(t / "registry")
        if reg is not None:
            urls.append(reg[1])
        else:
            print("docker-registry not installed: oci:// figures skipped")
        try:
            for url in urls:
                backend = open_backend(url)
                n = 20
                t0 = time.perf_counter()
                for _ in range(n):
                    backend.get_manifest("0" * 32)
                miss = (time.perf_counter() - t0) / n
                print(
                    f"{url.split(':')[0]}: miss lookup {miss * 1000:.2f} ms vs 0 (target <= 30 ms)"
                )
                up = push(backend, want, files)
                print(
                    f"  push {mb} MB: {up:.3f} s ({mb / up:.0f} MB/s; "
                    "target >= 200 MB/s to a registry)"
                )
                again = second_push(backend, want)
                print(f"  second push: {again * 1000:.1f} ms (target <= 100 ms)")
                store = open_store(t / f"store-{url.split(':')[0]}")
                t0 = time.perf_counter()
                entry = substitute(store, [url], want, NullReporter(), require=True)
                sub = time.perf_counter() - t0
                assert entry is not None
                print(
                    f"  substitute {mb} MB: {sub:.3f} s ({mb / sub:.0f} MB/s) vs cp {cp:.3f} s: "
                    f"{cp / sub:.0%} of cp speed (target >= 80% file://, >= 200 MB/s oci://)"
                )
                store.close()
        finally:
            if reg is not None:
                reg[0].terminate()
                reg[0].wait(10)


if __name__ == "__main__":
    main()
