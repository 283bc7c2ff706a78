"""``lock --companions STACK``: triton, torchvision and torchaudio pinned from the stack's torch
tree (real git repositories made here: a torch tree with its pin files, and companion
repositories with release tags), written into the companions' recipes with their layout kept."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO, commit_all, git, rf, rf_in

from rocmforge.lock.companions import RELEASED_WITH, github_slug, triton_fork_note


def _repo(root: Path, name: str, files: dict[str, str]) -> tuple[Path, str]:
    repo = root / name
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    return repo, commit_all(repo, f"{name} first")


def _tagged(root: Path, name: str, tags: list[str]) -> tuple[Path, dict[str, str]]:
    """A repository with one commit per tag (annotated tags, as upstream releases are)."""
    repo, _ = _repo(root, name, {"README": name})
    commits = {}
    for tag in tags:
        (repo / "VERSION").write_text(tag)
        commits[tag] = commit_all(repo, tag)
        git(repo, "tag", "-a", tag, "-m", f"release {tag}")
    return repo, commits


RECIPE = """\
# {comment}
schema = 1

[package]
name = "{name}"
version = "{version}"   # the public part is what lock --companions changes

[source]
git = "{git}"
{source}

[env]
{env}
"""


@pytest.fixture
def stack(tmp_path: Path) -> dict[str, object]:
    repos = tmp_path / "repos"
    triton, triton_commit = _repo(repos, "triton", {"python/triton/__init__.py": "x = 1\n"})
    torch, torch_commit = _repo(
        repos,
        "pytorch",
        {
            "version.txt": "2.14.1\n",
            ".ci/docker/ci_commit_pins/triton.txt": triton_commit + "\n",
            ".ci/docker/triton_version.txt": "3.8.0\n",
        },
    )
    vision, vision_tags = _tagged(
        repos, "vision", ["v0.28.0", "v0.29.0", "v0.29.1", "v0.29.2", "v0.30.0"]
    )
    audio, audio_tags = _tagged(repos, "audio", ["v2.11.0", "v2.11.1"])
    old = vision_tags["v0.28.0"]
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    files = {
        "torch": (torch, f'rev = "{torch_commit}"', "2.14.1", ""),
        "triton": (triton, 'ref = "main"\nrev = "' + "0" * 40 + '"', "3.7.0+rocm7.15", ""),
        "torchvision": (vision, f'rev = "{old}"', "0.28.0+rocm7.15",
                        'BUILD_VERSION = "0.28.0+rocm7.15"  # setup.py names the wheel'),
        "torchaudio": (audio, f'ref = "v2.11.0"\nrev = "{audio_tags["v2.11.0"]}"',
                       "2.11.0+rocm7.15", 'BUILD_VERSION = "2.11.0+rocm7.15"'),
    }  # fmt: skip
    for name, (repo, source, version, env) in files.items():
        (recipes / f"{name}.toml").write_text(
            RECIPE.format(
                comment=f"the {name} of the stack",
                name=name,
                version=version,
                git=repo,
                source=source,
                env=env,
            )
        )
    stack_file = recipes / "stack.toml"
    stack_file.write_text(
        'schema = 1\n[stack]\nname = "s"\n'
        'recipes = ["torch.toml", "triton.toml", "torchvision.toml", "torchaudio.toml"]\n'
    )
    return {
        "file": stack_file,
        "dir": recipes,
        "triton": triton_commit,
        "vision": vision_tags,
        "audio": audio_tags,
        "torch": torch,
    }


@pytest.mark.slow
def test_companions_are_pinned_from_the_torch_tree(
    stack: dict[str, object], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    d = stack["dir"]
    assert isinstance(d, Path)
    before = (d / "torchvision.toml").read_text()
    r = rf("lock", "--companions", stack["file"], "--store", store, "--json")
    assert r.returncode == 0, r.stderr
    reports = {Path(x["recipe"]).stem: x for x in json.loads(r.stdout)}
    assert set(reports) == {"triton", "torchvision", "torchaudio"}  # torch itself is not changed

    triton = (d / "triton.toml").read_text()
    assert f'rev = "{stack["triton"]}"' in triton and "ref =" not in triton
    assert 'version = "3.8.0+rocm7.15"' in triton  # triton_version.txt, local part kept

    vision = (d / "torchvision.toml").read_text()
    tags = stack["vision"]
    assert isinstance(tags, dict)
    assert f'rev = "{tags["v0.29.1"]}"' in vision and 'ref = "v0.29.1"' in vision
    assert vision.index("git =") < vision.index("ref =") < vision.index("rev =")
    assert 'BUILD_VERSION = "0.29.1+rocm7.15"  # setup.py names the wheel' in vision
    assert 'version = "0.29.1+rocm7.15"   # the public part is what' in vision
    # only the pinned values changed: every other line (comments, order) is as it was
    changed = {ln for ln in vision.splitlines()} ^ {ln for ln in before.splitlines()}
    assert all(("rev" in ln or "ref" in ln or "version" in ln.lower()) for ln in changed), changed

    audio = (d / "torchaudio.toml").read_text()
    atags = stack["audio"]
    assert isinstance(atags, dict)
    assert f'rev = "{atags["v2.11.1"]}"' in audio and 'ref = "v2.11.1"' in audio
    keys = {c["key"] for c in reports["torchaudio"]["changes"]}
    assert keys == {"source.ref", "source.rev", "package.version", "env.BUILD_VERSION"}

    again = rf("lock", "--companions", stack["file"], "--store", store, "--check")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("already locked") == 3


def test_check_reports_a_stale_companion_and_writes_nothing(
    stack: dict[str, object], tmp_path: Path
) -> None:
    d = stack["dir"]
    assert isinstance(d, Path)
    before = (d / "triton.toml").read_text()
    r = rf_in("lock", "--companions", stack["file"], "--store", tmp_path / "store", "--check")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "triton.toml: would change" in r.stdout
    assert f"source.rev: {'0' * 40} -> {stack['triton']}" in r.stdout
    assert (d / "triton.toml").read_text() == before


@pytest.mark.slow
def test_a_new_torch_commit_moves_the_triton_pin(stack: dict[str, object], tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert rf("lock", "--companions", stack["file"], "--store", store).returncode == 0
    torch = stack["torch"]
    assert isinstance(torch, Path)
    newer = "f" * 40
    (torch / ".ci/docker/ci_commit_pins/triton.txt").write_text(newer + "\n")
    commit = commit_all(torch, "bump triton")
    d = stack["dir"]
    assert isinstance(d, Path)
    recipe = d / "torch.toml"
    recipe.write_text(recipe.read_text().replace(
        git(torch, "rev-parse", "HEAD~1"), commit))  # fmt: skip
    r = rf("lock", "--companions", stack["file"], "--store", store)
    assert r.returncode == 0, r.stderr
    assert f'rev = "{newer}"' in (d / "triton.toml").read_text()


def test_a_torch_without_known_companions_is_bad_input(
    stack: dict[str, object], tmp_path: Path
) -> None:
    torch = stack["torch"]
    d = stack["dir"]
    assert isinstance(torch, Path) and isinstance(d, Path)
    (torch / "version.txt").write_text("2.15.0a0\n")
    commit = commit_all(torch, "main")
    recipe = d / "torch.toml"
    text = recipe.read_text()
    old = text.split('rev = "')[1].split('"')[0]
    recipe.write_text(text.replace(old, commit).replace('"2.14.1"', '"2.15.0a0"'))
    r = rf_in("lock", "--companions", stack["file"], "--store", tmp_path / "store")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "torch.toml" in r.stderr and "not a release" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_table_pairs_torch_2_14_and_2_15_with_their_releases() -> None:
    assert RELEASED_WITH["2.14.1"].torchvision == "0.29.1"
    assert RELEASED_WITH["2.14.1"].torchaudio == "2.11.1"
    # torch 2.15.0 has no torchvision 0.30: 0.29.2, a stable-ABI wheel (torch>=2.14.0), was
    # uploaded to PyPI with it on 2026-10-28
    assert RELEASED_WITH["2.15.0"].torchvision == "0.29.2"
    assert RELEASED_WITH["2.15.0"].torchaudio == "2.11.1"
    for torch, rel in RELEASED_WITH.items():  # up to 2.14, torchvision's minor is torch's + 15
        if int(torch.split(".")[1]) <= 14:
            assert int(rel.torchvision.split(".")[1]) == int(torch.split(".")[1]) + 15, torch


@pytest.mark.slow
def test_rocms_related_commits_pin_vision_and_audio_to_its_commits(
    stack: dict[str, object], tmp_path: Path
) -> None:
    torch, d = stack["torch"], stack["dir"]
    vision, audio = stack["vision"], stack["audio"]
    assert isinstance(torch, Path) and isinstance(d, Path)
    assert isinstance(vision, dict) and isinstance(audio, dict)
    old = git(torch, "rev-parse", "HEAD")
    (torch / "related_commits").write_text(
        f"ubuntu|pytorch|torchvision|release/0.29|{vision['v0.29.0']}|https://github.com/pytorch/vision\n"
        f"centos|pytorch|torchaudio|release/2.11|{'e' * 40}|https://github.com/pytorch/audio\n"
    )
    commit = commit_all(torch, "ROCm fork pins")
    recipe = d / "torch.toml"
    recipe.write_text(recipe.read_text().replace(old, commit))
    r = rf("lock", "--companions", stack["file"], "--store", tmp_path / "store")
    assert r.returncode == 0, r.stderr
    text = (d / "torchvision.toml").read_text()
    assert f'rev = "{vision["v0.29.0"]}"' in text and "ref =" not in text
    assert 'version = "0.28.0+rocm7.15"' in text  # a related commit claims no version
    # only an ubuntu line counts (TheRock reads the shared Linux pins): audio uses its release tag
    assert f'rev = "{audio["v2.11.1"]}"' in (d / "torchaudio.toml").read_text()


def test_a_torch_recipe_disagreeing_with_its_tree_is_bad_input(
    stack: dict[str, object], tmp_path: Path
) -> None:
    d = stack["dir"]
    assert isinstance(d, Path)
    recipe = d / "torch.toml"
    recipe.write_text(recipe.read_text().replace('"2.14.1"', '"2.14.0"'))
    r = rf_in("lock", "--companions", stack["file"], "--store", tmp_path / "store")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "package.version" in r.stderr and "says 2.14.1" in r.stderr, r.stderr


@pytest.mark.slow
def test_the_shipped_triton_recipe_is_pinned_with_its_inputs_kept(
    stack: dict[str, object], tmp_path: Path
) -> None:
    """recipes/torch-2.14/triton-mi300x.toml itself (inputs, offline switches, comments), pointed
    at the local triton repository: lock --companions moves its rev to torch's pin and keeps the
    rest."""
    d = stack["dir"]
    assert isinstance(d, Path)
    shipped = (REPO / "recipes" / "torch-2.14" / "triton-mi300x.toml").read_text()
    triton_repo = stack["torch"].parent / "triton"  # type: ignore[union-attr]
    text = shipped.replace("https://github.com/ROCm/triton.git", str(triton_repo))
    (d / "triton.toml").write_text(text)
    r = rf("lock", "--companions", stack["file"], "--store", tmp_path / "store")
    assert r.returncode == 0, r.stderr
    after = (d / "triton.toml").read_text()
    assert f'rev = "{stack["triton"]}"' in after
    assert 'version = "3.8.0+rocm7.14"' in after  # triton_version.txt 3.8.0, local part kept
    changed = set(after.splitlines()) ^ set(text.splitlines())
    assert all(ln.startswith("rev = ") for ln in changed), changed  # inputs, env, comments kept


def test_a_triton_of_another_fork_than_torchs_pin_keeps_its_pin(
    stack: dict[str, object], tmp_path: Path
) -> None:
    """Upstream torch's triton.txt names triton-lang commits; a ROCm/triton recipe (the shipped
    stack's case, as TheRock builds it) keeps its own pin with a note naming both repositories,
    and the other companions are still filled."""
    from rocmforge.sources.git import mirror_path

    d, torch = stack["dir"], stack["torch"]
    assert isinstance(d, Path) and isinstance(torch, Path)
    url = "https://github.com/pytorch/pytorch.git"
    for name, to in (("torch", url), ("triton", "https://github.com/ROCm/triton.git")):
        file = d / f"{name}.toml"
        file.write_text(re.sub(r'git = "[^"]*"', f'git = "{to}"', file.read_text()))
    recipe = d / "triton.toml"
    before = recipe.read_text()
    store = tmp_path / "store"
    # torch's tree from the mirror cache, as a machine that fetched upstream PyTorch has it
    mirror = mirror_path(url, store / "sources")
    mirror.parent.mkdir(parents=True)
    git(tmp_path, "clone", "-q", "--mirror", str(torch), str(mirror))
    r = rf_in("lock", "--companions", stack["file"], "--store", store)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "source.rev kept" in r.stdout and "triton-lang/triton" in r.stdout
    assert "rocm/triton" in r.stdout and "Traceback" not in r.stderr
    assert recipe.read_text() == before
    assert "torchvision.toml: updated" in r.stdout  # the others are still filled
    assert triton_fork_note("https://github.com/pytorch/pytorch", "https://github.com/ROCm/triton")
    # the matching pair takes the pin file's commit: ROCm's torch pins ROCm's triton
    assert triton_fork_note("https://github.com/ROCm/pytorch",
                            "git@github.com:ROCm/triton.git") is None  # fmt: skip
    assert github_slug("https://github.com/openai/triton") == "triton-lang/triton"


def _release_2_15(stack: dict[str, object]) -> tuple[str, str]:
    """Tag torch's commit v2.14.1, add torch 2.15.0 (another Triton, 3.9.0) tagged v2.15.0 and
    give the torch recipe the flagship's version keys; return (2.15.0's commit, its triton)."""
    torch, d = stack["torch"], stack["dir"]
    assert isinstance(torch, Path) and isinstance(d, Path)
    git(torch, "tag", "-a", "v2.14.1", "-m", "release 2.14.1")
    triton, _ = _repo(torch.parent, "triton-3.9", {"VERSION": "3.9.0"})
    new_triton = git(triton, "rev-parse", "HEAD")
    (torch / "version.txt").write_text("2.15.0\n")
    (torch / ".ci/docker/ci_commit_pins/triton.txt").write_text(new_triton + "\n")
    (torch / ".ci/docker/triton_version.txt").write_text("3.9.0\n")
    commit = commit_all(torch, "2.15.0")
    git(torch, "tag", "-a", "v2.15.0", "-m", "release 2.15.0")
    recipe = d / "torch.toml"
    text = recipe.read_text().replace('version = "2.14.1"', 'version = "2.14.1+rocm10.0"')
    recipe.write_text(text.replace("[env]\n", '[env]\nPYTORCH_BUILD_VERSION = "2.14.1+rocm10.0"\n'))
    return commit, new_triton


@pytest.mark.slow
def test_upgrade_moves_a_stack_to_a_chosen_torch_release(
    stack: dict[str, object], tmp_path: Path
) -> None:
    """``lock --upgrade torch==2.15.0 STACK``: torch to its tag, and the companions to the pins
    of that tree (Triton) and the releases made with it (torchvision 0.29.2)."""
    commit, new_triton = _release_2_15(stack)
    d, vision = stack["dir"], stack["vision"]
    assert isinstance(d, Path) and isinstance(vision, dict)
    r = rf("lock", "--upgrade", "torch==2.15.0", stack["file"], "--store", tmp_path / "store")
    assert r.returncode == 0, r.stdout + r.stderr
    torch = (d / "torch.toml").read_text()
    assert f'rev = "{commit}"' in torch and 'ref = "v2.15.0"' in torch
    assert (
        'version = "2.15.0+rocm10.0"' in torch
        and 'PYTORCH_BUILD_VERSION = "2.15.0+rocm10.0"' in torch
    )
    assert "# the torch of the stack" in torch  # layout kept
    triton = (d / "triton.toml").read_text()
    assert f'rev = "{new_triton}"' in triton and 'version = "3.9.0+rocm7.15"' in triton
    assert f'rev = "{vision["v0.29.2"]}"' in (d / "torchvision.toml").read_text()
    again = rf("lock", "--companions", stack["file"], "--store", tmp_path / "store", "--check")
    assert again.returncode == 0 and again.stdout.count("already locked") == 3, again.stdout


def test_upgrade_check_shows_the_move_and_its_companions_and_writes_nothing(
    stack: dict[str, object], tmp_path: Path
) -> None:
    commit, new_triton = _release_2_15(stack)
    d = stack["dir"]
    assert isinstance(d, Path)
    before = {p.name: p.read_text() for p in d.glob("*.toml")}
    r = rf_in("lock", "--check", "--upgrade", "torch==2.15.0", stack["file"],
              "--store", tmp_path / "store")  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "torch.toml: would change" in r.stdout and f"-> {commit}" in r.stdout
    assert "follow when written" in r.stdout
    assert "triton.toml: would change" in r.stdout and f"-> {new_triton}" in r.stdout
    assert {p.name: p.read_text() for p in d.glob("*.toml")} == before


def test_upgrade_to_a_release_without_a_tag_is_bad_input(
    stack: dict[str, object], tmp_path: Path
) -> None:
    d = stack["dir"]
    assert isinstance(d, Path)
    before = (d / "torch.toml").read_text()
    r = rf_in("lock", "--upgrade", "torch==2.99.0", stack["file"], "--store", tmp_path / "store")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "torch.toml" in r.stderr and "no release tag v2.99.0" in r.stderr
    assert "Traceback" not in r.stderr and (d / "torch.toml").read_text() == before
    bad = rf_in("lock", "--upgrade", "torch==latest", stack["file"], "--store", tmp_path / "store")
    assert bad.returncode == 2 and "NAME==VERSION" in bad.stderr, bad.stderr
