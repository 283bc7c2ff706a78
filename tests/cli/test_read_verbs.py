"""The read verbs (list, pins, query, show, du, log, audit) where the store or its files are
not what the import-light readers answer: the full branch of each verb repairs, indexes or says
what is wrong; and the lean modules those readers are made of (``leanjson``, ``zstdread``).

That a healthy store is answered without the store classes is tests/cli/test_startup.py's.
The memo's ``plan`` answer (a remembered recipe) is here too: the console entry's one fast path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard
from conftest import pip_args, rf, synthetic_store
from test_enclosing import make_repo
from test_gc import fake_entry, reindex, set_times

from rocmforge.store.store import open_store
from rocmforge.util import leanjson

CONSOLE = """\
import atexit, sys
atexit.register(lambda: sys.stderr.write("\\nMODULES " + " ".join(sorted(sys.modules))))
sys.argv[0] = "rocmforge"
from rocmforge.console import main_entry
main_entry()
"""


def _run(argv: list[str], cwd: Path, extra: dict[str, str] | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ROCMFORGE_STORE", "MAX_JOBS")}
    env.update(extra or {})
    p = subprocess.run(
        [sys.executable, "-c", CONSOLE, *argv], capture_output=True, text=True, cwd=cwd, env=env
    )
    return p.returncode, p.stdout, p.stderr


def _console(
    argv: list[str], cwd: Path, extra: dict[str, str] | None = None
) -> tuple[bool, tuple[int, str, str]]:
    """Run ``argv`` through the console entry: (the memo answered, (exit code, out, err))."""
    code, out, err = _run(argv, cwd, extra)
    err, _, mods = err.rpartition("\nMODULES ")
    return "rocmforge.cli.main" not in mods.split(), (code, out, err)


@pytest.fixture
def roomy_store(tmp_path: Path) -> Path:
    """A store with 300 indexed entries, a pin, a dangling pin and a registered result link."""
    s = synthetic_store(tmp_path / "store")
    root = s.root
    target = root / "entries" / (f"{7:04x}" * 8 + "-p.2x0-1.7")
    target.mkdir(parents=True)
    pins = root / "roots" / "pins"
    pins.mkdir(parents=True)
    (pins / "keep").symlink_to(f"../../entries/{target.name}")
    (pins / "gone").symlink_to("../../entries/nothing-here")
    auto = root / "roots" / "auto"
    auto.mkdir()
    link = tmp_path / "result"
    link.symlink_to(target)
    (auto / "x").symlink_to(link)
    return root


def test_the_table_shows_roots_and_last_use(roomy_store: Path) -> None:
    out = rf("list", "--store", roomy_store).stdout
    line = next(x for x in out.splitlines() if x.startswith(f"{7:04x}" * 3))
    assert line.endswith("  2"), line  # the pin and the result link
    used = next(x for x in out.splitlines() if x.startswith(f"{5:04x}" * 3))
    assert "2027-01-15 08:00" in used  # used/<hash> is newer than the index's last use
    target = f"{7:04x}" * 8 + "-p.2x0-1.7"
    assert rf("pins", "--store", roomy_store).stdout == f"gone -> (dangling)\nkeep -> {target}\n"
    found = rf("query", "--name", "P-1X4", "--store", roomy_store).stdout  # pip's name rules
    assert found.count("\n") > 1 and all("p_1x4" in x.lower() for x in found.splitlines()[1:])


def test_a_store_that_needs_work_is_repaired_by_the_full_branch(
    roomy_store: Path, tmp_path: Path
) -> None:
    argv = ["list", "--store", roomy_store]
    # an entry waiting to be indexed: settled first (it has no files here: set aside)
    pending = roomy_store / "pending" / f"{999:032x}-late-1.0"
    pending.parent.mkdir(exist_ok=True)
    pending.touch()
    assert rf(*argv).returncode == 0 and not pending.exists()
    # a damaged index: set aside and rebuilt, with a warning
    index = roomy_store / "index.sqlite"
    index.write_bytes(b"not a database" * 100)
    for suffix in ("-wal", "-shm"):  # the pages still in the write-ahead log would answer
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    proc = rf(*argv)
    assert proc.returncode == 0 and "set aside" in proc.stderr
    # no store there: exit 3, and nothing created
    proc = rf("list", "--store", tmp_path / "none")
    assert proc.returncode == 3 and not (tmp_path / "none").exists()


DAY = 86400.0
LOG = b"".join(b"step %d: compiling something rather long\n" % i for i in range(2000))


@pytest.fixture
def du_store(tmp_path: Path) -> Path:
    """A store with three entries (two of one package; ages days back, mid-unit so no count
    ticks between two runs), a pin, a failed build's log and diagnosis, a kept build directory,
    source caches and a compiler cache with one namespace."""
    s = open_store(tmp_path / "store")
    now = time.time()
    big = fake_entry(s, "big", "1", size=50_000)
    big2 = fake_entry(s, "big", "2", size=20_000)
    small = fake_entry(s, "small", "1", size=1_000)
    set_times(s, big, created=now - 10.5 * DAY, used=now - 3.5 * DAY)
    set_times(s, big2, created=now - 20.5 * DAY)
    set_times(s, small, created=now - 5.5 * DAY)
    log = small.path / "build.log.zst"
    os.chmod(small.path, 0o755)
    os.chmod(log, 0o644)
    log.write_bytes(zstandard.ZstdCompressor().compress(LOG))
    os.chmod(log, 0o444)
    os.chmod(small.path, 0o555)
    reindex(s)
    root = s.root
    pins = root / "roots" / "pins"
    pins.mkdir(parents=True)
    (pins / "keep").symlink_to(f"../../entries/{big2.path.name}")
    failed = root / "failed"
    h = "f" * 32
    (failed / f"{h}-broken-1.0.log.zst").write_bytes(zstandard.ZstdCompressor().compress(LOG))
    (failed / f"{h}-broken-1.0.json").write_text('{"diagnosis": "a failed step"}')
    kept = root / "tmp" / f"{'e' * 32}.4242.abcd"
    (kept / "src").mkdir(parents=True)
    (kept / "src" / "x.o").write_bytes(b"o" * 7000)
    for p in (failed / f"{h}-broken-1.0.log.zst", failed / f"{h}-broken-1.0.json", kept):
        os.utime(p, (now - 5.5 * 3600, now - 5.5 * 3600))
    sources = root / "sources"
    (sources / "wheels").mkdir()
    (sources / "wheels" / "w-1-py3-none-any.whl").write_bytes(b"w" * 3000)
    (sources / "git-resolved").mkdir()
    (sources / "git-resolved" / "k.json").write_text('{"commit": "' + "a" * 40 + '"}')
    (sources / "trees").mkdir()
    (sources / "trees" / "t1.head").write_text("head\n")
    (sources / "trees" / "t1.files").write_text("files\n" * 50)
    ns = root / "ccache" / "0123456789abcdef"
    (ns / "a").mkdir(parents=True)
    (ns / "a" / "bR").write_bytes(b"r" * 9000)
    (ns / "stats").write_text("0\n")
    return root


def test_du_with_a_shared_compiler_cache(du_store: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared-ccache"
    shutil.copytree(du_store / "ccache", shared)
    proc = rf("du", "--store", du_store, env={"ROCMFORGE_COMPILER_CACHE_DIR": str(shared)})
    assert proc.returncode == 0 and f"at {shared}\n" in proc.stdout
    proc = rf("du", "--store", du_store, env={"ROCMFORGE_COMPILER_CACHE_DIR": "relative/dir"})
    assert proc.returncode != 0 and "relative/dir" in proc.stderr


def test_a_damaged_log_prints_what_it_has_or_fails_once(du_store: Path) -> None:
    entry = next(p for p in (du_store / "entries").iterdir() if "-small-" in p.name)
    log = entry / "build.log.zst"
    os.chmod(entry, 0o755)
    log.chmod(0o644)
    argv = ["log", entry.name[:32], "--store", du_store]
    log.write_bytes(log.read_bytes()[:-40])  # truncated: zstandard prints what it has
    proc = rf(*argv)
    assert proc.returncode == 0 and LOG.decode().startswith(proc.stdout)
    assert proc.stdout != LOG.decode()
    log.write_bytes(b"not zstd at all" * 10)  # zstandard raises: reported once, nothing printed
    proc = rf(*argv)
    assert proc.returncode == 4 and not proc.stdout and proc.stderr.count("ZstdError") == 1


@pytest.mark.parametrize("command", ["du", "log"])
def test_a_meta_json_damaged_in_a_field_neither_prints(du_store: Path, command: str) -> None:
    """meta.json is checked by the full parser's rules (store/metafields.py), not only the
    fields du and log print: an entry the full branch rejects or skips is not printed."""
    entry = next(p for p in (du_store / "entries").iterdir() if "-small-" in p.name)
    os.chmod(entry, 0o755)
    meta = entry / "meta.json"
    meta.chmod(0o644)
    meta.write_text(meta.read_text().replace("{", '{"steps": 7, ', 1))
    proc = rf(command, *([entry.name[:32]] if command == "log" else []), "--store", du_store)
    if command == "log":
        assert proc.returncode != 0 and "steps" in proc.stderr
    else:
        assert proc.returncode == 0 and "-small-" not in proc.stdout


def test_zstd_backend_falls_back_to_the_package(tmp_path: Path) -> None:
    """When the C backend cannot be loaded on its own (here: a copy of the package whose
    ``backend_c`` is not a loadable library, the package told to use its cffi backend), the
    log is decompressed through ``import zstandard``, to the same bytes."""
    pkg = Path(zstandard.__file__).parent
    copy = tmp_path / "site" / "zstandard"
    shutil.copytree(pkg, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for so in copy.glob("backend_c.*"):
        so.write_bytes(b"not a library")
    log = tmp_path / "build.log.zst"
    log.write_bytes(zstandard.ZstdCompressor().compress(LOG))
    code = (
        "import io, sys\n"
        "from rocmforge.util.zstdread import copy_log\n"
        "out = io.BytesIO()\n"
        f"copy_log({str(log)!r}, out)\n"
        "sys.stdout.buffer.write(out.getvalue())\n"
        "sys.stderr.write(sys.modules['zstandard'].backend)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(copy.parent), "PYTHON_ZSTANDARD_IMPORT_POLICY": "cffi"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout == LOG and p.stderr == b"cffi"
    # and the lean load without the package, in a plain interpreter
    code = code.replace("sys.modules['zstandard'].backend", "str('zstandard' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == LOG and p.stderr == b"False"


def test_leanjson_agrees_with_json_on_the_stores_files(du_store: Path) -> None:
    texts = [p.read_bytes() for p in du_store.rglob("*.json") if p.is_file()]
    texts += [
        b'{"a": [1, 2.5e3, -0.0, null, true, "\\u00e9\\ud83d\\ude00"], "b": {}}',
        b" 7 ",
        b"\xef\xbb\xbf[1]",
        '{"x": 1}'.encode("utf-16"),
        b"NaN",
        b"[Infinity, -Infinity]",
    ]
    bad = [b"{", b"", b"[1,]", b"{} x", b'"\x01"', b"\xff", b"[01]"]
    assert len(texts) > 8
    for raw in texts:
        assert repr(leanjson.loads(raw)) == repr(json.loads(raw)), raw
    for raw in bad:
        with pytest.raises(ValueError):
            json.loads(raw)
        with pytest.raises(ValueError):
            leanjson.loads(raw)


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2.5, -0.0, 1e400, true, false, null, "\\u00e9\\ud83d\\ude00"]}', " [] \n",
     '"x"', "NaN", '{"a": 1, "a": 2}', "-Infinity"],
)  # fmt: skip
def test_leanjson_parses_as_json_does(text: str) -> None:
    assert repr(leanjson.loads(text)) == repr(json.loads(text))
    assert leanjson.dumps_str(text) == json.dumps(text)


@pytest.mark.parametrize("text", ["", "{", "[] x", '{"a": 1} {}', "[1,]", "'x'"])
def test_leanjson_rejects_what_json_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        leanjson.loads(text)


PLAN_RECIPE = """\
schema = 1
[package]
name = "vendored"
version = "1.0"
[source]
path = "vendor/vendored"
[build]
steps = ["mkdir vendored && echo 'V = 1' > vendored/__init__.py",
         "python mkwheel.py $OUT vendored 1.0"]
[check]
import = "vendored"
"""


@pytest.mark.slow
def test_plan_of_a_remembered_recipe_is_answered_from_the_memo(tmp_path: Path) -> None:
    """The full ``plan`` of a cached recipe records what it printed (warnings included); the
    next ``plan`` prints the same bytes from the memo while its guards and the host's lint
    facts hold, and falls through to the full CLI when any of them moves."""
    repo = make_repo(tmp_path)  # an enclosing .gitignore leaves lib/ out: a warning to replay
    recipe = repo / "vendored.toml"
    recipe.write_text(PLAN_RECIPE)
    store = tmp_path / "store"
    built = rf("realize", recipe, "--store", store)
    assert built.returncode == 0, built.stderr
    argv = ["plan", str(recipe), "--store", str(store)]
    env = {"ROCMFORGE_PIP_ARGS": pip_args()}
    _, first = _console(argv, tmp_path, env)  # the first plan records what it printed
    assert first[0] == 0 and "cached:     yes" in first[1] and "left out" in first[2]
    fast, again = _console(argv, tmp_path, env)
    assert fast and again == first
    assert not _console([*argv, "--json"], tmp_path, env)[0]
    fast, again = _console([*argv, "--rehash"], tmp_path, env)  # a full resolve, same answer
    assert not fast and again == first
    # another MAX_JOBS on the host: the lints might say otherwise
    fast, again = _console(argv, tmp_path, {**env, "MAX_JOBS": "64"})
    assert not fast and again == first
    # a wheel that moved since publish: the full CLI checks the entry
    wheel = next((store / "entries").glob("*/*.whl"))
    os.utime(wheel, (1.6e9, 1.6e9))
    assert not _console(argv, tmp_path, env)[0]
    # a changed recipe: a new hash, not cached
    recipe.write_text(PLAN_RECIPE + "[env]\nX = \"1\"\n")
    fast, (code, out, _) = _console(argv, tmp_path, env)
    assert not fast and code == 0 and "cached:     no" in out
