"""kill -9 of a realize at seeded instants spread over every phase (resolve, prepare, build,
check, publish, index), of the process alone or of its whole process group.

After each kill: no partial entry in ``entries/``, no surviving build process; after the next
realize: every entry indexed, nothing left pending, the store verifies and the wheel is sound.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, pip_args, rf

from rocmforge.util.hashing import file_blake3

SEED = 20261130
INSTANTS = 32
WITH_ENV = TINY_RECIPE.replace("[build]\n", '[env]\nTINY_FLAG = "{flag}"\n\n[build]\n')

pytestmark = [pytest.mark.slow, pytest.mark.stress]


def _session_members(sid: int) -> list[str]:
    """Return ``pid comm`` of every live process in session ``sid``."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        comm_end = stat.rindex(")")
        fields = stat[comm_end + 2 :].split()
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            out.append(f"{d} {stat[stat.index('(') + 1 : comm_end]}")
    return out


def _survivors(sid: int, wait: float = 5.0) -> list[str]:
    deadline = time.monotonic() + wait
    while True:
        alive = _session_members(sid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _start(recipe: Path, store: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, ROCMFORGE_PIP_ARGS=pip_args())
    env.pop("ROCMFORGE_STORE", None)
    return subprocess.Popen(
        [sys.executable, "-m", "rocmforge", "realize", str(recipe), "--store", str(store)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own session and process group: pid == sid == pgid
    )


def _indexed(store: Path) -> set[str]:
    db = sqlite3.connect(f"file:{store / 'index.sqlite'}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT hash FROM entries")}
    finally:
        db.close()


def test_kill_9_at_seeded_instants_leaves_a_sound_store(tmp_path: Path, tiny_src: Path) -> None:
    store = tmp_path / "store"
    # A cold realize fills the caches; warm ones of other derivations (what every instant
    # below runs) tell how long the phases take together: the fastest of three, so that the
    # instants stay inside a realize when the machine gets less loaded than while it measured
    # (under a parallel suite, a single probe at a busy moment put a third of them past the end)
    spans = []
    for flag in ("cold", "warm1", "warm2", "warm3"):
        probe = tmp_path / f"{flag}.toml"
        probe.write_text(WITH_ENV.format(src=tiny_src, flag=flag))
        started = time.monotonic()
        assert rf("realize", probe, "--store", store).returncode == 0
        spans.append(time.monotonic() - started)
    span = min(spans[1:]) * 1.1
    rng = random.Random(SEED)
    # Stratified: one instant in each of INSTANTS equal slices of the span, so every phase
    # gets its share; odd instants kill the process group, even ones the realize alone.
    instants = [(i + rng.random()) * span / INSTANTS for i in range(INSTANTS)]
    outcomes: list[str] = []
    for i, delay in enumerate(instants):
        recipe = tmp_path / f"r{i}.toml"
        recipe.write_text(WITH_ENV.format(src=tiny_src, flag=str(i)))
        proc = _start(recipe, store)
        time.sleep(delay)
        group = i % 2 == 1
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = proc.wait()
        outcomes.append("finished" if code == 0 else "killed")
        what = f"instant {i} ({delay:.3f} s, {'group' if group else 'pid'})"
        left = _survivors(proc.pid)
        if left and not group:
            # What the build started may outlive realize only while it notices its parent died.
            os.killpg(proc.pid, signal.SIGKILL)
        assert not left, f"{what}: build processes survived: {left}"
        for entry in (store / "entries").iterdir():
            assert (entry / "meta.json").is_file(), f"{what}: partial entry {entry}"
        # The next command: realize the same recipe; it must succeed with a sound wheel.
        again = rf("realize", recipe, "--store", store, "--json")
        assert again.returncode == 0, f"{what}: {again.stderr}"
        wheel = Path(json.loads(again.stdout)[0]["wheels"][0])
        entry_hash = wheel.parent.name[:32]
        assert file_blake3(wheel) == json.loads((wheel.parent / "meta.json").read_text())[
            "wheels"
        ][0]["blake3"]
        entries = {p.name[:32] for p in (store / "entries").iterdir()}
        assert entry_hash in entries
        assert entries <= _indexed(store), f"{what}: unindexed {entries - _indexed(store)}"
        pending = store / "pending"
        assert not pending.exists() or not os.listdir(pending), f"{what}: {os.listdir(pending)}"
    verify = rf("verify", "--store", store, "--json")
    assert verify.returncode == 0, verify.stdout
    assert json.loads(verify.stdout)["entries"] == INSTANTS + 4
    # The instants really were spread over the realize: most kills landed before its end.
    assert outcomes.count("killed") >= INSTANTS * 2 // 3, outcomes
