"""``rocmforge explain`` and the "nearest cached build" note, against real builds and repos."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA, TINY_RECIPE, commit_all, git, rf

from rocmforge.trust.explain import diff_derivations

FLAGGED = TINY_RECIPE.replace("[build]\n", '[env]\nTINY_FLAG = "{flag}"\n\n[build]\n')


def _recipe(tmp_path: Path, src: Path, flag: str) -> Path:
    path = tmp_path / f"tiny-{flag}.toml"
    path.write_text(FLAGGED.format(src=src, flag=flag))
    return path


@pytest.mark.slow
def test_explain_names_exactly_the_env_flag_that_differs(
    tmp_path: Path, tiny_src: Path, store: Path
) -> None:
    a, b = _recipe(tmp_path, tiny_src, "on"), _recipe(tmp_path, tiny_src, "off")
    proc = rf("explain", a, b, "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ['env.TINY_FLAG: "on" -> "off"']
    data = json.loads(rf("explain", a, b, "--store", store, "--json").stdout)
    assert data["identical"] is False
    assert data["differences"] == [
        {"key": "env.TINY_FLAG", "a": "on", "b": "off", "only_in": None}
    ]
    same = rf("explain", a, a, "--store", store)
    assert same.returncode == 0 and same.stdout.startswith("identical derivations")


@pytest.mark.slow
def test_explain_accepts_hash_prefix_store_path_and_wheel(
    tmp_path: Path, tiny_src: Path, store: Path
) -> None:
    a, b = _recipe(tmp_path, tiny_src, "on"), _recipe(tmp_path, tiny_src, "off")
    built = json.loads(rf("realize", a, "--store", store, "--json").stdout)[0]
    copy = tmp_path / "copied.whl"
    shutil.copy(built["wheels"][0], copy)
    for target in (built["hash"][:8], built["path"], str(copy)):
        proc = rf("explain", target, b, "--store", store)
        assert proc.returncode == 0, (target, proc.stderr)
        assert proc.stdout.splitlines() == ['env.TINY_FLAG: "on" -> "off"'], target
    same = rf("explain", str(copy), built["hash"], "--store", store)
    assert same.stdout.startswith("identical derivations")
    bad = rf("explain", "ffffffff", b, "--store", store)
    assert bad.returncode == 2 and "no store entry" in bad.stderr


@pytest.mark.slow
def test_realize_and_plan_name_the_nearest_cached_build(
    tmp_path: Path, tiny_src: Path, store: Path
) -> None:
    a, b = _recipe(tmp_path, tiny_src, "on"), _recipe(tmp_path, tiny_src, "off")
    first = rf("realize", a, "--store", store)
    assert first.returncode == 0 and "nearest cached build" not in first.stderr
    built = json.loads(rf("realize", a, "--store", store, "--json").stdout)[0]

    planned = json.loads(rf("plan", b, "--store", store, "--json").stdout)
    assert planned["cached"] is False
    assert planned["nearest"]["hash"] == built["hash"]
    assert [d["key"] for d in planned["nearest"]["differences"]] == ["env.TINY_FLAG"]
    text = rf("plan", b, "--store", store)
    assert f"nearest cached build {built['hash'][:12]} (tiny 0.1) differs in:" in text.stdout
    hint = f"`rocmforge explain {built['hash'][:12]} {b}` lists every key"
    assert f'\n  env.TINY_FLAG: "on" -> "off"\n  {hint}\n' in text.stdout, text.stdout

    second = rf("realize", b, "--store", store)
    assert second.returncode == 0, second.stderr
    assert f"nearest cached build {built['hash'][:12]}" in second.stderr
    assert 'env.TINY_FLAG: "on" -> "off"' in second.stderr
    assert f'differs in: env.TINY_FLAG: "on" -> "off" ({hint})' in second.stderr


@pytest.mark.slow
def test_explain_names_a_bumped_submodule(tmp_path: Path, store: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "data.txt").write_text("1\n")
    git(sub, "init", "-q")
    commit_all(sub, "sub one")
    repo = tmp_path / "repo"
    (repo / "tiny").mkdir(parents=True)
    shutil.copy(DATA / "mkwheel.py", repo / "mkwheel.py")
    (repo / "tiny" / "__init__.py").write_text("")
    git(repo, "init", "-q")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "third/sub")
    c1 = commit_all(repo, "one")
    (sub / "data.txt").write_text("2\n")
    s2 = commit_all(sub, "sub two")
    git(repo / "third" / "sub", "pull", "-q", "origin", "HEAD")
    c2 = commit_all(repo, "bump sub")
    recipes = []
    for commit in (c1, c2):
        path = tmp_path / f"{commit[:8]}.toml"
        path.write_text(
            TINY_RECIPE.replace('path = "{src}"', f'git = "{repo}"\nrev = "{commit}"\n'
                                'submodules = true\nallow-local-submodules = true')
        )  # fmt: skip
        recipes.append(path)
    data = json.loads(rf("explain", *recipes, "--store", store, "--json").stdout)
    keys = {d["key"] for d in data["differences"]}
    assert {"source.commit", "source.submodules.third/sub"} <= keys
    assert keys <= {"source.commit", "source.submodules.third/sub", "source.epoch"}
    bumped = next(d for d in data["differences"] if d["key"] == "source.submodules.third/sub")
    assert bumped["b"] == s2


def test_a_bumped_requirement_is_one_line() -> None:
    def drv(version: str, digest: str) -> dict:
        req = {"name": "numpy", "version": version, "wheel": f"numpy-{version}.whl"}
        return {"requirements": [{**req, "blake3": digest}], "toolchain": {"cc": {"version": "12"}}}

    (d,) = diff_derivations(drv("2.0.1", "aa"), drv("2.0.2", "bb"))
    assert str(d) == "requirements.numpy: 2.0.1 -> 2.0.2"
    (d,) = diff_derivations(drv("2.0.1", "aa"), drv("2.0.1", "bb"))
    assert d.key == "requirements.numpy.blake3"
    b = drv("2.0.1", "aa")
    b["toolchain"]["cc"]["version"] = "13"
    (d,) = diff_derivations(drv("2.0.1", "aa"), b)
    assert str(d) == "toolchain.cc.version: 12 -> 13"


def test_pruned_diff_equals_the_full_flattened_diff() -> None:
    """diff_derivations skips equal subtrees before flattening (a miss compares itself with up to
    16 builds of ~1,000 keys each); on random nested derivations it must answer exactly what a
    diff of the fully flattened documents answers."""
    import copy
    import random

    from rocmforge.trust import explain

    def reference(a: dict, b: dict) -> tuple:
        fa, fb = explain.flatten(a), explain.flatten(b)
        absent = explain.ABSENT
        differing = {k for k in fa.keys() | fb.keys() if fa.get(k, absent) != fb.get(k, absent)}
        return tuple(
            explain.Difference(key=k, old=fa.get(k, absent), new=fb.get(k, absent))
            for k in sorted(differing)
            if not any(p in differing for p in explain._parents(k))
        )

    def value(rng: random.Random, depth: int = 0) -> object:
        if depth > 3 or rng.random() < 0.3:
            return rng.choice([1, 2, "x", None, [], [1], {}])
        return {rng.choice("abcde"): value(rng, depth + 1) for _ in range(rng.randint(0, 4))}

    def mutate(rng: random.Random, v: object, depth: int = 0) -> object:
        if isinstance(v, dict) and v and rng.random() < 0.8:
            v = dict(v)
            k = rng.choice(list(v))
            roll = rng.random()
            if roll < 0.2:
                del v[k]
            elif roll < 0.4:
                v[rng.choice("fgh")] = value(rng, depth + 1)
            else:
                v[k] = mutate(rng, v[k], depth + 1)
            return v
        return value(rng, depth)

    rng = random.Random(7)
    for _ in range(3000):
        a = {"env": value(rng), "toolchain": value(rng), "recipes": [{"name": "t", "hash": "h"}]}
        b = copy.deepcopy(a)
        for _ in range(rng.randint(0, 3)):
            b = mutate(rng, b)  # type: ignore[assignment]
        assert explain.diff_derivations(a, b) == reference(a, b), (a, b)
