"""``rocmforge outdated TARGET``: what newer releases exist for a recipe's or a stack's pins.

For every recipe of the target's closure, three kinds of pin are looked up where the recipe's
own configuration points, never on a hard-coded site:

- **the source**: the release tags (``v2.15.0``, ``2.15.0``) of the recipe's git remote
  (``git ls-remote --tags``), against the tag the recipe pins (``ref``) or its
  ``[package] version``;
- **the package on the Python index**: the versions of the recipe's package name on the
  indexes of ``ROCMFORGE_PIP_ARGS`` (``--index-url``/``--extra-index-url`` PEP 503 pages, or
  ``--find-links`` directories), against its ``[package] version``;
- **the ROCm SDK** of a ``rocm-sdk`` toolchain: the versions of ``rocm-sdk-core`` on the SDK
  index (``[toolchain] index``, ``ROCMFORGE_SDK_ARGS``), against ``[toolchain] version``.

Pre-releases and dev releases are left out (a nightly is not a release). What cannot be reached
is said per row (``unreachable``), never passed over.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.errors import SourceError

#: Where ``realize`` and ``lock`` take pip's index options from (rocmforge.sources.requirements).
PIP_ARGS_ENV = "ROCMFORGE_PIP_ARGS"
SDK_PACKAGE = "rocm-sdk-core"
_TAG = re.compile(r"^v?(\d+(?:\.\d+)*)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutdatedRow:
    """One pin: the recipe, what kind of pin (``source``, ``index``, ``rocm-sdk``), the name,
    the version pinned, the newest release found (None: none, or unreachable) and where."""

    recipe: Path
    kind: str
    name: str
    current: str | None
    newest: str | None
    where: str
    error: str | None = None

    @property
    def outdated(self) -> bool:
        """True if a release newer than the pinned one exists."""
        from packaging.version import Version

        if self.newest is None or self.current is None:
            return False
        return Version(self.newest) > Version(_public(self.current))

    def to_json(self) -> dict[str, Any]:
        """The row as JSON-ready data."""
        return {
            "recipe": str(self.recipe),
            "kind": self.kind,
            "name": self.name,
            "current": self.current,
            "newest": self.newest,
            "outdated": self.outdated,
            "where": self.where,
            "error": self.error,
        }


def _public(version: str) -> str:
    return version.partition("+")[0]


def newest_release(versions: Iterable[str]) -> str | None:
    """The highest final release among ``versions`` (invalid, pre and dev versions skipped)."""
    from packaging.version import InvalidVersion, Version

    best: Version | None = None
    for text in versions:
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        if v.is_prerelease or v.is_devrelease:
            continue
        v = Version(v.public)
        if best is None or v > best:
            best = v
    return None if best is None else str(best)


def tag_versions(url: str) -> list[str]:
    """The versions of the release tags of the git remote ``url``. Raises SourceError."""
    from rocmforge.sources.git import run_git

    out = run_git(["ls-remote", "--tags", "--refs", url], what=f"listing the tags of {url}")
    versions = []
    for line in out.decode("utf-8", "replace").splitlines():
        ref = line.partition("\t")[2].removeprefix("refs/tags/")
        m = _TAG.match(ref)
        if m:
            versions.append(m.group(1))
    return versions


def index_versions(name: str, args: Sequence[str]) -> tuple[list[str], str]:
    """The versions of package ``name`` (wheels and sdists) on the indexes and find-links of
    pip options ``args``, and a description of where it looked."""
    from rocmforge.lock.sdkwheels import listing, project_pages

    normal = re.sub(r"[-_.]+", "-", name).lower()
    pages = project_pages(normal, args)
    versions: list[str] = []
    file_re = re.compile(
        rf"^{re.escape(normal).replace('-', '[-_.]')}-([^-]+?)(?:-.*\.whl|\.tar\.gz|\.zip)$",
        re.IGNORECASE,
    )
    for page in pages:
        for file, _ in listing(page):
            m = file_re.match(file)
            if m:
                versions.append(m.group(1))
    return versions, ", ".join(pages) or "no index configured"


def outdated(recipes: Sequence[Path], environ: dict[str, str] | None = None) -> list[OutdatedRow]:
    """The rows of every recipe of ``recipes`` (a closure, dependencies first)."""
    from rocmforge.lock.locker import source_url
    from rocmforge.recipe.load import load_recipe_unlocked
    from rocmforge.toolchain.rocmsdk import index_args

    env = dict(os.environ) if environ is None else environ
    pip_args = shlex.split(env.get(PIP_ARGS_ENV, ""))
    rows: list[OutdatedRow] = []
    for path in recipes:
        recipe = load_recipe_unlocked(path)
        pkg = recipe.package
        src = recipe.source
        if src.kind == "git" and src.git:
            url = source_url(src.git, path.parent)
            tagged = _TAG.match(src.ref) if src.ref else None
            current = tagged.group(1) if tagged else None
            try:
                newest = newest_release(tag_versions(url))
                error = None
            except SourceError as exc:
                newest, error = None, str(exc)
            rows.append(
                OutdatedRow(
                    recipe=path,
                    kind="source",
                    name=f"{pkg.name} (git tags)",
                    current=current or _public(pkg.version),
                    newest=newest,
                    where=url,
                    error=error,
                )
            )
        if pip_args:
            versions, where = index_versions(pkg.name, pip_args)
            rows.append(
                OutdatedRow(
                    recipe=path,
                    kind="index",
                    name=pkg.name,
                    current=_public(pkg.version),
                    newest=newest_release(versions),
                    where=where,
                )
            )
        tc = recipe.toolchain
        if tc.kind == "rocm-sdk":
            args = index_args(tc, env)
            if args:
                versions, where = index_versions(SDK_PACKAGE, args)
                newest, error = newest_release(versions), None
            else:
                newest, where = None, "no SDK index configured"
                error = "set [toolchain] index or ROCMFORGE_SDK_ARGS"
            rows.append(
                OutdatedRow(
                    recipe=path,
                    kind="rocm-sdk",
                    name=SDK_PACKAGE,
                    current=tc.sdk_version,
                    newest=newest,
                    where=where,
                    error=error,
                )
            )
    return rows
