"""``rocmforge doctor --comm`` for real: interfaces made in network namespaces of our own
(``unshare -rnm``: veth pairs, one end with addresses, one without, a pair left down; sysfs
mounted again inside so ``/sys/class/net`` is the namespace's), NCCL_SOCKET_IFNAME read as
NCCL reads it, NCCL logs of real runs (tests/data/accept/nccl-*.txt: the H200 here and public
issue threads, each file says where it came from), and the timed run against a real
interpreter whose ``torch`` prints real NCCL INFO lines and then hangs or fails.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, rf

from rocmforge.accept.commdoctor import (
    CURRENT,
    LEGACY,
    check_shm,
    check_variables,
    comm_doctor,
    parse_iflist,
    read_stage,
    run_environment,
)
from rocmforge.accept.devices import GpuDevices, find_devices
from rocmforge.build.sandbox import BwrapRunner, NoneRunner, Runner

DATA = Path(__file__).parent.parent / "data" / "accept"
#: one CUDA GPU with no node to bind (the timed run's sandbox needs none for a fake torch)
ONE_GPU = GpuDevices("cuda", (), 1, {})


# --- NCCL_SOCKET_IFNAME as NCCL reads it ------------------------------------------------------


def test_the_list_is_read_as_ncclS_parsestringlist() -> None:
    plain = parse_iflist("eth,ib0")
    assert (plain.exclude, plain.exact, plain.items) == (False, False, (("eth", None),
                                                                        ("ib0", None)))
    assert plain.matches("eth0") and plain.matches("ib0") and not plain.matches("ib1")
    assert not plain.problems and plain.describe() == "prefixes eth, ib0"
    excl = parse_iflist("^docker,lo")
    assert excl.exclude and not excl.matches("docker0") and not excl.matches("lo")
    assert excl.matches("eth0") and excl.describe() == "all but prefixes docker, lo"
    exact = parse_iflist("=eth0")
    assert exact.exact and exact.matches("eth0") and not exact.matches("eth01")
    both = parse_iflist("^=eth0")
    assert both.exclude and both.exact and both.matches("eth01") and not both.matches("eth0")
    # "=^": the ^ is a character of the name, NCCL reads ^ only first
    swapped = parse_iflist("=^eth0")
    assert swapped.exact and not swapped.exclude and swapped.items == (("^eth0", None),)
    assert any("'^'" in p for p in swapped.problems)
    # an empty list keeps all; excluded, nothing
    assert parse_iflist("=").matches("x") and not parse_iflist("^").matches("x")
    assert parse_iflist("^=").problems


@pytest.mark.parametrize(("raw", "words"), [
    ("eth0,,ib0", "item 2 is empty"),
    ("eth0,", "item 2 is empty"),
    (",eth0", "item 1 is empty"),
    ("eth0,^lo", "holds '^'"),
    ("eth0,=ib0", "holds '='"),
    ("eth0, ib0", "holds a blank"),
    (":1234", "no name before its ':'"),
])  # fmt: skip
def test_bad_syntax_is_named(raw: str, words: str) -> None:
    spec = parse_iflist(raw)
    assert any(words in p for p in spec.problems), spec.problems


def test_a_port_is_cut_off_and_more_than_16_items_are_ignored() -> None:
    spec = parse_iflist("eth0:1234")
    assert spec.items == (("eth0", 1234),) and spec.matches("eth0") and not spec.problems
    assert "as a port and ignores it" in spec.warnings[0]
    hca = parse_iflist("mlx5_0:1,mlx5_1:2", ports=True)
    assert hca.matches("mlx5_0", 1) and not hca.matches("mlx5_0", 2) and not hca.warnings
    many = parse_iflist(",".join(f"e{i}" for i in range(18)))
    assert len(many.items) == 16 and "ignores the rest (e16, e17)" in many.warnings[0]


# --- interfaces in network namespaces --------------------------------------------------------

#: the namespace every test below sets up: lo up; va (up, 10.9.0.1/24 and fd00:9::1/64) with
#: its peer vb (up, no address: no IPv6 link-local made); vc (down, 10.9.1.1/24) with its peer
#: vd (down, no address)
SETUP = """
set -e
echo 1 > /proc/sys/net/ipv6/conf/default/addr_gen_mode
ip link set lo up
ip link add va type veth peer name vb
ip link add vc type veth peer name vd
ip link set va up
ip link set vb up
ip addr add 10.9.0.1/24 dev va
ip addr add fd00:9::1/64 dev va nodad
ip addr add 10.9.1.1/24 dev vc
"""
MOUNT_SYS = "mount -t sysfs sys /sys\n"


@functools.cache
def _netns_reason() -> str | None:
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    try:
        proc = subprocess.run(["unshare", "-rnm", "sh", "-c", "ip link add va type veth peer "
                               "name vb && mount -t sysfs sys /sys"], capture_output=True,
                              text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -rnm does not run: {exc}"
    if proc.returncode != 0:
        return f"unshare -rnm with a veth pair is not allowed here: {proc.stderr.strip()}"
    return None


@pytest.fixture
def netns() -> None:
    """Skip (or, under CI=true, fail) where user and network namespaces cannot be made."""
    why = _netns_reason()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}: CI must run the namespace tests")
        pytest.skip(why)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NCCL_", "RCCL_", "SLURM_"))}  # fmt: skip
    env.update(extra)
    return env


def _in_netns(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["unshare", "-rnm", "sh", "-c", script], cwd=REPO, text=True,
                          capture_output=True, env=env or _clean_env(), timeout=120)


def _doctor_runs(cases: list[tuple[str | None, list[str]]], *, sysfs: bool = True,
                 setup: str = SETUP) -> list[tuple[int, dict[str, Any]]]:
    """Run ``doctor --comm --json`` once per (NCCL_SOCKET_IFNAME, extra args) in one
    namespace; return each exit status and report."""
    py = sys.executable
    lines = [setup, MOUNT_SYS if sysfs else ""]
    for i, (ifname, args) in enumerate(cases):
        var = "unset NCCL_SOCKET_IFNAME" if ifname is None else \
            f"export NCCL_SOCKET_IFNAME='{ifname}'"
        lines.append(f"{var}; echo '@@ {i}'; {py} -m rocmforge doctor --comm --json "
                     f"{' '.join(args)} || echo \"@@ rc $?\"")
    proc = _in_netns("\n".join(lines))
    assert proc.returncode == 0, proc.stderr
    out: list[tuple[int, dict[str, Any]]] = []
    for chunk in proc.stdout.split("@@ ")[1:]:
        head, _, body = chunk.partition("\n")
        if head.startswith("rc "):
            out[-1] = (int(head[3:]), out[-1][1])
            continue
        out.append((0, json.loads(body)))
    assert len(out) == len(cases), proc.stdout + proc.stderr
    return out


def _by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in report["interfaces"]}


def _texts(report: dict[str, Any], severity: str) -> list[str]:
    return [f["text"] for f in report["findings"] if f["severity"] == severity]


def test_interfaces_their_state_and_addresses(netns: None) -> None:
    [(code, report)] = _doctor_runs([(None, [])])
    assert code == 0, report["findings"]
    ifs = _by_name(report)
    assert set(ifs) == {"lo", "va", "vb", "vc", "vd"}
    va, vb, vc, vd, lo = (ifs[n] for n in ("va", "vb", "vc", "vd", "lo"))
    assert va["running"] and va["operstate"] == "up" and va["mtu"] == 1500
    assert [(a["family"], a["address"], a["prefixlen"]) for a in va["addresses"]] == [
        (4, "10.9.0.1", 24), (6, "fd00:9::1", 64)]  # fmt: skip
    assert vb["running"] and vb["addresses"] == []  # up, no address
    assert not vc["up"] and vc["operstate"] == "down"
    assert [a["address"] for a in vc["addresses"]] == ["10.9.1.1"]  # down, with an address
    assert not vd["up"] and vd["addresses"] == []
    assert lo["loopback"] and not lo["bootstrap_fit"] and va["bootstrap_fit"]
    assert report["sysfs_warning"] is None
    # unset: NCCL's default skips lo; NCCL >= 2.28 takes running interfaces only, RCCL and
    # older NCCL any with an address (the down vc too: a warning on one node)
    current, legacy = report["choices"]
    assert current["rules"] == CURRENT.name and current["chosen"] == ["va"]
    assert current["how"] == "default: ^docker,lo,virbr" and current["bootstrap"] == "va"
    assert legacy["rules"] == LEGACY.name and legacy["chosen"] == ["va", "vc"]
    assert legacy["bootstrap_address"] == "10.9.0.1"
    assert any(t.startswith("vc is down but has an address and is selected")
               for t in _texts(report, "warning"))  # fmt: skip
    assert ifs["va"]["note"] == "selected (bootstrap)"
    assert ifs["vc"]["selected_by"] == [LEGACY.name]


def test_selection_by_prefix_exclusion_and_exact_match(netns: None) -> None:
    cases: list[tuple[str | None, list[str]]] = [
        ("va", []),           # a prefix naming the interface with an address
        ("v", []),            # one character: NCCL ignores it, its default applies
        ("vb", []),           # up but no address: nothing selected
        ("=v", []),           # exact: no interface is named "v"
        ("^lo,va", []),       # exclusion: only the down vc is left
        ("^=va", []),         # exact exclusion: lo and (for RCCL) vc are left
        ("nosuch0", []),      # matches nothing at all
        ("va,,^lo", []),      # bad syntax
        ("lo", ["--nodes", "2"]),  # loopback bootstrap across nodes
        ("vc", ["--nodes", "2"]),  # a down interface across nodes
    ]  # fmt: skip
    runs = _doctor_runs(cases)
    (c_va, va), (c_v, v), (c_vb, vb), (c_exact, exact), (c_excl, excl), (c_both, both), \
        (c_none, none), (c_bad, bad), (c_lo, lo), (c_vc, vc) = runs
    assert c_va == 0 and [c["chosen"] for c in va["choices"]] == [["va"], ["va"]]
    assert va["socket_ifname"]["items"] == [["va", None]]
    assert _by_name(va)["vb"]["note"] == "not selected: not named"

    assert c_v == 0 and v["socket_ifname"] is None
    assert any("is ignored: NCCL reads it only when it has 2 characters" in t
               for t in _texts(v, "warning"))  # fmt: skip

    assert c_vb == 1 and all(c["chosen"] == [] for c in vb["choices"])
    [err] = _texts(vb, "error")
    assert "NCCL_SOCKET_IFNAME=vb selects no interface NCCL can use" in err
    assert "vb has no address" in err and "Bootstrap : no socket interface found" in err
    assert _by_name(vb)["vb"]["note"] == "matches, no address: skipped"
    assert vb["advice"].endswith("an interface that is up and has an address: va")

    assert c_exact == 1 and "it names none of this host's interfaces" in _texts(exact,
                                                                                "error")[0]
    assert exact["socket_ifname"]["exact"] is True

    current, legacy = excl["choices"]
    assert current["chosen"] == [] and legacy["chosen"] == ["vc"] and c_excl == 1
    assert "vc is not running" in _texts(excl, "error")[0]
    assert _by_name(excl)["va"]["note"] == "not selected: excluded"

    assert c_both == 0 and [c["chosen"] for c in both["choices"]] == [["lo"], ["lo", "vc"]]
    assert both["socket_ifname"]["exclude"] and both["socket_ifname"]["exact"]
    assert any("bootstrap on lo" in t and "fine on one node" in t for t in _texts(both, "note"))

    assert c_none == 1 and "names none of this host's interfaces" in _texts(none, "error")[0]

    assert c_bad == 1 and bad["exit_code"] == 1
    errors = _texts(bad, "error")
    assert any("item 2 is empty" in t for t in errors)
    assert any("item '^lo' holds '^'" in t for t in errors)

    assert c_lo == 1 and lo["nodes"] == 2
    assert any("bootstrap on lo (loopback" in t and "across 2 nodes" in t
               for t in _texts(lo, "error"))  # fmt: skip
    assert c_vc == 1 and any("vc is down" in t and "the other nodes cannot reach it" in t
                             for t in _texts(vc, "error"))  # fmt: skip


def test_the_text_report_and_a_small_dev_shm(netns: None) -> None:
    py = sys.executable
    proc = _in_netns(SETUP + MOUNT_SYS + "mount -t tmpfs -o size=64m tmpfs /dev/shm\n"
                     f"NCCL_SOCKET_IFNAME=va {py} -m rocmforge doctor --comm; echo rc=$?\n"
                     f"{py} -c 'import json; from rocmforge.accept.commdoctor import check_shm;"
                     " i, f = check_shm(\"/dev/shm\", gpus=2, shm_disabled=False);"
                     " print(json.dumps([i.to_json(), [x.to_json() for x in f]]))'")
    assert proc.returncode == 0, proc.stderr
    text, _, last = proc.stdout.rpartition("rc=")
    rc, _, shm_json = last.partition("\n")
    assert rc == "0", text
    lines = text.splitlines()
    assert lines[0] == "interfaces (NCCL_SOCKET_IFNAME=va):"
    va = next(ln for ln in lines if ln.startswith("  va "))
    assert "running" in va and "10.9.0.1/24, fd00:9::1/64" in va and "selected (bootstrap)" in va
    vc = next(ln for ln in lines if ln.startswith("  vc "))
    assert "down" in vc and "10.9.1.1/24" in vc and "not selected: not named" in vc
    assert "  NCCL and RCCL: va (NCCL_SOCKET_IFNAME=va); bootstrap on va 10.9.0.1" in lines
    assert "/dev/shm: 0.1 GiB free of 0.1 GiB (/dev/shm)" in lines
    assert any(ln.startswith("  warning: /dev/shm has 64.0 MiB free") for ln in lines)
    assert any(ln.startswith("timed run: skipped: no --python given") for ln in lines)
    assert lines[-1].startswith("advice: ")
    # two GPUs on a 64 MiB /dev/shm: an error (NCCL's SHM transport needs it)
    info, [finding] = json.loads(shm_json)
    assert info["total_bytes"] == 64 << 20 and finding["severity"] == "error"
    assert "Docker's default is 64 MiB" in finding["text"]


def test_a_sysfs_of_another_namespace_is_said(netns: None) -> None:
    [(code, report)] = _doctor_runs([("va", [])], sysfs=False)
    assert "is not of this network namespace" in report["sysfs_warning"]
    assert set(_by_name(report)) == {"lo", "va", "vb", "vc", "vd"}  # names from this netns
    assert code in (0, 1)


# --- the other variables ---------------------------------------------------------------------


def test_plugins_ib_hcas_and_the_disable_switches(tmp_path: Path) -> None:
    libs = tmp_path / "lib"
    libs.mkdir()
    (libs / "librccl-net-ofi.so").write_bytes(b"\x7fELF")
    ib = tmp_path / "infiniband"
    for dev, ports in (("mlx5_0", ("1",)), ("mlx5_1", ("1", "2"))):
        for port in ports:
            (ib / dev / "ports" / port).mkdir(parents=True)
    env = {"LD_LIBRARY_PATH": str(libs), "NCCL_NET_PLUGIN": "ofi,/nowhere/libnccl-net.so",
           "RCCL_NET_PLUGIN": "none", "NCCL_IB_HCA": "=mlx5_1:2", "NCCL_P2P_DISABLE": "2",
           "NCCL_SHM_DISABLE": "yes"}  # fmt: skip
    found = check_variables(env, gpus=2, ib_root=str(ib), ld_conf=str(tmp_path / "none"))
    text = {f.text: f.severity for f in found}
    assert text[f"NCCL_NET_PLUGIN: ofi is {libs / 'librccl-net-ofi.so'}"] == "note"
    missing = next(t for t in text if "/nowhere/libnccl-net.so not found" in t)
    assert text[missing] == "warning" and "fall back to their internal IB" in missing
    assert text["RCCL_NET_PLUGIN=none: external network plugins off (internal IB and socket "
                "transports)"] == "note"
    assert text["NCCL_IB_HCA==mlx5_1:2 selects mlx5_1:2"] == "note"
    assert text["NCCL_P2P_DISABLE='2': NCCL reads it as 2 (off)"] == "warning"
    assert text["NCCL_SHM_DISABLE='yes' is not a number: NCCL ignores it and keeps the default "
                "(0)"] == "warning"
    none = check_variables({"NCCL_IB_HCA": "mlx5_9", "RCCL_NET_PLUGIN": "librccl-net.so",
                            "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "0x1"},
                           gpus=2, ib_root=str(ib), ld_conf=str(tmp_path / "none"))
    words = " | ".join(f.text for f in none)
    assert "selects none of this host's RDMA devices (mlx5_0, mlx5_1)" in words
    assert "RCCL's plugin loader reads NCCL_NET_PLUGIN" in words
    assert "both set: the GPUs of this node talk through the network transport" in words
    absent = check_variables({"NCCL_IB_HCA": "mlx5_0"}, gpus=1, ib_root=str(tmp_path / "no"))
    assert "has no RDMA devices" in absent[0].text


def test_dev_shm_free_space_is_statvfs(tmp_path: Path) -> None:
    info, findings = check_shm(str(tmp_path), gpus=8, shm_disabled=False)
    st = os.statvfs(tmp_path)
    assert info.exists and abs(info.free_bytes - st.f_bavail * st.f_frsize) < 64 << 20
    assert (findings == []) == (info.free_bytes >= 1 << 30)
    gone, [missing] = check_shm(str(tmp_path / "absent"), gpus=8, shm_disabled=False)
    assert not gone.exists and missing.severity == "error"


def test_the_run_environment_turns_nccl_debug_on() -> None:
    env, used = run_environment({"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG_FILE": "/x/%h",
                                 "NCCL_DEBUG": "WARN"}, "bwrap")  # fmt: skip
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET,BOOTSTRAP,ENV"
    assert "NCCL_DEBUG_FILE" not in env
    assert used == "lo" and env["NCCL_SOCKET_IFNAME"] == "lo"  # the sandbox has lo only
    kept, none = run_environment({"NCCL_SOCKET_IFNAME": "^docker"}, "bwrap")
    assert none is None and kept["NCCL_SOCKET_IFNAME"] == "^docker"
    host, none = run_environment({"NCCL_SOCKET_IFNAME": "eth0"}, "none")
    assert none is None and host["NCCL_SOCKET_IFNAME"] == "eth0"


# --- NCCL logs -------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "stage", "version", "bootstrap"), [
    ("nccl-nosuch0.txt", "bootstrap", "2.28.9", None),
    ("nccl-857-bootstrap.txt", "bootstrap", "2.10.3+cuda11.3", "eth0:162.30.2.40<0>"),
    ("nccl-1267-channels.txt", "transport setup", "2.19.3+cuda12.3", "ens7:10.128.0.31<0>"),
    ("nccl-188-rings.txt", "transport setup", None, None),
    ("nccl-1936-init-complete.txt", "first collective", None, None),
    ("nccl-h200-world1.txt", "done", "2.28.9+cuda13.0", "eth0:192.0.2.2<0>"),
])  # fmt: skip
def test_the_stage_from_real_nccl_logs(name: str, stage: str, version: str | None,
                                       bootstrap: str | None) -> None:
    reading = read_stage((DATA / name).read_text().splitlines())
    assert (reading.stage, reading.nccl_version, reading.bootstrap) == (stage, version,
                                                                        bootstrap)
    if name == "nccl-nosuch0.txt":
        assert reading.failure == "[rank0]: Bootstrap : no socket interface found"


def test_the_stage_from_the_comm_scripts_own_lines() -> None:
    start = 'ROCMFORGE-START {"check": "%s", "timeout": 60}'
    done = 'ROCMFORGE-CHECK {"check": "%s", "status": "passed"}'
    assert read_stage([start % "import"]).stage == "import"
    assert read_stage([start % "import", done % "import", start % "init"]).stage == "rendezvous"
    log = (DATA / "nccl-1936-init-complete.txt").read_text().splitlines()
    assert read_stage([start % "correctness", *log, done % "correctness"]).stage == "done"
    assert read_stage([]).stage is None


# --- the timed run ---------------------------------------------------------------------------


def _runner() -> Runner:
    bwrap = shutil.which("bwrap")
    return BwrapRunner(bwrap) if bwrap else NoneRunner()


def _torch_that(tmp_path: Path, init: str, all_reduce: str = "pass") -> str:
    """A venv whose ``torch`` has what comm_script.py calls up to its first all_reduce, with
    ``init_process_group`` running ``init`` and ``all_reduce`` running ``all_reduce``."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "torch" / "distributed").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        "__version__ = '0.0-doctor'\n"
        "class device:\n    def __init__(self, *a):\n        pass\n"
        "def full(*a, **k):\n    return None\n"
        "class _Props:\n    name = 'Fake GPU'\n"
        "class cuda:\n    @staticmethod\n    def set_device(i):\n        pass\n"
        "    @staticmethod\n    def get_device_properties(i):\n        return _Props()\n"
    )

    def fn(head: str, body: str) -> str:
        return head + "".join(f"    {line}\n" for line in body.splitlines())

    (site / "torch" / "distributed" / "__init__.py").write_text(
        "import sys, time\n\n"
        + fn("def init_process_group(*args, **kwargs):\n", init)
        + fn("def new_group(*args, **kwargs):\n", "return None")
        + fn("def all_reduce(*args, **kwargs):\n", all_reduce)
    )
    return str(venv / "bin" / "python")


@pytest.mark.slow
def test_a_hang_is_killed_at_the_timeout_naming_the_stage(tmp_path: Path) -> None:
    lines = [ln for ln in (DATA / "nccl-1267-channels.txt").read_text().splitlines()
             if "NCCL" in ln]  # fmt: skip
    python = _torch_that(tmp_path, f"sys.stdout.write({chr(10).join(lines) + chr(10)!r})\n"
                                   "sys.stdout.flush()\ntime.sleep(600)")
    t = time.monotonic()
    report = comm_doctor(environ=_clean_env(), devices=ONE_GPU, python=python,
                         runner=_runner(), workdir=tmp_path / "w", timeout=3)  # fmt: skip
    took = time.monotonic() - t
    assert took < 8, took  # killed at its 3 s, not the sleep's 600
    run = report.run
    assert run.status == "timed out" and 3 <= run.seconds < 6, run
    assert run.stage == "transport setup" and run.detail == (
        "killed at the 3 s timeout in stage transport setup")
    assert run.tail[-1].endswith("NCCL INFO Channel 01/32 :    0")
    assert run.nccl_version == "2.19.3+cuda12.3" and run.bootstrap == "ens7:10.128.0.31<0>"
    assert report.exit_code == 1 and report.advice.startswith("NCCL stalled connecting")
    assert run.log is not None and "Init START" in Path(run.log).read_text()


def test_a_failed_run_gives_ncclS_own_words(tmp_path: Path) -> None:
    """As on the H200: init_process_group returns (torch starts NCCL lazily), the first
    all_reduce fails with NCCL's bootstrap error."""
    text = (DATA / "nccl-nosuch0.txt").read_text()
    python = _torch_that(tmp_path, "return None", f"sys.stderr.write({text!r})\nsys.exit(1)")
    report = comm_doctor(environ=_clean_env(NCCL_SOCKET_IFNAME="nosuch0"), devices=ONE_GPU,
                         python=python, runner=_runner(), workdir=tmp_path / "w",
                         timeout=30)  # fmt: skip
    run = report.run
    assert run.status == "failed" and run.stage == "bootstrap", run
    assert run.detail == ("stopped in stage bootstrap: [rank0]: Bootstrap : no socket "
                          "interface found")
    assert run.failure == "[rank0]: Bootstrap : no socket interface found"
    assert report.advice.startswith("NCCL_SOCKET_IFNAME selects no interface with an address")
    assert report.exit_code == 1 and run.seconds < 30


def test_no_gpu_with_python_is_exit_3_and_bad_input_is_2(tmp_path: Path) -> None:
    if find_devices().kind is None:
        proc = rf("doctor", "--comm", "--python", sys.executable, env=_clean_env())
        assert proc.returncode == 3, proc.stderr
        assert "no GPU found: looked for /dev/kfd" in proc.stdout
        assert proc.stdout.startswith("interfaces (")  # the static report is still there
    for argv in (["--comm", "--timeout", "0"], ["--comm", "--python", str(tmp_path / "nope")],
                 ["--python", sys.executable], ["--comm", "--nodes", "0"],
                 ["--comm", "recipe.toml"]):  # fmt: skip
        proc = rf("doctor", *argv, env=_clean_env())
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
