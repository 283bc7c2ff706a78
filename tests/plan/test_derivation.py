"""The input hash: what changes it and what must not (via ``rocmforge plan --json``, no builds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA, TINY_RECIPE, commit_all, git, pip_args, rf, rf_in, tiny_wheel


def plan(recipe: Path, store: Path, env: dict[str, str] | None = None) -> dict:
    proc = rf("plan", recipe, "--store", store, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"hash", "name", "version", "cached", "derivation"} <= set(data)
    return data


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.slow
def test_comments_key_order_and_file_location_do_not_change_the_hash(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    base = plan(write(tmp_path / "a.toml", TINY_RECIPE.format(src=tiny_src)), store)
    reordered = f"""\
# a comment that changes nothing
[check]
import = "tiny"   # trailing comment

[build]
steps = [ "python mkwheel.py $OUT tiny 0.1" ]

[source]
path = "{tiny_src}"

[package]
version = "0.1"
name = "tiny"

schema = 1
"""
    reordered = "schema = 1\n" + reordered.replace("\nschema = 1\n", "")
    other = write(tmp_path / "elsewhere" / "renamed-recipe.toml", reordered)
    assert plan(other, store)["hash"] == base["hash"]
    # a relative source path from another directory, same tree
    rel = write(tmp_path / "deeper" / "x" / "r.toml", TINY_RECIPE.format(src="../../tiny-src"))
    assert plan(rel, store)["hash"] == base["hash"]
    # the same content copied to another directory
    copy = shutil.copytree(tiny_src, tmp_path / "copy-of-src")
    assert (
        plan(write(tmp_path / "c.toml", TINY_RECIPE.format(src=copy)), store)["hash"]
        == base["hash"]
    )
    # passthrough and timeout are not inputs
    extra = TINY_RECIPE.format(src=tiny_src).replace(
        "[build]\n", '[build]\npassthrough = ["MAX_JOBS"]\ntimeout = "2h"\n'
    )
    assert plan(write(tmp_path / "d.toml", extra), store)["hash"] == base["hash"]


@pytest.mark.slow
def test_env_value_and_source_content_change_the_hash(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    text = TINY_RECIPE.format(src=tiny_src)
    h0 = plan(write(tmp_path / "a.toml", text), store)["hash"]
    h1 = plan(write(tmp_path / "b.toml", text + '\n[env]\nUSE_ROCM = "1"\n'), store)["hash"]
    h2 = plan(write(tmp_path / "c.toml", text + '\n[env]\nUSE_ROCM = "0"\n'), store)["hash"]
    assert len({h0, h1, h2}) == 3
    (tiny_src / "tiny" / "__init__.py").write_text("VALUE = 43\n")
    assert plan(tmp_path / "a.toml", store)["hash"] != h0


@pytest.fixture
def git_project(tmp_path: Path) -> tuple[Path, Path, str, str]:
    """A git repo holding the tiny project with a submodule `vendor/lib`; returns ids."""
    sub = tmp_path / "lib-repo"
    sub.mkdir()
    git(sub, "init", "-q")
    write(sub / "lib.txt", "v1\n")
    sub1 = commit_all(sub, "lib v1")
    top = tmp_path / "top-repo"
    top.mkdir()
    git(top, "init", "-q")
    shutil.copy(DATA / "mkwheel.py", top / "mkwheel.py")
    write(top / "tiny" / "__init__.py", "VALUE = 1\n")
    git(top, "submodule", "add", "-q", str(sub), "vendor/lib")
    c1 = commit_all(top, "top v1")
    return top, sub, c1, sub1


def git_recipe(path: Path, url: Path, rev: str, patches: list[Path] | None = None) -> Path:
    text = TINY_RECIPE.replace(
        'path = "{src}"',
        f'git = "{url}"\nrev = "{rev}"\nsubmodules = true\nallow-local-submodules = true',
    )
    if patches:
        text = text.replace(
            "submodules = true",
            "submodules = true\npatches = " + json.dumps([str(p) for p in patches]),
            1,
        )
    return write(path, text)


@pytest.mark.slow
def test_git_rev_submodule_commit_and_patch_change_the_hash(
    git_project: tuple[Path, Path, str, str], tmp_path: Path, store: Path
) -> None:
    top, sub, c1, sub1 = git_project
    d1 = plan(git_recipe(tmp_path / "r1.toml", top, c1), store)
    assert d1["derivation"]["source"]["commit"] == c1
    assert sub1 in json.dumps(d1["derivation"]["source"])
    assert str(top) not in json.dumps(d1["derivation"])

    write(top / "tiny" / "__init__.py", "VALUE = 2\n")
    c2 = commit_all(top, "top v2")
    d2 = plan(git_recipe(tmp_path / "r2.toml", top, c2), store)
    assert d2["hash"] != d1["hash"]

    # only the submodule commit moves
    write(sub / "lib.txt", "v2\n")
    sub2 = commit_all(sub, "lib v2")
    git(top / "vendor" / "lib", "pull", "-q", "origin", "HEAD")
    c3 = commit_all(top, "bump lib")
    d3 = plan(git_recipe(tmp_path / "r3.toml", top, c3), store)
    assert sub2 in json.dumps(d3["derivation"]["source"])
    assert d3["hash"] not in (d1["hash"], d2["hash"])

    patch = write(
        tmp_path / "p.patch",
        "--- a/tiny/__init__.py\n+++ b/tiny/__init__.py\n@@ -1 +1 @@\n-VALUE = 1\n+VALUE = 7\n",
    )
    d4 = plan(git_recipe(tmp_path / "r4.toml", top, c1, [patch]), store)
    assert d4["hash"] != d1["hash"]
    patch.write_text(patch.read_text().replace("VALUE = 7", "VALUE = 8"))
    assert plan(tmp_path / "r4.toml", store)["hash"] not in (d1["hash"], d4["hash"])


@pytest.mark.slow
def test_a_mirror_url_gives_the_same_hash(
    git_project: tuple[Path, Path, str, str], tmp_path: Path, store: Path
) -> None:
    top, _sub, c1, _ = git_project
    mirror = tmp_path / "mirror.git"
    git(tmp_path, "clone", "-q", "--mirror", str(top), str(mirror))
    a = plan(git_recipe(tmp_path / "a.toml", top, c1), store)
    b = plan(git_recipe(tmp_path / "b.toml", mirror, c1), tmp_path / "store2")
    assert a["hash"] == b["hash"]


def _tiny_wheel(directory: Path, name: str, version: str) -> Path:
    """Write a valid pure wheel `name` (module `name` with `V = version`) into `directory`."""
    return tiny_wheel(directory, name, version, f"V = {version!r}\n")


@pytest.mark.slow
def test_requirement_version_changes_the_hash(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    wheels = tmp_path / "wheels"
    _tiny_wheel(wheels, "rfpin", "1.0")
    _tiny_wheel(wheels, "rfpin", "1.1")
    env = {"ROCMFORGE_PIP_ARGS": pip_args(wheels)}
    text = TINY_RECIPE.format(src=tiny_src) + '\n[requirements]\nbuild = ["rfpin==1.0"]\n'
    d10 = plan(write(tmp_path / "a.toml", text), store, env)
    d11 = plan(write(tmp_path / "b.toml", text.replace("1.0", "1.1")), store, env)
    assert d10["hash"] != d11["hash"]
    assert d10["derivation"]["requirements"][0]["version"] == "1.0"
    assert len(d10["derivation"]["requirements"][0]["blake3"]) == 64
    # second plan is served from the store without pip: an empty index would fail a fetch
    again = plan(tmp_path / "a.toml", store, {"ROCMFORGE_PIP_ARGS": "--no-index"})
    assert again["hash"] == d10["hash"]


def test_unlocked_requirement_is_bad_input(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    text = TINY_RECIPE.format(src=tiny_src) + '\n[requirements]\nbuild = ["rfpin>=1.0"]\n'
    proc = rf_in("plan", write(tmp_path / "a.toml", text), "--store", store)
    assert proc.returncode == 2 and "requirements.build" in proc.stderr
    assert "not locked" in proc.stderr and "rocmforge lock" in proc.stderr


UNPINNED = """\
schema = 1
[package]
name = "x"
version = "1.0"
[source]
git = "https://example.invalid/x.git"
ref = "v1.0"
[requirements]
build = ["setuptools>=70"]
[build]
steps = ["true"]
"""


def test_everything_lock_fixes_is_named_at_once_with_the_real_path(
    tmp_path: Path, store: Path
) -> None:
    (tmp_path / "recipes").mkdir()
    write(tmp_path / "recipes" / "x.toml", UNPINNED)
    for verb in ("plan", "realize"):
        proc = rf_in(verb, "recipes/x.toml", "--store", store, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 2, proc.stderr  # the unpinned ref and the unlocked requirements
        assert all("run `rocmforge lock recipes/x.toml`" in ln for ln in errors), errors
        assert "source.rev" in errors[0] and "requirements.build" in errors[1]
        assert proc.stderr.splitlines()[-1] == (
            "note: 2 things need `rocmforge lock recipes/x.toml`: source.rev, requirements.build"
        )


def _fake_cc(directory: Path, version: str) -> Path:
    path = directory / f"cc-{version}"
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = --version ]; then echo "fakecc {version}"; exit 0; fi\n'
        'exec gcc "$@"\n'
    )
    path.chmod(0o755)
    return path


@pytest.mark.slow
def test_toolchain_version_changes_the_hash(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    text = TINY_RECIPE.format(src=tiny_src)
    hashes = set()
    for v in ("1.0", "2.0"):
        cc = _fake_cc(tmp_path, v)
        recipe = write(tmp_path / f"cc{v}.toml", text + f'\n[toolchain]\ncc = "{cc}"\n')
        d = plan(recipe, store)
        assert d["derivation"]["toolchain"]["cc"]["version"] == f"fakecc {v}"
        hashes.add(d["hash"])
    assert len(hashes) == 2


@pytest.mark.slow
def test_plan_reports_cached_after_realize(tiny_recipe: Path, store: Path) -> None:
    assert plan(tiny_recipe, store)["cached"] is False
    assert rf("realize", tiny_recipe, "--store", store).returncode == 0
    assert plan(tiny_recipe, store)["cached"] is True
