"""``lock --companions STACK``: pin a stack's triton, torchvision and torchaudio from its torch.

Torch names its companions itself, so nobody copies commits by hand:

- **triton**: the commit in the torch tree's ``.ci/docker/ci_commit_pins/triton.txt`` (the version
  in ``.ci/docker/triton_version.txt``, when present, becomes the recipe's version);
- **torchvision / torchaudio**: the commit in the tree's ``related_commits`` (ROCm's fork lists
  them there) or else the release tag of the versions released with that torch, from
  :data:`RELEASED_WITH` (torch's own tree does not name them); a tag is resolved to its commit.

The torch tree is read at the torch recipe's pinned commit through the git mirror cache (the same
one ``realize`` uses); nothing is checked out. The companions' recipes are rewritten with tomlkit
(comments and layout kept): ``[source] rev`` (and ``ref`` for a tag; a stale ``ref`` is removed
when a bare commit is pinned), the public part of ``[package] version`` (its ``+local`` part is
kept) and ``[env] BUILD_VERSION`` when the recipe sets it (torchvision's and torchaudio's
setup.py name the wheel from it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import Problem, RecipeError, SourceError, UsageError
from rocmforge.lock.locker import LockChange, LockReport, resolve_ref, source_url

if TYPE_CHECKING:
    from rocmforge.store.store import Store

TRITON_PIN = ".ci/docker/ci_commit_pins/triton.txt"
TRITON_VERSION = ".ci/docker/triton_version.txt"
TORCH_VERSION = "version.txt"
RELATED_COMMITS = "related_commits"

#: Package names of the companion recipes, by role.
ROLES: dict[str, str] = {
    "triton": "triton",
    "pytorch-triton": "triton",
    "pytorch-triton-rocm": "triton",
    "torchvision": "torchvision",
    "torchaudio": "torchaudio",
}

_COMMIT = re.compile(r"^[0-9a-f]{40}$")

#: A torch repository -> the Triton repository whose commits its ``ci_commit_pins/triton.txt``
#: names: upstream PyTorch builds its triton / pytorch-triton-rocm wheels from triton-lang/triton
#: (``.github/scripts/build_triton_wheel.py``), ROCm's fork of PyTorch pins ROCm's fork of Triton.
TRITON_REPO: dict[str, str] = {
    "pytorch/pytorch": "triton-lang/triton",
    "rocm/pytorch": "rocm/triton",
}
_SAME_REPO = {"openai/triton": "triton-lang/triton"}  # the old name redirects
_GITHUB = re.compile(r"^(?:https?://|ssh://git@|git@)github\.com[/:]([^/]+)/([^/]+?)(?:\.git)?/?$")


def github_slug(url: str) -> str | None:
    """``owner/name`` (lower case, old names mapped to the new) of a GitHub URL, else None."""
    m = _GITHUB.match(url.strip())
    if m is None:
        return None
    slug = f"{m.group(1)}/{m.group(2)}".lower()
    return _SAME_REPO.get(slug, slug)


def triton_fork_note(torch_url: str, triton_url: str) -> str | None:
    """Why a triton recipe keeps its own pin: it builds another repository than the one the
    torch's pin file names commits of (a triton-lang commit written into a ROCm/triton recipe
    may not exist there). None when the pin file applies."""
    torch, triton = github_slug(torch_url), github_slug(triton_url)
    expected = TRITON_REPO.get(torch or "")
    known = set(TRITON_REPO.values())
    if expected is None or triton not in known or triton == expected:
        return None
    return (
        f"source.rev kept: torch from {torch} pins commits of {expected} in {TRITON_PIN}, but "
        f"this recipe builds {triton} (as AMD's TheRock builds do on Linux); move its pin by "
        f'hand, or use git = "https://github.com/{expected}.git" to take the pin file\'s commit'
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Released:
    """The torchvision and torchaudio releases made for one torch release, and the evidence."""

    torchvision: str
    torchaudio: str
    source: str


#: torch release -> the torchvision / torchaudio released with it. Torch's tree does not name them
#: (only ROCm's fork has ``related_commits``), so this table is kept here. Up to torch 2.14,
#: torchvision's minor is torch's + 15 with the same patch (torch 2.15.0 came with torchvision
#: 0.29.2, a stable-ABI build); torchaudio follows torch up to 2.11, whose stable-ABI build
#: supports every later torch (no torchaudio 2.12+ exists).
RELEASED_WITH: dict[str, Released] = {
    "2.5.0": Released(torchvision="0.20.0", torchaudio="2.5.0", source="torchaudio compat matrix"),
    "2.5.1": Released(torchvision="0.20.1", torchaudio="2.5.1", source="recipes/*-mi300x.toml"),
    "2.6.0": Released(torchvision="0.21.0", torchaudio="2.6.0", source="torchaudio compat matrix"),
    "2.7.0": Released(torchvision="0.22.0", torchaudio="2.7.0", source="torchaudio compat matrix"),
    "2.7.1": Released(torchvision="0.22.1", torchaudio="2.7.1", source="spack py-torch*"),
    "2.8.0": Released(torchvision="0.23.0", torchaudio="2.8.0", source="torchaudio compat matrix"),
    "2.9.0": Released(torchvision="0.24.0", torchaudio="2.9.0", source="torchaudio compat matrix"),
    "2.9.1": Released(torchvision="0.24.1", torchaudio="2.9.1", source="torchaudio compat matrix"),
    "2.10.0": Released(torchvision="0.25.0", torchaudio="2.10.0", source="torchaudio matrix"),
    "2.11.0": Released(torchvision="0.26.0", torchaudio="2.11.0", source="torchaudio matrix"),
    "2.12.0": Released(torchvision="0.27.0", torchaudio="2.11.0", source="spack; audio 2.11+"),
    "2.12.1": Released(torchvision="0.27.1", torchaudio="2.11.0", source="spack; audio 2.11+"),
    "2.14.0": Released(torchvision="0.29.0", torchaudio="2.11.1", source="vision v0.29.0 notes"),
    "2.14.1": Released(torchvision="0.29.1", torchaudio="2.11.1", source="vision v0.29.1 notes"),
    # no torchvision 0.30: 0.29.2 (a stable-ABI py3-none wheel, torch>=2.14.0) was uploaded to
    # PyPI with torch 2.15.0 on 2026-10-28; torchaudio 2.11.1 is still the newest
    "2.15.0": Released(torchvision="0.29.2", torchaudio="2.11.1", source="PyPI, 2026-10-28"),
}

#: The release tag of each companion version, as the upstream repositories name them.
TAG = "v{version}"
#: ``[env]`` keys that name the wheel's version (torchvision's and torchaudio's setup.py read
#: ``BUILD_VERSION``, torch's build ``PYTORCH_BUILD_VERSION``): their public part follows a move.
VERSION_ENV = ("BUILD_VERSION", "PYTORCH_BUILD_VERSION")


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchPins:
    """What a torch tree at one commit says about its companions."""

    commit: str
    version: str | None
    triton_commit: str | None
    triton_version: str | None
    #: project -> commit, from ROCm's ``related_commits`` (``os|source|project|branch|commit|url``)
    related: dict[str, str]


def _show(mirror: Path, commit: str, path: str) -> str | None:
    from rocmforge.sources.git import git_ok, run_git

    if not git_ok(["--git-dir", mirror, "cat-file", "-e", f"{commit}:{path}"]):
        return None
    data = run_git(["--git-dir", mirror, "show", f"{commit}:{path}"], what=f"reading {path}")
    return data.decode("utf-8", "replace")


def read_torch_pins(url: str, commit: str, cache: Path) -> TorchPins:
    """Read the companion pins from the torch tree ``url`` at ``commit`` (via the mirror cache)."""
    from rocmforge.sources.git import ensure_mirror

    mirror = ensure_mirror(url, commit, cache)
    version = (_show(mirror, commit, TORCH_VERSION) or "").strip() or None
    pin = (_show(mirror, commit, TRITON_PIN) or "").strip().lower() or None
    if pin is not None and not _COMMIT.match(pin):
        raise SourceError(f"{url}@{commit[:12]}:{TRITON_PIN}: {pin!r} is not a full commit id")
    triton_version = (_show(mirror, commit, TRITON_VERSION) or "").strip() or None
    related: dict[str, str] = {}
    for line in (_show(mirror, commit, RELATED_COMMITS) or "").splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and parts[0] == "ubuntu" and _COMMIT.match(parts[4].lower()):
            related[parts[2]] = parts[4].lower()
    return TorchPins(
        commit=commit,
        version=version,
        triton_commit=pin,
        triton_version=triton_version,
        related=related,
    )


def _bad(file: Path, key: str, message: str) -> RecipeError:
    return RecipeError([Problem(file=file, key=key, message=message)])


def _release(version: str, file: Path) -> str:
    """``2.14.1`` for ``2.14.1`` / ``2.14.1+rocm7.15``; a pre-release (a nightly) is refused."""
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion as exc:
        raise _bad(file, "package.version", f"{version!r} is not a version") from exc
    if v.is_prerelease or v.is_devrelease:
        raise _bad(
            file,
            "package.version",
            f"torch {version} is not a release: its companions are nightlies; pin them by hand",
        )
    return ".".join(str(n) for n in (*v.release, 0, 0)[:3])


def _public(version: str) -> tuple[str, str]:
    public, plus, local = version.partition("+")
    return public, plus + local


def _torch_recipe(recipes: Sequence[Path]) -> tuple[Path, Any]:
    from rocmforge.recipe.load import load_recipe

    found = []
    for path in recipes:
        recipe = load_recipe(path)
        if recipe.package.name.lower() == "torch":
            found.append((path, recipe))
    if len(found) != 1:
        raise UsageError(f"lock --companions: the stack must hold exactly one torch recipe, not "
                         f"{len(found)}")  # fmt: skip
    return found[0]


def companion_pins(
    stack_file: Path, *, store: Store, moved: tuple[str, str] | None = None
) -> tuple[TorchPins, dict[str, Released]]:
    """Read the torch of ``stack_file`` and return its pins and (by role) released versions.

    ``moved`` (commit, version) reads the torch tree at that commit instead of the recipe's pin
    (``lock --check --upgrade torch==V``: the recipe is not rewritten)."""
    from rocmforge.recipe.stack import load_stack

    stack = load_stack(stack_file)
    if stack is None:
        raise UsageError(f"{stack_file}: lock --companions needs a stack file ([stack] table)")
    path, torch = _torch_recipe(stack.recipes)
    src = torch.source
    if src.kind != "git" or not src.git:
        raise _bad(path, "source.git", "lock --companions reads torch's own tree: a git source")
    url = source_url(src.git, path.parent)
    commit = src.rev or (resolve_ref(url, src.ref) if src.ref else None)
    declared = torch.package.version
    if moved is not None:
        commit, declared = moved
    if commit is None:
        raise _bad(path, "source.rev", "pin torch first (rev, or a ref `lock` resolves)")
    pins = read_torch_pins(url, commit, store.sources_dir)
    version = pins.version or declared
    release = _release(version, path)
    if pins.version is not None and _release(declared, path) != release:
        raise _bad(
            path,
            "package.version",
            f"{declared}, but torch's {TORCH_VERSION} at {commit[:12]} says {pins.version}",
        )
    released = RELEASED_WITH.get(release)
    return pins, ({} if released is None else {"torchvision": released, "torchaudio": released})


def lock_companions(
    stack_file: Path,
    *,
    store: Store,
    write: bool = True,
    moved: tuple[str, str] | None = None,
) -> list[LockReport]:
    """Fill the companion pins of the stack at ``stack_file`` from its torch; one report per
    companion recipe (nothing is written when nothing changed or ``write`` is False).
    ``moved`` is as for :func:`companion_pins`."""
    from rocmforge.recipe.load import load_recipe
    from rocmforge.recipe.stack import load_stack

    stack_file = Path(os.path.abspath(stack_file))
    pins, released = companion_pins(stack_file, store=store, moved=moved)
    stack = load_stack(stack_file)
    assert stack is not None
    torch_file, torch = _torch_recipe(stack.recipes)
    reports = []
    for path in stack.recipes:
        recipe = load_recipe(path)
        role = ROLES.get(recipe.package.name.lower())
        if role is None:
            continue
        if role == "triton":
            note = recipe.source.git and triton_fork_note(
                source_url(torch.source.git or "", torch_file.parent),
                source_url(recipe.source.git, path.parent),
            )
            if note:
                reports.append(LockReport(recipe=path, changes=(), written=False, notes=(note,)))
                continue
            if pins.triton_commit is None:
                raise _bad(path, "source.rev", f"torch's tree at {pins.commit[:12]} has no "
                           f"{TRITON_PIN}")  # fmt: skip
            target = _Target(rev=pins.triton_commit, ref=None, version=pins.triton_version)
        elif role in pins.related:  # ROCm's own pin: a commit on a branch, no version claimed
            target = _Target(rev=pins.related[role], ref=None, version=None)
        else:
            if role not in released:
                raise _bad(
                    path,
                    "source.rev",
                    f"no {role} release is known for torch {pins.version}: add it to "
                    "rocmforge.lock.companions.RELEASED_WITH or pin it by hand",
                )
            version = getattr(released[role], role)
            if not recipe.source.git:
                raise _bad(path, "source.git", f"{role} needs a git source to pin its tag")
            tag = TAG.format(version=version)
            rev = resolve_ref(source_url(recipe.source.git, path.parent), tag)
            target = _Target(rev=rev, ref=tag, version=version)
        reports.append(_rewrite(path, target, write=write))
    return reports


@dataclass(frozen=True, slots=True, kw_only=True)
class _Target:
    rev: str
    ref: str | None
    version: str | None


def _rewrite(path: Path, target: _Target, *, write: bool) -> LockReport:
    import tomlkit

    from rocmforge.lock.locker import insert_after, write_recipe

    text = path.read_text(encoding="utf-8")
    doc = tomlkit.parse(text)
    changes: list[LockChange] = []
    source = doc.get("source")
    if not isinstance(source, dict):
        raise _bad(path, "source", "lock --companions writes [source] rev: declare [source] here")

    def put(table: Any, key: str, value: str, where: str, after: str | None = None) -> None:
        old = table.get(key)
        if old is not None and str(old) == value:
            return
        if old is None and after is not None and after in table:
            insert_after(table, after, key, value)
        else:
            table[key] = value
        changes.append(LockChange(key=f"{where}.{key}", old=None if old is None else str(old),
                                  new=value))  # fmt: skip

    if target.ref is not None:
        put(source, "ref", target.ref, "source", after="git")
    elif "ref" in source:
        changes.append(LockChange(key="source.ref", old=str(source["ref"]), new=None))
        del source["ref"]
    put(source, "rev", target.rev, "source", after="ref" if "ref" in source else "git")
    if target.version is not None:
        package = doc.get("package")
        if isinstance(package, dict) and isinstance(package.get("version"), str):
            public, local = _public(str(package["version"]))
            if public != target.version:
                put(package, "version", target.version + local, "package")
        env = doc.get("env")
        for key in VERSION_ENV:
            if isinstance(env, dict) and isinstance(env.get(key), str):
                public, local = _public(str(env[key]))
                if public != target.version:
                    put(env, key, target.version + local, "env")
    written = False
    if changes and write:
        write_recipe(path, tomlkit.dumps(doc))
        written = True
    return LockReport(recipe=path, changes=tuple(changes), written=written)


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """``lock --upgrade NAME==VERSION``: one recipe moved to a release tag of its git source."""

    recipe: Path
    name: str
    version: str
    tag: str
    rev: str
    report: LockReport


def parse_release(text: str) -> tuple[str, str] | None:
    """``("torch", "2.15.0")`` for ``torch==2.15.0``; None for a bare NAME (or ``*``)."""
    name, eq, version = text.partition("==")
    if not eq:
        return None
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or not re.fullmatch(
        r"\d+(\.\d+)*", version
    ):
        raise UsageError(
            f"lock --upgrade {text}: a release move is NAME==VERSION with a release version, "
            "e.g. torch==2.15.0"
        )
    return name, version


def move_release(recipes: Sequence[Path], name: str, version: str, *, write: bool) -> Move:
    """Move the one recipe of ``recipes`` whose package is ``name`` to the release ``version``:
    ``[source] ref`` the tag (``v2.15.0``, else ``2.15.0``) and ``rev`` its commit, the public
    part of ``[package] version`` and of the ``[env]`` version keys. The tag must exist on the
    recipe's git remote; nothing is written when ``write`` is False."""
    from rocmforge.recipe.load import load_recipe

    norm = re.sub(r"[-_.]+", "-", name).lower()
    found = [
        (p, r) for p in recipes
        if re.sub(r"[-_.]+", "-", (r := load_recipe(p)).package.name).lower() == norm
    ]  # fmt: skip
    if len(found) != 1:
        raise UsageError(
            f"lock --upgrade {name}=={version}: the targets hold {len(found)} recipes of "
            f"package {name!r}, not one"
        )
    path, recipe = found[0]
    if recipe.source.kind != "git" or not recipe.source.git:
        raise _bad(path, "source.git", f"moving {name} to {version} needs a git source with tags")
    url = source_url(recipe.source.git, path.parent)
    for tag in (TAG.format(version=version), version):
        try:
            rev = resolve_ref(url, tag)
        except SourceError as exc:
            if "no tag or branch named" not in str(exc):
                raise  # unreachable, ambiguous: said as it is
            continue
        target = _Target(rev=rev, ref=tag, version=version)
        report = _rewrite(path, target, write=write)
        return Move(recipe=path, name=name, version=version, tag=tag, rev=rev, report=report)
    raise SourceError(
        f"{path}: source.git: {url} has no release tag {TAG.format(version=version)} or {version}"
    )
