"""``rocmforge lock``: a git ref becomes a full commit, pins get digests, the layout survives."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from conftest import DATA, WHEELHOUSE, commit_all, git, rf, rf_in

ZERO = "a" * 40  # a stale locked commit
FAKE_DIGEST = "sha256:" + "0" * 64

COMMENTED = """\
# A recipe with comments everywhere; lock must touch only the resolved values.
schema = 1   # the schema

[package]
name = "tiny"      # the name
version = "0.1"

[source]
git = "{repo}"   # local repository
ref = "v1.0"     # a tag: lock pins it
rev = "{rev}"  # locked commit

# requirements come next
[requirements]
build = ["setuptools==75.6.0"]   # the only pin
digests = {{ "setuptools==75.6.0" = "{digest}" }}  # locked digests

[build]
steps = [
  "python mkwheel.py $OUT tiny 0.1",   # writes the wheel
]

[check]
import = "tiny"
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository of the tiny project with an annotated tag v1.0 and a branch."""
    repo = tmp_path / "tiny-git"
    (repo / "tiny").mkdir(parents=True)
    shutil.copy(DATA / "mkwheel.py", repo / "mkwheel.py")
    (repo / "tiny" / "__init__.py").write_text("VALUE = 1\n")
    git(repo, "init", "-q")
    commit_all(repo, "first")
    git(repo, "tag", "-a", "v1.0", "-m", "release 1.0")
    git(repo, "branch", "stable")
    return repo


def _setuptools_sha256() -> str:
    (wheel,) = WHEELHOUSE.glob("setuptools-75.6.0-*.whl")
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


@pytest.mark.slow
def test_lock_keeps_commented_recipe_identical_except_resolved_values(
    repo: Path, tmp_path: Path, store: Path, wheelhouse: Path
) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    tag_object = git(repo, "rev-parse", "v1.0")
    assert tag_object != commit  # annotated: lock must peel it to the commit
    recipe = tmp_path / "tiny.toml"
    before = COMMENTED.format(repo=repo, rev=ZERO, digest=FAKE_DIGEST)
    recipe.write_text(before)

    proc = rf("lock", recipe, "--store", store)
    assert proc.returncode == 0, proc.stderr
    after = recipe.read_text()
    expected = before.replace(ZERO, commit).replace(FAKE_DIGEST, f"sha256:{_setuptools_sha256()}")
    assert after == expected
    assert "source.rev" in proc.stdout and "requirements.digests" in proc.stdout

    again = rf("lock", recipe, "--store", store)
    assert again.returncode == 0 and "already locked" in again.stdout
    assert recipe.read_text() == expected
    built = rf("realize", recipe, "--store", store)
    assert built.returncode == 0, built.stderr


@pytest.mark.slow
def test_lock_inserts_rev_and_digests_and_follows_a_moved_branch(
    repo: Path, tmp_path: Path, store: Path, wheelhouse: Path
) -> None:
    before = COMMENTED.format(repo=repo, rev=ZERO, digest=FAKE_DIGEST)
    before = before.replace('ref = "v1.0"', 'ref = "stable"')
    before = "\n".join(
        ln for ln in before.splitlines() if not ln.startswith(("rev =", "digests ="))
    ) + "\n"
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(before)

    refused = rf("realize", recipe, "--store", store)
    assert refused.returncode == 2
    assert "source.rev" in refused.stderr and "rocmforge lock" in refused.stderr

    check = rf("lock", recipe, "--store", store, "--check")
    assert check.returncode == 1 and "would change" in check.stdout
    assert recipe.read_text() == before
    assert rf("lock", recipe, "--store", store).returncode == 0
    assert rf("lock", recipe, "--store", store, "--check").returncode == 0
    first = git(repo, "rev-parse", "stable")
    lines = recipe.read_text().splitlines()
    assert lines[lines.index('ref = "stable"     # a tag: lock pins it') + 1] == f'rev = "{first}"'
    added = [ln for ln in lines if ln not in before.splitlines()]
    assert added == [
        f'rev = "{first}"',
        f'digests = {{"setuptools==75.6.0" = "sha256:{_setuptools_sha256()}"}}',
    ]

    (repo / "tiny" / "__init__.py").write_text("VALUE = 2\n")
    git(repo, "checkout", "-q", "stable")
    second = commit_all(repo, "second")
    text = recipe.read_text()
    assert rf("lock", recipe, "--store", store).returncode == 0
    assert recipe.read_text() == text.replace(first, second)


@pytest.mark.slow
def test_realize_refuses_a_wheel_whose_digest_differs_from_the_lock(
    repo: Path, tmp_path: Path, store: Path, wheelhouse: Path
) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(COMMENTED.format(repo=repo, rev=commit, digest=FAKE_DIGEST))
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 2
    assert "requirements.digests.setuptools==75.6.0" in proc.stderr
    assert _setuptools_sha256() in proc.stderr
    assert not list((store / "entries").iterdir())


@pytest.mark.slow
def test_every_resolve_checks_the_locked_digests(
    repo: Path, tmp_path: Path, store: Path, wheelhouse: Path
) -> None:
    """explain resolves a recipe too: it must refuse the same wheel realize refuses."""
    commit = git(repo, "rev-parse", "HEAD")
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(COMMENTED.format(repo=repo, rev=commit, digest=FAKE_DIGEST))
    for argv in (("explain", recipe, recipe), ("plan", recipe)):
        proc = rf(*argv, "--store", store)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert "requirements.digests.setuptools==75.6.0" in proc.stderr, proc.stderr


def test_lock_refuses_an_unknown_ref(repo: Path, tmp_path: Path, store: Path) -> None:
    recipe = tmp_path / "tiny.toml"
    text = COMMENTED.format(repo=repo, rev=ZERO, digest=FAKE_DIGEST).replace("v1.0", "v9")
    recipe.write_text(text)
    proc = rf_in("lock", recipe, "--store", store)
    assert proc.returncode == 2
    assert "no tag or branch named 'v9'" in proc.stderr
    assert recipe.read_text() == text


def test_lock_of_a_dependent_or_a_stack_locks_its_closure(
    repo: Path, tmp_path: Path, store: Path
) -> None:
    """The dependency's stale rev is found through the dependent and through a stack."""
    dep = tmp_path / "tiny.toml"
    text = COMMENTED.format(repo=repo, rev=ZERO, digest=FAKE_DIGEST)
    text = text.split("# requirements come next")[0] + text.split("# locked digests\n")[1]
    dep.write_text(text)
    user = tmp_path / "user.toml"
    user.write_text(
        'schema = 1\n[package]\nname = "user"\nversion = "1.0"\n'
        f'[source]\npath = "{repo}"\n[requirements]\nrecipes = ["tiny.toml"]\n'
        '[build]\nsteps = ["python mkwheel.py $OUT user 1.0"]\n'
    )
    stack = tmp_path / "both.toml"
    stack.write_text('schema = 1\n[stack]\nname = "both"\nrecipes = ["user.toml"]\n')
    for target in (user, stack):
        proc = rf_in("lock", "--check", target, "--store", store)
        assert proc.returncode == 1, proc.stderr
        assert f"{dep}: would change" in proc.stdout and "source.rev" in proc.stdout
        assert f"{user}: already locked" in proc.stdout
    assert rf_in("lock", stack, "--store", store).returncode == 0
    assert ZERO not in dep.read_text()
    again = rf_in("lock", "--check", stack, "--store", store)
    assert again.returncode == 0, again.stdout + again.stderr
