"""Binary caches through the recipe graph: realize --push and push push closures, plan says what a
cache would provide, substituting a dependent brings its closure, and both gcs keep closures."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import rf
from test_graph import tiny_pkg


def _generate(env: dict[str, str], name: str) -> str:
    proc = rf("key", "generate", "--json", "--name", name, env=env)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["public_key"])


def _entries(store: Path) -> set[str]:
    return {p.name[:32] for p in (store / "entries").iterdir()}


def _pushed(proc) -> list[str]:  # type: ignore[no-untyped-def]
    assert proc.returncode == 0, proc.stderr
    return [e["name"] for e in json.loads(proc.stdout)["entries"]]


@pytest.mark.slow
def test_graph_push_plan_substitute_closure_and_gc(tmp_path: Path, monkeypatch) -> None:
    env_a = {"XDG_CONFIG_HOME": str(tmp_path / "config-a")}
    public = _generate(env_a, "builder-a")
    tiny_pkg(tmp_path, "base", [])
    top = tiny_pkg(tmp_path, "top", ["base.toml"])
    store_a, store_b = tmp_path / "store-a", tmp_path / "store-b"
    cache = tmp_path / "cache"
    url = f"file://{cache}"

    # A: realize --push pushes what it realized, the closure included.
    proc = rf("realize", top, "--store", store_a, "--all", "--json", "--push", url, env=env_a)
    assert proc.returncode == 0, proc.stderr
    base_hash, top_hash = (r["hash"] for r in json.loads(proc.stdout))
    assert "pushed 2 of 2 entries to" in proc.stderr, proc.stderr
    manifest = json.loads((cache / "entries" / f"{top_hash}.json").read_text())
    assert manifest["meta"]["built_against"] == [base_hash]
    again = rf("realize", top, "--store", store_a, "--push", url, env=env_a)
    assert "pushed 0 of 2 entries" in again.stderr, again.stderr

    # B is configured by files only: its user file trusts A's key, the project file (beside the
    # recipes) names the cache.
    env_b = {"XDG_CONFIG_HOME": str(tmp_path / "config-b")}
    user_b = tmp_path / "config-b" / "rocmforge" / "config.toml"
    user_b.parent.mkdir(parents=True)
    user_b.write_text(f'trusted-keys = ["{public}"]\n')
    (tmp_path / "rocmforge.toml").write_text(f'caches = ["{url}"]\n')

    # plan says what the cache would provide (one manifest request per node); --offline asks none.
    plan = rf("plan", top, "--graph", "--store", store_b, "--json", env=env_b)
    assert plan.returncode == 0, plan.stderr
    assert [n["substitutable"] for n in json.loads(plan.stdout)["nodes"]] == [url, url]
    text = rf("plan", top, "--graph", "--store", store_b, env=env_b).stdout
    assert f"(missing, substitutable from {url})" in text, text
    one = rf("plan", top, "--store", store_b, env=env_b).stdout
    assert f"cache:      substitutable from {url}" in one, one
    offline = rf("plan", top, "--store", store_b, "--json", "--offline", env=env_b)
    assert json.loads(offline.stdout)["substitutable"] is None

    # B realizes the graph: both nodes substituted, nothing built.
    proc = rf("realize", top, "--store", store_b, "--all", "--json", env=env_b)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert [(r["substituted"], r["sandbox"]) for r in got] == [(url, None), (url, None)]
    meta = json.loads((Path(got[1]["path"]) / "meta.json").read_text())
    assert meta["built_against"] == [base_hash] and meta["origin"]["keyid"] == "builder-a"
    # audit in B trusts the key of B's user config file, as the substitution did
    audit = rf("audit", got[1]["wheels"][0], "--store", store_b, "--json", env=env_b)
    assert json.loads(audit.stdout)[0]["signature"]["status"] == "valid", audit.stdout

    # gc treats substituted entries like built ones: the pinned dependent keeps its dependency.
    assert rf("pin", "t", top_hash, "--store", store_b).returncode == 0
    dry = json.loads(rf("gc", "--dry-run", "--json", "--store", store_b).stdout)
    rows = dry["plan"]["keep"] if "plan" in dry else dry["kept"]
    assert {e["hash"]: e["reasons"] for e in rows}[base_hash] == ["kept: dependency of top 0.1"]
    assert rf("gc", "--keep-last", "0", "--store", store_b).returncode == 0
    assert _entries(store_b) == {base_hash, top_hash}

    # push: a hash target brings its closure, dependency first; --no-closure only the target.
    closure = rf("push", f"file://{tmp_path}/c2", top_hash[:12], "--store", store_a, "--json")
    assert _pushed(closure) == ["base", "top"]
    alone = f"file://{tmp_path}/c3"
    assert _pushed(rf("push", alone, top_hash, "--no-closure", "--store", store_a, "--json")) == [
        "top"
    ]
    assert _pushed(rf("push", f"file://{tmp_path}/c4", top, "--store", store_a, "--json")) == [
        "base",
        "top",
    ]
    stack = tmp_path / "stack.toml"
    stack.write_text('schema = 1\n[stack]\nname = "s"\nrecipes = ["top.toml"]\n')
    assert _pushed(rf("push", f"file://{tmp_path}/c5", stack, "--store", store_a, "--json")) == [
        "base",
        "top",
    ]

    # Substituting the dependent alone brings its closure into the store (as Nix substitutes a
    # path's references first); a cache without the dependency is refused for it.
    from rocmforge.cache.substitute import Wanted, substitute
    from rocmforge.store.store import open_store
    from rocmforge.util.progress import NullReporter

    class Warnings(NullReporter):
        said: list[str] = []

        def warning(self, message: str) -> None:
            self.said.append(message)

    monkeypatch.setenv("ROCMFORGE_TRUSTED_KEYS", public)
    want = Wanted(top_hash, "top", "0.1")
    store_c = open_store(tmp_path / "store-c")
    assert substitute(store_c, [alone], want, Warnings()) is None
    assert "its dependency base 0.1" in Warnings.said[-1] and "in no cache" in Warnings.said[-1]
    assert _entries(tmp_path / "store-c") == set()
    from rocmforge.store.roots import TempRoots

    roots = TempRoots(store_c)

    def protect(h: str) -> None:
        with store_c.shared_lock():
            roots.add(h)

    entry = substitute(store_c, [alone, url], want, Warnings(), protect=protect)
    assert entry is not None and _entries(tmp_path / "store-c") == {base_hash, top_hash}
    assert entry.meta.built_against == (base_hash,)
    # The dependency stays a temp root of the substituting process (the dependent was not
    # published yet when it landed): a gc meanwhile keeps it, even with the dependent gone.
    assert rf("gc", "--keep-last", "0", "--store", tmp_path / "store-c").returncode == 0
    assert _entries(tmp_path / "store-c") == {base_hash}
    roots.close()

    # cache gc never breaks a closure: base pushed long ago stays while top (recent) stays.
    old = time.time() - 30 * 86400
    os.utime(cache / "entries" / f"{base_hash}.json", (old, old))
    kept = json.loads(rf("cache", "gc", url, "--older-than", "1d", "--json").stdout)
    assert kept["deleted"] == [] and kept["kept"] == 2
    os.utime(cache / "entries" / f"{top_hash}.json", (old, old))  # the control: both go
    gone = json.loads(rf("cache", "gc", url, "--older-than", "1d", "--json").stdout)
    assert {e["name"] for e in gone["deleted"]} == {"base", "top"}
