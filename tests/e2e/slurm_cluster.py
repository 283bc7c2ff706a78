"""A private single-node Slurm for a test module (``tests/e2e/test_slurm*.py``).

:func:`private_slurm` starts slurmctld, slurmd and munged (``scripts/slurm-up.sh``, Debian's
slurm-wlm and munge) on free loopback ports with all state in a temp dir, and stops them at the
end (``scripts/slurm-down.sh``: jobs cancelled first, daemons by pid file). Each module wraps it
in its own module-scoped ``slurm`` fixture (tests/conftest.py keeps a module's tests that share
it on one xdist worker). Where Slurm is not installed the test is skipped, except under
``CI=true``, where scripts/test.sh should have installed it: there it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest
from conftest import REPO, rf

TOOLS = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scontrol", "scancel")


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def private_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Start a private Slurm; yield the environment a client and a job need (``SLURM_CONF``,
    and a signing key's ``XDG_CONFIG_HOME`` and ``ROCMFORGE_TRUSTED_KEYS``)."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        why = f"Slurm is not installed ({', '.join(missing)} missing): scripts/test.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} should have installed it in CI")
        pytest.skip(why)
    if os.geteuid() != 0:
        pytest.skip("slurm-up.sh runs slurmctld/slurmd as root")
    base = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURMCTLD_PORT": str(free_port()), "SLURMD_PORT": str(free_port())}
    up = subprocess.run([str(REPO / "scripts" / "slurm-up.sh"), str(base)], env=env,
                        capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    conf = str(base / "slurm.conf")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        config = tmp_path_factory.mktemp("config")
        keyenv = {"XDG_CONFIG_HOME": str(config), "ROCMFORGE_TRUSTED_KEYS": ""}
        proc = rf("key", "generate", "--json", "--name", "slurm-test", env=keyenv)
        assert proc.returncode == 0, proc.stderr
        yield {
            "SLURM_CONF": conf,
            "XDG_CONFIG_HOME": str(config),
            "ROCMFORGE_TRUSTED_KEYS": json.loads(proc.stdout)["public_key"],
        }
    finally:
        subprocess.run([str(REPO / "scripts" / "slurm-down.sh"), str(base)],
                       env={**os.environ, "SLURM_CONF": conf}, capture_output=True,
                       timeout=120, check=False)  # fmt: skip
