"""``rocmforge test --python PATH --tier comm --executor slurm`` against a real single-node Slurm.

CI has no GPU and no torch: the Python under test is a real venv whose ``torch`` is a stand-in
written here that implements exactly the calls ``rocmforge/accept/comm_script.py`` makes, with a
REAL rendezvous: ``init_process_group`` connects every rank over TCP to
``MASTER_ADDR:MASTER_PORT`` (rank 0 listens there and refuses a rank that comes twice, a world
size that differs, or two ranks of one host on one device) and ``all_reduce`` sums the ranks'
values over those sockets. A wrong ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` or
``MASTER_PORT`` from the batch script or the per-task wrapper fails the run. The Slurm is the
module's own (tests/e2e/slurm_cluster.py), with no GPU gres: ``--no-gres``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import rf
from slurm_cluster import private_slurm

from rocmforge.build.sandbox import Runner

BWRAP = shutil.which("bwrap")

STANDIN_INIT = '''\
"""A stand-in torch: tensors are arrays of doubles, the GPUs are names (tests only)."""
import array
import os
import random
import types

__version__ = "0.0-standin"
float32 = "float32"
float64 = "float64"


class device:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index


class Tensor:
    __hash__ = None

    def __init__(self, data, dtype=float32):
        self.data = data if isinstance(data, array.array) else array.array("d", data)
        self.dtype = dtype

    def _new(self, values, dtype=None):
        return Tensor(array.array("d", values), dtype or self.dtype)

    def _other(self, other):
        return other.data if isinstance(other, Tensor) else [other] * len(self.data)

    def __eq__(self, other):
        return self._new([float(a == b) for a, b in zip(self.data, self._other(other))], "bool")

    def __add__(self, other):
        return self._new([a + b for a, b in zip(self.data, self._other(other))])

    __radd__ = __add__

    def __sub__(self, other):
        return self._new([a - b for a, b in zip(self.data, self._other(other))])

    def abs(self):
        return self._new([abs(v) for v in self.data])

    def max(self):
        return self._new([max(self.data)])

    def item(self):
        return bool(self.data[0]) if self.dtype == "bool" else self.data[0]

    def float(self):
        return Tensor(array.array("d", array.array("f", self.data)), float32)

    def double(self):
        return Tensor(self.data, float64)

    def cpu(self):
        return self

    def to(self, where):
        return self


class Generator:
    def manual_seed(self, seed):
        self.random = random.Random(seed)
        return self


def full(size, value, device=None, dtype=float32):
    return Tensor(array.array("d", [float(value)]) * size[0], dtype)


def ones(count, dtype=float32, device=None):
    return Tensor(array.array("d", [1.0]) * count, dtype)


def randn(count, generator=None, dtype=float32):
    rng = generator.random if generator is not None else random
    return Tensor([rng.gauss(0.0, 1.0) for _ in range(count)], dtype)


def all(t):
    return Tensor([float(min(t.data, default=1.0) != 0.0)], "bool")


def _set_device(index):
    if not 0 <= index < cuda.device_count():
        raise RuntimeError(f"CUDA error: invalid device ordinal {index}")
    cuda.current = index


cuda = types.SimpleNamespace(
    current=None,
    device_count=lambda: int(os.environ.get("TORCH_STANDIN_GPUS", "8")),
    set_device=_set_device,
    get_device_properties=lambda i: types.SimpleNamespace(name="Stand-in GPU"),
    synchronize=lambda: None,
    is_available=lambda: True,
)

from . import distributed  # noqa: E402
'''

STANDIN_DISTRIBUTED = '''\
"""The stand-in's collectives: a star over TCP, rank 0 in the middle, at MASTER_ADDR:PORT."""
import array
import json
import os
import socket
import struct
import time

import torch

_peers = {}
_me = {}


def _exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise RuntimeError("stand-in NCCL error: a peer closed its connection")
        buf += chunk
    return bytes(buf)


def _send(sock, payload):
    sock.sendall(struct.pack("!Q", len(payload)) + payload)


def _recv(sock):
    return _exact(sock, struct.unpack("!Q", _exact(sock, 8))[0])


def init_process_group(backend, rank, world_size, timeout=None):
    if os.environ.get("TORCH_STANDIN_FAIL_RANK") == str(rank):
        raise RuntimeError(f"stand-in NCCL error: rank {rank} was told to fail")
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    limit = timeout.total_seconds() if timeout is not None else 60.0
    me = {"rank": rank, "world": world_size, "host": socket.gethostname(),
          "device": torch.cuda.current}
    _me.update(me)
    if rank == 0:
        server = socket.create_server(("", port))  # every interface, as torch's TCPStore
        server.settimeout(limit)
        seen = {(me["host"], me["device"])}
        while len(_peers) < world_size - 1:
            conn, _ = server.accept()
            conn.settimeout(None)
            peer = json.loads(_recv(conn))
            if peer["world"] != world_size:
                raise RuntimeError(f"stand-in rendezvous: rank {peer['rank']} has world size "
                                   f"{peer['world']}, rank 0 {world_size}")
            if peer["rank"] in _peers or not 0 < peer["rank"] < world_size:
                raise RuntimeError(f"stand-in rendezvous: rank {peer['rank']} again or out of "
                                   "range")
            if (peer["host"], peer["device"]) in seen:
                raise RuntimeError(f"stand-in NCCL error: duplicate GPU {peer['device']} on "
                                   f"{peer['host']} (rank {peer['rank']})")
            seen.add((peer["host"], peer["device"]))
            _peers[peer["rank"]] = conn
        server.close()
        for conn in _peers.values():
            _send(conn, b"ok")
    else:
        end = time.monotonic() + limit
        while True:
            try:
                sock = socket.create_connection((addr, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)
        sock.settimeout(None)
        _send(sock, json.dumps(me).encode())
        if _recv(sock) != b"ok":
            raise RuntimeError("stand-in rendezvous: refused")
        _peers[0] = sock


def new_group(ranks):
    if list(ranks) != list(range(_me["world"])):
        raise RuntimeError(f"stand-in: new_group({ranks}) is not the whole world")
    return tuple(ranks)


def all_reduce(tensor, group=None):
    if os.environ.get("TORCH_STANDIN_HANG_RANK") == str(_me["rank"]):
        time.sleep(3600)
    if _me["world"] == 1:
        return
    if _me["rank"] != 0:
        _send(_peers[0], tensor.data.tobytes())
        tensor.data = array.array("d", _recv(_peers[0]))
        return
    total = tensor.data
    for rank in sorted(_peers):
        other = array.array("d", _recv(_peers[rank]))
        if len(other) != len(total):
            raise RuntimeError("stand-in NCCL error: ranks reduce different sizes")
        total = array.array("d", [a + b for a, b in zip(total, other)])
    for conn in _peers.values():
        _send(conn, total.tobytes())
    tensor.data = total


def barrier(group=None):
    all_reduce(torch.Tensor([0.0]), group=group)


def destroy_process_group():
    for conn in _peers.values():
        conn.close()
    _peers.clear()
'''


def standin_python(root: Path) -> Path:
    """A venv whose ``torch`` is the stand-in; its interpreter."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(STANDIN_INIT)
    (site / "torch" / "distributed.py").write_text(STANDIN_DISTRIBUTED)
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A private Slurm for this module; yields the environment a client and a job need."""
    with private_slurm(tmp_path_factory) as env:
        yield env


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python under test (at the same path on every node: here, one node)."""
    return standin_python(tmp_path_factory.mktemp("standin"))


def _comm(python: Path, tmp_path: Path, *extra: str | Path) -> list[str | Path]:
    return ["test", "--python", python, "--tier", "comm", "--executor", "slurm",
            "--nodes", "1", "--gpus-per-node", "2", "--no-gres", "--job-dir", tmp_path / "jobs",
            *extra]  # fmt: skip


def _env(slurm: dict[str, str], tmp_path: Path, **extra: str) -> dict[str, str]:
    """The CLI's environment: the Slurm's, ``TMPDIR`` in the test's directory (the run's log
    directory is made there), and ``extra`` (which the job passes on to the ranks)."""
    return {**slurm, "TMPDIR": str(tmp_path), **extra}


def _squeue(slurm: dict[str, str], job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"],
                         env={**os.environ, **slurm}, capture_output=True, text=True,
                         check=False)  # fmt: skip
    return out.stdout.strip()


def _sandboxes() -> list[object]:
    bwrap = pytest.param("bwrap", marks=pytest.mark.skipif(
        BWRAP is None, reason="bubblewrap is not installed"))  # fmt: skip
    return ["none", bwrap]


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", _sandboxes())
def test_two_tasks_meet_at_the_first_node_and_reduce(
    slurm: dict[str, str], python: Path, tmp_path: Path, sandbox: str
) -> None:
    thresholds = tmp_path / "thresholds.toml"
    thresholds.write_text('"Stand-in GPU x2" = 0.000001\n')
    proc = rf(*_comm(python, tmp_path, "--sandbox", sandbox, "--max-bytes", "65536",
                     "--thresholds", thresholds, "--json"),
              env=_env(slurm, tmp_path, NCCL_DEBUG="WARN"), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == ["import", "init", "correctness", "sweep", "bandwidth"], checks
    assert all(c["status"] == "passed" for c in checks.values()), checks
    assert report["result"] == "PASSED" and report["tier"] == "comm"
    assert report["sandbox"] == sandbox
    # rank 0's lines, read back from the job's output as it grew
    assert checks["import"]["figures"]["torch"] == "0.0-standin"
    assert checks["init"]["figures"]["world_size"] == 2
    assert checks["init"]["figures"]["device"] == "Stand-in GPU"
    assert checks["correctness"]["figures"]["exact_sum"] is True  # 1 + 2, over the sockets
    assert checks["correctness"]["figures"]["rel_error"] < 1e-5
    rows = checks["sweep"]["figures"]["rows"]
    assert [r["bytes"] for r in rows] == [8 << i for i in range(14)]  # 8 B .. 64 KiB
    assert all(r["busbw"] == pytest.approx(r["algbw"], abs=0.002) for r in rows)  # 2(n-1)/n = 1
    assert checks["bandwidth"]["figures"]["threshold"] == 0.000001
    assert "(Stand-in GPU x2)" in checks["bandwidth"]["detail"]
    node = report["node"]
    assert node["executor"] == "slurm" and node["nodes"] == ["localhost"]
    assert node["gpu_model"] == "Stand-in GPU" and node["gpu_count"] == 2
    assert node["node_count"] == 1 and node["gpus_per_node"] == 2
    assert node["rendezvous"].startswith("localhost:")
    job = node["slurm_job"]
    assert f"[slurm] comm job {job}: " in proc.stderr
    assert _squeue(slurm, job) == "COMPLETED"
    shown = subprocess.run(["scontrol", "show", "job", "-o", job], env={**os.environ, **slurm},
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    # one node, a task per GPU; the time limit from the checks' timeouts (1140 s) + 2 + 5 min
    assert "NumNodes=1 " in shown and "NumTasks=2 " in shown, shown
    assert "TimeLimit=00:26:00" in shown and "gres" not in shown.lower(), shown
    # The batch script and the job's output stay in the job directory.
    [run] = (tmp_path / "jobs" / "comm").iterdir()
    batch = (run / "comm.sbatch").read_text()
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in batch
    assert "srun --kill-on-bad-exit=1 " in batch and " rank " in batch
    out = (run / "comm.out").read_text()
    assert f"rocmforge-comm: job {job} on localhost: world size 2, rendezvous at " in out
    assert Path(report["log"]).read_text() == out  # the whole output, in the run's log


@pytest.mark.slow
def test_a_hanging_rank_is_cancelled_at_its_checks_timeout(
    slurm: dict[str, str], python: Path, tmp_path: Path
) -> None:
    t = time.monotonic()
    proc = rf(*_comm(python, tmp_path, "--sandbox", "none", "--max-bytes", "64",
                     "--timeout", "correctness=3", "--json"),
              env=_env(slurm, tmp_path, TORCH_STANDIN_HANG_RANK="1"), timeout=300)  # fmt: skip
    took = time.monotonic() - t
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["init"]["status"] == "passed"
    hung = checks["correctness"]
    assert hung["status"] == "failed" and "timed out after 3 s" in hung["detail"], hung
    job = report["node"]["slurm_job"]
    assert f"Slurm job {job} cancelled (scancel)" in hung["detail"]
    assert checks["bandwidth"]["status"] == "not run"
    assert report["result"] == "FAILED"
    assert took < 60, took  # the job's own limit is minutes: the check's 3 s ended it
    assert _squeue(slurm, job) == "CANCELLED"


@pytest.mark.slow
def test_a_failing_rank_fails_the_job_and_names_it(
    slurm: dict[str, str], python: Path, tmp_path: Path
) -> None:
    proc = rf(*_comm(python, tmp_path, "--sandbox", "none", "--max-bytes", "64"),
              env=_env(slurm, tmp_path, TORCH_STANDIN_FAIL_RANK="1"), timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [ln for ln in proc.stdout.splitlines() if " init " in ln]
    assert line.split()[0] == "failed", proc.stdout
    # the Slurm state and the rank's own last words, not srun's note about them
    ended = re.search(r"Slurm job (\d+) ended FAILED", line)
    assert ended, line
    assert _squeue(slurm, ended.group(1)) == "FAILED"
    assert "RuntimeError: stand-in NCCL error: rank 1 was told to fail" in line, line
    assert "FAILED: comm tier" in proc.stdout


def test_slurm_options_where_they_do_not_apply_exit_2(tmp_path: Path) -> None:
    py = sys.executable
    base = ["test", "--python", py, "--tier", "comm", "--executor", "slurm"]
    cases = {
        ("test", "--python", py, "--nodes", "2"): "--nodes is an option of --executor slurm",
        ("test", "--python", py, "--tier", "comm", "--job-dir", tmp_path):
            "--job-dir is an option of --executor slurm",
        ("test", "x.toml", "--tier", "comm", "--executor", "slurm", "--gpus-per-node", "2"):
            "give --python PATH",
        ("test", "--python", py, "--executor", "slurm", "--gpus-per-node", "2"):
            "runs the comm tier only",
        ("test", "--python", py, "--tier", "smoke", "--tier", "comm", "--executor", "slurm",
         "--gpus-per-node", "2"): "runs the comm tier only",
        (*base,): "needs --gpus-per-node G",
        (*base, "--gpus-per-node", "0"): "must be at least 1",
        (*base, "--gpus-per-node", "2", "--gpus", "2"): "the world size is --nodes x",
        (*base, "--gpus-per-node", "2", "--sandbox", "none", "--config", ""):
            "needs --job-dir DIR",
        (*base, "--gpus-per-node", "2", "--sandbox", "none", "--job-dir", tmp_path,
         "--time", "soon"): "test --executor slurm: time:",
    }  # fmt: skip
    for args, want in cases.items():
        proc = rf(*args, env={"ROCMFORGE_JOB_DIR": "", "TMPDIR": str(tmp_path)})
        assert proc.returncode == 2, (args, proc.stderr)
        assert want in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# -- the per-task wrapper, without Slurm ----------------------------------------------------

TASK_ENV = {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4",
            "MASTER_ADDR": "node001", "MASTER_PORT": "29411", "NCCL_DEBUG": "INFO",
            "PATH": os.environ["PATH"], "UNRELATED": "not passed"}  # fmt: skip


def _rank_env(rank_sh: Path, **extra: str) -> dict[str, str]:
    """What the rank's command sees: ``rank.sh /usr/bin/env`` run as a task would be."""
    out = subprocess.run(["bash", str(rank_sh), "/usr/bin/env"], env={**TASK_ENV, **extra},
                         capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def _rank_sh(tmp_path: Path, runner: Runner) -> Path:
    from rocmforge.accept.run import probe_python
    from rocmforge.accept.slurmcomm import write_job

    files = write_job(probe_python(sys.executable), runner=runner,
                      directory=tmp_path / "run", config={"timeouts": {}})  # fmt: skip
    return files.rank


def test_each_task_gets_its_rank_a_clean_environment_and_its_device(tmp_path: Path) -> None:
    from rocmforge.build.sandbox import NoneRunner

    rank_sh = _rank_sh(tmp_path, NoneRunner())
    env = _rank_env(rank_sh)
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                "MASTER_PORT")} == {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "node001",
        "MASTER_PORT": "29411"}  # fmt: skip
    assert env["NCCL_DEBUG"] == "INFO" and "UNRELATED" not in env
    assert env["HOME"] == "/tmp" and env["PYTHONUNBUFFERED"] == "1"
    assert not any(k.startswith("SLURM_") for k in env)
    # The node's GPUs visible to every task: device number SLURM_LOCALID among them.
    assert _rank_env(rank_sh, CUDA_VISIBLE_DEVICES="0,1,2,3")["LOCAL_RANK"] == "1"
    assert _rank_env(rank_sh, ROCR_VISIBLE_DEVICES="4,5")["ROCR_VISIBLE_DEVICES"] == "4,5"
    # Slurm bound the task to one GPU of its own: that one, device 0 (visibility untouched).
    bound = _rank_env(rank_sh, CUDA_VISIBLE_DEVICES="5")
    assert bound["LOCAL_RANK"] == "0" and bound["CUDA_VISIBLE_DEVICES"] == "5"
    assert _rank_env(rank_sh, HIP_VISIBLE_DEVICES="2")["LOCAL_RANK"] == "0"
    batch = (rank_sh.parent / "comm.sbatch").read_text()
    assert f"srun --kill-on-bad-exit=1 {rank_sh} {sys.executable} " in batch
    assert f"{rank_sh.parent / 'comm_script.py'} rank " in batch


@pytest.mark.skipif(BWRAP is None, reason="bubblewrap is not installed")
def test_each_task_runs_in_bubblewrap_sharing_the_network(tmp_path: Path) -> None:
    from rocmforge.build.sandbox import detect_runner
    from rocmforge.errors import SandboxError

    try:
        runner = detect_runner("bwrap")
    except SandboxError as exc:
        pytest.skip(f"bubblewrap does not work here: {exc}")
    rank_sh = _rank_sh(tmp_path, runner)
    env = _rank_env(rank_sh)
    assert env["RANK"] == "3" and env["LOCAL_RANK"] == "1" and env["MASTER_PORT"] == "29411"
    assert env["NCCL_DEBUG"] == "INFO" and "UNRELATED" not in env and "PWD" not in env
    text = rank_sh.read_text()
    assert "--unshare-all --share-net" in text and f"{rank_sh.parent} /accept" in text
    # the host's network namespace: the same interfaces inside as outside
    out = subprocess.run(["bash", str(rank_sh), "/bin/cat", "/proc/net/dev"], env=TASK_ENV,
                         capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert _interfaces(out.stdout) == _interfaces(Path("/proc/net/dev").read_text())
    # ... and its name resolution: the rendezvous is by node name
    if shutil.which("getent") and os.path.exists("/etc/hosts"):
        hosts = subprocess.run(["bash", str(rank_sh), "getent", "hosts", "localhost"],
                               env=TASK_ENV, capture_output=True, text=True, timeout=60,
                               check=False)  # fmt: skip
        assert hosts.returncode == 0 and "localhost" in hosts.stdout, hosts.stderr


def _interfaces(proc_net_dev: str) -> list[str]:
    return sorted(ln.split(":")[0].strip() for ln in proc_net_dev.splitlines() if ":" in ln)
