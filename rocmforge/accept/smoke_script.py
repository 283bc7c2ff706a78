"""The smoke tier's checks, run by the Python under test (never imported by rocmforge).

``python smoke_script.py CONFIG_JSON`` runs each check in turn and prints, for each, a line
``ROCMFORGE-START {"check": NAME, "timeout": SECONDS}`` before it starts and a line
``ROCMFORGE-CHECK {...}`` when it ends: its status (passed, failed, skipped), seconds,
figures and a detail. The caller kills the whole process when a check outlasts its timeout
(a hung kernel cannot be interrupted from inside). A check that fails and makes the rest
meaningless (no GPU, an arch the wheel lacks) stops the run: the rest are not run.

CONFIG_JSON: ``{"expected_devices": N or null, "archs": [...] or null, "flash": true/false/null,
"checks": [names] or null, "timeouts": {name: seconds}}``. Standard library and torch only;
Python 3.9 or later.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

Result = tuple[str, dict[str, Any], str]

START = "ROCMFORGE-START "
RESULT = "ROCMFORGE-CHECK "

#: relative error bounds against a float64 CPU reference: max |got - ref| / max |ref|
BOUNDS = {"fp32": 1e-4, "bf16": 2e-2, "conv": 1e-4, "flash": 2e-2}


class Stop(Exception):
    """A failure after which no later check means anything."""


def emit(prefix: str, payload: dict[str, Any]) -> None:
    """Print one protocol line and flush it (the caller reads lines as they come)."""
    sys.stdout.write(prefix + json.dumps(payload, sort_keys=True) + "\n")
    sys.stdout.flush()


def rel_error(got: Any, ref: Any) -> float:
    """max |got - ref| / max |ref|, in float64 on the CPU."""
    import torch

    got = got.detach().to("cpu", torch.float64)
    scale = float(ref.abs().max().item()) or 1.0
    return float((got - ref).abs().max().item()) / scale


def arch_of(torch: Any, i: int) -> tuple[str, str]:
    """The device's arch as the wheel's libraries name it: gfx942 (ROCm), sm_90 (CUDA)."""
    props = torch.cuda.get_device_properties(i)
    gcn = getattr(props, "gcnArchName", "") or ""
    if getattr(torch.version, "hip", None) and gcn:
        return gcn.split(":")[0], gcn
    sm = f"sm_{props.major}{props.minor}"
    return sm, sm


def check_import(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """import torch; its version and how long the import took."""
    t = time.monotonic()
    import torch

    state["torch"] = torch
    figures = {
        "torch": torch.__version__,
        "import_seconds": round(time.monotonic() - t, 3),
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "git_version": getattr(torch.version, "git_version", None),
    }
    return "passed", figures, "import torch " + torch.__version__


def check_is_available(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """torch.cuda.is_available(): nothing else runs without it."""
    torch = state["torch"]
    if not torch.cuda.is_available():
        raise Stop("torch.cuda.is_available() is False: no GPU is usable from this process")
    return "passed", {"available": True}, "torch.cuda.is_available() is True"


def check_device_count(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """torch.cuda.device_count() against the devices the caller expects."""
    torch = state["torch"]
    n = torch.cuda.device_count()
    want = cfg.get("expected_devices")
    figures = {"device_count": n, "expected": want}
    if want is not None and n != want:
        why = cfg.get("expected_why") or "the visible devices"
        raise Stop(f"torch.cuda.device_count() is {n}, expected {want} ({why})")
    return "passed", figures, f"{n} device(s)"


def check_archs(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """Each device's arch among the archs the wheel was built for, before any kernel."""
    torch = state["torch"]
    devices = []
    for i in range(torch.cuda.device_count()):
        arch, full = arch_of(torch, i)
        devices.append({"index": i, "name": torch.cuda.get_device_name(i), "arch": arch,
                        "arch_full": full})
    state["devices"] = devices
    built = cfg.get("archs")
    source = "the wheel's libraries"
    if not built:
        built = [a for a in torch.cuda.get_arch_list() if a.startswith(("gfx", "sm_"))]
        source = "torch.cuda.get_arch_list()"
    figures = {"devices": devices, "built_for": sorted(built), "built_for_source": source}
    if not built:
        return "skipped", figures, "no GPU archs recorded for the wheel"
    for d in devices:
        if d["arch"] not in built:
            raise Stop(
                f"device {d['index']} ({d['name']}) is {d['arch_full']}, but {source} hold "
                f"only {' '.join(sorted(built))}: rebuild with {d['arch']} among the archs "
                "(PYTORCH_ROCM_ARCH / [check] archs), or run on a node of those archs"
            )
    return "passed", figures, ", ".join(f"{d['index']}: {d['name']} {d['arch']}" for d in devices)


def _seeded(state: dict[str, Any]) -> int:
    import torch

    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    return seed


def check_matmul_fp32(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """An fp32 matmul against a float64 CPU reference (TF32 off)."""
    torch = state["torch"]
    seed = _seeded(state)
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 1024
    a, b = torch.randn(n, n, dtype=torch.float64), torch.randn(n, n, dtype=torch.float64)
    ref = a @ b
    got = a.float().cuda() @ b.float().cuda()
    torch.cuda.synchronize()
    err = rel_error(got, ref)
    figures = {"n": n, "rel_error": err, "bound": BOUNDS["fp32"], "seed": seed}
    ok = err <= BOUNDS["fp32"]
    detail = f"fp32 {n}^3 rel. error {err:.2e} (bound {BOUNDS['fp32']:.0e})"
    return ("passed" if ok else "failed"), figures, detail


def check_matmul_bf16(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """A bf16 matmul against float64, then its throughput on a large product."""
    torch = state["torch"]
    seed = _seeded(state)
    n = 1024
    a, b = torch.randn(n, n, dtype=torch.float64), torch.randn(n, n, dtype=torch.float64)
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    ref = a16.double() @ b16.double()  # the error of the product, not of rounding the inputs
    got = a16.cuda() @ b16.cuda()
    err = rel_error(got, ref)
    big = int(cfg.get("bf16_size") or 8192)
    x = torch.randn(big, big, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(big, big, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        x @ y
    torch.cuda.synchronize()
    reps = 10
    t = time.monotonic()
    for _ in range(reps):
        x @ y
    torch.cuda.synchronize()
    seconds = time.monotonic() - t
    tflops = 2.0 * big ** 3 * reps / seconds / 1e12
    figures = {"n": n, "rel_error": err, "bound": BOUNDS["bf16"], "seed": seed,
               "perf_size": big, "tflops": round(tflops, 1)}
    ok = err <= BOUNDS["bf16"]
    detail = f"bf16 rel. error {err:.2e}; {big}^3: {tflops:.1f} TFLOP/s"
    return ("passed" if ok else "failed"), figures, detail


def check_conv(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """A conv2d (MIOpen or cuDNN) against a float64 CPU reference (TF32 off)."""
    torch = state["torch"]
    seed = _seeded(state)
    torch.backends.cudnn.allow_tf32 = False
    x = torch.randn(8, 16, 32, 32, dtype=torch.float64)
    w = torch.randn(32, 16, 3, 3, dtype=torch.float64)
    ref = torch.nn.functional.conv2d(x, w, padding=1)
    got = torch.nn.functional.conv2d(x.float().cuda(), w.float().cuda(), padding=1)
    err = rel_error(got, ref)
    backend = "MIOpen" if getattr(torch.version, "hip", None) else "cuDNN"
    figures = {"rel_error": err, "bound": BOUNDS["conv"], "seed": seed, "backend": backend}
    ok = err <= BOUNDS["conv"]
    return ("passed" if ok else "failed"), figures, f"conv2d ({backend}) rel. error {err:.2e}"


def check_sdpa_flash(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """SDPA forced to the flash backend (fp16) against a float64 reference."""
    torch = state["torch"]
    if cfg.get("flash") is False:
        return "skipped", {}, "the build did not enable flash attention"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return "skipped", {}, "this torch has no torch.nn.attention.sdpa_kernel"
    seed = _seeded(state)
    q, k, v = (torch.randn(2, 8, 256, 64, dtype=torch.float64) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    half = [t.to(torch.float16).cuda() for t in (q, k, v)]
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            got = torch.nn.functional.scaled_dot_product_attention(*half)
    except RuntimeError as exc:
        if cfg.get("flash") is True:
            return "failed", {"seed": seed}, f"flash attention was built in but fails: {exc}"
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return "skipped", {"seed": seed}, f"no flash attention kernel here: {first}"
    torch.cuda.synchronize()
    err = rel_error(got, ref)
    figures = {"rel_error": err, "bound": BOUNDS["flash"], "seed": seed, "dtype": "float16"}
    ok = err <= BOUNDS["flash"]
    return ("passed" if ok else "failed"), figures, f"SDPA (flash backend) rel. error {err:.2e}"


def check_compile(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """torch.compile of a small function (Triton) against eager."""
    torch = state["torch"]

    def f(x: Any, y: Any) -> Any:
        return torch.sin(x) + torch.cos(y)

    x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    t = time.monotonic()
    got = torch.compile(f)(x, y)
    torch.cuda.synchronize()
    first = time.monotonic() - t
    err = (got - f(x, y)).abs().max().item()
    figures = {"first_call_seconds": round(first, 2), "max_abs_error": err}
    ok = err <= 1e-5
    detail = f"torch.compile (Triton) first call {first:.1f} s"
    return ("passed" if ok else "failed"), figures, detail


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def check_runtime(state: dict[str, Any], cfg: dict[str, Any]) -> Result:
    """The runtime facts: HIP or CUDA, the ROCm SDK, the driver, NCCL/RCCL."""
    torch = state["torch"]
    figures = {"hip": getattr(torch.version, "hip", None),
               "cuda": getattr(torch.version, "cuda", None)}
    try:
        import rocm_sdk

        figures["rocm_sdk"] = getattr(rocm_sdk, "__version__", None)
    except ImportError:
        figures["rocm_sdk"] = None
    driver = _read("/sys/module/amdgpu/version") or _read("/proc/driver/nvidia/version")
    figures["driver"] = driver.splitlines()[0] if driver else None
    if torch.cuda.is_available():
        nccl = getattr(torch.cuda, "nccl", None)
        try:
            figures["nccl"] = ".".join(map(str, nccl.version())) if nccl else None
        except Exception:
            figures["nccl"] = None
    state["runtime"] = figures
    parts = [f"{k} {v}" for k, v in sorted(figures.items()) if v]
    return "passed", figures, "; ".join(parts)


CHECKS = [
    ("import", check_import),
    ("is_available", check_is_available),
    ("device_count", check_device_count),
    ("archs", check_archs),
    ("matmul_fp32", check_matmul_fp32),
    ("matmul_bf16", check_matmul_bf16),
    ("conv", check_conv),
    ("sdpa_flash", check_sdpa_flash),
    ("compile", check_compile),
    ("runtime", check_runtime),
]


def main(argv: list[str]) -> int:
    """Run the checks named by the config in ARGV[1]; 1 if one stopped the run."""
    cfg = json.loads(argv[1]) if len(argv) > 1 else {}
    wanted = cfg.get("checks")
    timeouts = cfg.get("timeouts") or {}
    state: dict[str, Any] = {}
    for name, fn in CHECKS:
        if wanted is not None and name not in wanted and name not in ("import",):
            continue
        emit(START, {"check": name, "timeout": timeouts.get(name, 120)})
        t = time.monotonic()
        try:
            status, figures, detail = fn(state, cfg)
        except Stop as exc:
            emit(RESULT, {"check": name, "status": "failed", "seconds": time.monotonic() - t,
                          "figures": {}, "detail": str(exc), "stop": True})
            return 1
        except Exception as exc:
            status, figures, detail = "failed", {}, f"{type(exc).__name__}: {exc}"
            if name == "import":
                emit(RESULT, {"check": name, "status": status, "seconds": time.monotonic() - t,
                              "figures": figures, "detail": detail, "stop": True})
                return 1
        emit(RESULT, {"check": name, "status": status, "seconds": time.monotonic() - t,
                      "figures": figures, "detail": detail})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
