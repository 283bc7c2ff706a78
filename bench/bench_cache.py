"""Binary caches (issue 16): miss cost, substitution and push throughput, file:// and oci://.

A synthetic signed entry (one wheel of random bytes, a derivation, a provenance statement signed
with a fresh ed25519 key) is published into store A and pushed (``push_entries``) and
substituted (``substitute``) through the real backends: a file:// cache in a temp directory and
Debian's docker-registry on 127.0.0.1 (skipped when not installed). Each figure is a pair
measured in the same run, alternating A B A B over ``--runs`` rounds, printed as both medians
and the median of the per-round ratios:
  1. a cache miss (``substitute`` asking the cache, which lacks the hash) vs a plain local miss
     (the store lookup): target <= 30 ms extra;
  2. push of the entry to a fresh cache vs the anchor: ``cp`` + fsync of the wheel (file://) or
     a raw ``curl -T`` PUT of the same blob (oci://): target >= 200 MB/s to the registry;
     a second push (the cache has it): <= 100 ms;
  3. substituting it into a fresh store (download, sha256 + blake3 while streaming, signature,
     publish with fsync) vs the anchor: ``cp`` + fsync of the cached blob (file://, target
     >= 80% of its speed) or ``curl -o`` + fsync of the blob (oci://, target >= 200 MB/s).
Page caches are warm (the wheel was just written): it measures CPU and copies, not the disk.
Usage: python bench/bench_cache.py [--mb 500] [--runs 5] [--quick]  (--quick: 50 MB, 2 rounds)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rocmforge.cache.push import push_entries  # noqa: E402
from rocmforge.cache.substitute import Wanted, substitute  # noqa: E402
from rocmforge.cache.urls import open_backend  # noqa: E402
from rocmforge.store.entry import Entry, input_hash  # noqa: E402
from rocmforge.store.store import Store, open_store  # noqa: E402
from rocmforge.trust.signing import PublicKey, SecretKey, sign_payload  # noqa: E402
from rocmforge.util.progress import NullReporter  # noqa: E402

WHEEL = "bench-1.0-py3-none-any.whl"


def make_entry(t: Path, mb: int) -> tuple[Store, Entry, str]:
    """Publish a signed synthetic entry into a store under ``t``; return (store, entry, key)."""
    from nacl.signing import SigningKey

    store = open_store(t / "store-a")
    d = t / "staged"
    d.mkdir(parents=True)
    wheel = d / WHEEL
    sha = hashlib.sha256()
    b3 = blake3.blake3()
    with open(wheel, "wb") as f:
        for _ in range(mb):
            block = os.urandom(1 << 20)
            sha.update(block)
            b3.update(block)
            f.write(block)
    derivation = {
        "package": {"name": "bench", "version": "1.0"},
        "env": {"NONCE": os.urandom(8).hex()},
        "toolchain": {},
    }
    (d / "derivation.json").write_text(json.dumps(derivation))
    h = input_hash(derivation)
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        # as rocmforge's provenance names a wheel: sha256 and blake3
        "subject": [
            {"name": WHEEL, "digest": {"sha256": sha.hexdigest(), "blake3": b3.hexdigest()}}
        ],
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
    entry = store.publish(d, hash=h, name="bench", version="1.0", meta={"sandbox": "bwrap"})
    return store, entry, "bench:" + base64.b64encode(pub).decode()


def start_registry(root: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    """Start docker-registry on loopback with storage in ``root``; return (process, cache URL)
    or None when not installed."""
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


def timed(fn: Callable[[], Any]) -> float:
    """Return the seconds ``fn()`` took."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def cp_fsync(src: Path, dst: Path) -> None:
    """``cp`` with an fsync of the copy (a published entry is fsynced too)."""
    subprocess.run(["cp", str(src), str(dst)], check=True)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def curl_put(port: int, repo: str, wheel: Path, sha: str) -> None:
    """The registry's own ceiling: a POST for an upload location, then ``curl -T`` of the blob."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/{repo}/blobs/uploads/", data=b"", method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=30) as resp:
        location = resp.headers["Location"]
    target = urllib.parse.urljoin(f"http://127.0.0.1:{port}/", location)
    sep = "&" if "?" in target else "?"
    subprocess.run(
        ["curl", "-sSf", "--noproxy", "*", "-H", "Expect:", "-H",
         "Content-Type: application/octet-stream", "-T", str(wheel),
         f"{target}{sep}digest=sha256:{sha}", "-o", os.devnull],
        check=True,
    )  # fmt: skip


def curl_get(port: int, repo: str, sha: str, out: Path) -> None:
    """``curl -o`` of the blob, then fsync (what a substitution's publish does)."""
    subprocess.run(
        ["curl", "-sSf", "--noproxy", "*", "-o", str(out),
         f"http://127.0.0.1:{port}/v2/{repo}/blobs/sha256:{sha}"],
        check=True,
    )  # fmt: skip
    fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MISS = """
import sys
import rocmforge.pipeline.realize
from rocmforge.store.store import open_store
store = open_store(sys.argv[1])
assert store.lookup(sys.argv[2], "bench", "1.0") is None
if len(sys.argv) > 3:
    from rocmforge.cache.substitute import Wanted, substitute
    from rocmforge.util.progress import NullReporter
    want = Wanted(sys.argv[2], "bench", "1.0")
    assert substitute(store, [sys.argv[3]], want, NullReporter()) is None
"""


def miss_process(store: Path, want: Wanted, cache: str | None) -> None:
    """A process that imports realize, opens the store and misses in it (then in ``cache``)."""
    subprocess.run(
        [sys.executable, "-c", MISS, str(store), want.hash, *([cache] if cache else [])],
        check=True,
        cwd=REPO,
    )


def children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def registry_cpu(pid: int) -> float:
    """CPU seconds (user + system) the registry process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sha256_floor(path: Path) -> None:
    """Read the file and sha256 it (no write): what checking a digest costs at the least."""
    h = hashlib.sha256()
    buf = memoryview(bytearray(1 << 20))
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(buf[:n])


def pair(label: str, a: list[float], b: list[float], a_name: str, b_name: str) -> float:
    """Print medians of ``a`` and ``b`` and the median per-round ratio a/b; return it."""
    ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
    print(
        f"  {label}: {a_name} {statistics.median(a) * 1000:.2f} ms vs {b_name} "
        f"{statistics.median(b) * 1000:.2f} ms: ratio {ratio:.2f} "
        f"(min {min(a) * 1000:.2f} / {min(b) * 1000:.2f} ms)"
    )
    return ratio


def verdict(ok: bool) -> str:
    """``met`` or ``MISSED``."""
    return "met" if ok else "MISSED"


def main() -> None:
    """Run the figures and print each pair with its ratio."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="50 MB, 2 rounds")
    args = ap.parse_args()
    mb, runs = (50, 2) if args.quick else (args.mb, args.runs)
    size_mb = mb * (1 << 20) / 1e6  # MB/s figures are in 10^6 bytes
    with tempfile.TemporaryDirectory(prefix="bench-cache-", dir=os.environ.get("TMPDIR")) as tmp:
        t = Path(tmp)
        store_a, entry, public = make_entry(t, mb)
        os.environ["ROCMFORGE_TRUSTED_KEYS"] = public
        want = Wanted(entry.hash, entry.name, entry.version)
        missing = Wanted("0" * 32, entry.name, entry.version)
        wheel = entry.path / WHEEL
        sha = entry.meta.wheels[0].sha256
        reg = start_registry(t / "registry")
        port = int(reg[1].split(":")[2].split("/")[0]) if reg is not None else 0
        caches = ["file"] + (["oci"] if reg is not None else [])
        if reg is None:
            print("docker-registry not installed: oci:// figures skipped")
        print(f"entry: {mb} MiB wheel ({size_mb:.0f} MB), {runs} rounds, A B alternating")
        try:
            for kind in caches:

                def url(name: str, kind: str = kind) -> str:
                    if kind == "file":
                        return f"file://{t / name}"
                    assert reg is not None
                    return f"oci://127.0.0.1:{port}/bench/{name}"

                print(f"{kind}://")
                # 1. miss, whole processes (imports included): a realize's local lookup alone
                #    vs that plus asking the cache, which lacks the hash.
                local, cache, local_cpu, cache_cpu = [], [], [], []
                for _ in range(4 if args.quick else 10):
                    c0 = children_cpu()
                    local.append(timed(lambda: miss_process(t / "store-a", missing, None)))
                    c1 = children_cpu()
                    cache.append(timed(lambda: miss_process(t / "store-a", missing, url("empty"))))
                    local_cpu.append(c1 - c0)
                    cache_cpu.append(children_cpu() - c1)
                extra = statistics.median(cache) - statistics.median(local)
                extra_cpu = statistics.median(cache_cpu) - statistics.median(local_cpu)
                pair("miss (whole process)", cache, local, "local + cache", "local")
                print(f"    -> {extra * 1000:.1f} ms wall, {extra_cpu * 1000:.1f} ms CPU over a "
                      f"local miss (target <= 30 ms: wall {verdict(extra <= 0.030)}, "
                      f"CPU {verdict(extra_cpu <= 0.030)})")  # fmt: skip
                # 2. push to a fresh cache vs the anchor; then a second push.
                pushes, anchors, seconds = [], [], []
                cpu: dict[str, list[float]] = {"push": [], "curl": []}
                for r in range(runs):
                    dest = url(f"push{r}")
                    c0 = registry_cpu(reg[0].pid) if reg is not None else 0.0
                    pushes.append(timed(lambda d=dest: push_entries(open_backend(d), [entry])))
                    if kind == "file":
                        anchors.append(timed(lambda r=r: cp_fsync(wheel, t / f"cp{r}.whl")))
                        os.unlink(t / f"cp{r}.whl")
                    else:
                        assert reg is not None
                        c1 = registry_cpu(reg[0].pid)
                        anchors.append(
                            timed(lambda r=r: curl_put(port, f"bench/curl{r}", wheel, sha))
                        )
                        cpu["push"].append(c1 - c0)
                        cpu["curl"].append(registry_cpu(reg[0].pid) - c1)
                    seconds.append(timed(lambda d=dest: push_entries(open_backend(d), [entry])))
                    if kind == "file" and r < runs - 1:
                        shutil.rmtree(t / f"push{r}")
                anchor = "cp" if kind == "file" else "curl -T"
                ratio = pair("push", pushes, anchors, "push", anchor)
                rate = size_mb / statistics.median(pushes)
                target = "" if kind == "file" else f"; target >= 200 MB/s: {verdict(rate >= 200)}"
                print(f"    -> push {rate:.0f} MB/s, {anchor} "
                      f"{size_mb / statistics.median(anchors):.0f} MB/s, "
                      f"{1 / ratio:.0%} of {anchor} speed{target}")  # fmt: skip
                if kind == "oci":
                    busy = statistics.median(cpu["push"])
                    print(f"    registry CPU per push: {busy:.2f} s (ours), "
                          f"{statistics.median(cpu['curl']):.2f} s (curl): its ceiling on one "
                          f"free core ~{size_mb / busy:.0f} MB/s")  # fmt: skip
                second = statistics.median(seconds)
                print(f"  second push: {second * 1000:.1f} ms (max {max(seconds) * 1000:.1f}; "
                      f"target <= 100 ms: {verdict(second <= 0.100)})")  # fmt: skip
                # 3. substitute into a fresh store vs the anchor.
                src = url(f"push{runs - 1}")
                blob = t / f"push{runs - 1}" / "blobs" / "sha256" / sha
                subs, anchors, floors = [], [], []
                for r in range(runs):
                    floors.append(timed(lambda: sha256_floor(wheel)))
                    store_b = open_store(t / f"store-b{r}")
                    got: list[Entry | None] = []

                    def sub(s: Store = store_b, g: list[Entry | None] = got, u: str = src) -> None:
                        g.append(substitute(s, [u], want, NullReporter(), require=True))

                    subs.append(timed(sub))
                    assert got[0] is not None
                    store_b.close()
                    shutil.rmtree(t / f"store-b{r}", ignore_errors=True)
                    out = t / f"anchor{r}.whl"
                    if kind == "file":
                        anchors.append(timed(lambda o=out, b=blob: cp_fsync(b, o)))
                    else:
                        assert reg is not None
                        anchors.append(
                            timed(lambda o=out: curl_get(port, f"bench/push{runs - 1}", sha, o))
                        )
                    os.unlink(out)
                anchor = "cp" if kind == "file" else "curl -o"
                ratio = pair("substitute", subs, anchors, "substitute", anchor)
                floor = statistics.median(floors)
                print(f"    read + sha256 alone (no write): {floor * 1000:.1f} ms "
                      f"({size_mb / floor:.0f} MB/s), {floor / statistics.median(anchors):.0%} "
                      f"of {anchor}'s time")  # fmt: skip
                rate = size_mb / statistics.median(subs)
                ok = 1 / ratio >= 0.8 if kind == "file" else rate >= 200
                target = "target >= 80% of cp" if kind == "file" else "target >= 200 MB/s"
                print(f"    -> substitute {rate:.0f} MB/s, {anchor} "
                      f"{size_mb / statistics.median(anchors):.0f} MB/s, "
                      f"{1 / ratio:.0%} of {anchor} speed ({target}: {verdict(ok)})")  # fmt: skip
        finally:
            store_a.close()
            if reg is not None:
                reg[0].terminate()
                reg[0].wait(10)


if __name__ == "__main__":
    main()
