"""Build requirements as specifiers, resolved by ``lock`` (real uv / pip resolvers) into a lock
file beside the recipe, with ``extends``, ``--upgrade``, ``--check`` and the diagnosis of a
closure that is not complete.

Real PyPI files, fetched once by the test setup (``scripts/test.sh`` prefetches them) into
git-ignored caches under ``.ci/``; the tests themselves resolve offline from those caches with
``--no-index --find-links`` (the air-gapped setup of ``ROCMFORGE_PIP_ARGS``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
from conftest import REPO, rf, rf_in

CI = REPO / ".ci"
LOCK_WHEELS = CI / "lockwheels"
SDISTS = CI / "sdists"
TORCH_WHEELS = CI / "torchwheels"
#: A cffi-based sdist whose [build-system] requires has dependencies of its own
#: (cffi -> pycparser, setuptools_scm -> packaging); it builds in ~15 s here.
SDIST = "argon2_cffi_bindings-25.1.0.tar.gz"
#: What the closure tests resolve from (two setuptools versions to choose between).
LOCK_SPECS = (
    ["setuptools>=77,<80", "setuptools_scm[toml]>=6.2", "cffi>=1.0.1"],
    ["setuptools==75.6.0", "cffi~=1.17"],
)
DEMO = REPO / "examples" / "demo"


def _pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args],
        check=True,
        capture_output=True,
    )


def prefetch() -> None:
    """Download what these tests need, once (also run by scripts/test.sh)."""
    marker = LOCK_WHEELS / ".complete"
    if not marker.exists():
        for specs in LOCK_SPECS:
            _pip("download", "--only-binary", ":all:", "--python-version", "3.11",
                 "-d", str(LOCK_WHEELS), *specs)  # fmt: skip
        marker.write_text("")
    if not (SDISTS / SDIST).exists():
        _pip("download", "--no-binary", ":all:", "--no-deps", "-d", str(SDISTS),
             "argon2-cffi-bindings==25.1.0")  # fmt: skip


def prefetch_torch() -> None:
    """Download the wheels of the shipped rocm-6.2.lock (~150 MB, once)."""
    marker = TORCH_WHEELS / ".complete"
    if marker.exists():
        return
    with open(REPO / "recipes" / "legacy" / "rocm-6.2.lock", "rb") as f:
        pins = [f"{p['name']}=={p['version']}" for p in tomllib.load(f)["package"]]
    _pip("download", "--only-binary", ":all:", "--no-deps", "--python-version", "3.11",
         "-d", str(TORCH_WHEELS), *pins)  # fmt: skip
    marker.write_text("")


@pytest.fixture(scope="module")
def lockwheels() -> Path:
    prefetch()
    return LOCK_WHEELS


def offline(*dirs: Path) -> dict[str, str]:
    return {"ROCMFORGE_PIP_ARGS": "--no-index " + " ".join(f"--find-links {d}" for d in dirs)}


def read_lock(path: Path) -> dict[str, dict[str, str]]:
    with open(path, "rb") as f:
        return {p["name"]: p for p in tomllib.load(f)["package"]}


DEMO_RECIPE = """\
schema = 1
{extends}
[package]
name = "rfdemo"
version = "1.0.0"

[source]
path = "{src}"

[requirements]
build = [{build}]
"""


def demo(path: Path, build: str, extends: str = "") -> Path:
    path.write_text(
        DEMO_RECIPE.format(
            src=DEMO, build=build, extends=f'extends = "{extends}"' if extends else ""
        )
    )
    return path


@pytest.mark.slow
def test_sdist_builds_from_its_own_build_system_requires(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    with tarfile.open(SDISTS / SDIST) as tar:
        tar.extractall(tmp_path, filter="data")
    src = next(tmp_path.glob("argon2_cffi_bindings-*"))
    recipe = tmp_path / "argon2.toml"
    recipe.write_text(
        'schema = 1\n[package]\nname = "argon2-cffi-bindings"\nversion = "25.1.0"\n'
        f'[source]\npath = "{src}"\n[requirements]\nbuild-system = true\n'
    )
    env = offline(lockwheels)
    refused = rf("realize", recipe, "--store", store, env=env)
    assert refused.returncode == 2 and "rocmforge lock" in refused.stderr, refused.stderr
    done = rf("lock", recipe, "--store", store, env=env)
    assert done.returncode == 0, done.stderr
    locked = read_lock(tmp_path / "argon2.lock")
    # the closure, nothing pinned by hand: cffi's and setuptools_scm's own dependencies too
    assert {"cffi", "pycparser", "setuptools", "setuptools-scm", "packaging"} <= set(locked)
    with open(tmp_path / "argon2.lock", "rb") as f:
        data = tomllib.load(f)
    assert data["build-system"] is True and "cffi>=1.0.1; python_version < '3.14'" in (
        data["source-requires"]
    )
    cffi, pycparser = locked["cffi"]["version"], locked["pycparser"]["version"]
    with open(recipe, "a") as f:
        f.write(
            '[check]\nimport = "_argon2_cffi_bindings"\n'
            f'requirements = ["cffi=={cffi}", "pycparser=={pycparser}"]\n'
        )
    built = rf("realize", recipe, "--store", store, env=env)
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip().endswith(".whl") and "argon2_cffi_bindings-25.1.0" in built.stdout


@pytest.mark.slow
def test_missing_dependency_of_a_pin_is_diagnosed(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    with tarfile.open(SDISTS / SDIST) as tar:
        tar.extractall(tmp_path, filter="data")
    src = next(tmp_path.glob("argon2_cffi_bindings-*"))
    names = {p.name.split("-")[0].lower(): p.name.split("-")[1] for p in lockwheels.glob("*.whl")}
    pins = ", ".join(
        f'"{n}=={names[n]}"' for n in ("setuptools_scm", "vcs_versioning", "packaging")
    )  # exact pins are installed without dependencies: cffi's pycparser is missing
    recipe = tmp_path / "argon2.toml"
    recipe.write_text(
        'schema = 1\n[package]\nname = "argon2-cffi-bindings"\nversion = "25.1.0"\n'
        f'[source]\npath = "{src}"\n[requirements]\n'
        f'build = ["setuptools==79.0.1", "cffi==1.17.1", {pins}]\n'
    )
    proc = rf("realize", recipe, "--store", store, env=offline(lockwheels))
    assert proc.returncode == 1, proc.stderr
    assert "cffi==1.17.1 (Requires-Dist: pycparser)" in proc.stderr, proc.stderr
    assert "needs 'pycparser', which is not in the build venv" in proc.stderr
    assert f"rocmforge lock {recipe}" in proc.stderr


@pytest.mark.slow
def test_child_changes_one_pin_of_a_locked_base(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    env = offline(lockwheels)
    base = demo(tmp_path / "base.toml", '"setuptools>=70,<80", "cffi~=1.17"')
    assert rf("lock", base, "--store", store, env=env).returncode == 0
    base_text = (tmp_path / "base.lock").read_bytes()
    base_lock = read_lock(tmp_path / "base.lock")
    assert base_lock["setuptools"]["version"] == "79.0.1" and "pycparser" in base_lock
    child = demo(tmp_path / "child.toml", '"setuptools==75.6.0", "cffi~=1.17"', "base.toml")
    refused = rf("plan", child, "--store", store, env=env)
    assert refused.returncode == 2 and f"rocmforge lock {child}" in refused.stderr
    done = rf("lock", child, "--store", store, env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "base.lock").read_bytes() == base_text  # the base's lock is untouched
    child_lock = read_lock(tmp_path / "child.lock")
    changed = {n for n in set(base_lock) | set(child_lock) if base_lock.get(n) != child_lock.get(n)}
    assert changed == {"setuptools"} and child_lock["setuptools"]["version"] == "75.6.0"
    assert rf("lock", "--check", base, child, "--store", store, env=env).returncode == 0
    built = rf("realize", child, "--store", store, env=env)
    assert built.returncode == 0, built.stderr


@pytest.mark.slow
def test_a_child_that_keeps_its_base_requirements_uses_the_base_lock(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    env = offline(lockwheels)
    (tmp_path / "base.toml").write_text(
        'schema = 1\n[toolchain]\nkind = "system"\npython = "3.11"\n'
        '[requirements]\nbuild = ["setuptools>=70,<80"]\n'
    )
    child = tmp_path / "child.toml"
    child.write_text(
        f'schema = 1\nextends = "base.toml"\n[package]\nname = "rfdemo"\nversion = "1.0.0"\n'
        f'[source]\npath = "{DEMO}"\n'
    )
    done = rf("lock", child, "--store", store, env=env)  # writes the base's lock
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "base.lock").is_file() and not (tmp_path / "child.lock").exists()
    assert rf("lock", "--check", tmp_path / "base.toml", "--store", store).returncode == 0
    assert rf("realize", child, "--store", store, env=env).returncode == 0


@pytest.mark.slow
def test_check_fails_after_a_specifier_change_and_passes_after_lock(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    env = offline(lockwheels)
    recipe = demo(tmp_path / "r.toml", '"setuptools>=70,<80"')
    missing = rf("lock", "--check", recipe, "--store", store, env=env)
    assert missing.returncode == 1 and "missing" in missing.stdout
    assert rf("lock", recipe, "--store", store, env=env).returncode == 0
    assert rf("lock", "--check", recipe, "--store", store, env=env).returncode == 0
    demo(recipe, '"setuptools>=70,<79"')
    stale = rf("lock", "--check", recipe, "--store", store, env=env)
    assert stale.returncode == 1 and "stale" in stale.stdout, stale.stdout
    refused = rf("realize", recipe, "--store", store, env=env)
    assert refused.returncode == 2 and "r.lock was locked for other requirements" in refused.stderr
    assert rf("lock", recipe, "--store", store, env=env).returncode == 0
    assert read_lock(tmp_path / "r.lock")["setuptools"]["version"] == "75.6.0"
    assert rf("lock", "--check", recipe, "--store", store, env=env).returncode == 0


@pytest.mark.slow
def test_upgrade_re_resolves_only_the_named_package(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    old = tmp_path / "old-index"
    old.mkdir()
    for wheel in lockwheels.glob("*.whl"):
        if not wheel.name.startswith("setuptools-79"):
            os.symlink(wheel, old / wheel.name)
    recipe = demo(tmp_path / "r.toml", '"setuptools>=70,<80", "cffi~=1.17"')
    assert rf("lock", recipe, "--store", store, env=offline(old)).returncode == 0
    before = read_lock(tmp_path / "r.lock")
    assert before["setuptools"]["version"] == "75.6.0"
    env = offline(lockwheels)
    same = rf("lock", recipe, "--store", store, env=env)  # a newer setuptools is no reason
    assert same.returncode == 0 and "already locked" in same.stdout
    would = rf("lock", "--check", "--upgrade", "setuptools", recipe, "--store", store, env=env)
    assert would.returncode == 1 and "lock.setuptools: 75.6.0 -> 79.0.1" in would.stdout
    up = rf("lock", "--upgrade", "setuptools", recipe, "--store", store, env=env)
    assert up.returncode == 0, up.stderr
    after = read_lock(tmp_path / "r.lock")
    assert after["setuptools"]["version"] == "79.0.1"
    assert {n: p for n, p in after.items() if n != "setuptools"} == {
        n: p for n, p in before.items() if n != "setuptools"
    }


@pytest.mark.slow
def test_pip_resolver_gives_the_same_closure(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    spec = '"setuptools>=70,<80", "cffi~=1.17"'
    for resolver in ("uv", "pip"):
        d = tmp_path / resolver
        d.mkdir()
        recipe = demo(d / "r.toml", spec)
        env = {**offline(lockwheels), "ROCMFORGE_RESOLVER": resolver}
        proc = rf("lock", recipe, "--store", store, env=env)
        assert proc.returncode == 0, proc.stderr
        with open(d / "r.lock", "rb") as f:
            assert tomllib.load(f)["resolver"].startswith(resolver)
    assert read_lock(tmp_path / "uv" / "r.lock") == read_lock(tmp_path / "pip" / "r.lock")


def test_no_solution_is_bad_input_naming_the_resolver(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    recipe = demo(tmp_path / "r.toml", '"setuptools>=99"')
    proc = rf_in("lock", recipe, "--store", store, env=offline(lockwheels))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "found no solution" in proc.stderr and "setuptools" in proc.stderr


def test_shipped_recipes_are_locked_without_rocm(store: Path) -> None:
    legacy = REPO / "recipes" / "legacy"
    recipes = [legacy / n for n in ("mi300x.toml", "mi250x.toml", "rocm-6.2.toml")]
    proc = rf_in("lock", "--check", *recipes, REPO / "recipes" / "demo.toml", "--store", store)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("already locked") == 2  # rocm-6.2 and demo: no git source
    # PyTorch's resolution (its ~40 submodules' commits) can only be recorded where its
    # repository is reachable: said, not failed (docs/sharing.md)
    for name in ("mi300x.toml", "mi250x.toml"):
        assert f"legacy/{name}: not locked yet: lock.source" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_lock_mi300x_without_rocm_reproduces_the_shipped_lock(tmp_path: Path, store: Path) -> None:
    prefetch_torch()
    for name in ("mi300x.toml", "rocm-6.2.toml"):
        shutil.copy(REPO / "recipes" / "legacy" / name, tmp_path / name)
    env = offline(TORCH_WHEELS)  # and no ROCm: lock reads the Python version from the recipe
    refused = rf("plan", tmp_path / "mi300x.toml", "--store", store, env=env)
    assert refused.returncode == 2 and "rocmforge lock" in refused.stderr
    proc = rf("lock", tmp_path / "mi300x.toml", "--store", store, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "mi300x.lock").exists()  # the base declares them: its lock
    shipped = REPO / "recipes" / "legacy" / "rocm-6.2.lock"
    assert read_lock(tmp_path / "rocm-6.2.lock") == read_lock(shipped)


@pytest.mark.slow
def test_realize_memo_sees_a_re_lock(
    lockwheels: Path, tmp_path: Path, tiny_src: Path, store: Path
) -> None:
    from conftest import TINY_RECIPE

    old = tmp_path / "old-index"
    old.mkdir()
    for wheel in lockwheels.glob("setuptools-75*.whl"):
        os.symlink(wheel, old / wheel.name)
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src) + '\n[requirements]\nbuild = ["setuptools>=70,<80"]\n'
    )
    assert rf("lock", recipe, "--store", store, env=offline(old)).returncode == 0

    def realized() -> str:
        proc = rf("realize", recipe, "--store", store, "--json", env=offline(lockwheels))
        assert proc.returncode == 0, proc.stderr
        return str(json.loads(proc.stdout)[0]["hash"])

    first = realized()
    assert realized() == first  # answered by the memo
    up = rf("lock", "--upgrade", recipe, "--store", store, env=offline(lockwheels))
    assert up.returncode == 0 and "79.0.1" in up.stdout, up.stdout + up.stderr
    assert realized() != first  # the lock file is guarded: the new closure is a new hash
    (tmp_path / "tiny.lock").unlink()
    refused = rf("realize", recipe, "--store", store, env=offline(lockwheels))
    assert refused.returncode == 2 and "rocmforge lock" in refused.stderr


@pytest.mark.slow
def test_exact_pins_keep_their_spelling_in_digests(tmp_path: Path, store: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        f'schema = 1\n[package]\nname = "rfdemo"\nversion = "1.0.0"\n[source]\npath = "{DEMO}"\n'
        '[requirements]\nbuild = ["SetupTools==75.6.0"]   # spelled as upstream once did\n'
    )
    proc = rf("lock", recipe, "--store", store)
    assert proc.returncode == 0, proc.stderr
    text = recipe.read_text()
    assert '"SetupTools==75.6.0" = "sha256:' in text, text  # not the normalised setuptools
    assert "# spelled as upstream once did" in text and not (tmp_path / "r.lock").exists()
    assert rf("lock", "--check", recipe, "--store", store).returncode == 0


@pytest.mark.slow
def test_build_system_requires_of_a_git_source(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    from conftest import git

    repo = tmp_path / "repo"
    shutil.copytree(DEMO, repo)
    text = (repo / "pyproject.toml").read_text()
    (repo / "pyproject.toml").write_text(
        text.replace('requires = ["setuptools==75.6.0"]', 'requires = ["setuptools>=70,<76"]')
    )
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "demo")
    commit = git(repo, "rev-parse", "HEAD")
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        'schema = 1\n[package]\nname = "rfdemo"\nversion = "1.0.0"\n'
        f'[source]\ngit = "{repo}"\nrev = "{commit}"\n[requirements]\nbuild-system = true\n'
    )
    env = offline(lockwheels)
    proc = rf("lock", recipe, "--store", store, env=env)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "r.lock", "rb") as f:
        data = tomllib.load(f)
    assert data["source-requires"] == ["setuptools>=70,<76"]
    assert [p["version"] for p in data["package"]] == ["75.6.0"]
    assert rf("lock", "--check", recipe, "--store", store, env=env).returncode == 0
    built = rf("realize", recipe, "--store", store, env=env)
    assert built.returncode == 0, built.stderr


@pytest.mark.slow
def test_build_file_of_a_git_source_is_read_by_lock_at_the_pinned_commit(
    lockwheels: Path, tmp_path: Path, store: Path
) -> None:
    """``[requirements] build-file`` (PyTorch's requirements-build.txt): ``lock`` reads the file
    from the pinned tree and resolves it with ``build``; a new commit whose file differs makes
    ``lock --check`` report the lock stale; a ``lock --check`` without the source fetched says
    so and changes nothing; the lock applies at plan time without the source."""
    from conftest import git

    repo = tmp_path / "repo"
    shutil.copytree(DEMO, repo)
    (repo / "requirements-build.txt").write_text(
        "# what the build needs\nsetuptools>=70,<76  # the backend\n\n"
    )
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "demo")
    commit = git(repo, "rev-parse", "HEAD")
    recipe = tmp_path / "r.toml"
    text = (
        'schema = 1\n[package]\nname = "rfdemo"\nversion = "1.0.0"\n'
        f'[source]\ngit = "{repo}"\nrev = "{{rev}}"\n'
        '[requirements]\nbuild = ["packaging"]\nbuild-file = "requirements-build.txt"\n'
    )
    recipe.write_text(text.format(rev=commit))
    env = offline(lockwheels)
    before = rf("lock", "--check", recipe, "--store", store, env=env)
    assert before.returncode == 0 and "is not fetched here" in before.stdout, before.stdout
    proc = rf("lock", recipe, "--store", store, env=env)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "r.lock", "rb") as f:
        data = tomllib.load(f)
    assert data["build-file"] == "requirements-build.txt"
    assert data["source-requires"] == ["setuptools>=70,<76"] and data["requires"] == ["packaging"]
    assert {p["name"]: p["version"] for p in data["package"]} == {
        "setuptools": "75.6.0", "packaging": "26.4"
    }  # fmt: skip
    assert rf("lock", "--check", recipe, "--store", store, env=env).returncode == 0
    plan = rf("plan", recipe, "--store", tmp_path / "other-store", "--json", env=env)
    assert plan.returncode == 0, plan.stderr  # the lock applies without the source at hand
    # a lock whose source-requires were guessed (the shipped PyTorch lock's case): where the
    # source is at hand, lock --check says it is stale and lock puts the file's list in
    lock = tmp_path / "r.lock"
    good = lock.read_text()
    lock.write_text(good.replace('"setuptools>=70,<76"', '"setuptools>=70,<75"'))
    stale = rf("lock", "--check", recipe, "--store", store, env=env)
    assert stale.returncode == 1 and "re-lock" in stale.stdout, stale.stdout + stale.stderr
    assert rf("lock", recipe, "--store", store, env=env).returncode == 0
    assert lock.read_text() == good
    # upstream changes its file and the pin moves: lock fetches the commit and re-resolves
    (repo / "requirements-build.txt").write_text("setuptools>=79\n")
    git(repo, "commit", "-qam", "bump")
    recipe.write_text(text.format(rev=git(repo, "rev-parse", "HEAD")))
    assert rf("lock", recipe, "--store", store, env=env).returncode == 0
    with open(tmp_path / "r.lock", "rb") as f:
        relocked = tomllib.load(f)
    assert relocked["source-requires"] == ["setuptools>=79"]
    assert {p["name"]: p["version"] for p in relocked["package"]}["setuptools"] == "79.0.1"
    # pip options are not followed: one line error naming the file and line
    (repo / "requirements-build.txt").write_text("-r other.txt\n")
    git(repo, "commit", "-qam", "include")
    recipe.write_text(text.format(rev=git(repo, "rev-parse", "HEAD")))
    bad = rf("lock", recipe, "--store", store, env=env)
    assert bad.returncode != 0 and "requirements-build.txt:1" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


def test_build_file_must_be_a_path_inside_the_source(tmp_path: Path) -> None:
    from rocmforge.errors import RecipeError
    from rocmforge.recipe.load import load_recipe

    for bad in ("/etc/passwd", "../x.txt", ""):
        recipe = tmp_path / "r.toml"
        recipe.write_text(
            'schema = 1\n[package]\nname = "x"\nversion = "1"\n[source]\npath = "."\n'
            f'[requirements]\nbuild-file = "{bad}"\n'
        )
        with pytest.raises(RecipeError, match=r"requirements\.build-file"):
            load_recipe(recipe)
