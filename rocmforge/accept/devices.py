"""The GPU device nodes of this host, and which of them a test may use.

ROCm exposes ``/dev/kfd`` (the compute driver) and one ``/dev/dri/renderD*`` a GPU; CUDA
``/dev/nvidia0``, ``/dev/nvidia1``, ... beside ``/dev/nvidiactl``, ``/dev/nvidia-uvm`` and
friends. A sandbox binds the ones found (``--dev-bind``) and ``/sys`` read-only (ROCm's
runtime reads the GPU topology from ``/sys/class/kfd``). ``HIP_VISIBLE_DEVICES``,
``ROCR_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES`` are honoured: they are passed into the
sandbox and set how many devices the checks expect.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass

#: the variables that select devices, passed into the sandbox when set
VISIBLE_VARS = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True, slots=True)
class GpuDevices:
    """What the host offers: the vendor stack (``rocm``, ``cuda``, or None), the device nodes
    to bind, the number of GPUs those nodes stand for and the selecting variables set."""

    kind: str | None
    nodes: tuple[str, ...]
    gpus: int
    visible: Mapping[str, str]

    @property
    def looked_for(self) -> str:
        """What was looked for, for the error when nothing is found."""
        return "/dev/kfd with /dev/dri/renderD* (ROCm), /dev/nvidia[0-9]* (CUDA)"


def _numbered(pattern: str, prefix: str) -> list[str]:
    return sorted(
        (p for p in glob.glob(pattern) if p[len(prefix) :].isdigit()),
        key=lambda p: int(p[len(prefix) :]),
    )


def find_devices(dev: str = "/dev", environ: Mapping[str, str] | None = None) -> GpuDevices:
    """Return the GPU device nodes under ``dev`` and the selecting variables of ``environ``."""
    env = os.environ if environ is None else environ
    visible = {k: env[k] for k in VISIBLE_VARS if k in env}
    kfd = os.path.join(dev, "kfd")
    render = _numbered(os.path.join(dev, "dri", "renderD*"), os.path.join(dev, "dri", "renderD"))
    if os.path.exists(kfd) and render:
        return GpuDevices("rocm", (kfd, *render), len(render), visible)
    nvidia = _numbered(os.path.join(dev, "nvidia*"), os.path.join(dev, "nvidia"))
    if nvidia:
        extra = [
            p
            for p in sorted(glob.glob(os.path.join(dev, "nvidia*")))
            if p not in nvidia and not os.path.isdir(p)
        ]
        caps = sorted(glob.glob(os.path.join(dev, "nvidia-caps", "*")))
        return GpuDevices("cuda", (*nvidia, *extra, *caps), len(nvidia), visible)
    return GpuDevices(None, (), 0, visible)


def visible_count(devices: GpuDevices) -> tuple[int, str]:
    """How many devices a process should see, and why: the first selecting variable set
    (``HIP_VISIBLE_DEVICES=0,1`` -> 2; an empty one -> 0), else every GPU found."""
    for var in VISIBLE_VARS:
        value = devices.visible.get(var)
        if value is not None:
            picked = [p for p in value.split(",") if p.strip() and p.strip() != "-1"]
            return len(picked), f"{var}={value}"
    return devices.gpus, f"{devices.gpus} GPU device node(s) found"
