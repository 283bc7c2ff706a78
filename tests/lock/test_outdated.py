"""``rocmforge outdated``: newer release tags of a recipe's git remote and newer versions of its
package on a local index (a find-links directory of real file names), as a table and --json."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import commit_all, git, rf

RECIPE = """\
schema = 1

[package]
name = "rfpkg"
version = "1.1.0+local"

[source]
git = "{git}"
ref = "v1.1.0"
rev = "{rev}"

[build]
steps = ["true"]
"""


def _remote(root: Path, tags: list[str]) -> dict[str, str]:
    root.mkdir(parents=True)
    git(root, "init", "-q")
    commits = {}
    for tag in tags:
        (root / "VERSION").write_text(tag)
        commits[tag] = commit_all(root, tag)
        git(root, "tag", "-a", tag, "-m", tag)
    return commits


def test_outdated_names_newer_tags_and_index_versions(tmp_path: Path) -> None:
    commits = _remote(tmp_path / "remote", ["v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0rc1"])
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(git=tmp_path / "remote", rev=commits["v1.1.0"]))
    links = tmp_path / "links"
    links.mkdir()
    for name in (
        "rfpkg-1.1.0-py3-none-any.whl",
        "rfpkg-1.4.0.tar.gz",
        "rfpkg-2.0.0.dev1-py3-none-any.whl",
        "other-9.0-py3-none-any.whl",
    ):
        (links / name).write_bytes(b"")
    env = {"ROCMFORGE_PIP_ARGS": f"--no-index --find-links {links}"}
    r = rf("outdated", recipe, "--json", env=env)
    assert r.returncode == 0, r.stderr
    rows = {row["kind"]: row for row in json.loads(r.stdout)}
    assert rows["source"]["current"] == "1.1.0" and rows["source"]["newest"] == "1.2.0"
    assert rows["source"]["outdated"] is True  # the rc is not a release
    assert rows["index"]["newest"] == "1.4.0" and rows["index"]["current"] == "1.1.0"

    text = rf("outdated", recipe, env=env)
    assert text.returncode == 0, text.stderr
    assert "1.2.0 *" in text.stdout and "2 pins with a newer release" in text.stdout


def test_an_unreachable_remote_is_said_per_row(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(git=tmp_path / "gone", rev="a" * 40))
    r = rf("outdated", recipe, env={"ROCMFORGE_PIP_ARGS": ""})
    assert r.returncode == 0, r.stderr
    assert "unreachable" in r.stdout and "Traceback" not in r.stderr
    missing = rf("outdated", tmp_path / "nope.toml")
    assert missing.returncode != 0 and "no such recipe" in missing.stderr
