"""What every toolchain probe shares: the :class:`Toolchain` value and :func:`run_probe`.

The system probe (:mod:`rocmforge.toolchain.system`) and the ROCm probe
(:mod:`rocmforge.toolchain.rocm`) both build on this module; neither imports the other at module
level, so the ROCm probe no longer imports the module that calls it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import ToolchainError

if TYPE_CHECKING:
    from rocmforge.toolchain.rocmsdk import SdkWheel

#: Bumped when what the system probe records changes; part of its stat-cache key.
PROBE_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Toolchain:
    """A probed toolchain: the hashed ``fingerprint`` plus what the build needs to run it."""

    fingerprint: Mapping[str, Any]
    python: Path
    python_prefix: Path
    python_version: str
    env: Mapping[str, str] = field(default_factory=dict)
    path_dirs: tuple[str, ...] = ()
    mounts: tuple[Path, ...] = ()
    guards: tuple[str, ...] = ()
    #: Host directories the bwrap sandbox hides (unowned by any package: docs/hermetic.md).
    masks: tuple[str, ...] = ()
    #: A declared view (``[toolchain] packages``): ``{"packages": {...}, "links": {...}}``.
    view: Mapping[str, Any] | None = None
    #: ``kind = "rocm-sdk"``: the locked SDK wheels, unpacked and mounted by the build.
    sdk: tuple[SdkWheel, ...] = ()


def probe_env() -> dict[str, str]:
    """Return the environment a probe runs in by default: PATH, HOME, pyenv's vars, ``LC_ALL=C``."""
    env = {
        k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYENV_VERSION", "PYENV_ROOT")
    }
    env["LC_ALL"] = "C"
    return env


def run_probe(
    argv: list[str], *, env: Mapping[str, str] | None = None, with_stderr: bool = False
) -> str:
    """Run one probe command and return its stdout (plus stderr with ``with_stderr``).

    ``env`` defaults to :func:`probe_env`. A failure to start, a timeout or a non-zero exit is a
    :class:`ToolchainError` quoting the command and its last line of output.
    """
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=dict(env) if env is not None else probe_env(),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"toolchain probe `{' '.join(argv)}` failed: {exc}") from exc
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise ToolchainError(
            f"toolchain probe `{' '.join(argv)}` exited {proc.returncode}"
            + (f": {detail[-1]}" if detail else "")
        )
    return proc.stdout + "\n" + proc.stderr if with_stderr else proc.stdout
