"""The comm tier, run by the Python under test (never imported by rocmforge).

``python comm_script.py launch CONFIG_JSON`` starts one rank process per GPU on this node
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` set; the visible
devices of the caller kept), waits for them and exits with the worst status. A rank process
(``python comm_script.py rank CONFIG_JSON``, also what ``srun`` starts, one task per GPU,
with the ranks taken from ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``) does
``init_process_group`` -> ``new_group`` -> ``all_reduce`` correctness -> an in-place bandwidth
sweep. Rank 0 prints the lines the caller reads, as the smoke tier does: ``ROCMFORGE-START
{"check": NAME, "timeout": S}`` before each phase and ``ROCMFORGE-CHECK {...}`` after it.

busbw = algbw x 2(n-1)/n (all-reduce, as rccl-tests and nccl-tests compute it); algbw =
bytes / time. Standard library and torch only; Python 3.9 or later.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

START = "ROCMFORGE-START "
RESULT = "ROCMFORGE-CHECK "


def emit(prefix: str, payload: dict[str, Any]) -> None:
    """Print one protocol line and flush it."""
    sys.stdout.write(prefix + json.dumps(payload, sort_keys=True) + "\n")
    sys.stdout.flush()


def free_port() -> int:
    """A free TCP port on loopback for the rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(cfg_text: str) -> int:
    """Start ``world_size`` rank processes on this node; return the worst exit status."""
    cfg = json.loads(cfg_text)
    n = int(cfg["world_size"])
    env = dict(os.environ)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "WORLD_SIZE": str(n)})
    procs: list[subprocess.Popen[bytes]] = []
    for rank in range(n):
        e = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
        out = None if rank == 0 else subprocess.DEVNULL
        procs.append(subprocess.Popen([sys.executable, __file__, "rank", cfg_text], env=e,
                                      stdout=out))
    codes = [p.wait() for p in procs]
    return max(codes, key=abs) if any(codes) else 0


def sizes(low: int, high: int) -> list[int]:
    """low, 2 low, 4 low, ... up to high (all_reduce_perf -b LOW -e HIGH -f 2)."""
    out, s = [], low
    while s <= high:
        out.append(s)
        s *= 2
    return out


def rank_main(cfg_text: str) -> int:
    """One rank: init, correctness, the sweep; rank 0 prints the results."""
    cfg = json.loads(cfg_text)
    timeouts = cfg.get("timeouts") or {}
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
    lead = rank == 0

    def start(name: str) -> float:
        if lead:
            emit(START, {"check": name, "timeout": timeouts.get(name, 120)})
        return time.monotonic()

    def done(name: str, t: float, status: str, figures: dict[str, Any], detail: str) -> None:
        if lead:
            emit(RESULT, {"check": name, "status": status, "seconds": time.monotonic() - t,
                          "figures": figures, "detail": detail})

    t = start("import")
    import datetime

    import torch
    import torch.distributed as dist

    done("import", t, "passed", {"torch": torch.__version__}, "import torch " + torch.__version__)
    t = start("init")
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group(
        "nccl", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=float(timeouts.get("init", 120))),
    )
    group = dist.new_group(list(range(world)))
    props = torch.cuda.get_device_properties(local)
    done("init", t, "passed", {"world_size": world, "device": props.name, "backend": "nccl"},
         f"init_process_group + new_group, world size {world}")

    t = start("correctness")
    x = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(x, group=group)
    want = world * (world + 1) / 2.0
    exact = bool(torch.all(x == want).item())
    gen = torch.Generator().manual_seed(1234 + rank)
    mine = torch.randn(4096, generator=gen, dtype=torch.float64)
    total = sum(torch.randn(4096, generator=torch.Generator().manual_seed(1234 + r),
                            dtype=torch.float64) for r in range(world))
    y = mine.float().to(device)
    dist.all_reduce(y, group=group)
    err = (y.double().cpu() - total).abs().max().item() / (total.abs().max().item() or 1.0)
    ok = exact and err <= 1e-5
    done("correctness", t, "passed" if ok else "failed",
         {"exact_sum": exact, "rel_error": err},
         f"all_reduce sum over {world} rank(s): {'exact' if exact else 'WRONG'}, "
         f"random fp32 rel. error {err:.1e}")
    if not ok:
        dist.destroy_process_group()
        return 1

    t = start("sweep")
    low, high = int(cfg.get("min_bytes", 8)), int(cfg.get("max_bytes", 8 << 30))
    rows: list[dict[str, Any]] = []
    factor = 2.0 * (world - 1) / world
    for nbytes in sizes(low, high):
        count = max(1, nbytes // 4)
        buf = torch.ones(count, dtype=torch.float32, device=device)
        iters = 20 if nbytes <= (64 << 20) else 5
        for _ in range(2):
            dist.all_reduce(buf, group=group)
        torch.cuda.synchronize()
        dist.barrier(group=group)
        t0 = time.monotonic()
        for _ in range(iters):
            dist.all_reduce(buf, group=group)
        torch.cuda.synchronize()
        seconds = (time.monotonic() - t0) / iters
        algbw = count * 4 / seconds / 1e9
        rows.append({"bytes": count * 4, "time_us": round(seconds * 1e6, 2),
                     "algbw": round(algbw, 3), "busbw": round(algbw * factor, 3)})
        del buf
    last = rows[-1] if rows else {"bytes": 0, "algbw": 0.0, "busbw": 0.0}
    alone = ""
    if world == 1:
        alone = " (world size 1: all_reduce moves no data, busbw is 0 by definition)"
    done("sweep", t, "passed", {"rows": rows, "in_place": True, "dtype": "float32",
                                "op": "sum", "world_size": world},
         f"in-place all_reduce, {len(rows)} sizes from {low} B to {high} B; at {last['bytes']} B:"
         f" algbw {last['algbw']:.1f} GB/s, busbw {last['busbw']:.1f} GB/s{alone}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    mode = sys.argv[1]
    sys.exit(launch(sys.argv[2]) if mode == "launch" else rank_main(sys.argv[2]))
