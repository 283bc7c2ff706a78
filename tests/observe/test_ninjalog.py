"""``.ninja_log`` v5/v6/v7 as real ninja binaries write them: Debian's ``ninja-build`` and the
PyPI ``ninja`` wheels of the wheelhouse (1.11.1.1, 1.11.1.4: v5; 1.13.0: v7), read finished and
while ninja writes it; a foreign or truncated log is refused with a message naming it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from conftest import WHEELHOUSE

from rocmforge.observe.ninjalog import (
    LiveNinjaLog,
    NinjaLogError,
    parse_ninja_log,
    read_ninja_log,
)

#: wheel version -> the log version that ninja writes
WHEELS = {"1.11.1.1": 5, "1.11.1.4": 5, "1.13.0": 7}

BUILD = """\
rule s
  command = sleep $t && touch $out
build a: s
  t = 0.05
build b: s
  t = 0.05
build c: s a
  t = 0.05
"""


def _wheel_ninja(version: str, dest: Path) -> Path:
    """The ninja binary of the PyPI wheel ``ninja==version`` in the wheelhouse, unpacked."""
    found = sorted(WHEELHOUSE.glob(f"ninja-{version}-*.whl"))
    if not found:
        pytest.skip(f"no ninja {version} wheel in {WHEELHOUSE} (scripts/setup.sh fetches it)")
    with zipfile.ZipFile(found[0]) as z:
        member = next(
            n for n in z.namelist()
            if n.endswith(("/bin/ninja", ".data/scripts/ninja"))
            and z.read(n)[:4] == b"\x7fELF"
        )  # fmt: skip
        target = dest / version / "ninja"
        target.parent.mkdir(parents=True)
        target.write_bytes(z.read(member))
    target.chmod(target.stat().st_mode | stat.S_IXUSR)
    return target


def _ninjas(tmp: Path) -> list[tuple[str, Path, int]]:
    out = []
    debian = shutil.which("ninja")
    if debian:
        out.append(("debian", Path(debian), 5))
    for v, log_version in WHEELS.items():
        out.append((v, _wheel_ninja(v, tmp), log_version))
    return out


@pytest.mark.parametrize("which", ["debian", *WHEELS])
def test_real_ninja_logs_parse(tmp_path: Path, which: str) -> None:
    if which == "debian":
        if shutil.which("ninja") is None:
            pytest.skip("Debian's ninja-build is not installed")
        binary, expect = Path(str(shutil.which("ninja"))), 5
    else:
        binary, expect = _wheel_ninja(which, tmp_path), WHEELS[which]
    work = tmp_path / "w"
    work.mkdir()
    (work / "build.ninja").write_text(BUILD)
    subprocess.run([str(binary), "-j2"], cwd=work, check=True, capture_output=True)
    text, log = read_ninja_log(str(work / ".ninja_log"))
    assert text.startswith(f"# ninja log v{expect}\n")
    assert log.version == expect
    assert {e.output for e in log.edges} == {"a", "b", "c"}
    by = {e.output: e for e in log.edges}
    assert by["c"].start_ms >= by["a"].end_ms  # c waits for a
    assert all(e.ms >= 40 for e in log.edges)
    # a second run that rebuilds one output: the last line of it wins
    (work / "a").unlink()
    subprocess.run([str(binary), "-j2"], cwd=work, check=True, capture_output=True)
    _, again = read_ninja_log(str(work / ".ninja_log"))
    assert {e.output for e in again.edges} == {"a", "b", "c"}
    assert len(again.runs()) == 3


def test_live_log_follows_a_running_ninja(tmp_path: Path) -> None:
    binary = _wheel_ninja("1.13.0", tmp_path)
    work = tmp_path / "w"
    work.mkdir()
    (work / "build.ninja").write_text(
        "rule s\n  command = sleep $t && touch $out\n"
        "build fast: s\n  t = 0.05\nbuild slow: s\n  t = 1.5\n"
    )
    live = LiveNinjaLog(str(work / ".ninja_log"))
    proc = subprocess.Popen([str(binary), "-j2"], cwd=work, stdout=subprocess.DEVNULL)
    try:
        seen: list[str] = []
        stop = time.monotonic() + 1.2
        while time.monotonic() < stop and not seen:
            seen += [e.output for e in live.poll()]
            time.sleep(0.05)
        assert seen == ["fast"], "ninja flushes each finished edge"
        assert proc.wait(timeout=10) == 0
        assert [e.output for e in live.poll()] == ["slow"]
        assert live.version == 7 and live.error is None
    finally:
        proc.kill()
        proc.wait()


def test_foreign_and_truncated_logs_are_refused(tmp_path: Path) -> None:
    good = "# ninja log v5\n1\t20\t1796238233778820418\tout.o\t36a4176a1d22daaf\n"
    assert parse_ninja_log(good, where="x").edges[0].ms == 19
    for text, words in (
        ("# ninja log v4\n1\t2\t3\tout\tcommand\n", "version 4"),
        ("# ninja log v8\n", "version 8"),
        ("ninja_deps\x00\x00", "not a ninja log"),
        ("", "empty"),
        (good[:-10], "truncated"),
        ("# ninja log v6\n1\t2\tout.o\n", "line 2"),
        ("# ninja log v7\n5\t2\t0\tout.o\tzz\n", "line 2"),
    ):
        with pytest.raises(NinjaLogError) as err:
            parse_ninja_log(text, where="/b/.ninja_log")
        assert "/b/.ninja_log" in str(err.value) and words in str(err.value), text
    link = tmp_path / ".ninja_log"
    os.symlink("/etc/passwd", link)
    with pytest.raises(NinjaLogError, match="cannot open"):
        read_ninja_log(str(link))  # a link the build made is never followed
