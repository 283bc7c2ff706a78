"""gc, roots and pins: what goes, what stays, and why — on real stores, through the real CLI."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import zstandard
from conftest import TINY_RECIPE, commit_all, git, pip_args, rf, rf_in

from rocmforge.sources.refs import entry_refs
from rocmforge.store.entry import Entry, EntryMeta
from rocmforge.store.gc import (
    EntryInfo,
    Policies,
    SourceItem,
    SourceRefs,
    collect_garbage,
    format_size,
    parse_size,
    plan_gc,
    plan_sources,
)
from rocmforge.store.roots import TempRoots, collect_roots, register_link
from rocmforge.store.store import Store, open_store
from rocmforge.util.hashing import blake3_hex

DAY = 86400.0
STRESS_ROUNDS = 6
STRESS_SEED = 8


# -- helpers ---------------------------------------------------------------------------------------


def fake_entry(store: Store, name: str, version: str, *, size: int = 1000, tag: str = "") -> Entry:
    """Publish an entry with a wheel of ``size`` bytes, a log and a derivation (no build)."""
    h = blake3_hex(f"{name}\0{version}\0{size}\0{tag}".encode())[:32]
    staged = store.root / "stage" / h
    staged.mkdir(parents=True)
    (staged / f"{name}-{version}-py3-none-any.whl").write_bytes(os.urandom(size))
    drv = {"package": {"name": name, "version": version}, "env": {}, "requirements": []}
    (staged / "derivation.json").write_text(json.dumps(drv))
    (staged / "build.log.zst").write_bytes(zstandard.ZstdCompressor().compress(b"log\n"))
    return store.publish(staged, hash=h, name=name, version=version, meta={"sources": []})


def set_times(store: Store, entry: Entry, *, created: float, used: float | None = None) -> None:
    """Backdate ``entry``: rewrite ``created`` in meta.json (re-sealing it, as a forger would)
    and set ``used/<hash>``'s mtime."""
    meta_path = entry.path / "meta.json"
    meta = json.loads(meta_path.read_bytes())
    meta["created"] = created
    meta["seal"] = EntryMeta.from_json(meta, file=meta_path).compute_seal()
    os.chmod(entry.path, 0o755)
    os.chmod(meta_path, 0o644)
    meta_path.write_text(json.dumps(meta))
    os.chmod(meta_path, 0o444)
    os.chmod(entry.path, 0o555)
    if used is not None:
        p = store.root / "used" / entry.hash
        p.parent.mkdir(exist_ok=True)
        p.touch()
        os.utime(p, (used, used))


def reindex(store: Store) -> None:
    """Rebuild the index from scratch so its last_used reflects the backdated ``created``."""
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store.index_path}{suffix}").unlink(missing_ok=True)
    store.rebuild_index()
    store.close()


def names(store_root: Path) -> set[str]:
    return {p.name for p in (store_root / "entries").iterdir()}


def realize(recipe: Path, store: Path, *extra: str | Path) -> Path:
    proc = rf("realize", recipe, "--store", store, *extra)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


def gc_json(store: Path, *flags: str, run: Callable[..., CompletedProcess[str]] = rf) -> dict:
    proc = run("gc", "--store", store, "--json", *flags)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def variant(tmp_path: Path, src: Path, value: str) -> Path:
    recipe = tmp_path / f"tiny-{value}.toml"
    recipe.write_text(TINY_RECIPE.format(src=src) + f'\n[env]\nV = "{value}"\n')
    return recipe


# -- the pure plan ---------------------------------------------------------------------------------


def info(h: str, name: str, *, created: float, used: float, size: int = 100) -> EntryInfo:
    h = h * 32
    return EntryInfo(
        hash=h,
        name=name,
        version="1",
        dirname=f"{h}-{name}-1",
        size=size,
        created=created,
        last_used=used,
    )


NOW = 1_000 * DAY
ENTRIES = [
    info("a", "torch", created=NOW - 50 * DAY, used=NOW - 40 * DAY, size=500),
    info("b", "torch", created=NOW - 20 * DAY, used=NOW - 2 * DAY, size=400),
    info("c", "torch", created=NOW - 1 * DAY, used=NOW - 1 * DAY, size=300),
    info("d", "numpy", created=NOW - 90 * DAY, used=NOW - 60 * DAY, size=200),
    info("e", "numpy", created=NOW - 40 * DAY, used=NOW - 35 * DAY, size=100),
]


def doomed(policies: Policies, roots: dict[str, list[str]] | None = None) -> list[str]:
    plan = plan_gc(ENTRIES, roots or {}, policies, NOW)
    assert len(plan.delete) + len(plan.keep) == len(ENTRIES)
    assert plan.freed == sum(d.entry.size for d in plan.delete)
    return sorted(d.entry.hash[0] for d in plan.delete)


def test_plan_without_policy_deletes_everything_unrooted() -> None:
    assert doomed(Policies()) == ["a", "b", "c", "d", "e"]
    assert doomed(Policies(), {"b" * 32: ["pin x"]}) == ["a", "c", "d", "e"]


def test_plan_keep_last_keeps_the_newest_n_per_package() -> None:
    assert doomed(Policies(keep_last=1)) == ["a", "b", "d"]
    assert doomed(Policies(keep_last=2)) == ["a"]
    plan = plan_gc(ENTRIES, {}, Policies(keep_last=1), NOW)
    (b,) = [d for d in plan.delete if d.entry.hash[0] == "b"]
    assert b.reasons == ("keep-last 1: 2nd newest of torch",)


def test_plan_older_than_goes_by_last_use_not_creation() -> None:
    assert doomed(Policies(older_than=30 * DAY)) == ["a", "d", "e"]
    plan = plan_gc(ENTRIES, {}, Policies(older_than=30 * DAY), NOW)
    (e,) = [d for d in plan.delete if d.entry.hash[0] == "e"]
    assert e.reasons == ("older-than 30d: last used 35d ago",)


def test_plan_keep_rules_combine_by_keeping_what_either_keeps() -> None:
    # keep-last 1 alone: a b d; older-than 30d alone: a d e; together only a and d go.
    assert doomed(Policies(keep_last=1, older_than=30 * DAY)) == ["a", "d"]


def test_plan_max_size_deletes_least_recently_used_until_it_fits() -> None:
    # total 1500; LRU order: d (60d) a (40d) e (35d) b (2d) c (1d)
    assert doomed(Policies(max_size=1500)) == []
    assert doomed(Policies(max_size=1300)) == ["d"]
    assert doomed(Policies(max_size=1299)) == ["a", "d"]
    assert doomed(Policies(max_size=0)) == ["a", "b", "c", "d", "e"]
    plan = plan_gc(ENTRIES, {"d" * 32: ["pin keep"]}, Policies(max_size=999), NOW)
    assert sorted(d.entry.hash[0] for d in plan.delete) == ["a", "e"]
    assert plan.size_after == 900 and plan.over_by == 0
    plan = plan_gc(ENTRIES, {h * 32: ["pin"] for h in "abcd"}, Policies(max_size=100), NOW)
    assert plan.over_by == 1400 - 100


def test_plan_max_size_applies_after_the_keep_rules() -> None:
    # older-than 30d removes a d e (800); the rest (700) must fit in 400: b (LRU) goes too.
    assert doomed(Policies(older_than=30 * DAY, max_size=400)) == ["a", "b", "d", "e"]


def test_plan_a_root_survives_every_policy() -> None:
    roots = {"a" * 32: ["pin old"]}
    for p in (
        Policies(),
        Policies(keep_last=0),
        Policies(older_than=0),
        Policies(max_size=0),
        Policies(keep_last=0, older_than=0, max_size=0),
    ):
        assert "a" not in doomed(p, roots), p
    plan = plan_gc(ENTRIES, roots, Policies(max_size=0), NOW)
    (a,) = [d for d in plan.keep if d.entry.hash[0] == "a"]
    assert a.reasons == ("rooted: pin old",)


def test_plan_sources_keeps_what_kept_entries_reference() -> None:
    items = [
        SourceItem(rel="git/aa.git", size=10),
        SourceItem(rel="git/bb.git", size=10),
        SourceItem(rel="wheels/x-1-py3-none-any.whl", size=5),
        SourceItem(rel="wheels/y-1-py3-none-any.whl", size=5),
        SourceItem(rel="trees/t1", size=1),
        SourceItem(rel="git-resolved/k.json", size=1, commit="c1"),
        SourceItem(rel="git-resolved/l.json", size=1, commit="c2"),
    ]
    refs = SourceRefs(
        refs=frozenset({"git/aa.git", "wheels/x-1-py3-none-any.whl"}), commits=frozenset({"c1"})
    )
    got = [i.rel for i in plan_sources(items, refs)]
    assert got == ["git-resolved/l.json", "git/bb.git", "trees/t1", "wheels/y-1-py3-none-any.whl"]
    unknown = SourceRefs(refs=refs.refs, commits=refs.commits, complete=False)
    got = [i.rel for i in plan_sources(items, unknown)]
    assert got == ["git-resolved/l.json", "wheels/y-1-py3-none-any.whl"]


def test_sizes_parse_and_format() -> None:
    assert parse_size("500M") == 500 * 1024**2
    assert parse_size("20G") == 20 * 1024**3
    assert parse_size("1.5T") == int(1.5 * 1024**4)
    assert parse_size("4096") == 4096
    assert parse_size("2GiB") == 2 * 1024**3
    for bad in ("", "G", "5X", "-1G"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.5 KiB"
    assert format_size(20 * 1024**3) == "20.0 GiB"


# -- policies on a real store with controlled times ------------------------------------------------


@pytest.fixture
def timed_store(tmp_path: Path) -> tuple[Path, dict[str, Entry]]:
    """torch x3, numpy x2 with the times of ENTRIES (relative to the real clock)."""
    store = open_store(tmp_path / "store")
    now = time.time()
    made = {}
    for e in ENTRIES:
        entry = fake_entry(store, e.name, str(ord(e.hash[0])), size=e.size * 10)
        set_times(store, entry, created=now - (NOW - e.created), used=now - (NOW - e.last_used))
        made[e.hash[0]] = entry
    reindex(store)
    return store.root, made


def _gone(root: Path, made: dict[str, Entry]) -> list[str]:
    present = names(root)
    return sorted(k for k, e in made.items() if e.path.name not in present)


def test_cli_keep_last_on_a_real_store(timed_store: tuple[Path, dict[str, Entry]]) -> None:
    root, made = timed_store
    report = gc_json(root, "--keep-last", "1", run=rf_in)
    assert _gone(root, made) == ["a", "b", "d"]
    assert report["freed_bytes"] >= (500 + 400 + 200) * 10
    with open_store(root).index as index:
        assert sorted(r.hash for r in index.rows()) == sorted(made[k].hash for k in "ce")


def test_cli_older_than_on_a_real_store(timed_store: tuple[Path, dict[str, Entry]]) -> None:
    root, made = timed_store
    gc_json(root, "--older-than", "30d", run=rf_in)
    assert _gone(root, made) == ["a", "d", "e"]
    assert not (root / "used" / made["a"].hash).exists()


def test_cli_max_size_on_a_real_store(timed_store: tuple[Path, dict[str, Entry]]) -> None:
    root, made = timed_store
    sizes = {k: e.meta.size + len((e.path / "meta.json").read_bytes()) for k, e in made.items()}
    limit = sum(sizes.values()) - sizes["d"]  # dropping only the LRU entry fits exactly
    gc_json(root, "--max-size", str(limit), run=rf_in)
    assert _gone(root, made) == ["d"]
    gc_json(root, "--max-size", str(limit - 1), run=rf_in)
    assert _gone(root, made) == ["a", "d"]


def test_cli_pin_survives_every_policy(timed_store: tuple[Path, dict[str, Entry]]) -> None:
    root, made = timed_store
    proc = rf_in("pin", "old-torch", made["a"].hash[:8], "--store", root)
    assert proc.returncode == 0, proc.stderr
    for flags in (["--keep-last", "0"], ["--older-than", "0s"], ["--max-size", "0"], []):
        gc_json(root, *flags, run=rf_in)
        assert made["a"].path.is_dir(), flags
    assert _gone(root, made) == ["b", "c", "d", "e"]
    listed = rf_in("pins", "--store", root, "--json")
    assert json.loads(listed.stdout) == [
        {
            "name": "old-torch",
            "entry": made["a"].path.name,
            "path": str(root / "roots/pins/old-torch"),
        }
    ]
    assert rf_in("unpin", "old-torch", "--store", root).returncode == 0
    assert rf_in("unpin", "old-torch", "--store", root).returncode == 2
    gc_json(root, run=rf_in)
    assert names(root) == set()


def test_dry_run_deletes_nothing_and_says_why(timed_store: tuple[Path, dict[str, Entry]]) -> None:
    root, made = timed_store
    before = names(root)
    proc = rf_in("gc", "--store", root, "--dry-run", "--older-than", "30d")
    assert proc.returncode == 0, proc.stderr
    assert names(root) == before
    with open_store(root).index as index:
        assert len(index.rows()) == 5
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("would delete")]
    assert len(lines) == 3
    assert any(made["e"].path.name in ln and "last used 35d ago" in ln for ln in lines)
    assert proc.stdout.splitlines()[-1].startswith("would free ")
    report = gc_json(root, "--dry-run", run=rf_in)
    assert report["dry_run"] and len(report["deleted"]) == 5 and names(root) == before


def test_gc_text_lists_what_it_kept_and_why(timed_store: tuple[Path, dict[str, Entry]]) -> None:
    root, made = timed_store
    assert rf_in("pin", "old-torch", made["a"].hash[:8], "--store", root).returncode == 0
    proc = rf_in("gc", "--store", root, "--dry-run", "--keep-last", "1")
    assert proc.returncode == 0, proc.stderr
    kept = [ln for ln in proc.stdout.splitlines() if ln.startswith("kept ")]
    assert len(kept) == 3, proc.stdout  # the pin, and the newest torch and numpy
    assert kept[0].startswith(f"kept {made['a'].path.name}  ")  # rooted ones first
    assert kept[0].endswith("(rooted: pin old-torch: `rocmforge unpin old-torch` lets it go)")
    assert all("keep-last 1: 1st newest of" in ln for ln in kept[1:]), kept


def test_bad_policy_values_are_usage_errors(tmp_path: Path) -> None:
    for flags in (["--older-than", "30"], ["--max-size", "lots"], ["--keep-last", "-1"]):
        proc = rf_in("gc", "--store", tmp_path / "s", *flags)
        assert proc.returncode == 2 and "error:" in proc.stderr, flags


# -- roots -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_unrooted_goes_rooted_stays_and_a_moved_link_stops_rooting(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    r1, r2 = variant(tmp_path, tiny_src, "1"), variant(tmp_path, tiny_src, "2")
    link = tmp_path / "result"
    w1 = realize(r1, store, "-o", link)
    w2 = realize(r2, store)  # no link: unrooted
    report = gc_json(store)
    assert [d["entry"] for d in report["deleted"]] == [w2.parent.name]
    assert w1.is_file() and not w2.exists()
    (kept,) = report["kept"]
    assert kept["reasons"] == [f"rooted: link {link}"]

    # Re-pointing the link elsewhere stops rooting; the user's link itself is never touched.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link.unlink()
    link.symlink_to(elsewhere)
    gc_json(store)
    assert not w1.exists() and link.is_symlink() and elsewhere.is_dir()
    assert list((store / "roots" / "auto").iterdir()) == []  # the stale registration went

    # A deleted link stops rooting too (-o never replaces a link that points outside a store).
    link.unlink()
    w1 = realize(r1, store, "-o", link)
    gc_json(store)
    assert w1.is_file()
    link.unlink()
    gc_json(store)
    assert not w1.exists()


@pytest.mark.slow
def test_pin_command_targets_and_errors(tiny_recipe: Path, store: Path) -> None:
    wheel = realize(tiny_recipe, store)
    for target in (wheel.parent.name[:6], str(wheel)):
        proc = rf("pin", "p1", target, "--store", store)
        assert proc.returncode == 0 and wheel.parent.name in proc.stdout, proc.stderr
    assert rf("pin", "bad/name", wheel.parent.name, "--store", store).returncode == 2
    assert rf("pin", "p2", "ffff", "--store", store).returncode == 2
    assert rf("pins", "--store", store).stdout.strip() == f"p1 -> {wheel.parent.name}"
    gc_json(store)
    assert wheel.is_file()


@pytest.mark.slow
def test_running_realize_and_build_in_progress_are_roots(tiny_recipe: Path, store: Path) -> None:
    wheel = realize(tiny_recipe, store)
    h = wheel.parent.name[:32]
    s = open_store(store)
    # A running realize that returned this entry (its temp roots file is flock-held).
    roots = TempRoots(s)
    with s.shared_lock():
        roots.add(h)
    report = gc_json(store)
    assert report["deleted"] == [] and wheel.is_file()
    assert report["kept"][0]["reasons"] == [f"rooted: realize pid {os.getpid()} running"]
    roots.close()
    # A build in progress of that hash: rooted, and source caches are left alone.
    with s.new_build_dir(h):
        report = gc_json(store)
        assert report["deleted"] == [] and wheel.is_file()
        assert "build of" in report["sources_kept_because"]
    # A realize that died leaves an unheld temp roots file: stale, removed, roots nothing.
    (store / "roots" / "live" / "99999-dead").write_text(f"root {h}\nbusy\n")
    report = gc_json(store)
    assert [d["entry"] for d in report["deleted"]] == [wheel.parent.name]
    assert not (store / "roots" / "live" / "99999-dead").exists()


def test_register_link_roots_only_while_the_link_points_into_the_store(tmp_path: Path) -> None:
    s = open_store(tmp_path / "store")
    e = fake_entry(s, "pkg", "1")
    link = tmp_path / "l"
    link.symlink_to(e.wheels[0])  # a link to a file inside the entry roots the entry
    with s.shared_lock():
        register_link(s, link)
    with s.exclusive_lock():
        assert collect_roots(s).by_hash == {e.hash: (f"link {link}",)}
    link.unlink()
    link.write_text("not a link any more")
    with s.exclusive_lock():
        found = collect_roots(s)
    assert found.by_hash == {} and len(found.stale) == 1


# -- last use --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cache_hits_update_last_use(tiny_recipe: Path, store: Path) -> None:
    wheel = realize(tiny_recipe, store)
    used = store / "used" / wheel.parent.name[:32]
    assert used.is_file()
    old = time.time() - 100 * DAY
    os.utime(used, (old, old))
    realize(tiny_recipe, store)  # the memo fast path
    assert used.stat().st_mtime > old + 99 * DAY
    os.utime(used, (old, old))
    realize(tiny_recipe, store, "--json")  # the full pipeline
    assert used.stat().st_mtime > old + 99 * DAY


# -- deletion safety -------------------------------------------------------------------------------


def test_symlinks_inside_an_entry_never_lead_gc_outside(tmp_path: Path) -> None:
    s = open_store(tmp_path / "store")
    e = fake_entry(s, "pkg", "1")
    outside = tmp_path / "precious"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "data.txt").write_text("keep me")
    (outside / "file.txt").write_text("me too")
    os.chmod(outside / "sub", 0o555)
    os.chmod(outside / "file.txt", 0o444)
    os.chmod(e.path, 0o755)
    (e.path / "to-dir").symlink_to(outside)
    (e.path / "to-file").symlink_to(outside / "file.txt")
    (e.path / "nested").mkdir()
    (e.path / "nested" / "deep").symlink_to(outside / "sub")
    os.chmod(e.path / "nested", 0o555)
    os.chmod(e.path, 0o555)
    # An entry directory that is itself a symlink to outside: only the link goes.
    fake = s.entries_dir / f"{'f' * 32}-evil-1"
    fake.symlink_to(outside)
    s.close()
    report = collect_garbage(open_store(s.root), Policies(), entry_refs=entry_refs)
    assert [d.entry.dirname for d in report.plan.delete] == [e.path.name]
    assert not e.path.exists()
    assert (outside / "sub" / "data.txt").read_text() == "keep me"
    assert (outside / "file.txt").read_text() == "me too"
    assert stat.S_IMODE(os.stat(outside / "sub").st_mode) == 0o555
    assert stat.S_IMODE(os.stat(outside / "file.txt").st_mode) == 0o444
    assert fake.is_symlink()  # not an entry (no meta.json of its own): left alone


def test_index_row_goes_and_a_crashed_gcs_trash_is_cleaned(tmp_path: Path) -> None:
    s = open_store(tmp_path / "store")
    e = fake_entry(s, "pkg", "1")
    trash = s.root / "trash" / "gc-1-dead"
    (trash / "x").mkdir(parents=True)
    (trash / "x" / "f").write_text("left by a crash")
    os.chmod(trash / "x", 0o555)
    report = collect_garbage(s, Policies(), entry_refs=entry_refs)
    assert report.plan.delete[0].entry.hash == e.hash
    assert s.index.get(e.hash) is None
    assert list((s.root / "trash").iterdir()) == []


# -- source caches ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_unreferenced_source_caches_are_collected(
    tmp_path: Path, wheelhouse: Path, tiny_src: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(tiny_src, repo)
    git(repo, "init", "-q")
    rev = commit_all(repo, "tiny")
    recipe = tmp_path / "git.toml"
    recipe.write_text(
        TINY_RECIPE.replace('path = "{src}"', f'git = "{repo}"\nrev = "{rev}"')
        + '\n[requirements]\nbuild = ["setuptools==75.6.0"]\n'
    )
    store = tmp_path / "store"
    link = tmp_path / "result"
    env = {"ROCMFORGE_PIP_ARGS": pip_args(wheelhouse)}
    proc = rf("realize", recipe, "--store", store, "-o", link, env=env)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((link / "meta.json").read_bytes())
    mirrors = [r for r in meta["sources"] if r.startswith("git/")]
    assert len(mirrors) == 1 and "wheels/setuptools-75.6.0-py3-none-any.whl" in meta["sources"]
    sources = store / "sources"
    assert (sources / mirrors[0]).is_dir()

    report = gc_json(store)  # everything is referenced by the rooted entry
    assert report["deleted"] == [] and report["sources"] == []
    link.unlink()
    report = gc_json(store, "--keep-sources")
    assert len(report["deleted"]) == 1 and report["sources"] == []
    assert (sources / mirrors[0]).is_dir()
    report = gc_json(store)
    kinds = sorted(s["kind"] for s in report["sources"])
    assert kinds == ["git mirror", "git resolve cache", "requirement wheel", "unpacked wheel"]
    assert not (sources / mirrors[0]).exists()
    assert list((sources / "wheels").glob("*.whl")) == []
    assert list((sources / "wheels-unpacked").iterdir()) == []
    # The store still works: the next realize fetches again.
    proc = rf("realize", recipe, "--store", store, env=env)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_a_kept_entry_keeps_its_input_tree_cache_and_check_wheels(
    tmp_path: Path, wheelhouse: Path, tiny_src: Path
) -> None:
    aot = tmp_path / "aot"
    (aot / "lib").mkdir(parents=True)
    (aot / "lib" / "data.txt").write_text("kernels\n")
    text = (
        TINY_RECIPE.format(src=tiny_src).replace(
            'import = "tiny"', 'import = "tiny"\nrequirements = ["setuptools==75.6.0"]'
        )
        + f'\n[inputs.aot]\npath = "{aot}"\nenv = "AOT"\n'
    )
    recipe = tmp_path / "r.toml"
    recipe.write_text(text)
    store = tmp_path / "store"
    sources = store / "sources"
    env = {"ROCMFORGE_PIP_ARGS": pip_args(wheelhouse)}
    proc = rf("realize", recipe, "--store", store, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    proc = rf("pin", "keep", json.loads(proc.stdout)[0]["hash"], "--store", store)
    assert proc.returncode == 0, proc.stderr
    wheel = sources / "wheels" / "setuptools-75.6.0-py3-none-any.whl"
    records = sorted((sources / "trees").iterdir())
    assert wheel.is_file() and len(records) == 4  # source and input: .head and .files each
    before = {p: (os.stat(p).st_ino, os.stat(p).st_mtime_ns) for p in records}

    report = gc_json(store)
    assert report["deleted"] == [] and report["sources"] == []
    assert wheel.is_file()
    assert sorted((sources / "trees").iterdir()) == records

    # Nothing is fetched again (pip may only use an empty index) and no tree is hashed again:
    # the stat cache records are the very files written by the first realize.
    offline = {"ROCMFORGE_PIP_ARGS": "--no-index"}
    proc = rf("realize", recipe, "--store", store, "--json", env=offline)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["cached"] is True
    variant = tmp_path / "variant.toml"  # a new build: resolves the check requirements again
    variant.write_text(text + '\n[env]\nV = "2"\n')
    proc = rf("realize", variant, "--store", store, "--json", env=offline)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["cached"] is False
    assert {p: (os.stat(p).st_ino, os.stat(p).st_mtime_ns) for p in records} == before


# -- du --------------------------------------------------------------------------------------------


def test_du_reports_areas_packages_and_entries(tmp_path: Path) -> None:
    s = open_store(tmp_path / "store")
    big = fake_entry(s, "big", "1", size=50_000)
    fake_entry(s, "small", "1", size=1_000)
    (s.sources_dir / "wheels").mkdir()
    (s.sources_dir / "wheels" / "w-1-py3-none-any.whl").write_bytes(b"x" * 3000)
    s.close()
    proc = rf_in("du", "--store", s.root, "--json")
    assert proc.returncode == 0, proc.stderr
    usage = json.loads(proc.stdout)
    areas = {a["area"]: a["bytes"] for a in usage["areas"]}
    assert areas["sources: requirement wheels"] == 3000
    assert areas["entries"] > 51_000
    assert usage["total_bytes"] == sum(areas.values())
    assert [p["name"] for p in usage["packages"]] == ["big", "small"]
    assert usage["entries"][0]["entry"] == big.path.name
    text = rf_in("du", "--store", s.root).stdout
    assert text.startswith("total ") and big.path.name in text


# -- concurrency -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.stress
def test_stress_realize_and_gc_in_parallel(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    """Realizes (with and without -o) and gc race for a fixed number of seeded rounds.

    Each round starts all four workers together: two realize with a link, one without, one runs
    gc. The schedule never lets round k+1 touch the recipe realized without a link in round k,
    so by construction every round's gc has something unrooted to delete and every round after
    the second rebuilds something deleted: the race is real however slow the machine is.
    """
    recipes = [variant(tmp_path, tiny_src, str(i)) for i in range(4)]
    assert realize(recipes[0], store).is_file()  # warm the toolchain probe and stat caches
    rng = random.Random(STRESS_SEED)
    schedule: list[tuple[int, int, int, float]] = []  # (linked 0, linked 1, plain, gc delay)
    plain = -1
    for _ in range(STRESS_ROUNDS):
        picks = [i for i in range(len(recipes)) if i != plain]
        rng.shuffle(picks)
        plain = picks[2]
        schedule.append((picks[0], picks[1], plain, rng.uniform(0.0, 0.3)))
    barrier = threading.Barrier(4)
    failures: list[str] = []
    counts = {"realize": 0, "built": 0, "gc": 0, "deleted": 0}
    cv = threading.Lock()

    def rounds(work: Callable[[int], str | None]) -> Callable[[], None]:
        def loop() -> None:
            try:
                for k in range(STRESS_ROUNDS):
                    barrier.wait(timeout=300)
                    failure = work(k)
                    if failure:
                        failures.append(failure)
                        barrier.abort()
                        return
            except threading.BrokenBarrierError:
                return

        return loop

    def linked_work(w: int) -> Callable[[int], str | None]:
        link = tmp_path / f"result-{w}"

        def work(k: int) -> str | None:
            proc = rf("realize", recipes[schedule[k][w]], "--store", store, "-o", link, timeout=120)
            if proc.returncode != 0:
                return f"realize -o failed: {proc.stderr}"
            wheel = Path(proc.stdout.strip().splitlines()[-1])
            # The link roots it: it must exist now, however many gcs ran since.
            if not wheel.is_file() or os.path.realpath(link) != str(wheel.parent):
                return f"linked realize returned {wheel}, gone or unlinked after exit"
            with cv:
                counts["realize"] += 1
                counts["built"] += "built" in proc.stderr
            return None

        return work

    plain_runs: list[tuple[float, Path, bool]] = []  # (started, wheel, existed right after exit)
    gcs: list[tuple[float, set[str]]] = []  # (finished, entries deleted)

    def plain_work(k: int) -> str | None:
        started = time.monotonic()
        proc = rf("realize", recipes[schedule[k][2]], "--store", store, timeout=120)
        if proc.returncode != 0:
            return f"realize failed: {proc.stderr}"
        wheel = Path(proc.stdout.strip().splitlines()[-1])
        plain_runs.append((started, wheel, wheel.is_file()))
        with cv:
            counts["realize"] += 1
            counts["built"] += "built" in proc.stderr
        return None

    def gc_work(k: int) -> str | None:
        time.sleep(schedule[k][3])  # land somewhere inside the round's realizes
        proc = rf("gc", "--store", store, "--json", timeout=120)
        if proc.returncode != 0:
            return f"gc failed: {proc.stderr}"
        deleted = {d["entry"] for d in json.loads(proc.stdout)["deleted"]}
        gcs.append((time.monotonic(), deleted))
        with cv:
            counts["gc"] += 1
            counts["deleted"] += len(deleted)
        return None

    threads = [
        threading.Thread(target=rounds(linked_work(0))),
        threading.Thread(target=rounds(linked_work(1))),
        threading.Thread(target=rounds(plain_work)),
        threading.Thread(target=rounds(gc_work)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert not failures, failures[0]
    # Without a link an entry is unrooted once the realize exits, so a gc may take it right
    # after; but only a gc that was still running after the realize started, never an earlier
    # one (that would mean the realize printed a path that was already gone).
    for started, wheel, existed in plain_runs:
        if not existed:
            assert any(wheel.parent.name in deleted and done >= started for done, deleted in gcs), (
                f"{wheel} was gone after the realize that printed it, and no gc explains it"
            )
    # The race was real: entries were deleted under the workers and rebuilt.
    assert counts["gc"] == STRESS_ROUNDS and counts["realize"] == 3 * STRESS_ROUNDS, counts
    assert counts["deleted"] >= STRESS_ROUNDS - 1 and counts["built"] >= STRESS_ROUNDS - 2, counts
    # Afterwards the links still root their entries and nothing else is left.
    final = gc_json(store)
    for k in (0, 1):
        assert (tmp_path / f"result-{k}").resolve().is_dir()
    assert len(final["kept"]) <= 2
