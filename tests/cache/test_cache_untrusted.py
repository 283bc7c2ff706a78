"""A cache is untrusted input, all of it (issue 34 point 5): real keys, real stores, a real
file:// cache and the real OCI registry.

The signed statement lists every file of the entry with its digest, and a substitution writes
exactly that set: a manifest that appends a file (``sitecustomize.py`` naming a blob the cache
holds), leaves one out (``build.log.zst``) or renames one is refused. A FIFO in place of a blob
is refused without blocking; a manifest or envelope nested 100,000 levels is refused as such
(exit 1, one line naming the cache); a substitution killed earlier leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import rf
from test_oci import registry  # noqa: F401 (the registry fixture)

from rocmforge.cache.manifest import FileRef, Manifest, parse_manifest
from rocmforge.cache.urls import open_backend


def _signed_push(recipe: Path, tmp_path: Path, cache: str) -> tuple[dict, dict[str, str]]:
    """Build ``recipe`` with a fresh key, push it to ``cache``; return the realize report and
    the environment of a teammate trusting only that key."""
    env_a = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    proc = rf("key", "generate", "--json", "--name", "builder-a", env=env_a)
    assert proc.returncode == 0, proc.stderr
    key = json.loads(proc.stdout)
    proc = rf("realize", recipe, "--store", tmp_path / "store-a", "--json", env=env_a)
    assert proc.returncode == 0, proc.stderr
    (built,) = json.loads(proc.stdout)
    proc = rf("push", cache, "--store", tmp_path / "store-a", env=env_a)
    assert proc.returncode == 0, proc.stderr
    env_b = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"),
             "ROCMFORGE_TRUSTED_KEYS": key["public_key"]}  # fmt: skip
    return dict(built), env_b


def _substitute(recipe: Path, store: Path, env: dict[str, str], cache: str, timeout: float = 120):
    return rf(
        "realize", recipe, "--store", store, "--json", "--cache", cache,
        "--require-substitute", env=env, timeout=timeout,
    )  # fmt: skip


def _tamper(cache: str, hash: str, edit) -> Manifest:  # type: ignore[no-untyped-def]
    """Replace the cache's manifest of ``hash`` by ``edit(files)``; return the original."""
    backend = open_backend(cache)
    raw = backend.get_manifest(hash)
    assert raw is not None
    original = parse_manifest(raw)
    files = edit(list(original.files))
    changed = Manifest(original.hash, original.name, original.version, tuple(files),
                       original.meta)  # fmt: skip
    backend.replace_manifest(hash, changed.to_bytes())
    return original


def _append_sitecustomize(files: list[FileRef]) -> list[FileRef]:
    donor = next(f for f in files if f.name == "derivation.json")  # any blob the cache holds
    return [*files, FileRef("sitecustomize.py", donor.sha256, donor.size)]


def _drop_build_log(files: list[FileRef]) -> list[FileRef]:
    return [f for f in files if f.name != "build.log.zst"]


def _rename_build_log(files: list[FileRef]) -> list[FileRef]:
    return [FileRef("build-log.zst", f.sha256, f.size) if f.name == "build.log.zst" else f
            for f in files]  # fmt: skip


TAMPERINGS = {
    "appended": (_append_sitecustomize, "sitecustomize.py: not covered by the signed statement"),
    "missing": (_drop_build_log, "build.log.zst: named by the signed statement but absent"),
    "renamed": (_rename_build_log, "build-log.zst: not covered by the signed statement"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", "oci"])
def test_a_manifest_adding_dropping_or_renaming_a_file_is_refused(
    tiny_recipe: Path, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    cache = (
        f"file://{tmp_path / 'cache'}"
        if kind == "file"
        else request.getfixturevalue("registry").url()
    )
    built, env_b = _signed_push(tiny_recipe, tmp_path, cache)
    statement = json.loads((Path(built["path"]) / "provenance.json").read_bytes())
    listed = statement["predicate"]["buildDefinition"]["internalParameters"]["entryFiles"]
    assert {f["name"] for f in listed} >= {"derivation.json", "build.log.zst"}
    assert not {f["name"] for f in listed} & {"provenance.json", "provenance.dsse.json"}
    original = None
    for i, (edit, reason) in enumerate(TAMPERINGS.values()):
        original = _tamper(cache, built["hash"], edit)
        store = tmp_path / f"store-b{i}"
        proc = _substitute(tiny_recipe, store, env_b, cache)
        assert proc.returncode == 1, proc.stderr
        assert (
            f"cache {cache}: refused tiny 0.1 ({built['hash']}): the entry's files differ "
            f"from its signed statement ({reason})" in proc.stderr
        ), proc.stderr
        assert "Traceback" not in proc.stderr
        assert not list((store / "entries").glob("*")), "nothing is published"
        assert not [n for n in os.listdir(store / "tmp") if not n.endswith(".lock")]
        backend = open_backend(cache)
        backend.replace_manifest(built["hash"], original.to_bytes())
    # The control: the untampered manifest is substituted, with exactly the signed files.
    proc = _substitute(tiny_recipe, tmp_path / "store-ok", env_b, cache)
    assert proc.returncode == 0, proc.stderr
    (got,) = json.loads(proc.stdout)
    names = set(os.listdir(got["path"])) - {"meta.json", "provenance.json", "provenance.dsse.json"}
    assert names == {f["name"] for f in listed}


def test_an_old_statement_covers_only_what_it_names(tmp_path: Path, monkeypatch) -> None:
    """A statement from before the file list (subjects and byproducts only) still substitutes,
    and a file it does not name is refused all the same."""
    from test_cache import _signed_synthetic_entry
    from test_cache_faults import Warnings

    from rocmforge.cache.substitute import substitute
    from rocmforge.store.store import open_store

    url = f"file://{tmp_path / 'cache'}"
    want, public = _signed_synthetic_entry(url, tmp_path, 4096)  # an old-style statement
    monkeypatch.setenv("ROCMFORGE_TRUSTED_KEYS", public)
    original = _tamper(url, want.hash, _append_sitecustomize)
    store = open_store(tmp_path / "store")
    reporter = Warnings()
    assert substitute(store, [url], want, reporter) is None
    (said,) = reporter.said
    assert (
        "sitecustomize.py: not covered by the signed statement; it is an older statement "
        "without a file list, which covers only its wheels, its byproducts and "
        "derivation.json)" in said
    ), said
    open_backend(url).replace_manifest(want.hash, original.to_bytes())
    entry = substitute(store, [url], want, Warnings())
    assert entry is not None and not (entry.path / "sitecustomize.py").exists()


def _blob_path(cache: Path, manifest: Manifest, name: str) -> Path:
    ref = next(f for f in manifest.files if f.name == name)
    return cache / "blobs" / "sha256" / ref.sha256


@pytest.mark.slow
def test_a_fifo_in_place_of_a_blob_is_refused_without_blocking(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "cache"
    cache = f"file://{cache_dir}"
    built, env_b = _signed_push(tiny_recipe, tmp_path, cache)
    raw = open_backend(cache).get_manifest(built["hash"])
    assert raw is not None
    manifest = parse_manifest(raw)
    wheel = next(f.name for f in manifest.files if f.name.endswith(".whl"))
    blob = _blob_path(cache_dir, manifest, wheel)
    kept = tmp_path / "kept-blob"
    os.chmod(blob, 0o644)
    os.rename(blob, kept)
    os.mkfifo(blob)  # nobody ever writes it: an open() without O_NONBLOCK waits forever
    store = tmp_path / "store-b"
    started = time.monotonic()
    proc = _substitute(tiny_recipe, store, env_b, cache, timeout=60)
    assert time.monotonic() - started < 30
    assert proc.returncode == 1, proc.stderr
    assert f"cannot read blob {blob.name}: is a FIFO, not a regular file" in proc.stderr, (
        proc.stderr
    )
    assert not list((store / "entries").glob("*"))
    # A manifest that is a FIFO is refused too, as such.
    mpath = cache_dir / "entries" / f"{built['hash']}.json"
    mkept = tmp_path / "kept-manifest"
    os.rename(mpath, mkept)
    os.mkfifo(mpath)
    proc = _substitute(tiny_recipe, store, env_b, cache, timeout=60)
    assert proc.returncode == 1 and "is not a regular file" in proc.stderr, proc.stderr
    os.unlink(mpath)
    os.rename(mkept, mpath)
    os.unlink(blob)
    os.rename(kept, blob)
    proc = _substitute(tiny_recipe, store, env_b, cache)  # the control
    assert proc.returncode == 0, proc.stderr


_KILLED_CHILD = """
import sys, time
from pathlib import Path
from rocmforge.store.store import open_store
store = open_store(Path(sys.argv[1]))
bd = store.new_build_dir(sys.argv[2]).__enter__()
(bd.path / "entry").mkdir()
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_killed_substitution_leaves_nothing_behind(tiny_recipe: Path, tmp_path: Path) -> None:
    cache = f"file://{tmp_path / 'cache'}"
    built, env_b = _signed_push(tiny_recipe, tmp_path, cache)
    store = tmp_path / "store-b"
    # A substitution's build dir held by a process then killed with SIGKILL, as a substitution
    # hung on a FIFO and killed by hand was.
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CHILD, str(store), built["hash"]],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.kill()
    child.wait()
    assert [n for n in os.listdir(store / "tmp")], "the killed one left its dir and lock"
    proc = _substitute(tiny_recipe, store, env_b, cache)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(store / "tmp") == [], os.listdir(store / "tmp")


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.slow
def test_a_manifest_nested_100000_levels_is_refused_naming_the_cache(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "cache"
    cache = f"file://{cache_dir}"
    built, env_b = _signed_push(tiny_recipe, tmp_path, cache)
    mpath = cache_dir / "entries" / f"{built['hash']}.json"
    good = mpath.read_bytes()
    os.chmod(mpath, 0o644)
    mpath.write_bytes(DEEP)
    proc = _substitute(tiny_recipe, tmp_path / "store-b", env_b, cache)
    assert proc.returncode == 1, proc.stderr
    assert "internal error" not in proc.stderr and "RecursionError" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert (
        f"cache {cache}: refused tiny 0.1 ({built['hash']}): the manifest is not JSON "
        "(nested too deep to be parsed)" in line
    ), proc.stderr
    ls = rf("cache", "ls", cache, env=env_b)
    assert "Traceback" not in ls.stderr and "internal error" not in ls.stderr, ls.stderr
    mpath.write_bytes(good)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", "oci"])
def test_an_envelope_nested_100000_levels_is_refused_as_such(
    tiny_recipe: Path, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    cache = (
        f"file://{tmp_path / 'cache'}"
        if kind == "file"
        else request.getfixturevalue("registry").url()
    )
    built, env_b = _signed_push(tiny_recipe, tmp_path, cache)
    deep = tmp_path / "deep.json"
    deep.write_bytes(DEEP)
    sha = hashlib.sha256(DEEP).hexdigest()
    backend = open_backend(cache)
    backend.put_blob(sha, deep)

    def swap(files: list[FileRef]) -> list[FileRef]:
        return [FileRef(f.name, sha, len(DEEP)) if f.name == "provenance.dsse.json" else f
                for f in files]  # fmt: skip

    _tamper(cache, built["hash"], swap)
    proc = _substitute(tiny_recipe, tmp_path / "store-b", env_b, cache)
    assert proc.returncode == 1, proc.stderr
    assert "internal error" not in proc.stderr and "RecursionError" not in proc.stderr
    assert (
        f"cache {cache}: refused tiny 0.1 ({built['hash']}): the signature envelope is "
        "not JSON (nested too deep to be parsed)" in proc.stderr
    ), proc.stderr


@pytest.fixture
def small_cache_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 12 MB tmpfs (needs root, as CI runs; skipped otherwise), filled up to its last
    bytes: the disk of the cache, not of the store."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    mount = shutil.which("mount") or "mount"
    proc = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mnt)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
    try:
        (mnt / "cache").mkdir()
        with open(mnt / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.slow
def test_a_full_cache_disk_during_push_is_blamed_on_the_cache(
    tiny_recipe: Path, tmp_path: Path, small_cache_disk: Path
) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    store = tmp_path / "store-a"
    proc = rf("realize", tiny_recipe, "--store", store, env=env)
    assert proc.returncode == 0, proc.stderr
    cache = f"file://{small_cache_disk / 'cache'}"
    proc = rf("push", cache, "--store", store, env=env)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert f"error: the cache {cache} is full: No space left on device writing " in lines[-1]
    assert "MiB free there (the store is not what is full)" in lines[-1]
    assert f"rocmforge cache gc {cache}" in lines[-1], proc.stderr
    assert "under the store" not in proc.stderr and "rocmforge gc" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((small_cache_disk / "cache").rglob(".tmp-*")), "no temp file is left"
    assert not list((small_cache_disk / "cache" / "entries").glob("*.json"))


_KILLED_PUSH = """
import sys, os, time
from pathlib import Path
from rocmforge.cache.backend import FileCache
root = Path(sys.argv[1])
cache = FileCache(root, "file://" + str(root))
def fill(fd):
    os.write(fd, b"half a blob")
    print("writing", flush=True)
    time.sleep(600)
cache._write(root / "blobs" / "sha256" / ("0" * 64), fill)
"""


@pytest.mark.slow
def test_a_killed_push_is_cleaned_by_the_next_push_and_by_cache_gc(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "cache"
    cache = f"file://{cache_dir}"
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    store = tmp_path / "store-a"
    assert rf("realize", tiny_recipe, "--store", store, env=env).returncode == 0

    def killed_push() -> Path:
        before = set((cache_dir / "blobs" / "sha256").glob(".tmp-*"))
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED_PUSH, str(cache_dir)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "writing"
        child.kill()  # SIGKILL: no finally runs, the temp file stays
        child.wait()
        (tmp,) = set((cache_dir / "blobs" / "sha256").glob(".tmp-*")) - before
        return tmp

    old = killed_push()
    os.utime(old, (time.time() - 7200, time.time() - 7200))  # two hours ago
    fresh = tmp_path / "fresh"
    os.rename(killed_push(), fresh)  # set aside while the old one is tested alone
    proc = rf("push", cache, "--store", store, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not old.exists(), "the next push removes an old leftover"
    # One being written now (another push in flight: a fresh mtime) is left alone.
    back = cache_dir / "blobs" / "sha256" / fresh.name
    os.rename(fresh, back)
    assert rf("push", cache, "--store", store, env=env).returncode == 0
    assert back.exists()
    os.utime(back, (time.time() - 7200, time.time() - 7200))
    proc = rf("cache", "gc", cache, "--keep-last", "5", env=env)
    assert proc.returncode == 0, proc.stderr
    assert not list(cache_dir.rglob(".tmp-*"))


def test_gc_removes_the_build_locks_nobody_holds(tmp_path: Path) -> None:
    store = tmp_path / "store"
    held_hash, old_hash = "a" * 32, "b" * 32
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom pathlib import Path\n"
         "from rocmforge.store.store import open_store\n"
         "s = open_store(Path(sys.argv[1]))\n"
         "with s.build_lock(sys.argv[2]):\n"
         "    print('held', flush=True)\n    time.sleep(600)\n",
         str(store), held_hash],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        from rocmforge.store.store import open_store

        s = open_store(store)
        with s.build_lock(old_hash):  # a build that finished: its lock file stays
            pass
        assert (store / "locks" / f"{old_hash}.lock").exists()
        proc = rf("gc", "--store", store)
        assert proc.returncode == 0, proc.stderr
        assert not (store / "locks" / f"{old_hash}.lock").exists()
        assert (store / "locks" / f"{held_hash}.lock").exists(), "a held lock stays"
        with s.build_lock(old_hash):  # and the lock works again afterwards
            assert (store / "locks" / f"{old_hash}.lock").exists()
    finally:
        child.kill()
        child.wait()


def test_verify_reports_a_file_no_statement_covers(tmp_path: Path, monkeypatch) -> None:
    """An entry substituted by a rocmforge that did not check the file list (the check is
    switched off here) holds the cache's sitecustomize.py, recorded in meta.json: verify
    reports it as uncovered, and --repair moves it aside."""
    from test_cache import _signed_synthetic_entry
    from test_cache_faults import Warnings

    from rocmforge.cache.substitute import substitute
    from rocmforge.store import coverage
    from rocmforge.store.store import open_store

    url = f"file://{tmp_path / 'cache'}"
    want, public = _signed_synthetic_entry(url, tmp_path, 4096)
    monkeypatch.setenv("ROCMFORGE_TRUSTED_KEYS", public)
    _tamper(url, want.hash, _append_sitecustomize)
    store = open_store(tmp_path / "store")
    ok = rf("verify", "--store", tmp_path / "store")
    assert ok.returncode == 0, ok.stderr
    with monkeypatch.context() as m:
        m.setattr(coverage, "file_set_problem", lambda *a: None)  # the old substitution
        entry = substitute(store, [url], want, Warnings())
    assert entry is not None and (entry.path / "sitecustomize.py").exists()
    proc = rf("verify", "--store", tmp_path / "store", "--json")
    assert proc.returncode != 0, proc.stdout
    problems = json.loads(proc.stdout)["problems"]
    assert {"kind": "uncovered", "path": str(entry.path / "sitecustomize.py"),
            "detail": "no provenance statement covers it"} in problems, problems  # fmt: skip
    assert len(problems) == 1, problems
    repaired = rf("verify", "--store", tmp_path / "store", "--repair")
    assert not (entry.path / "sitecustomize.py").exists(), repaired.stderr
