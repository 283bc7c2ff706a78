"""The demo recipe's ``[test]`` script on a GPU node: the built ``rfdemo`` wheel works, and GPU
work runs through the node's torch beside it (``rocmforge test RECIPE --over TORCH_PYTHON``).

Reports its checks to rocmforge with ``ROCMFORGE-START``/``ROCMFORGE-CHECK`` lines (docs/recipes.md,
``[test]``): ``rfdemo`` (the C extension's answer) and ``gpu_matmul`` (an fp32 matmul on the
first GPU against a float64 CPU reference, with TF32 off).
"""

from __future__ import annotations

import json
import time


def _start(name: str, timeout: float) -> float:
    print("ROCMFORGE-START " + json.dumps({"check": name, "timeout": timeout}), flush=True)
    return time.monotonic()


def _done(name: str, t: float, ok: bool, figures: dict[str, object], detail: str) -> None:
    print("ROCMFORGE-CHECK " + json.dumps({
        "check": name, "status": "passed" if ok else "failed",
        "seconds": round(time.monotonic() - t, 3), "figures": figures, "detail": detail,
    }), flush=True)  # fmt: skip


def main() -> int:
    """Run both checks; exit 1 if one fails."""
    t = _start("rfdemo", 30)
    import rfdemo

    answers = {"add(2, 3)": rfdemo.add(2, 3), "fib(20)": rfdemo.fib(20)}
    ok = answers == {"add(2, 3)": 5, "fib(20)": 6765}
    _done("rfdemo", t, ok, {"file": rfdemo.__file__, **answers},
          f"rfdemo's C extension: add(2, 3) = {answers['add(2, 3)']}, fib(20) = "
          f"{answers['fib(20)']}")
    if not ok:
        return 1
    t = _start("gpu_matmul", 120)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(int(time.time()))
    a, b = (torch.randn(2048, 2048, generator=g) for _ in range(2))
    ref = a.double() @ b.double()
    got = (a.cuda() @ b.cuda()).cpu().double()
    err = float((got - ref).abs().max() / ref.abs().max())
    ok = err < 1e-4
    _done("gpu_matmul", t, ok, {"rel_error": err, "device": torch.cuda.get_device_name(0),
                                "torch": torch.__version__},
          f"fp32 2048^3 on {torch.cuda.get_device_name(0)}: rel. error {err:.2e} (bound 1e-04)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
