"""Query and audit on a store of 10,000 entries; wheel hashing rate.

Builds a synthetic index of N entries (50 packages, env flags drawn from a few values, random
wheel digests) plus one real entry holding a big stamped wheel, then reports (median of --runs):
index queries by name, version, env flag (exact and substring) and age; `list` of all entries;
the audit lookup (wheel digest -> entry); a whole `audit_wheel` of the big wheel (hash + lookup +
reading the entry); the blake3 and sha256 rates on the big wheel (page cache warm); and the CLI
end to end (`rocmforge query`, `rocmforge audit`).

Targets (issue 3): query and audit lookup <= 50 ms plus the time to hash the wheel; hashing at
>= 1 GB/s. Usage: python bench/bench_query.py [--entries 10000] [--wheel-mb 512] [--runs 20]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rocmforge.store.entry import Entry, EntryMeta
from rocmforge.store.query import EnvFilter, list_entries, query_entries
from rocmforge.store.store import open_store
from rocmforge.trust.audit import audit_wheel
from rocmforge.util.hashing import blake3_hex, canonical_json, file_blake3
from rocmforge.wheel.stamp import stamp_wheel

ARCHS = ["gfx90a", "gfx942", "gfx90a;gfx942", "gfx1100", "gfx942;gfx1100"]


def median_ms(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def make_big_wheel(path: Path, mb: int) -> None:
    payload = os.urandom(1 << 20)
    record = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for i in range(mb):
            name = f"big/blob{i:04d}.bin"
            data = payload[i % 251 :] + payload[: i % 251]
            zf.writestr(name, data)
            digest = hashlib.sha256(data).digest()
            b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            record.append(f"{name},sha256={b64},{len(data)}")
        meta = b"Metadata-Version: 2.1\nName: big\nVersion: 1.0\n"
        zf.writestr("big-1.0.dist-info/METADATA", meta)
        b64 = base64.urlsafe_b64encode(hashlib.sha256(meta).digest()).rstrip(b"=").decode()
        record.append(f"big-1.0.dist-info/METADATA,sha256={b64},{len(meta)}")
        record.append("big-1.0.dist-info/RECORD,,")
        zf.writestr("big-1.0.dist-info/RECORD", "\n".join(record) + "\n")


def synthetic(store: Any, n: int, rng: random.Random) -> Iterator[tuple[Entry, dict[str, Any]]]:
    now = time.time()
    for i in range(n):
        name = f"pkg{i % 50:02d}"
        version = f"1.{i // 50 % 20}.{i % 7}"
        env = {"PYTORCH_ROCM_ARCH": rng.choice(ARCHS), "USE_FLASH": rng.choice(["0", "1"])}
        drv = {"package": {"name": name, "version": version}, "env": env, "n": i}
        h = blake3_hex(canonical_json(drv))[:32]
        file = f"{name}-{version}-py3-none-any.whl"
        meta = {
            "hash": h, "name": name, "version": version, "created": now - (n - i) * 60,
            "size": 1000 + i, "sandbox": "bwrap",
            "wheels": [{"file": file, "sha256": os.urandom(32).hex(),
                        "blake3": os.urandom(32).hex()}],
        }  # fmt: skip
        path = store.entries_dir / f"{h}-{name}-{version}"
        yield Entry.from_meta(path, EntryMeta.from_json(meta, file=path / "meta.json")), drv


def real_entry(store: Any, wheel_src: Path) -> tuple[Entry, dict[str, Any]]:
    drv = {"package": {"name": "big", "version": "1.0"}, "env": {"PYTORCH_ROCM_ARCH": "gfx942"}}
    h = blake3_hex(canonical_json(drv))[:32]
    t = time.perf_counter()
    stamp_wheel(wheel_src, input_hash=h, derivation=drv)
    mib = wheel_src.stat().st_size / 2**20
    print(f"stamp_wheel on a {mib:.0f} MiB wheel: {time.perf_counter() - t:.2f} s (once per build)")
    path = store.entries_dir / f"{h}-big-1.0"
    path.mkdir()
    wheel = path / "big-1.0-py3-none-any.whl"
    os.replace(wheel_src, wheel)
    (path / "derivation.json").write_text(json.dumps(drv))
    b3 = file_blake3(wheel)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    meta = {"hash": h, "name": "big", "version": "1.0", "created": time.time(),
            "size": wheel.stat().st_size,
            "wheels": [{"file": wheel.name, "sha256": sha, "blake3": b3}]}  # fmt: skip
    (path / "meta.json").write_text(json.dumps(meta))
    return Entry.from_meta(path, EntryMeta.from_json(meta, file=path / "meta.json")), drv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--wheel-mb", type=int, default=512)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="smoke run: 500 entries, 3 runs")
    args = ap.parse_args()
    if args.quick:
        args.entries, args.wheel_mb, args.runs = 500, 64, 3
    tmp = Path(tempfile.mkdtemp(prefix="rf-bench-query-"))
    try:
        store = open_store(tmp / "store")
        rng = random.Random(1)
        big_src = tmp / "big-1.0-py3-none-any.whl"
        make_big_wheel(big_src, args.wheel_mb)
        big = real_entry(store, big_src)
        t = time.perf_counter()
        n = store.index.rebuild([*synthetic(store, args.entries, rng), big])
        print(f"index of {n} entries built in {time.perf_counter() - t:.2f} s")
        wheel = big[0].wheels[0]
        size = wheel.stat().st_size
        digest = big[0].meta.wheels[0].blake3
        r = args.runs
        gfx = [EnvFilter(key="PYTORCH_ROCM_ARCH", value="gfx942", substring=False)]
        sub = [EnvFilter(key="PYTORCH_ROCM_ARCH", value="gfx942", substring=True)]
        rows = [
            ("query --name pkg07", lambda: query_entries(store, name="pkg07")),
            ("query --name --version", lambda: query_entries(store, name="pkg07",
                                                             version="1.3.0")),
            ("query --env KEY=VALUE", lambda: query_entries(store, env=gfx)),
            ("query --env KEY~SUBSTR", lambda: query_entries(store, env=sub)),
            ("query --since (last 1000)", lambda: query_entries(
                store, since=time.time() - 1000 * 60)),
            ("list (all entries)", lambda: list_entries(store)),
            ("audit lookup (digest->entry)", lambda: store.index.by_wheel_digest(digest)),
        ]  # fmt: skip
        counts = {
            "query --name pkg07": len(query_entries(store, name="pkg07")),
            "query --env KEY=VALUE": len(query_entries(store, env=gfx)),
            "query --env KEY~SUBSTR": len(query_entries(store, env=sub)),
        }
        for label, fn in rows:
            extra = f"  ({counts[label]} rows)" if label in counts else ""
            print(f"{label:<32}{median_ms(fn, r):8.2f} ms{extra}")
        b3_ms = median_ms(lambda: file_blake3(wheel), max(3, r // 4))

        def sha() -> None:
            h = hashlib.sha256()
            with open(wheel, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)

        sha_ms = median_ms(sha, 3)
        gb = size / 1e9
        print(f"blake3 of the {size / 2**20:.0f} MiB wheel  {b3_ms:8.1f} ms  "
              f"({gb / (b3_ms / 1000):.2f} GB/s, target >= 1 GB/s)")  # fmt: skip
        print(f"sha256 of the same wheel        {sha_ms:8.1f} ms  "
              f"({gb / (sha_ms / 1000):.2f} GB/s)")  # fmt: skip
        report = audit_wheel(wheel, store=store)
        assert report.status == "verified", report
        audit_ms = median_ms(lambda: audit_wheel(wheel, store=store), max(3, r // 4))
        print(f"audit_wheel (verified), total   {audit_ms:8.1f} ms  "
              f"({gb / (audit_ms / 1000):.2f} GB/s of wheel audited)")  # fmt: skip
        exe = shutil.which("rocmforge", path=str(Path(sys.executable).parent)) or "rocmforge"
        for label, argv in (
            ("CLI: rocmforge query --env", [exe, "query", "--env", "PYTORCH_ROCM_ARCH=gfx942"]),
            ("CLI: rocmforge audit WHEEL", [exe, "audit", str(wheel)]),
        ):
            def cli(argv: list[str] = argv) -> None:
                subprocess.run([*argv, "--store", str(store.root)], check=False,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

            print(f"{label:<32}{median_ms(cli, 5):8.1f} ms  (process start included)")
        store.close()
    finally:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
