"""Substitution from the lock alone (issue 34, point 1): a teammate with the recipe, its lock file
and a cache gets the wheel without any clone or mirror of the source (real git repositories with
nested submodules, a real file:// cache, real keys).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA, pip_args, rf, tiny_wheel

#: real repositories, builds and substitutions of seconds each: the full suite
pytestmark = pytest.mark.slow

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null", "PATH": "/usr/bin:/bin",
}  # fmt: skip

RECIPE = """\
schema = 1

[package]
name = "tiny"
version = "0.1"

[source]
git = "{top}"
ref = "main"
submodules = true
allow-local-submodules = true

[requirements]
build = ["rfreq>=1"]

[build]
steps = ["python mkwheel.py $OUT tiny 0.1"]

[check]
import = "tiny"
"""


def git(cwd: Path, *args: str, date: int = 1700000000) -> str:
    env = {**GIT_ENV, "GIT_AUTHOR_DATE": f"{date} +0000", "GIT_COMMITTER_DATE": f"{date} +0000"}
    out = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
        cwd=cwd, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip()


def repo(path: Path, files: dict[str, str], date: int, subs: dict[str, str] = {}) -> str:  # noqa: B006
    path.mkdir(parents=True)
    git(path, "init", "-q")
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    for where, url in subs.items():
        git(path, "submodule", "add", "-q", url, where)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "c", date=date)
    return git(path, "rev-parse", "HEAD")


@pytest.fixture
def upstream(tmp_path: Path) -> dict[str, Any]:
    """top -> third_party/mid -> deps/leaf, and the recipe and its lock in a checkout of ours."""
    up = tmp_path / "upstream"
    leaf = repo(up / "leaf", {"leaf.h": "#define LEAF 1\n"}, 1600000000)
    mid = repo(up / "mid", {"mid.c": "int mid;\n"}, 1650000000, {"deps/leaf": "../leaf"})
    top = repo(
        up / "top",
        {"mkwheel.py": (DATA / "mkwheel.py").read_text(), "tiny/__init__.py": "VALUE = 42\n"},
        1700000123,
        {"third_party/mid": "../mid"},
    )
    recipes = tmp_path / "ours"
    recipes.mkdir()
    recipe = recipes / "tiny.toml"
    recipe.write_text(RECIPE.format(top=up / "top"))
    index = up / "index"  # the build requirement's index: gone for the teammate too
    tiny_wheel(index, "rfreq", "1.0", "R = 1\n")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config-a"), "ROCMFORGE_PIP_ARGS": pip_args(index)}
    gen = rf("key", "generate", "--json", "--name", "builder-a", env=env)
    assert gen.returncode == 0, gen.stderr
    locked = rf("lock", recipe, "--store", tmp_path / "store-a", env=env)
    assert locked.returncode == 0, locked.stderr
    return {"up": up, "recipe": recipe, "env": env, "commits": (top, mid, leaf),
            "public": json.loads(gen.stdout)["public_key"]}  # fmt: skip


def test_lock_records_what_the_hash_needs(upstream: dict[str, Any]) -> None:
    top, mid, leaf = upstream["commits"]
    lock = tomllib.loads(upstream["recipe"].with_suffix(".lock").read_text())
    (pkg,) = lock["package"]
    assert pkg["name"] == "rfreq" and len(pkg["blake3"]) == 64  # what the derivation names
    assert lock["source"] == {
        "commit": top, "submodules": True, "epoch": 1700000123,
        "modules": [["third_party/mid", mid], ["third_party/mid/deps/leaf", leaf]],
    }  # fmt: skip
    again = rf("lock", upstream["recipe"], "--check", "--store", upstream["up"] / "s",
               env=upstream["env"])  # fmt: skip
    assert again.returncode == 0 and "already locked" in again.stdout + again.stderr, again


def test_a_teammate_without_the_sources_substitutes(upstream: dict[str, Any],
                                                    tmp_path: Path) -> None:  # fmt: skip
    recipe, env_a = upstream["recipe"], upstream["env"]
    store_a = tmp_path / "store-a"
    built = rf("realize", recipe, "--store", store_a, "--json", env=env_a)
    assert built.returncode == 0, built.stderr
    (report,) = json.loads(built.stdout)
    cache = f"file://{tmp_path / 'cache'}"
    pushed = rf("push", cache, "--store", store_a, env=env_a)
    assert pushed.returncode == 0, pushed.stderr
    # The teammate has the recipe and its lock; every repository, clone and mirror is gone.
    mine = tmp_path / "teammate"
    mine.mkdir()
    for name in ("tiny.toml", "tiny.lock"):
        shutil.copy(recipe.parent / name, mine / name)
    wheel = Path(report["wheels"][0]).read_bytes()
    shutil.rmtree(upstream["up"])
    shutil.rmtree(store_a)
    env_b = {"XDG_CONFIG_HOME": str(tmp_path / "config-b"),
             "ROCMFORGE_TRUSTED_KEYS": upstream["public"]}  # fmt: skip
    store_b = tmp_path / "store-b"
    plan = rf("plan", mine / "tiny.toml", "--store", store_b, "--json", env=env_b)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert planned["hash"] == report["hash"] and not planned.get("provisional"), planned
    got = rf("realize", mine / "tiny.toml", "--store", store_b, "--cache", cache, "--json",
             env=env_b)  # fmt: skip
    assert got.returncode == 0, got.stderr
    (sub,) = json.loads(got.stdout)
    assert sub["hash"] == report["hash"] and sub["substituted"] == cache, got.stderr
    assert Path(sub["wheels"][0]).read_bytes() == wheel
    for fetched in (store_b / "sources" / "git", store_b / "sources" / "wheels"):
        assert not fetched.exists() or not any(fetched.iterdir()), list(fetched.iterdir())
    # A build needs the source: without the cache it is fetched, and that fails here, saying so.
    other = tmp_path / "store-c"
    failed = rf("realize", mine / "tiny.toml", "--store", other, env=env_b)
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    assert "rfreq==1.0" in failed.stderr or "upstream/top" in failed.stderr, failed.stderr


def test_a_lock_that_lies_is_refused_when_the_source_is_fetched(
    upstream: dict[str, Any], tmp_path: Path
) -> None:
    recipe = upstream["recipe"]
    lock = recipe.with_suffix(".lock")
    _, mid, _ = upstream["commits"]
    env = upstream["env"]
    honest = rf("plan", recipe, "--store", tmp_path / "s1", "--json", env=env)
    # a fresh store hashes the honest lock before fetching anything, then builds: the wheel
    # and the tree it fetches for the build are the ones the lock names
    fresh = rf("realize", recipe, "--store", tmp_path / "s0", "--json", env=env)
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout)[0]["hash"] == json.loads(honest.stdout)["hash"]
    lock.write_text(lock.read_text().replace(mid, "0" * 40))
    # the lock is believed for the hash (nothing fetched) ...
    plan = rf("plan", recipe, "--store", tmp_path / "s2", "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["hash"] != json.loads(honest.stdout)["hash"]
    # ... and the build, which fetches the tree, refuses it
    built = rf("realize", recipe, "--store", tmp_path / "s3", env=env)
    assert built.returncode != 0 and "Traceback" not in built.stderr
    assert "disagrees with the repository" in built.stderr and "third_party/mid" in built.stderr
    assert "rocmforge lock" in built.stderr, built.stderr


def test_a_lock_whose_wheel_digest_lies_is_refused_by_the_build(
    upstream: dict[str, Any], tmp_path: Path
) -> None:
    """The lock's blake3 is believed for the hash; the build fetches the wheel and refuses it."""
    recipe, env = upstream["recipe"], upstream["env"]
    lock = recipe.with_suffix(".lock")
    b3 = tomllib.loads(lock.read_text())["package"][0]["blake3"]
    honest = rf("plan", recipe, "--store", tmp_path / "s1", "--json", env=env)
    lock.write_text(lock.read_text().replace(b3, "e" * 64))
    plan = rf("plan", recipe, "--store", tmp_path / "s2", "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["hash"] != json.loads(honest.stdout)["hash"]
    assert not (tmp_path / "s2" / "sources" / "wheels").exists() or not any(
        (tmp_path / "s2" / "sources" / "wheels").iterdir()
    )  # hashed from the lock: nothing fetched
    built = rf("realize", recipe, "--store", tmp_path / "s3", env=env)
    assert built.returncode != 0 and "Traceback" not in built.stderr
    assert "rfreq==1.0" in built.stderr and "eeeeeeeeeeeeeeee" in built.stderr, built.stderr
    assert not list((tmp_path / "s3").glob("entries/*")), "nothing published"


def test_lock_check_names_a_missing_or_stale_source_record(upstream: dict[str, Any]) -> None:
    recipe, lock = upstream["recipe"], upstream["recipe"].with_suffix(".lock")
    store, env = upstream["up"] / "s", upstream["env"]
    text = lock.read_text()
    top = upstream["commits"][0]
    lock.write_text(text.replace(f'commit = "{top}"', f'commit = "{"1" * 40}"'))
    stale = rf("lock", recipe, "--check", "--store", store, env=env)
    assert stale.returncode == 1 and "lock.source" in stale.stdout, stale
    assert "recorded for another commit" in stale.stdout
    # a lock made before the record existed: provisional, not a failure
    lock.write_text(text[: text.index("\n# the git source as resolved")] + "\n")
    missing = rf("lock", recipe, "--check", "--store", store, env=env)
    assert missing.returncode == 0, missing
    assert "not locked yet: lock.source" in missing.stdout + missing.stderr, missing
    relock = rf("lock", recipe, "--store", store, env=env)
    assert relock.returncode == 0 and tomllib.loads(lock.read_text())["source"]["commit"] == top
