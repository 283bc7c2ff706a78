"""Provenance that a standard verifier accepts (in-toto Statement v1 / SLSA Provenance v1).

Every statement any test leaves in its tmp_path is validated by conftest's autouse fixture; these
tests pin the specific promises: byproducts with digests, sha256 beside blake3 for the toolchain,
the path source and patches, and repository-relative paths in ``externalParameters``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, commit_all, git, rf
from provenance_check import validate_statement

pytestmark = pytest.mark.slow  # each test builds once (~4 s)

PATCH = """\
--- a/tiny/__init__.py
+++ b/tiny/__init__.py
@@ -1 +1 @@
-VALUE = 42
+VALUE = 43
"""


def _tree_sha256(root: Path) -> str:
    """The documented sha256 tree digest, computed independently of rocmforge."""
    out = hashlib.sha256(b"rocmforge-tree-sha256-v1\0")
    rels = sorted(
        os.path.relpath(os.path.join(d, f), root).encode()
        for d, dirs, files in os.walk(root)
        for f in files
        if ".git" not in Path(d).relative_to(root).parts
    )
    for rel in rels:
        path = root / rel.decode()
        kind = "x" if os.access(path, os.X_OK) else "f"
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        out.update(rel + f"\0{kind}\0{digest}\0".encode())
    return out.hexdigest()


@pytest.fixture
def statement(tmp_path: Path, tiny_src: Path, store: Path) -> tuple[dict, Path, Path]:
    """A real build of a patched path source whose recipe sits in a git repository."""
    repo = tmp_path / "repo"
    (repo / "recipes").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "recipes" / "fix.patch").write_text(PATCH)
    recipe = repo / "recipes" / "tiny.toml"
    text = TINY_RECIPE.format(src=tiny_src).replace(
        "[build]", 'patches = ["fix.patch"]\n\n[build]'
    )
    recipe.write_text(text)
    commit_all(repo, "recipe")
    proc = rf("realize", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)
    entry = Path(report["path"])
    return json.loads((entry / "provenance.json").read_text()), entry, recipe


def test_statement_passes_the_in_toto_library_and_the_schema(statement: tuple) -> None:
    validate_statement(statement[0])


def test_byproducts_carry_the_digests_of_the_entry_files(statement: tuple) -> None:
    stmt, entry, _ = statement
    byproducts = {b["name"]: b for b in stmt["predicate"]["runDetails"]["byproducts"]}
    assert set(byproducts) == {"build.log.zst", "telemetry.json.zst"}
    meta = json.loads((entry / "meta.json").read_text())
    for name, b in byproducts.items():
        data = (entry / name).read_bytes()
        assert b["digest"]["sha256"] == hashlib.sha256(data).hexdigest()
        assert b["digest"]["blake3"] == meta["files"][name]


def test_toolchain_path_source_and_patches_have_sha256(statement: tuple, tiny_src: Path) -> None:
    stmt = statement[0]
    deps = {d["name"]: d for d in stmt["predicate"]["buildDefinition"]["resolvedDependencies"]}
    tc = deps["toolchain"]
    canonical = json.dumps(
        tc["annotations"], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()
    assert tc["digest"]["sha256"] == hashlib.sha256(canonical).hexdigest()
    assert len(tc["digest"]["blake3"]) == 64
    assert deps["source"]["digest"]["sha256"] == _tree_sha256(tiny_src)
    patch = deps["source.patches/fix.patch"]
    assert patch["digest"]["sha256"] == hashlib.sha256(PATCH.encode()).hexdigest()


def test_external_parameters_are_relative_to_the_recipe_repository(statement: tuple) -> None:
    stmt, _, recipe = statement
    bd = stmt["predicate"]["buildDefinition"]
    ext, local = bd["externalParameters"], bd["internalParameters"]["localPaths"]
    repo = recipe.parent.parent
    assert local["repository"] == str(repo)
    assert ext["recipeFile"] == "recipes/tiny.toml"
    assert ext["extends"] == ["recipes/tiny.toml"]
    assert ext["recipe"]["source"]["patches"] == ["recipes/fix.patch"]
    assert local["paths"]["recipeFile"] == str(recipe)
    assert local["paths"]["recipe.source.patches[0]"] == str(repo / "recipes" / "fix.patch")
    # The source lives outside the repository: it stays absolute (no relative form exists).
    assert os.path.isabs(ext["recipe"]["source"]["path"])


@pytest.mark.parametrize(
    ("what", "breaks"),
    [
        ("a byproduct with only a name", lambda s: s["predicate"]["runDetails"].update(
            byproducts=[{"name": "build.log.zst"}])),
        ("a toolchain digest without sha256", lambda s: [
            d.update(digest={"blake3": "ab" * 32})
            for d in s["predicate"]["buildDefinition"]["resolvedDependencies"]
            if d["name"] == "toolchain"]),
        ("an absolute path in externalParameters", lambda s: s["predicate"]["buildDefinition"][
            "externalParameters"].update(recipeFile=s["predicate"]["buildDefinition"][
                "internalParameters"]["localPaths"]["paths"]["recipeFile"])),
        ("an unknown predicate field", lambda s: s["predicate"].update(extra=1)),
    ],
)
def test_the_checker_rejects_what_a_verifier_would(statement: tuple, what: str, breaks) -> None:
    bad = copy.deepcopy(statement[0])
    breaks(bad)
    with pytest.raises(Exception):  # noqa: B017 - several libraries, several error types
        validate_statement(bad)
