"""End-to-end realize: real recipes, real sandbox, real store, through the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import venv
from pathlib import Path

import pytest
from conftest import REPO, TINY_RECIPE, rf


def _realize_json(
    recipe: Path, store: Path, *extra: str, env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> dict:  # fmt: skip
    proc = rf("realize", recipe, "--store", store, "--json", *extra, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    return report


@pytest.mark.slow
def test_realize_builds_then_hits_cache(tiny_recipe: Path, store: Path) -> None:
    first = rf("realize", tiny_recipe, "--store", store)
    assert first.returncode == 0, first.stderr
    wheel = Path(first.stdout.strip().splitlines()[-1])
    assert wheel.name == "tiny-0.1-py3-none-any.whl" and wheel.is_file()
    assert (wheel.parent / "build.log.zst").is_file()
    assert (wheel.parent / "derivation.json").is_file()

    log_mtime = (wheel.parent / "build.log.zst").stat().st_mtime_ns
    second = _realize_json(tiny_recipe, store)
    assert second["cached"] is True
    assert second["wheels"] == [str(wheel)]
    assert (wheel.parent / "build.log.zst").stat().st_mtime_ns == log_mtime
    assert list((store / "tmp").iterdir()) == []


@pytest.mark.slow
def test_log_prints_the_build_log(tiny_recipe: Path, store: Path) -> None:
    report = _realize_json(tiny_recipe, store)
    for target in (str(tiny_recipe), report["hash"][:8], report["path"]):
        proc = rf("log", target, "--store", store)
        assert proc.returncode == 0, proc.stderr
        assert "mkwheel: wrote tiny 0.1" in proc.stdout


@pytest.mark.slow
def test_secret_host_variable_is_invisible(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    recipe = tmp_path / "secret.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace(
            "steps = [", 'steps = ["test -z \\"${SECRET_TOKEN:-}\\"", "env | sort", '
        )
    )
    ok = rf("realize", recipe, "--store", store, env={"SECRET_TOKEN": "hunter2"})
    assert ok.returncode == 0, ok.stderr
    log = rf("log", recipe, "--store", store).stdout
    assert "hunter2" not in log
    assert not [ln for ln in log.splitlines() if ln.startswith("SECRET_TOKEN=")]
    assert "SOURCE_DATE_EPOCH=315532800" in log and "PYTHONHASHSEED=0" in log


@pytest.mark.slow
def test_build_cannot_reach_host_loopback(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    connect = f"python -c \\\"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\\\""
    recipe = tmp_path / "net.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace("steps = [", f'steps = ["{connect}", ')
    )
    try:
        proc = rf("realize", recipe, "--store", store)
    finally:
        stop.set()
        t.join()
        server.close()
    assert proc.returncode == 1, proc.stderr
    assert "step 1/2 exited with status 1" in proc.stderr
    assert accepted == []
    assert not (store / "entries").exists() or list((store / "entries").iterdir()) == []


@pytest.mark.slow
def test_failed_build_reports_tail_and_publishes_nothing(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    recipe = tmp_path / "fail.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace(
            "steps = [", 'steps = ["echo line-one; echo the-last-words >&2; exit 3", '
        )
    )
    proc = rf("realize", recipe, "--store", store, "--keep-failed")
    assert proc.returncode == 1
    assert "the-last-words" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "full log:" in proc.stderr and "build directory kept:" in proc.stderr
    assert list((store / "entries").iterdir()) == []
    log = rf("log", recipe, "--store", store)
    assert log.returncode == 0 and "the-last-words" in log.stdout


@pytest.mark.slow
def test_failed_check_publishes_nothing(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    recipe = tmp_path / "check.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace('import = "tiny"', 'import = "tiny.missing"')
    )
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 1, proc.stderr
    assert "check failed" in proc.stderr
    assert list((store / "entries").iterdir()) == []


@pytest.mark.slow
def test_wrong_version_fails_the_check(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    recipe = tmp_path / "version.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace('version = "0.1"', 'version = "0.2"')
    )
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 1
    assert "promises tiny 0.2" in proc.stderr


@pytest.mark.slow
@pytest.mark.stress
def test_three_concurrent_realizes_build_once(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    recipe = tmp_path / "slow.toml"
    recipe.write_text(TINY_RECIPE.format(src=tiny_src).replace("steps = [", 'steps = ["sleep 2", '))
    env = dict(os.environ)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rocmforge",
                "realize",
                str(recipe),
                "--store",
                str(store),
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        reports.extend(json.loads(out))
    assert sorted(r["cached"] for r in reports) == [False, True, True]
    assert len({r["path"] for r in reports}) == 1
    assert len(list((store / "entries").iterdir())) == 1


@pytest.mark.slow
def test_kill_mid_build_leaves_nothing_and_next_realize_succeeds(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    recipe = tmp_path / "killme.toml"
    # RF_SLOW is passthrough: it reaches the build but not the hash.
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src)
        .replace("steps = [", 'steps = ["if [ -n \\"${RF_SLOW:-}\\" ]; then sleep 60; fi", ')
        .replace("[build]\n", '[build]\npassthrough = ["RF_SLOW"]\n')
    )
    env = dict(os.environ, RF_SLOW="1")
    p = subprocess.Popen(
        [sys.executable, "-m", "rocmforge", "realize", str(recipe), "--store", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (store / "tmp").is_dir() and any((store / "tmp").iterdir()):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the build never started")
    time.sleep(1.0)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert list((store / "entries").iterdir()) == []
    report = _realize_json(recipe, store)
    assert report["cached"] is False
    assert Path(report["wheels"][0]).is_file()
    leftovers = [x for x in (store / "tmp").iterdir()]
    assert leftovers == []


@pytest.mark.slow
def test_built_demo_wheel_installs_and_imports_in_a_fresh_venv(
    wheelhouse: Path, tmp_path: Path, store: Path
) -> None:
    report = _realize_json(REPO / "recipes" / "demo.toml", store)
    (wheel,) = report["wheels"]
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    install = subprocess.run(
        [py, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", wheel],
        capture_output=True,
        text=True,
        check=False,
    )
    assert install.returncode == 0, install.stderr
    run = subprocess.run(
        [py, "-c", "import rfdemo; print(rfdemo.add(2, 3), rfdemo.__version__)"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert run.stdout.split() == ["5", "1.0.0"], run.stderr


@pytest.mark.slow
def test_demo_builds_byte_identical_in_two_stores(wheelhouse: Path, tmp_path: Path) -> None:
    a = _realize_json(REPO / "recipes" / "demo.toml", tmp_path / "store-a")
    b = _realize_json(REPO / "recipes" / "demo.toml", tmp_path / "store-b")
    assert a["hash"] == b["hash"]
    assert a["cached"] is False and b["cached"] is False
    wa, wb = Path(a["wheels"][0]), Path(b["wheels"][0])
    assert wa.read_bytes() == wb.read_bytes()


@pytest.mark.slow
def test_out_link_points_at_the_entry(tiny_recipe: Path, store: Path, tmp_path: Path) -> None:
    link = tmp_path / "result"
    report = _realize_json(tiny_recipe, store, "-o", str(link))
    assert link.is_symlink() and link.resolve() == Path(report["path"]).resolve()


def _uv() -> str | None:
    """The uv beside the test interpreter (the [test] extra installs it), else one on PATH."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.is_file() else shutil.which("uv")


@pytest.mark.slow
def test_the_out_link_installs_with_pip_and_uv_as_documented(
    tiny_recipe: Path, store: Path, tmp_path: Path
) -> None:
    """``-o result`` links to the entry directory; ``pip install result/*.whl`` and ``uv pip
    install result/*.whl`` (README, docs/cli.md) install the wheel from it, run as written."""
    uv = _uv()
    if uv is None:
        pytest.skip("uv is not installed (scripts/setup.sh --for-tests installs it)")
    _realize_json(tiny_recipe, store, "-o", "result", cwd=tmp_path)
    for tool in ("pip", "uv"):
        env_dir = tmp_path / f"venv-{tool}"
        venv.create(env_dir, with_pip=tool == "pip")
        python = env_dir / "bin" / "python"
        command = (
            f"{python} -m pip install -q --no-index result/*.whl"
            if tool == "pip"
            else f"{uv} pip install -q --offline --python {python} result/*.whl"
        )
        proc = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True,
                              check=False)  # fmt: skip
        assert proc.returncode == 0, (tool, proc.stderr)
        done = subprocess.run([python, "-c", "import tiny"], capture_output=True, check=False)
        assert done.returncode == 0, (tool, done.stderr)


@pytest.mark.slow
def test_tty_progress_shows_phase_elapsed_and_last_line(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    if not shutil.which("script"):
        pytest.skip("util-linux `script` is needed to give the CLI a terminal")
    recipe = tmp_path / "tty.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace(
            "steps = [", 'steps = ["echo tick-one; sleep 1.5; echo tick-two", '
        )
    )
    cmd = f"{sys.executable} -m rocmforge realize {recipe} --store {store}"
    typescript = tmp_path / "typescript"
    proc = subprocess.run(
        ["script", "-qec", cmd, str(typescript)],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, ROCMFORGE_PIP_ARGS="--no-index"),
    )
    assert proc.returncode == 0, proc.stdout
    screen = typescript.read_text(errors="replace")
    assert "[tiny build 0:00:0" in screen
    assert "] tick-one" in screen
    assert "tiny-0.1-py3-none-any.whl" in screen


@pytest.mark.slow
def test_check_requirements_are_installed_for_the_import_but_not_hashed(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    from test_derivation import _tiny_wheel

    wheels = tmp_path / "wheels"
    _tiny_wheel(wheels, "rfdep", "1.0")
    (tiny_src / "tiny" / "__init__.py").write_text("import rfdep\nVALUE = rfdep.V\n")
    env = {"ROCMFORGE_PIP_ARGS": f"--no-index --find-links {wheels}"}
    base = TINY_RECIPE.format(src=tiny_src)
    without = tmp_path / "without.toml"
    without.write_text(base)
    proc = rf("realize", without, "--store", store, env=env)
    assert proc.returncode == 1 and "check failed" in proc.stderr
    with_reqs = tmp_path / "with.toml"
    with_reqs.write_text(
        base.replace('import = "tiny"', 'import = "tiny"\nrequirements = ["rfdep==1.0"]')
    )
    report = _realize_json(with_reqs, store, env=env)
    assert report["cached"] is False
    plans = [
        json.loads(rf("plan", r, "--store", store, "--json", env=env).stdout)
        for r in (without, with_reqs)
    ]
    assert plans[0]["hash"] == plans[1]["hash"] == report["hash"]


@pytest.mark.slow
def test_a_second_store_reuses_the_host_cache(tiny_recipe: Path, tmp_path: Path) -> None:
    """Host facts (toolchain probe, system manifest, bwrap trial) are cached per user, not per
    store: a realize into a fresh store reads them and scans nothing again."""
    host = tmp_path / "host-cache"
    env = {"ROCMFORGE_HOST_CACHE": str(host)}
    first = rf("realize", tiny_recipe, "--store", tmp_path / "a", env=env)
    assert first.returncode == 0, first.stderr
    names = {"manifest.json", "toolchain.json", "pyprefix.json", "bwrap.json"}
    assert names <= {p.name for p in host.iterdir()}
    assert not names & {p.name for p in (tmp_path / "a" / "cache").iterdir()}
    before = {p.name: p.stat().st_mtime_ns for p in host.iterdir()}
    second = rf("realize", tiny_recipe, "--store", tmp_path / "b", env=env)
    assert second.returncode == 0, second.stderr
    assert {p.name: p.stat().st_mtime_ns for p in host.iterdir()} == before
