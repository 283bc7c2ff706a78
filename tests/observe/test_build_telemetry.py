"""Build telemetry end to end (issue 30): real CMake + Ninja builds of examples/cxx-many.

Two builds of one recipe name (the second after a source edit, so every edge runs again): the
first's ETA comes from the rate so far, the second's from the first's ``.ninja_log``; the record
(``telemetry.json.zst``) is in the entry, digested, pushed and substituted with it; ``show``,
``doctor``, ``trace`` and ``report`` read it; the MAX_JOBS advice is applied when the recipe
leaves MAX_JOBS to rocmforge. Stalls and bad ninja logs use the tiny recipe (no compiler).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import zstandard
from conftest import TINY_RECIPE, cxx_many, rf
from privroot import private_root

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("cmake") is None or shutil.which("ninja") is None,
        reason="cmake and ninja needed (scripts/setup.sh --tests installs them)",
    ),
]

TUS = 4
_ETA = re.compile(
    r"\[(\d+)/(\d+)\] \d+% ETA (\d+):(\d\d) \(from the (previous build|rate so far)\)"
)


def _realize(recipe: Path, store: Path, *args: str, env: dict[str, str] | None = None) -> tuple[
        dict[str, Any], str]:  # fmt: skip
    proc = rf("realize", recipe, "--store", store, "--json", "--no-compiler-cache",
              "--heartbeat", "1", *args, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (report,) = json.loads(proc.stdout)
    return report, proc.stderr


def _edit(src: Path, n: int) -> None:
    tu = src / "src" / "tu_002.cpp"
    tu.write_text(tu.read_text() + f"// edit {n}\n")


def _record(entry: Path) -> dict[str, Any]:
    data = zstandard.ZstdDecompressor().decompress(
        (entry / "telemetry.json.zst").read_bytes(), max_output_size=1 << 28
    )
    out: dict[str, Any] = json.loads(data)
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two builds of cxx-many in one store: the first, then one after an edit of a TU."""
    tmp = tmp_path_factory.mktemp("telemetry")
    recipe, src = cxx_many(tmp, TUS)
    store = tmp / "store"
    env = {"XDG_CONFIG_HOME": str(tmp / "config")}  # node A, which signs what it builds
    gen = rf("key", "generate", "--json", "--name", "node-a", env=env)
    assert gen.returncode == 0, gen.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MAX_JOBS", raising=False)  # left to rocmforge: the advice applies
        first, first_err = _realize(recipe, store, env=env)
        _edit(src, 1)
        second, second_err = _realize(recipe, store, env=env)
    return {"tmp": tmp, "recipe": recipe, "src": src, "store": store, "first": first,
            "first_err": first_err, "second": second, "second_err": second_err, "env": env,
            "public": json.loads(gen.stdout)["public_key"]}  # fmt: skip


def test_progress_eta_from_the_rate_then_from_the_previous_build(builds: dict[str, Any]) -> None:
    first = [m.group(5) for m in _ETA.finditer(builds["first_err"])]
    second = [m.group(5) for m in _ETA.finditer(builds["second_err"])]
    assert first and set(first) == {"rate so far"}, builds["first_err"][-2000:]
    assert second and "previous build" in second, builds["second_err"][-2000:]
    # the status counts ninja's edges: M is the same in every line of one build
    totals = {m.group(2) for m in _ETA.finditer(builds["second_err"])}
    assert len(totals) == 1 and int(totals.pop()) >= TUS + 1  # the TUs, main.cpp, the link


def test_the_record_is_in_the_entry_and_digested(builds: dict[str, Any]) -> None:
    entry = Path(builds["second"]["path"])
    meta = json.loads((entry / "meta.json").read_text())
    assert "telemetry.json.zst" in meta["files"]
    tel = meta["telemetry"]
    assert tel["peak_rss"] > 0 and tel["job_peak_rss"] > 0 and tel["jobs_peak"] >= 1, tel
    assert tel["cpu_seconds"] > 0
    record = _record(entry)
    (log,) = [n for n in record["ninja"] if "tu_000.cpp.o" in n["text"]]
    outputs = {line.split("\t")[3] for line in log["text"].splitlines()[1:] if line}
    assert {f"CMakeFiles/cxxmany.dir/src/tu_{i:03d}.cpp.o" for i in range(TUS)} <= outputs
    assert record["samples"] and max(s[1] for s in record["samples"]) == tel["peak_rss"]
    show = rf("show", builds["second"]["hash"], "--store", builds["store"])
    assert show.returncode == 0 and re.search(r"telemetry\s+peak RSS", show.stdout), show.stdout


def test_max_jobs_advice_is_applied_and_repeated_by_doctor(builds: dict[str, Any]) -> None:
    entry = Path(builds["second"]["path"])
    log = zstandard.ZstdDecompressor().decompress(
        (entry / "build.log.zst").read_bytes(), max_output_size=1 << 28
    ).decode()
    first = Path(builds["first"]["path"]).name
    m = re.search(r"rocmforge: MAX_JOBS=(\d+): compile jobs peaked at .* \(from (\S+)\)", log)
    assert m is not None and m.group(2) == first, log[:3000]
    assert int(m.group(1)) >= 1
    # the first build had no previous one: nothing applied
    log1 = zstandard.ZstdDecompressor().decompress(
        (Path(builds["first"]["path"]) / "build.log.zst").read_bytes(), max_output_size=1 << 28
    ).decode()
    assert "rocmforge: MAX_JOBS=" not in log1
    doctor = rf("doctor", builds["recipe"], "--store", builds["store"])
    assert f"MAX_JOBS={m.group(1)}" in doctor.stdout + doctor.stderr
    assert Path(builds["second"]["path"]).name in doctor.stdout + doctor.stderr


def test_a_recipe_that_sets_max_jobs_keeps_it(builds: dict[str, Any], tmp_path: Path) -> None:
    _edit(builds["src"], 2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAX_JOBS", "1")  # passed through by the recipe: the caller's value stands
        proc = rf("realize", builds["recipe"], "--store", builds["store"], "--no-compiler-cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the text summary line ends with the usage
    assert re.search(r"built in .*, peak RSS [\d.]+ [KMG]B, CPU [\d.]+ s, compile jobs peaked at "
                     r"[\d.]+ [KMG]B \(1 at once\)", proc.stderr), proc.stderr[-2000:]  # fmt: skip
    entry = Path(proc.stdout.strip().splitlines()[-1]).parent
    log = zstandard.ZstdDecompressor().decompress(
        (entry / "build.log.zst").read_bytes(), max_output_size=1 << 28
    ).decode()
    assert "rocmforge: MAX_JOBS=" not in log
    tel = json.loads((entry / "meta.json").read_text())["telemetry"]
    assert tel["jobs_peak"] == 1, tel  # ninja -j 1 ran one compile at a time


def test_trace_has_every_edge_on_a_free_slot_and_memory(builds: dict[str, Any],
                                                        tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "trace.json"
    proc = rf("trace", builds["second"]["hash"], "--store", builds["store"], "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout)
    assert said["hash"] == builds["second"]["hash"] and said["bytes"] == out.stat().st_size
    events = json.loads(out.read_text())["traceEvents"]
    record = _record(Path(builds["second"]["path"]))
    (log,) = [n for n in record["ninja"] if "tu_000.cpp.o" in n["text"]]
    lines = [ln.split("\t") for ln in log["text"].splitlines()[1:] if ln]
    edges = [e for e in events if e.get("cat") == "edge"]
    assert sorted(e["name"] for e in edges if e["pid"] == edges[0]["pid"]) == sorted(
        ln[3] for ln in lines
    )
    by_slot: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in edges:
        by_slot.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_slot.values():  # two edges never share a slot at one time
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    assert len(by_slot) >= 2  # cmake --build -j 2 ran two at once
    assert {e["name"] for e in events if e.get("cat") == "phase"} >= {"build", "check"}
    memory = [e for e in events if e["ph"] == "C" and e["name"] == "memory (MB)"]
    assert memory and max(next(iter(e["args"].values())) for e in memory) > 0


def test_trace_and_report_of_an_entry_without_telemetry(tmp_path: Path, tiny_src: Path) -> None:
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_RECIPE.format(src=tiny_src))
    store = tmp_path / "store"
    proc = rf("realize", recipe, "--store", store, "--json", env={"ROCMFORGE_TELEMETRY": "off"})
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    assert not (Path(report["path"]) / "telemetry.json.zst").exists()
    for verb, out in (("trace", "t.json"), ("report", "r.html")):
        got = rf(verb, report["hash"], "--store", store, "-o", tmp_path / out)
        assert got.returncode == 1, (verb, got.stderr)
        assert "telemetry" in got.stderr and "Traceback" not in got.stderr
        assert len(got.stderr.strip().splitlines()) == 1, got.stderr
        assert not (tmp_path / out).exists()


def test_report_is_one_self_contained_page(builds: dict[str, Any], tmp_path: Path) -> None:
    page = _report(builds, tmp_path)
    text = page.read_text()
    assert "<script" not in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched
    assert "<svg" in text and "tu_000.cpp.o" in text  # the timeline and the slowest edges
    assert "libcxxmany.so" in text  # the wheel's size by library


def _report(builds: dict[str, Any], tmp_path: Path) -> Path:
    page = tmp_path / "report.html"
    proc = rf("report", builds["second"]["hash"], "--store", builds["store"], "-o", page)
    assert proc.returncode == 0, proc.stderr
    return page


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing in CI: scripts/setup.sh --tests installs it")
        pytest.skip("chromium not installed (apt-get install chromium)")
    return found


def _render(page: Path, shot: Path) -> str:
    """Screenshot ``page`` in headless Chromium with no network; its log (console lines)."""
    home = shot.parent / "chromium-home"
    home.mkdir(exist_ok=True)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={home}", "--proxy-server=127.0.0.1:9",
             "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
             "--window-size=1200,900", f"--screenshot={shot}"]  # fmt: skip
    env = {**os.environ, "HOME": str(home)}
    # Chromium run as root makes <its install dir>/extensions (/usr/lib/chromium/extensions),
    # which changed the host and the system manifest's hash under every later test: /usr is a
    # private overlay for it (tests/privroot.py).
    with private_root(("/usr",)) as root:
        proc = root.run([_chromium(), *flags, page.as_uri()], capture_output=True, text=True,
                        timeout=120, env=env, check=False)  # fmt: skip
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    return proc.stderr


def _console_errors(log: str) -> list[str]:
    return [ln for ln in log.splitlines()
            if "CONSOLE" in ln or "Uncaught" in ln or "Failed to load resource" in ln]  # fmt: skip


def _timeline_pixels(shot: Path) -> int:
    """How many pixels of the screenshot have the timeline's first bar colour (#4e79a7)."""
    from pngread import read_rgb

    width, height, rgb = read_rgb(shot)
    want = bytes((0x4E, 0x79, 0xA7))
    return sum(1 for i in range(0, width * height * 3, 3) if rgb[i : i + 3] == want)


def test_report_renders_in_headless_chromium(builds: dict[str, Any], tmp_path: Path) -> None:
    page = _report(builds, tmp_path)
    log = _render(page, tmp_path / "report.png")
    assert _console_errors(log) == [], log[-2000:]
    assert _timeline_pixels(tmp_path / "report.png") > 500  # the timeline's bars are drawn
    # the checks can fail: a page with a console error and without the timeline is caught
    bad = tmp_path / "bad.html"
    bad.write_text(
        re.sub(r"<svg.*?</svg>", "", page.read_text(), count=1, flags=re.S).replace(
            "</body>", "<script>console.error('boom')</script></body>"
        )
    )
    log = _render(bad, tmp_path / "bad.png")
    assert _console_errors(log), log[-2000:]


@pytest.mark.slow
def test_telemetry_is_pushed_and_substituted_and_gives_the_eta_there(
    builds: dict[str, Any], tmp_path: Path
) -> None:
    env_a, public = builds["env"], builds["public"]
    cache = f"file://{tmp_path / 'cache'}"
    pushed = rf("push", cache, builds["second"]["hash"], "--store", builds["store"], env=env_a)
    assert pushed.returncode == 0, pushed.stderr
    # node B: another store, the same recipe, substituted, not built
    store_b = tmp_path / "store-b"
    env_b = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"), "ROCMFORGE_TRUSTED_KEYS": public}
    recipe_b, src_b = cxx_many(tmp_path, TUS)
    _edit(src_b, 1)  # the tree of A's second build
    got, err = _realize(recipe_b, store_b, "--cache", cache, env=env_b)
    assert got["hash"] == builds["second"]["hash"] and got["substituted"] == cache, err[-3000:]
    entry_a, entry_b = Path(builds["second"]["path"]), Path(got["path"])
    assert (entry_b / "telemetry.json.zst").read_bytes() == (
        entry_a / "telemetry.json.zst"
    ).read_bytes()
    # B's first own build of the recipe estimates from A's record
    _edit(src_b, 3)
    _, err = _realize(recipe_b, store_b, env=env_b)
    assert "(from the previous build)" in err, err[-2000:]


def _tiny(tmp_path: Path, tiny_src: Path, steps: str) -> Path:
    recipe = tmp_path / "tiny.toml"
    text = TINY_RECIPE.format(src=tiny_src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]', f"steps = {steps}"
    )
    recipe.write_text(text)
    return recipe


def test_a_stall_is_warned_naming_what_runs(tmp_path: Path, tiny_src: Path) -> None:
    recipe = _tiny(tmp_path, tiny_src, '["sleep 3", "python mkwheel.py $OUT tiny 0.1"]')
    proc = rf("realize", recipe, "--store", tmp_path / "store", "--stall-after", "1s")
    assert proc.returncode == 0, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if "no output for" in ln]
    assert len(warnings) == 1, proc.stderr  # said once per stall
    assert re.search(r"still running: sleep 3 \(\d+s, RSS [\d.]+ [KMG]?B\)", warnings[0]), warnings


def test_stall_timeout_fails_the_build_and_keeps_the_log(tmp_path: Path, tiny_src: Path) -> None:
    recipe = _tiny(tmp_path, tiny_src, '["echo started", "sleep 60"]')
    store = tmp_path / "store"
    proc = rf("realize", recipe, "--store", store, "--stall-timeout", "2s", timeout=50)
    assert proc.returncode == 1, proc.stderr
    assert "stalled" in proc.stderr and "sleep 60" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    log = rf("log", recipe, "--store", store)
    assert "started" in log.stdout, log.stdout + log.stderr


def test_a_foreign_or_truncated_ninja_log_is_one_warning(tmp_path: Path, tiny_src: Path) -> None:
    (tiny_src / "a").mkdir()
    (tiny_src / "a" / ".ninja_log").write_text("# ninja log v4\n1\t2\t0\tx.o\tdeadbeef\n")
    (tiny_src / "b").mkdir()
    (tiny_src / "b" / ".ninja_log").write_bytes(b"# ninja log v5\n1\t2\t0\tx.o\tdead")
    recipe = _tiny(tmp_path, tiny_src, '["python mkwheel.py $OUT tiny 0.1"]')
    proc = rf("realize", recipe, "--store", tmp_path / "store", "--json")
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if ".ninja_log" in ln and "warning" in ln]
    assert len(warned) == 2 and any("a/.ninja_log" in w for w in warned), proc.stderr
    assert any("b/.ninja_log" in w for w in warned), proc.stderr
