"""Tests for rocmforge.build.sandbox: real bubblewrap, real processes."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from rocmforge.build.sandbox import (
    LEVELS,
    BwrapRunner,
    Mount,
    NoneRunner,
    Runner,
    RunResult,
    detect_runner,
)
from rocmforge.errors import SandboxError

BASE_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}


def make_runner(level: str) -> Runner:
    try:
        return detect_runner(level)
    except SandboxError:
        if level == "bwrap" and shutil.which("bwrap") is None:
            pytest.skip("bubblewrap (bwrap) is not installed on this machine")
        raise


@pytest.fixture(params=LEVELS)
def runner(request: pytest.FixtureRequest) -> Runner:
    return make_runner(request.param)


@pytest.fixture
def bwrap() -> Runner:
    return make_runner("bwrap")


def run(
    runner: Runner,
    tmp_path: Path,
    argv: Sequence[str],
    *,
    mounts: Sequence[Mount] = (),
    cwd: str = "/",
    env: Mapping[str, str] = BASE_ENV,
    timeout: float | None = 30,
    on_line: Callable[[str], None] | None = None,
) -> tuple[RunResult, bytes]:
    log_path = tmp_path / f"log-{uuid.uuid4().hex}"
    with open(log_path, "ab") as log:
        result = runner.run(
            argv, cwd=cwd, env=env, mounts=mounts, timeout=timeout, log=log, on_line=on_line
        )
    return result, log_path.read_bytes()


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline:
            found.append(int(entry.name))
    return found


def wait_gone(token: str, seconds: float = 3.0) -> list[int]:
    stop = time.monotonic() + seconds
    while (left := processes_with(token)) and time.monotonic() < stop:
        time.sleep(0.05)
    return left


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


# --- every level --------------------------------------------------------------------------


def test_env_is_exactly_what_was_given(
    runner: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    env = {**BASE_ENV, "ROCMFORGE_PROBE": "a b=c"}
    result, out = run(runner, tmp_path, ["/usr/bin/env", "-0"], env=env)
    assert result.returncode == 0, out
    seen = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
    assert seen == env
    assert b"hunter2" not in out


def test_returncode_and_umask(runner: Runner, tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        result, out = run(runner, tmp_path, sh("umask; exit 3"))
    finally:
        os.umask(old)
    assert result.returncode == 3
    assert not result.timed_out
    assert out.strip() == b"0022"


def test_network(runner: Runner, tmp_path: Path, listener: int) -> None:
    probe = (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {listener}), timeout=3).close()\n"
        "except OSError as exc:\n"
        "    print('blocked:', exc); sys.exit(7)\n"
        "print('connected')\n"
    )
    result, out = run(runner, tmp_path, ["/usr/bin/python3", "-c", probe])
    if runner.level == "none":
        # Proves the probe can tell: without a network namespace the connection succeeds.
        assert (result.returncode, out) == (0, b"connected\n")
        assert runner.warning and "none" in runner.warning
    else:
        assert result.returncode == 7, out
        assert out.startswith(b"blocked:")
        assert runner.warning is None


@pytest.mark.slow
def test_timeout_kills_the_whole_tree(runner: Runner, tmp_path: Path) -> None:
    token = f"rfgrandchild-{uuid.uuid4().hex}"
    work = Mount(host=tmp_path / "w", inside="/w", writable=True)
    work.host.mkdir()
    beat = f"{runner.sandbox_path(work)}/beat"
    script = (
        f"sh -c 'while :; do date +%s%N > \"$1\"; sleep 0.1; done' {token} {beat} &\n"
        "echo started\n"
        "sleep 300\n"
    )
    result, out = run(runner, tmp_path, sh(script), mounts=[work], timeout=1.5)
    assert result.timed_out
    # Killed at the timeout, not when `sleep 300` ends (a bound on behaviour, not on speed).
    assert 1.5 <= result.seconds < 100
    assert b"started" in out
    assert wait_gone(token) == []
    beat_file = work.host / "beat"
    assert beat_file.exists(), "the grandchild never ran"
    before = beat_file.read_bytes()
    time.sleep(0.4)
    assert beat_file.read_bytes() == before, "the grandchild is still writing"


def test_keyboard_interrupt_kills_tree_and_reraises(runner: Runner, tmp_path: Path) -> None:
    token = f"rfinterrupt-{uuid.uuid4().hex}"

    def on_line(line: str) -> None:
        if line == "started":
            raise KeyboardInterrupt

    script = f"sh -c 'sleep 300' {token} &\nsleep 0.3\necho started\nsleep 300\n"
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run(runner, tmp_path, sh(script), on_line=on_line, timeout=60)
    # The interrupt ended the run, not the 60 s timeout (behaviour, not speed).
    assert time.monotonic() - start < 30
    assert wait_gone(token) == []


# --- output ---------------------------------------------------------------------------------


def test_log_appends_both_streams_and_on_line_gets_lines(tmp_path: Path) -> None:
    log_path = tmp_path / "build.log"
    log_path.write_bytes(b"HEADER\n")
    lines: list[str] = []
    script = (
        "echo one; echo two >&2; printf 'bad \\377\\r\\n'; "
        "head -c 300000 /dev/zero | tr '\\0' x; echo; printf last"
    )
    with open(log_path, "ab") as log:
        result = NoneRunner().run(
            sh(script),
            cwd="/",
            env=BASE_ENV,
            mounts=(),
            timeout=30,
            log=log,
            on_line=lines.append,
        )
    assert result.returncode == 0
    data = log_path.read_bytes()
    assert data.startswith(b"HEADER\none\ntwo\nbad \xff\r\n")
    assert data.endswith(b"x" * 300000 + b"\nlast")
    assert lines[:3] == ["one", "two", "bad \ufffd"]
    assert lines[4] == "last" and len(lines) == 5
    assert set(lines[3]) == {"x"}  # over-long line kept as its tail, not dropped


@pytest.mark.slow
def test_output_is_streamed_while_running(bwrap: Runner, tmp_path: Path) -> None:
    seen: dict[str, float] = {}

    def on_line(line: str) -> None:
        seen[line] = time.monotonic()

    run(bwrap, tmp_path, sh("echo first; sleep 1; echo second"), on_line=on_line)
    # Buffered output would deliver both lines together at the end.
    assert seen["second"] - seen["first"] > 0.7


@pytest.mark.slow
def test_term_ignored_escalates_to_kill(tmp_path: Path) -> None:
    token = f"rfstubborn-{uuid.uuid4().hex}"
    script = f"trap '' TERM; sh -c 'sleep 300' {token} & sleep 300"
    result, _ = run(NoneRunner(kill_grace=0.5), tmp_path, sh(script), timeout=0.5)
    assert result.timed_out
    assert 1.0 <= result.seconds < 4
    assert wait_gone(token) == []


# --- bwrap filesystem ---------------------------------------------------------------------


def test_bwrap_system_readonly_host_invisible_caps_dropped(bwrap: Runner, tmp_path: Path) -> None:
    secret = tmp_path / "hostsecret"
    secret.write_text("x")
    probe_name = f"rf-probe-{uuid.uuid4().hex}"
    home = Path.home()
    assert any(home.iterdir()), "needs a non-empty host home to prove it is hidden"
    script = (
        f"touch /usr/{probe_name} 2>/dev/null && echo usr-writable\n"
        f"touch /usr/bin/{probe_name} 2>/dev/null && echo usr-bin-writable\n"
        f"touch /etc/{probe_name} 2>/dev/null && echo etc-writable\n"
        f"touch /etc/passwd 2>/dev/null && echo passwd-writable\n"
        f"test -e {secret} && echo host-visible\n"
        f"ls -A {home} 2>/dev/null | grep -q . && echo home-visible\n"
        f"touch /{probe_name} 2>/dev/null && echo root-writable\n"
        f"mkdir -p {home}/{probe_name} 2>/dev/null && echo home-writable\n"
        "test -e /work && echo work-visible\n"
        "grep CapEff /proc/self/status\n"
        "echo done\n"
    )
    result, out = run(bwrap, tmp_path, sh(script))
    assert result.returncode == 0, out
    assert out.decode().split("\n") == ["CapEff:\t0000000000000000", "done", ""]
    assert not Path("/usr", probe_name).exists()
    assert not Path("/etc", probe_name).exists()


def test_bwrap_mounts_rw_ro_nested_and_relocated(bwrap: Runner, tmp_path: Path) -> None:
    rw = tmp_path / "rw"
    ro = tmp_path / "ro"
    rw.mkdir()
    ro.mkdir()
    (ro / "input.txt").write_text("from host\n")
    # The nested mount is listed first; it must still end up on top of its parent.
    mounts = [
        Mount(host=ro, inside="/build/src"),
        Mount(host=rw, inside="/build", writable=True),
    ]
    assert [bwrap.sandbox_path(m) for m in mounts] == ["/build/src", "/build"]
    script = (
        "cat input.txt && echo made > /build/out.txt && "
        "(touch /build/src/new 2>/dev/null && echo ro-writable; true)"
    )
    result, out = run(bwrap, tmp_path, sh(script), mounts=mounts, cwd="/build/src")
    assert result.returncode == 0, out
    assert out == b"from host\n"
    assert (rw / "out.txt").read_text() == "made\n"
    assert not (ro / "new").exists()


def test_bwrap_private_tmp(bwrap: Runner, tmp_path: Path) -> None:
    name = f"rf-tmp-{uuid.uuid4().hex}"
    result, out = run(bwrap, tmp_path, sh(f"echo x > /tmp/{name} && cat /tmp/{name}"))
    assert (result.returncode, out) == (0, b"x\n")
    assert not Path("/tmp", name).exists()


def test_bwrap_compiler_and_python_work(bwrap: Runner, tmp_path: Path) -> None:
    src = tmp_path / "src"
    out_dir = tmp_path / "out"
    src.mkdir()
    out_dir.mkdir()
    (src / "hello.c").write_text(
        '#include <stdio.h>\nint main(void) { puts("hello from the sandbox"); return 0; }\n'
    )
    mounts = [
        Mount(host=src, inside="/src"),
        Mount(host=out_dir, inside="/out", writable=True),
    ]
    script = (
        "cc -O2 -o /out/hello /src/hello.c && /out/hello && "
        "python3 -c 'import ssl, sqlite3, sys; print(sys.version_info[0])'"
    )
    result, out = run(bwrap, tmp_path, sh(script), mounts=mounts)
    assert result.returncode == 0, out
    assert out == b"hello from the sandbox\n3\n"
    assert (out_dir / "hello").stat().st_mode & 0o777 == 0o755


def test_bwrap_python_outside_usr_mounted_by_caller(bwrap: Runner, tmp_path: Path) -> None:
    prefix = Path(sys.base_prefix)
    if prefix.parts[:2] == ("/", "usr"):
        pytest.skip("the test interpreter lives under /usr; nothing to mount")
    interp = prefix / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    result, out = run(
        bwrap,
        tmp_path,
        [str(interp), "-c", "import json, sys; print(json.dumps(sys.base_prefix))"],
        mounts=[Mount(host=prefix, inside=str(prefix))],
    )
    assert result.returncode == 0, out
    assert out.decode().strip() == f'"{prefix}"'


# --- none specifics ----------------------------------------------------------------------


def test_none_uses_host_paths(tmp_path: Path) -> None:
    mount = Mount(host=tmp_path, inside="/build", writable=True)
    assert NoneRunner().sandbox_path(mount) == str(tmp_path)
    assert BwrapRunner("/usr/bin/bwrap").sandbox_path(mount) == "/build"


# --- errors and detection -------------------------------------------------------------------


def test_spawn_failures_become_sandbox_errors(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="nonexistent"):
        run(NoneRunner(), tmp_path, ["/nonexistent/program"])
    with pytest.raises(SandboxError, match="no-such-dir"):
        run(NoneRunner(), tmp_path, ["true"], cwd=str(tmp_path / "no-such-dir"))
    missing = Mount(host=tmp_path / "missing", inside="/m")
    with pytest.raises(SandboxError, match="missing"):
        run(BwrapRunner("/usr/bin/bwrap"), tmp_path, ["true"], mounts=[missing])


def test_detect_runner_default_prefers_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed on this machine")
    assert detect_runner().level == "bwrap"
    assert detect_runner("auto").level == "bwrap"
    assert isinstance(detect_runner("bwrap"), BwrapRunner)
    assert detect_runner("none").level == "none"


def test_auto_never_falls_back_silently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # A bwrap that exists but cannot create namespaces, as on hosts that forbid them.
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))

    with pytest.raises(SandboxError, match=r"'bwrap'.*No permissions to create new namespace"):
        detect_runner("bwrap")
    for auto in (None, "auto"):
        with pytest.raises(SandboxError, match=r"no sandbox available.*--sandbox none"):
            detect_runner(auto)
    fake.unlink()
    with pytest.raises(SandboxError, match=r"'bwrap'.*not found.*--sandbox none"):
        detect_runner()
    chosen = detect_runner("none")  # only by name, and it says so
    assert isinstance(chosen, NoneRunner)
    assert chosen.warning is not None
    assert "NO ISOLATION" in chosen.warning and "no network" in chosen.warning


def test_unshare_level_is_gone_with_a_reason() -> None:
    with pytest.raises(SandboxError, match=r"'unshare' was removed.*host filesystem"):
        detect_runner("unshare")


def test_detect_runner_rejects_unknown_level() -> None:
    with pytest.raises(SandboxError, match=r"unknown sandbox level 'docker'.*auto, bwrap, none"):
        detect_runner("docker")


def test_a_successful_bwrap_probe_is_remembered_by_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.which("bwrap")
    if real is None:
        pytest.skip("bubblewrap (bwrap) is not installed on this machine")
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    wrapper = bindir / "bwrap"
    wrapper.write_text(f'#!/bin/sh\necho x >> {calls}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    cache = tmp_path / "cache" / "bwrap.json"

    def probes() -> int:
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    assert detect_runner(probe_cache=cache).level == "bwrap" and probes() == 1
    assert detect_runner("bwrap", probe_cache=cache).level == "bwrap" and probes() == 1
    assert detect_runner().level == "bwrap" and probes() == 2  # no cache given: always probed
    os.utime(wrapper, ns=(1, 1))  # another binary (by stat): probed again
    assert detect_runner(probe_cache=cache).level == "bwrap" and probes() == 3
    # A failing bwrap is never remembered: each call probes and reports it.
    wrapper.write_text(f"#!/bin/sh\necho x >> {calls}\necho broken >&2\nexit 1\n")
    for n in (4, 5):
        with pytest.raises(SandboxError, match="broken"):
            detect_runner(probe_cache=cache)
        assert probes() == n
