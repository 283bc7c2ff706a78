"""rocmforge's OCI client against the ``oras`` SDK (PyPI ``oras``), side by side (issue 16).

Why rocmforge talks to registries with its own small client: this bench pushes and pulls the
same incompressible blob (default 200 MB) through both, each operation a whole process of its own,
interleaved A, B, A, B ... against Debian's docker-registry on 127.0.0.1, and prints the median
wall time, throughput and peak RSS of each and the ratio A/B pair by pair.

- push: rocmforge hashes the file (sha256, as a push of a store entry needs) and uploads it
  with ``OciCache.put_blob``; oras ``push`` (which hashes and uploads, plus a manifest). Every
  round pushes to a fresh repository so nothing is deduplicated.
- pull: rocmforge ``open_blob`` streamed to a file with its sha256 checked while streaming;
  oras ``pull`` to a directory (it does not check the digest).

Usage: python bench/bench_oras.py [--mb 200] [--runs 5] [--quick]
Skipped (with a line saying why) without docker-registry or the oras package.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]


def _rf(op: str, url: str, path: Path, digest: str) -> None:
    from rocmforge.cache.oci import open_oci

    cache = open_oci(url)
    if op == "push":
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        cache.put_blob(h.hexdigest(), path)
        return
    h = hashlib.sha256()
    with cache.open_blob(digest) as src, open(path, "wb") as out:
        while chunk := src.read(1 << 20):
            h.update(chunk)
            out.write(chunk)
    if h.hexdigest() != digest:
        raise SystemExit("rocmforge pull: digest mismatch")


def _oras(op: str, url: str, path: Path, digest: str) -> None:
    import oras.client

    host, repo = url.removeprefix("oci://").split("/", 1)
    client = oras.client.OrasClient(hostname=host, insecure=True)
    if op == "push":
        os.chdir(path.parent)  # oras names the layer by the path given
        client.push(target=f"{host}/{repo}:t", files=[path.name])
    else:
        client.pull(target=f"{host}/{repo}:t", outdir=str(path))


def one(client: str, op: str, url: str, path: Path, digest: str) -> None:
    """Do one operation in this process (the child side of the bench)."""
    (_rf if client == "rocmforge" else _oras)(op, url, path, digest)


def timed(argv: list[str]) -> tuple[float, float]:
    """Run ``argv``; return (wall seconds, peak RSS MB)."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return wall, usage.ru_maxrss / 1024


def main() -> int:
    """Run the pairs and print them."""
    if len(sys.argv) > 1 and sys.argv[1] == "_one":
        client, op, url, path, digest = sys.argv[2:7]
        one(client, op, url, Path(path), digest)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="20 MB, 2 runs")
    args = ap.parse_args()
    mb, runs = (20, 2) if args.quick else (args.mb, args.runs)
    try:
        import oras.client  # noqa: F401
    except ImportError:
        print("oras not installed (pip install oras): comparison skipped")
        return 0
    from bench_cache import start_registry

    tmp = Path(tempfile.mkdtemp(prefix="bench-oras-"))
    started = start_registry(tmp / "registry")
    if started is None:
        print("docker-registry not installed: comparison skipped")
        shutil.rmtree(tmp, ignore_errors=True)
        return 0
    registry, base = started
    try:
        blob = tmp / "blob.bin"
        with open(blob, "wb") as f:
            for _ in range(mb):
                f.write(os.urandom(1 << 20))
        h = hashlib.sha256()  # streamed: a forked child starts with this process's peak RSS
        with open(blob, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        digest = h.hexdigest()
        size = blob.stat().st_size
        host = base.removeprefix("oci://").split("/", 1)[0]
        me = [sys.executable, str(Path(__file__).resolve()), "_one"]
        rows: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for i in range(runs):
            for client in ("rocmforge", "oras"):
                url = f"oci://{host}/bench/{client}{i}"
                push = timed([*me, client, "push", url, str(blob), digest])
                out = tmp / f"out-{client}{i}"
                if client == "oras":
                    out.mkdir()
                pull = timed([*me, client, "pull", url, str(out), digest])
                rows.setdefault("push", {}).setdefault(client, []).append(push)
                rows.setdefault("pull", {}).setdefault(client, []).append(pull)
                shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink()
        print(f"{mb} MB blob, {runs} interleaved runs each, medians (whole processes)")
        for op, by in rows.items():
            line = []
            for client in ("rocmforge", "oras"):
                wall = statistics.median(w for w, _ in by[client])
                rss = max(r for _, r in by[client])
                line.append(f"{client} {wall:6.2f} s {size / wall / 1e6:6.0f} MB/s {rss:5.0f} MB")
            pairs = [a[0] / b[0] for a, b in zip(by["rocmforge"], by["oras"], strict=True)]
            ratio = statistics.median(pairs)
            print(f"{op:<5} {' | '.join(line)} | ratio {ratio:.2f}x")
    finally:
        registry.terminate()
        registry.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
