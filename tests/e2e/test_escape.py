"""The sandbox escape suite: hostile builds and sources against every selectable sandbox level.

Each probe is a real recipe built by the real CLI. ``bwrap`` must contain every probe: host
secrets (``/etc/shadow``, ``/root``, host ``/tmp``, environment variables) stay unreadable, the
system (``/usr``, ``/etc``, ``/root``, host ``/tmp``, the hostname) stays unwritten, loopback and
DNS stay unreachable. ``none`` promises no isolation, so the destructive probes are not run
there; instead it must be loud (a warning), recorded (``meta.json``) and never chosen by itself.
At every level: no secret variable reaches the build, nothing the build leaves in ``$OUT`` but
regular files is ever read by the host, no build process outlives a ``kill -9`` of realize, a
weaker entry never answers a stronger request, and a ``.gitmodules`` cannot reach host
repositories or smuggle options into git.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DATA, TINY_RECIPE, commit_all, git, rf

from rocmforge.build.sandbox import LEVELS, detect_runner
from rocmforge.errors import SandboxError, SourceError
from rocmforge.sources.git import ensure_mirror


def _selectable() -> list[str]:
    found = []
    for level in LEVELS:
        try:
            detect_runner(level)
        except SandboxError:
            continue
        found.append(level)
    return found


SELECTABLE = _selectable()
WHEEL = "tiny-0.1-py3-none-any.whl"


@pytest.fixture(params=SELECTABLE)
def level(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def recipe_with(tmp_path: Path, src: Path, steps: list[str], extra: str = "") -> Path:
    path = tmp_path / f"r-{uuid.uuid4().hex[:8]}.toml"
    text = TINY_RECIPE.format(src=src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]', f"steps = {json.dumps(steps)}"
    )
    path.write_text(text.replace("[build]\n", f"[build]\n{extra}"))
    return path


def entries(store: Path) -> list[str]:
    d = store / "entries"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def meta_of(wheel: str) -> dict[str, object]:
    data = json.loads((Path(wheel).parent / "meta.json").read_text())
    assert isinstance(data, dict)
    return data


def processes_running(arg: str) -> list[int]:
    """Processes that have ``arg`` as one whole argument (not inside a longer script)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if arg.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def host_wheel(tmp_path: Path, tiny_src: Path) -> Path:
    """A valid tiny wheel made on the host, where no sandbox could see it."""
    hidden = tmp_path / "host-only"
    hidden.mkdir()
    subprocess.run(
        [sys.executable, str(DATA / "mkwheel.py"), str(hidden), "tiny", "0.1"],
        cwd=tiny_src,
        check=True,
        capture_output=True,
    )
    return hidden / WHEEL


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


# --- isolation: bwrap contains everything, none is loud and recorded -------------------------


@pytest.mark.slow
def test_bwrap_contains_every_probe(
    tiny_src: Path, tmp_path: Path, store: Path, listener: int
) -> None:
    if "bwrap" not in SELECTABLE:
        pytest.skip("bubblewrap is not usable on this machine")
    token = uuid.uuid4().hex[:12]
    secret = tmp_path / "host-secret"
    secret.write_text("s3cret")
    host_tmp = Path("/tmp") / f"rf-escape-secret-{token}"
    host_tmp.write_text("s3cret")
    host_root = Path("/root") / f"rf-escape-secret-{token}"
    host_root.write_text("s3cret")
    planted = [Path(d) / f"rf-escape-{token}" for d in ("/usr", "/etc", "/root", "/tmp")]
    before = socket.gethostname()
    probe = f"""
e() {{ echo "ESCAPED $1"; }}
cat /etc/shadow >/dev/null 2>&1 && e read-etc-shadow
cat {host_root} >/dev/null 2>&1 && e read-root
ls -A /root 2>/dev/null | grep -q rf-escape-secret && e list-root
cat {secret} >/dev/null 2>&1 && e read-host-file
cat {host_tmp} >/dev/null 2>&1 && e read-host-tmp
for d in /usr /etc /root /tmp; do touch "$d/rf-escape-{token}" 2>/dev/null; done
python3 -c "import socket; socket.sethostname('rf-escape')" 2>/dev/null && e hostname
python3 -c "import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=2)" \\
  2>/dev/null && e loopback
python3 -c "import socket; socket.getaddrinfo('example.com', 443)" 2>/dev/null && e dns
test -n "${{SECRET_TOKEN:-}}" && e env-secret
echo PROBES-DONE
"""
    (tiny_src / "probe.sh").write_text(probe)
    recipe = recipe_with(tmp_path, tiny_src, ["sh probe.sh", "python mkwheel.py $OUT tiny 0.1"])
    try:
        proc = rf("realize", recipe, "--store", store, "--sandbox", "bwrap",
                  env={"SECRET_TOKEN": "hunter2"})  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        log = rf("log", recipe, "--store", store).stdout
        assert "PROBES-DONE" in log
        assert [ln for ln in log.splitlines() if ln.startswith("ESCAPED")] == []
        assert [p for p in planted if p.exists()] == []
        assert socket.gethostname() == before
        assert "hunter2" not in log
    finally:
        host_tmp.unlink()
        host_root.unlink()
        for p in planted:
            if p.exists():
                p.unlink()


@pytest.mark.slow
def test_none_is_loud_recorded_and_never_automatic(
    tiny_recipe: Path, store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = rf("realize", tiny_recipe, "--store", store, "--sandbox", "none", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "warning: sandbox level 'none': NO ISOLATION" in proc.stderr
    (report,) = json.loads(proc.stdout)
    assert report["sandbox"] == "none"
    assert meta_of(report["wheels"][0])["sandbox"] == "none"
    # The removed level is refused, and auto does not fall back when bwrap is unusable.
    assert rf("realize", tiny_recipe, "--store", store, "--sandbox", "unshare").returncode == 2
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bwrap").write_text("#!/bin/sh\necho 'bwrap: no namespaces' >&2\nexit 1\n")
    (bin_dir / "bwrap").chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    other = tmp_path / "other.toml"
    other.write_text(tiny_recipe.read_text().replace('version = "0.1"', 'version = "0.1"\n# b'))
    auto = rf("realize", other, "--store", store, env={"PATH": path})
    assert auto.returncode == 3, auto.stderr
    assert "no sandbox available" in auto.stderr and "--sandbox none" in auto.stderr
    assert len(entries(store)) == 1


# --- $OUT: the host reads only regular files the build made ----------------------------------

OUT_TRICKS = {
    "symlink-to-host-wheel": ["ln -s {host} $OUT/" + WHEEL],
    "fifo": ["mkfifo $OUT/" + WHEEL],
    "directory": ["mkdir $OUT/" + WHEEL],
    "device": ["mknod $OUT/" + WHEEL + " c 1 5 || echo NO-MKNOD"],
    "out-replaced-by-symlink": ["rm -rf $OUT && ln -s {hostdir} $OUT"],
}


@pytest.mark.parametrize("trick", sorted(OUT_TRICKS))
@pytest.mark.slow
def test_out_tricks_are_refused(
    trick: str, level: str, tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    host = host_wheel(tmp_path, tiny_src)
    steps = [s.format(host=host, hostdir=host.parent) for s in OUT_TRICKS[trick]]
    recipe = recipe_with(tmp_path, tiny_src, steps)
    proc = rf("realize", recipe, "--store", store, "--sandbox", level, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert entries(store) == []
    expected = {
        "symlink-to-host-wheel": "is a symlink, not a regular file",
        "fifo": "is a FIFO, not a regular file",
        "directory": "is a directory, not a regular file",
        "device": "is a character device, not a regular file",
        "out-replaced-by-symlink": "is a symlink, not a directory",
    }[trick]
    if level == "bwrap" and trick == "device":
        expected = "wrote no wheel"  # no capability to make a device at all
    if level == "bwrap" and trick == "out-replaced-by-symlink":
        expected = "exited with status"  # $OUT is a mount point: it cannot be replaced
    assert expected in proc.stderr, proc.stderr


# --- kill -9 of realize: no build process survives ----------------------------------------


@pytest.mark.parametrize("when", ["starting", "running"])
@pytest.mark.slow
def test_no_build_process_survives_kill_9(
    when: str, level: str, tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    token = f"rfsurvivor-{uuid.uuid4().hex}"
    steps = [
        f"setsid sh -c 'sleep 300; :' {token}-detached & "
        f"sh -c 'sleep 300; :' {token}-child & sleep 300"
    ]
    recipe = recipe_with(tmp_path, tiny_src, steps)
    p = subprocess.Popen(
        [sys.executable, "-m", "rocmforge", "realize", str(recipe), "--store", str(store),
         "--sandbox", level],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        # "starting": as soon as the step's command line exists (the runner is starting it);
        # "running": once both background processes run.
        def ready() -> bool:
            if when == "starting":
                return bool(processes_with(token))
            return all(processes_running(f"{token}-{k}") for k in ("detached", "child"))

        while not ready():
            assert time.monotonic() < deadline, "the build never started its processes"
            assert p.poll() is None, "realize ended before its build started"
            time.sleep(0.1)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    deadline = time.monotonic() + 10
    while (left := processes_with(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:  # do not leave them behind for the next test
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"build processes survived kill -9 of realize at level {level}"


# --- weaker builds never answer stronger requests ----------------------------------------


@pytest.mark.slow
def test_entry_built_without_sandbox_is_rebuilt_for_a_bwrap_request(
    tiny_recipe: Path, store: Path
) -> None:
    if "bwrap" not in SELECTABLE:
        pytest.skip("bubblewrap is not usable on this machine")
    weak = rf("realize", tiny_recipe, "--store", store, "--sandbox", "none")
    assert weak.returncode == 0, weak.stderr
    wheel = weak.stdout.strip().splitlines()[-1]
    assert meta_of(wheel)["sandbox"] == "none"
    # No options: the memo fast path answers repeats; it must not serve the weaker entry.
    strong = rf("realize", tiny_recipe, "--store", store)
    assert strong.returncode == 0, strong.stderr
    assert "cached" not in strong.stderr.splitlines()[-1]
    assert "weaker than the requested 'bwrap'" in strong.stderr
    assert strong.stdout.strip().splitlines()[-1] == wheel  # same path, entry replaced
    assert meta_of(wheel)["sandbox"] == "bwrap"
    assert len(entries(store)) == 1
    again = rf("realize", tiny_recipe, "--store", store)
    assert again.returncode == 0 and again.stderr.strip().endswith("cached"), again.stderr
    explicit = rf("realize", tiny_recipe, "--store", store, "--sandbox", "bwrap", "--json")
    assert json.loads(explicit.stdout)[0]["cached"] is True
    # A stronger entry answers a weaker request.
    weaker = rf("realize", tiny_recipe, "--store", store, "--sandbox", "none", "--json")
    assert json.loads(weaker.stdout)[0]["cached"] is True


# --- submodule URLs: only the recipe names local repositories -----------------------------


def _private_repo(tmp_path: Path) -> Path:
    private = tmp_path / "srv" / "private_repo"
    private.mkdir(parents=True)
    git(private, "init", "-q")
    (private / "SECRET.txt").write_text("host-only secret\n")
    commit_all(private, "private")
    return private


def _super_with_url(tmp_path: Path, tiny_src: Path, private: Path, url: str) -> tuple[Path, str]:
    top = tmp_path / "top"
    top.mkdir()
    for item in tiny_src.iterdir():
        os.rename(item, top / item.name)
    git(top, "init", "-q")
    git(top, "submodule", "add", "-q", str(private), "vendor/private")
    git(top, "config", "-f", ".gitmodules", "submodule.vendor/private.url", url)
    return top, commit_all(top, "with a submodule")


SUBMODULE_URLS = {
    "absolute-path": "{private}",
    "file-url": "file://{private}",
    "relative-to-local-super": "../srv/private_repo",
    "option-like": "--upload-pack=touch {marker}",
}


@pytest.mark.parametrize("kind", sorted(SUBMODULE_URLS))
@pytest.mark.slow
def test_submodule_url_tricks_are_refused(
    kind: str, level: str, tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    private = _private_repo(tmp_path)
    marker = tmp_path / "pwned"
    url = SUBMODULE_URLS[kind].format(private=private, marker=marker)
    top, commit = _super_with_url(tmp_path, tiny_src, private, url)
    recipe = tmp_path / "sub.toml"
    allow = "allow-local-submodules = true\n" if kind == "option-like" else ""
    recipe.write_text(
        TINY_RECIPE.replace('path = "{src}"',
                            f'git = "{top}"\nrev = "{commit}"\nsubmodules = true\n{allow}')
    )  # fmt: skip
    proc = rf("realize", recipe, "--store", store, "--sandbox", level)
    assert proc.returncode == 2, proc.stderr
    if kind == "option-like":
        # Even where local URLs are allowed, a URL is never read as an option: refused up front
        # (and every URL handed to git follows `--` besides).
        assert "starts with '-'" in proc.stderr, proc.stderr
    else:
        assert "only the recipe may name a repository on this machine" in proc.stderr
        assert "allow-local-submodules = true" in proc.stderr
    assert not marker.exists()
    assert entries(store) == []
    cached = list((store / "sources" / "git").glob("*.git"))
    assert len(cached) == 1, cached  # the recipe's own repository only


@pytest.mark.slow
def test_allowed_local_submodule_is_used(
    level: str, tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    private = _private_repo(tmp_path)
    top, commit = _super_with_url(tmp_path, tiny_src, private, str(private))
    recipe = tmp_path / "sub.toml"
    recipe.write_text(
        TINY_RECIPE.replace('path = "{src}"', f'git = "{top}"\nrev = "{commit}"\n'
                            "submodules = true\nallow-local-submodules = true\n")
        .replace('steps = ["', 'steps = ["test -f vendor/private/SECRET.txt", "')
    )  # fmt: skip
    proc = rf("realize", recipe, "--store", store, "--sandbox", level)
    assert proc.returncode == 0, proc.stderr


def test_git_gets_urls_after_double_dash(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="repository '-oops' does not exist"):
        ensure_mirror("-oops", "0" * 40, tmp_path / "cache")
