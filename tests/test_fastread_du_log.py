"""``du`` and ``log HASH`` on the console's read path: the same bytes as the full CLI, faster.

As in ``test_fastread.py``: each form runs through the console entry and through
``rocmforge.cli.main.main`` in fresh interpreters on the same store; stdout, stderr and the exit
code
must agree, and the console's loaded modules say whether the read path answered.
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
from conftest import build_tiny_entry
from test_fastread import CONSOLE, FULL, _both, _console, _run
from test_gc import fake_entry, reindex, set_times

from rocmforge.store.store import open_store
from rocmforge.util import leanjson

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


@pytest.mark.parametrize(
    "argv", [["du"], ["du", "--top", "2"], ["du", "--top=0"], ["du", "--top", "1"]]
)
def test_du_on_the_read_path_prints_what_the_full_cli_prints(
    du_store: Path, argv: list[str]
) -> None:
    fast, (code, out, err) = _both([*argv, "--store", str(du_store)], du_store.parent)
    assert fast and code == 0 and not err
    for part in ("packages:", "big (2 entries)", "rooted: pin keep", "used 3d ago",
                 "failed builds", "failed log: " + "f" * 32 + "-broken-1.0  5h old",
                 "kept build: " + "e" * 32 + ".4242.abcd", "sources: requirement wheels",
                 "sources: git resolve caches", "sources: tree stat caches",
                 "(2 files, 1 toolchains) at " + str(du_store / "ccache")):  # fmt: skip
        if argv != ["du"] and part.startswith(("big", "rooted", "used", "failed l", "kept")):
            continue  # fewer lines under --top
        assert part in out, (part, out)
    if argv == ["du"]:  # a failed log is a file: measured, not 0 B (tree_size of a file)
        assert " 0 B  failed log" not in out and "0 B  sources: tree" not in out
    if argv[1:] == ["--top", "2"]:
        assert out.count("  used ") == 2
    # the store found from the current directory, and --store before the command
    assert _both(argv, du_store.parent)[0]
    assert _both(["--store", str(du_store), *argv], Path("/"))[0]


@pytest.mark.slow
def test_du_with_a_shared_compiler_cache(du_store: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared-ccache"
    shutil.copytree(du_store / "ccache", shared)
    argv = ["du", "--store", str(du_store)]
    fast, full = _console(argv, tmp_path, {"ROCMFORGE_COMPILER_CACHE_DIR": str(shared)})
    assert fast and f"at {shared}\n" in full[1]
    assert full == _run_full(argv, tmp_path, {"ROCMFORGE_COMPILER_CACHE_DIR": str(shared)})
    # a size to check (a regular expression: the full CLI's), a relative directory (an error),
    # a path pathlib prints otherwise: the full CLI answers
    for env in ({"ROCMFORGE_COMPILER_CACHE_SIZE": "1k"},
                {"ROCMFORGE_COMPILER_CACHE_SIZE": "lots"},
                {"ROCMFORGE_COMPILER_CACHE_DIR": "relative/dir"},
                {"ROCMFORGE_COMPILER_CACHE_DIR": f"{shared}/"}):  # fmt: skip
        fast, got = _console(argv, tmp_path, env)
        assert not fast and got == _run_full(argv, tmp_path, env), env


def _run_full(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    return _run(FULL, argv, cwd, env)


@pytest.mark.parametrize(
    "argv",
    [
        ["du", "--json"],
        ["--json", "du"],
        ["du", "--top", "-1"],  # argparse's error
        ["du", "--top", "x"],
        ["du", "--to", "2"],  # an abbreviation: argparse's business
        ["du", "extra"],
        ["du", "--top"],
    ],
)
def test_other_du_forms_fall_through(du_store: Path, argv: list[str]) -> None:
    fast, _ = _both([*argv, "--store", str(du_store)], du_store.parent)
    assert not fast


def test_du_with_an_unreadable_resolve_cache(du_store: Path) -> None:
    (du_store / "sources" / "git-resolved" / "bad.json").write_text("{not json")
    (du_store / "sources" / "git-resolved" / "list.json").write_text("[1]")
    fast, (_, out, _) = _both(["du", "--store", str(du_store)], du_store.parent)
    assert fast and "sources: git resolve caches" in out  # the good one only, both ways


def test_du_of_a_damaged_entry_falls_through(du_store: Path) -> None:
    entry = next(p for p in (du_store / "entries").iterdir() if "-small-" in p.name)
    os.chmod(entry, 0o755)
    meta = entry / "meta.json"
    os.chmod(meta, 0o644)
    meta.write_text(meta.read_text().replace('"small"', '"other"'))
    argv = ["du", "--store", str(du_store)]
    fast, (code, out, _) = _both(argv, du_store.parent)
    assert not fast and code == 0 and "small" not in out  # gc leaves it alone: so does du


def test_log_by_hash_and_prefix_on_the_read_path(du_store: Path) -> None:
    entry = next(p for p in (du_store / "entries").iterdir() if "-small-" in p.name)
    h = entry.name[:32]
    for target in (h, h[:4], h[:12]):
        argv = ["log", target, "--store", str(du_store)]
        fast, (code, out, err) = _both(argv, du_store.parent)
        assert fast and code == 0 and not err and out == LOG.decode()


@pytest.mark.parametrize(
    "target",
    [
        "0" * 32,  # no such entry: the full CLI's error
        "abc",  # too short a prefix
        "f" * 32,  # a failed build's log: the full CLI finds it
        "small",  # a package name
        "tiny.toml",  # a recipe
        "entries",  # a path
    ],
)
def test_other_log_targets_fall_through(du_store: Path, target: str) -> None:
    fast, _ = _both(["log", target, "--store", str(du_store)], du_store.parent)
    assert not fast


@pytest.mark.slow
def test_other_log_forms_fall_through(du_store: Path, tmp_path: Path) -> None:
    entry = next(p for p in (du_store / "entries").iterdir() if "-small-" in p.name)
    h = entry.name[:32]
    for argv in (["log", h, "--job-dir", str(tmp_path)], ["log", h, "--cache", "file:///x"],
                 ["log", h, "--json"], ["log", "--", h], ["log"], ["log", h, h]):  # fmt: skip
        fast, _ = _both([*argv, "--store", str(du_store)], du_store.parent)
        assert not fast, argv
    (tmp_path / h[:6]).touch()  # a file named like the prefix: the full CLI decides
    assert not _both(["log", h[:6], "--store", str(du_store)], tmp_path)[0]
    # a damaged entry: the full CLI reports it
    os.chmod(entry, 0o755)
    (entry / "meta.json").chmod(0o644)
    (entry / "meta.json").write_text("{")
    fast, (code, _, err) = _both(["log", h, "--store", str(du_store)], du_store.parent)
    assert not fast and code != 0 and "meta.json" in err


def test_a_damaged_log_falls_through_with_nothing_printed(du_store: Path) -> None:
    entry = next(p for p in (du_store / "entries").iterdir() if "-small-" in p.name)
    log = entry / "build.log.zst"
    os.chmod(entry, 0o755)
    log.chmod(0o644)
    argv = ["log", entry.name[:32], "--store", str(du_store)]
    log.write_bytes(log.read_bytes()[:-40])  # truncated: zstandard prints what it has
    fast, (code, out, _) = _both(argv, du_store.parent)
    assert fast and code == 0 and LOG.decode().startswith(out) and out != LOG.decode()
    log.write_bytes(b"not zstd at all" * 10)  # zstandard raises: the full CLI reports it, once
    fast, (code, out, err) = _both(argv, du_store.parent)
    assert not fast and code == 4 and not out and err.count("ZstdError") == 1


def test_the_read_path_of_du_and_log_imports_almost_nothing(du_store: Path) -> None:
    entry = next(p for p in (du_store / "entries").iterdir() if "-small-" in p.name)
    heavy = {"argparse", "dataclasses", "typing", "re", "pathlib", "json", "contextlib",
             "zstandard", "platform", "rocmforge.cli.main", "rocmforge.errors",
             "rocmforge.store.store", "rocmforge.build.ccache"}  # fmt: skip
    for argv in (["du"], ["log", entry.name[:32]]):
        code, _, err = _run(CONSOLE, [*argv, "--store", str(du_store)], du_store.parent)
        mods = set(err.rpartition("\nMODULES ")[2].split())
        assert code == 0 and "rocmforge.cli.fastread" in mods
        assert not heavy & mods, (argv, heavy & mods)
    assert "zstandard.backend_c" in mods  # the log's decompressor, loaded on its own


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


@pytest.mark.slow
def test_du_and_log_of_a_real_build(tmp_path: Path) -> None:
    """A real build's entry: its log by full hash and by prefix, and ``du``, both ways."""
    built = build_tiny_entry(tmp_path)
    store = built["store"]
    h = built["entry"][:32]
    for target in (h, h[:6]):
        fast, (code, out, err) = _both(["log", target, "--store", str(store)], tmp_path)
        assert fast and code == 0 and not err and "tiny" in out
    # du prints each entry's age ("used 5s ago"): days back, mid-unit, so no count ticks
    # between the two runs _both compares (a fresh entry's seconds did, under load)
    s = open_store(store)
    entry = s.resolve(h)
    now = time.time()
    set_times(s, entry, created=now - 2.5 * DAY, used=now - 1.5 * DAY)
    reindex(s)
    fast, (code, out, _) = _both(["du", "--store", str(store)], tmp_path)
    assert fast and code == 0 and built["entry"] in out and "used 1d ago" in out
    assert not _both(["log", str(built["recipe"]), "--store", str(store)], tmp_path)[0]


@pytest.mark.parametrize("command", ["du", "log"])
def test_a_meta_json_damaged_in_a_field_neither_prints_falls_through(
    du_store: Path, command: str
) -> None:
    """meta.json is checked by the full parser's rules (store/metafields.py), not only the
    fields du and log print: an entry the full command rejects or skips is the full CLI's."""
    entry = next(p for p in (du_store / "entries").iterdir() if "-small-" in p.name)
    os.chmod(entry, 0o755)
    meta = entry / "meta.json"
    meta.chmod(0o644)
    meta.write_text(meta.read_text().replace("{", '{"steps": 7, ', 1))
    argv = [command, *([entry.name[:32]] if command == "log" else []), "--store", str(du_store)]
    fast, (code, out, err) = _both(argv, du_store.parent)
    assert not fast
    if command == "log":
        assert code != 0 and "steps" in err
    else:
        assert code == 0 and "-small-" not in out
