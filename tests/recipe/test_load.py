"""Tests for recipe loading (rocmforge.recipe.load) and validation (Recipe.from_dict)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocmforge.errors import Problem, RecipeError
from rocmforge.recipe.load import load_recipe, parse_recipe_text, scan_lines
from rocmforge.recipe.model import Recipe, parse_duration

COMMIT = "a8d6afb511a69687bbb2b7e88a3cf67917e1697e"

FULL = f"""\
schema = 1

[package]
name = "torch"
version = "2.5.1"

[source]
git = "https://github.com/pytorch/pytorch.git"
rev = "{COMMIT}"
submodules = true
patches = ["patches/fix-foo.patch", "../shared/bar.patch"]

[toolchain]
kind = "system"
python = "3.12"
cc = "gcc-12"
cxx = "g++-12"

[requirements]
build = ["numpy==2.0.2", "setuptools==75.6.0"]

[env]
USE_ROCM = "1"
PYTORCH_ROCM_ARCH = "gfx942"

[build]
steps = ["python setup.py bdist_wheel -d $OUT"]
passthrough = ["MAX_JOBS", "CCACHE_DIR"]
timeout = "8h"

[check]
import = ["torch", "torch.nn"]
"""

MINIMAL = """\
schema = 1
[package]
name = "demo"
version = "1.0"
[source]
path = "src"
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def problems(path: Path) -> tuple[Problem, ...]:
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    return info.value.problems


def only(path: Path) -> Problem:
    found = problems(path)
    assert len(found) == 1, found
    return found[0]


def test_full_recipe_loads_every_field(tmp_path: Path) -> None:
    file = write(tmp_path / "r" / "torch.toml", FULL)
    r = load_recipe(file)
    assert r.schema == 1 and r.file == file
    assert (r.package.name, r.package.version) == ("torch", "2.5.1")
    assert r.source.kind == "git"
    assert r.source.git == "https://github.com/pytorch/pytorch.git"
    assert (r.source.rev, r.source.submodules, r.source.path) == (COMMIT, True, None)
    assert r.source.patches == (
        tmp_path / "r" / "patches" / "fix-foo.patch",
        tmp_path / "shared" / "bar.patch",
    )
    assert (r.toolchain.kind, r.toolchain.python) == ("system", "3.12")
    assert (r.toolchain.cc, r.toolchain.cxx) == ("gcc-12", "g++-12")
    assert r.requirements.build == ("numpy==2.0.2", "setuptools==75.6.0")
    assert dict(r.env) == {"USE_ROCM": "1", "PYTORCH_ROCM_ARCH": "gfx942"}
    assert r.build.steps == ("python setup.py bdist_wheel -d $OUT",)
    assert r.build.passthrough == ("MAX_JOBS", "CCACHE_DIR")
    assert r.build.timeout == 8 * 3600.0
    assert r.check.imports == ("torch", "torch.nn")
    assert r.extends_chain == (file,)
    resolved = json.loads(json.dumps(r.resolved))
    assert resolved["source"]["patches"][1] == str(tmp_path / "shared" / "bar.patch")
    assert resolved["build"]["timeout"] == "8h"


def test_minimal_recipe_gets_defaults(tmp_path: Path) -> None:
    r = load_recipe(write(tmp_path / "m.toml", MINIMAL))
    assert r.source.kind == "path" and r.source.path == tmp_path / "src"
    assert (r.toolchain.kind, r.toolchain.python, r.toolchain.cc, r.toolchain.cxx) == (
        "system",
        "3.11",
        "cc",
        "c++",
    )
    assert r.requirements.build == () and dict(r.env) == {}
    assert r.build.steps == () and r.build.passthrough == () and r.build.timeout == 4 * 3600.0
    assert r.check.imports == ()


def test_check_import_accepts_a_single_string(tmp_path: Path) -> None:
    r = load_recipe(write(tmp_path / "m.toml", MINIMAL + '[check]\nimport = "demo.core"\n'))
    assert r.check.imports == ("demo.core",)


@pytest.mark.parametrize(
    ("git", "expected"),
    [
        ("../repo", "{root}/repo"),
        ("file:///srv/repo.git", "file:///srv/repo.git"),
        ("git@github.com:pytorch/pytorch.git", "git@github.com:pytorch/pytorch.git"),
    ],
)
def test_git_local_paths_are_made_absolute_urls_are_not(
    tmp_path: Path, git: str, expected: str
) -> None:
    text = f'schema = 1\n[package]\nname = "a"\nversion = "1"\n[source]\ngit = "{git}"\n'
    r = load_recipe(write(tmp_path / "r" / "a.toml", text + f'rev = "{COMMIT}"\n'))
    assert r.source.git == expected.format(root=tmp_path)
    assert r.resolved["source"]["git"] == expected.format(root=tmp_path)


def test_extends_deep_merge_three_levels(tmp_path: Path) -> None:
    root = write(
        tmp_path / "base" / "root.toml",
        """\
        schema = 1
        [package]
        name = "demo"
        version = "1.0"
        [source]
        path = "src"
        patches = ["root.patch"]
        [env]
        A = "root"
        B = "root"
        [build]
        steps = ["one", "two"]
        timeout = "1h"
        """,
    )
    write(
        tmp_path / "mid" / "mid.toml",
        """\
        extends = "../base/root.toml"
        [env]
        B = "mid"
        C = "mid"
        [build]
        steps = ["only"]
        """,
    )
    top = write(
        tmp_path / "top.toml",
        """\
        extends = "mid/mid.toml"
        [package]
        version = "2.0"
        [env]
        C = "top"
        [build]
        timeout = "30m"
        """,
    )
    r = load_recipe(top)
    assert r.extends_chain == (root, tmp_path / "mid" / "mid.toml", top)
    assert (r.package.name, r.package.version) == ("demo", "2.0")  # table merge, scalar replace
    assert dict(r.env) == {"A": "root", "B": "mid", "C": "top"}
    assert r.build.steps == ("only",)  # array replaces
    assert r.build.timeout == 1800.0
    # Paths are relative to the file that declared them, not the one that extends it.
    assert r.source.path == tmp_path / "base" / "src"
    assert r.source.patches == (tmp_path / "base" / "root.patch",)
    assert r.resolved["extends"] == str(tmp_path / "mid" / "mid.toml")


def test_extends_path_declared_in_child_is_relative_to_child(tmp_path: Path) -> None:
    write(tmp_path / "base" / "b.toml", MINIMAL)
    top = write(tmp_path / "sub" / "t.toml", 'extends = "../base/b.toml"\n[source]\npath = "x"\n')
    assert load_recipe(top).source.path == tmp_path / "sub" / "x"


def test_extends_self_cycle(tmp_path: Path) -> None:
    file = write(tmp_path / "a.toml", 'schema = 1\nextends = "a.toml"\n')
    p = only(file)
    assert (p.file, p.key, p.line) == (file, "extends", 2)
    assert "a.toml -> a.toml" in p.message


def test_extends_two_file_cycle(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", 'extends = "b.toml"\n')
    b = write(tmp_path / "b.toml", '# base\n\nextends = "./a.toml"\n')
    p = only(a)
    assert "cycle" in p.message and "a.toml -> b.toml -> a.toml" in p.message
    assert (p.file, p.key, p.line) == (b, "extends", 3)


def test_missing_file(tmp_path: Path) -> None:
    p = only(tmp_path / "nope.toml")
    assert (p.file, p.key, p.message) == (tmp_path / "nope.toml", "", "no such recipe")
    assert str(p) == f"{tmp_path / 'nope.toml'}: no such recipe"


def test_missing_extends_target_is_blamed_on_the_declaring_file(tmp_path: Path) -> None:
    write(tmp_path / "mid.toml", 'schema = 1\n\nextends = "gone.toml"\n')
    top = write(tmp_path / "top.toml", 'extends = "mid.toml"\n')
    p = only(top)
    assert (p.file, p.key, p.line) == (tmp_path / "mid.toml", "extends", 3)
    assert "no such recipe" in p.message and "gone.toml" in p.message


def test_syntax_error_is_one_problem_with_its_line(tmp_path: Path) -> None:
    file = write(tmp_path / "bad.toml", 'schema = 1\n[package]\nname "x"\nversion = "1"\n')
    p = only(file)
    assert (p.file, p.line, p.key) == (file, 3, "")
    assert p.message.startswith("invalid TOML:") and "at line" not in p.message


def test_syntax_error_in_base_names_the_base(tmp_path: Path) -> None:
    base = write(tmp_path / "base.toml", "schema = 1\n\n[env\n")
    p = only(write(tmp_path / "top.toml", 'extends = "base.toml"\n'))
    assert (p.file, p.line) == (base, 3)


def test_unknown_key_did_you_mean_with_line(tmp_path: Path) -> None:
    file = write(tmp_path / "t.toml", MINIMAL + '\n[pakage]\nname = "x"\n[build]\ntimout = "1h"\n')
    found = problems(file)
    assert [(p.key, p.line, p.message) for p in found] == [
        ("pakage", 8, "unknown key 'pakage' (did you mean 'package'?)"),
        ("build.timout", 11, "unknown key 'timout' (did you mean 'timeout'?)"),
    ]
    assert str(found[1]) == (
        f"{file}:11: build.timout: unknown key 'timout' (did you mean 'timeout'?)"
    )


def test_unknown_key_without_close_match_lists_the_keys(tmp_path: Path) -> None:
    p = only(write(tmp_path / "t.toml", MINIMAL + "[check]\nzzz = 1\n"))
    assert p.key == "check.zzz" and "expected one of: import" in p.message


def test_problem_in_base_names_base_file_and_line(tmp_path: Path) -> None:
    base = write(tmp_path / "base.toml", MINIMAL + '[build]\nsteps = ["a"]\ntimout = "1h"\n')
    top = write(tmp_path / "top.toml", 'extends = "base.toml"\n[build]\nsteps = ["b", 3]\n')
    found = problems(top)
    assert [(p.file, p.key, p.line) for p in found] == [
        (top, "build.steps[1]", 3),
        (base, "build.timout", 9),
    ]


@pytest.mark.parametrize(
    ("text", "key", "line", "fragment"),
    [
        ("[build]\ntimeout = true\n", "build.timeout", 8, "not a boolean (true)"),
        ('[build]\ntimeout = "soon"\n', "build.timeout", 8, "'soon' is not a duration"),
        ("[build]\ntimeout = 0\n", "build.timeout", 8, "must be positive"),
        ("[build]\nsteps = 'make'\n", "build.steps", 8, "must be an array of strings"),
        ('[build]\nsteps = [\n  "a",\n  "",\n]\n', "build.steps[1]", 10, "must not be empty"),
        ("[env]\nUSE_ROCM = 1\n", "env.USE_ROCM", 8, 'quote it: USE_ROCM = "1"'),
        ("[env]\nDEBUG = true\n", "env.DEBUG", 8, 'quote it: DEBUG = "true"'),
        ('[env]\nPATH = "/x"\n', "env.PATH", 8, "set by the sandbox"),
        ('[env]\n"1X" = "y"\n', "env.1X", 8, "not a valid variable name"),
        ('[env]\nA = "1"\n[build]\npassthrough = ["A"]\n', "build.passthrough[0]", 10, "[env]"),
        ('[build]\npassthrough = ["HOME"]\n', "build.passthrough[0]", 8, "set by the sandbox"),
        ('[toolchain]\nkind = "rocm"\nrocm = "6.2"\n', "toolchain.root", 7, "required key"),
        ('[toolchain]\nkind = "rocm"\nrocm = "6"\nroot = "/r"\n', "toolchain.rocm", 9, "'6'"),
        ('[toolchain]\nroot = "/r"\n', "toolchain.root", 8, 'only applies to kind = "rocm"'),
        ('[check]\narchs = ["gfx90a", "gfx942,gfx90a"]\n', "check.archs[1]", 8, "GPU target"),
        ('[check]\narchs = []\n', "check.archs", 8, "at least one"),
        ('[inputs.a]\npath = "x"\n', "inputs.a.env", 7, "required key"),
        ('[inputs.a]\nurl = "http://h/a.tgz"\nsha256 = "AB"\nenv = "A"\n', "inputs.a.sha256", 9,
         "64 lowercase hex"),
        ('[inputs.a]\npath = "x"\nenv = "A"\npth = 1\n', "inputs.a.pth", 10, "did you mean 'path'"),
        ('[inputs.a]\npath = "x"\nenv = "PATH"\n', "inputs.a.env", 9, "set by the sandbox"),
        ('[toolchain]\nkind = "nix"\n', "toolchain.kind", 8, "unknown kind 'nix'"),
        ('[toolchain]\npython = "py3"\n', "toolchain.python", 8, "'py3' is not a version"),
        ('[check]\nimport = ["a-b"]\n', "check.import[0]", 8, "not a dotted module name"),
        ("[toolchain]\ncc = 3\n", "toolchain.cc", 8, "must be a string, not an integer (3)"),
    ],
)
def test_wrong_values(tmp_path: Path, text: str, key: str, line: int, fragment: str) -> None:
    p = only(write(tmp_path / "t.toml", MINIMAL + text))
    assert (p.key, p.line) == (key, line)
    assert fragment in p.message


def test_section_must_be_a_table(tmp_path: Path) -> None:
    p = only(write(tmp_path / "t.toml", "env = 3\n" + MINIMAL))
    assert (p.key, p.line) == ("env", 1) and "must be a table" in p.message


def test_submodules_must_be_boolean(tmp_path: Path) -> None:
    text = 'schema = 1\n[package]\nname = "a"\nversion = "1"\n[source]\ngit = "../r"\n'
    file = write(tmp_path / "t.toml", text + f'rev = "{COMMIT}"\nsubmodules = "yes"\n')
    p = only(file)
    assert (p.key, p.line) == ("source.submodules", 8)
    assert "true or false" in p.message and "'yes'" in p.message


def test_missing_source(tmp_path: Path) -> None:
    p = only(write(tmp_path / "t.toml", 'schema = 1\n[package]\nname = "a"\nversion = "1"\n'))
    assert p.key == "source" and "missing table [source]" in p.message


def test_both_path_and_git(tmp_path: Path) -> None:
    extra = f'git = "https://example.org/x.git"\nrev = "{COMMIT}"\n'
    p = only(write(tmp_path / "t.toml", MINIMAL + extra))
    assert (p.key, p.line) == ("source", 5) and "not both" in p.message


def test_short_rev_points_at_lock(tmp_path: Path) -> None:
    text = 'schema = 1\n[package]\nname = "a"\nversion = "1"\n'
    text += '[source]\ngit = "https://example.org/x.git"\nrev = "v2.5.1"\n'
    p = only(write(tmp_path / "t.toml", text))
    assert (p.key, p.line) == ("source.rev", 7)
    assert "full 40-character commit" in p.message and "rocmforge lock" in p.message


def test_git_without_rev(tmp_path: Path) -> None:
    text = 'schema = 1\n[package]\nname = "a"\nversion = "1"\n[source]\ngit = "../x"\n'
    p = only(write(tmp_path / "t.toml", text))
    assert (p.key, p.line, p.message) == ("source.rev", 5, "required key is missing")


@pytest.mark.parametrize(
    "pin",
    ["numpy", "numpy>=2", "numpy==2.*", "numpy[x]==2.0", "numpy==2.0; python_version>'3'"],
)
def test_unlocked_specifier_asks_for_lock(tmp_path: Path, pin: str) -> None:
    text = f'[requirements]\nbuild = [\n  "cmake==3.31.1",\n  "{pin}",\n]\n'
    p = only(write(tmp_path / "t.toml", MINIMAL + text))
    assert p.key == "requirements.build"
    assert "not locked" in p.message and "rocmforge lock" in p.message


@pytest.mark.parametrize(
    ("pin", "fragment"),
    [("numpy>>2", "not a PEP 508 requirement"), ("numpy==two!", "not a PEP 508 requirement")],
)
def test_bad_requirement_names_the_index(tmp_path: Path, pin: str, fragment: str) -> None:
    text = f'[requirements]\nbuild = [\n  "cmake==3.31.1",\n  "{pin}",\n]\n'
    p = only(write(tmp_path / "t.toml", MINIMAL + text))
    assert (p.key, p.line) == ("requirements.build[1]", 10)
    assert fragment in p.message


def test_duplicate_requirement(tmp_path: Path) -> None:
    text = '[requirements]\nbuild = ["py-yaml==6.0.2", "Py_YAML==6.0.1"]\n'
    p = only(write(tmp_path / "t.toml", MINIMAL + text))
    assert p.key == "requirements.build[1]" and "duplicate" in p.message


def test_invalid_name_and_version(tmp_path: Path) -> None:
    text = 'schema = 1\n[package]\nname = "-bad-"\nversion = "one"\n[source]\npath = "."\n'
    found = problems(write(tmp_path / "t.toml", text))
    assert [(p.key, p.line) for p in found] == [("package.name", 3), ("package.version", 4)]


def test_schema_missing_and_unsupported(tmp_path: Path) -> None:
    p = only(write(tmp_path / "a.toml", MINIMAL.replace("schema = 1\n", "")))
    assert p.key == "schema" and "required" in p.message
    p = only(write(tmp_path / "b.toml", MINIMAL.replace("schema = 1", "schema = 2")))
    assert (p.key, p.line) == ("schema", 1) and "unsupported schema 2" in p.message
    base = write(tmp_path / "c.toml", MINIMAL.replace("schema = 1", "schema = 3"))
    p = only(write(tmp_path / "d.toml", 'schema = 1\nextends = "c.toml"\n'))
    assert (p.file, p.key) == (base, "schema") and "unsupported schema 3" in p.message


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    file = write(
        tmp_path / "t.toml",
        """\
        schema = 1
        pakage = 1
        [package]
        name = "x"
        [source]
        git = "https://example.org/x.git"
        rev = "main"
        submodules = "yes"
        [requirements]
        build = ["numpy>>1"]
        [env]
        HOME = "/root"
        [build]
        timeout = true
        """,
    )
    found = problems(file)
    assert [(p.key, p.line) for p in found] == [
        ("pakage", 2),
        ("package.version", 3),
        ("source.rev", 7),
        ("source.submodules", 8),
        ("requirements.build[0]", 10),
        ("env.HOME", 12),
        ("build.timeout", 14),
    ]
    assert all(p.file == file for p in found)


def test_from_dict_lines_fall_back_to_the_parent_table(tmp_path: Path) -> None:
    data = {"schema": 1, "package": {"name": "a"}, "source": {"path": "/src"}}
    with pytest.raises(RecipeError) as info:
        Recipe.from_dict(data, file=tmp_path / "x.toml", lines={"package": 4, "schema": 1})
    [p] = info.value.problems
    assert (p.key, p.line, p.file) == ("package.version", 4, tmp_path / "x.toml")


def test_parse_recipe_text_resolves_relative_to_file(tmp_path: Path) -> None:
    write(tmp_path / "base.toml", MINIMAL)
    r = parse_recipe_text('extends = "base.toml"\n[env]\nX = "1"\n', file=tmp_path / "mem.toml")
    assert r.file == tmp_path / "mem.toml"
    assert r.source.path == tmp_path / "src" and dict(r.env) == {"X": "1"}
    assert r.extends_chain == (tmp_path / "base.toml", tmp_path / "mem.toml")
    with pytest.raises(RecipeError) as info:
        parse_recipe_text("schema = 1\n[package]\n", file=tmp_path / "mem.toml")
    assert {p.key for p in info.value.problems} == {"package.name", "package.version", "source"}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("30m", 1800.0), ("8h", 28800.0), ("1h30m", 5400.0), ("30d", 2592000.0),
     ("1d2h3m4s", 93784.0), ("1.5h", 5400.0), (" 2m ", 120.0)],
)  # fmt: skip
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "90", "h", "1x", "30m1h", "1h1h", "1h 30m", "-5s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_integer_timeout_is_seconds(tmp_path: Path) -> None:
    r = load_recipe(write(tmp_path / "t.toml", MINIMAL + "[build]\ntimeout = 5400\n"))
    assert r.build.timeout == 5400.0


def test_scan_lines_covers_arrays_inline_tables_and_quoted_keys() -> None:
    text = textwrap.dedent(
        """\
        schema = 1  # comment with [brackets] and key = "x"
        [source]
        patches = [
          "a.patch",
          '''b
        .patch''',
          "c",
        ]
        [env]
        "QUOTED" = "1"
        inline = { x = 1, y.z = "}" }
        [build.sub]
        steps = ["a", "b"]
        """
    )
    lines = scan_lines(text)
    assert lines["schema"] == 1
    assert (lines["source.patches[0]"], lines["source.patches[1]"]) == (4, 5)
    assert lines["source.patches[2]"] == 7
    assert (lines["env.QUOTED"], lines["env.inline.y.z"]) == (10, 11)
    assert (lines["build"], lines["build.sub.steps[1]"]) == (12, 13)


def test_loading_a_valid_recipe_imports_no_tomlkit_or_filelock(tmp_path: Path) -> None:
    file = write(tmp_path / "r.toml", FULL)
    code = f"from rocmforge.recipe.load import load_recipe; load_recipe({str(file)!r})"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True
    )
    assert "rocmforge.recipe.load" in proc.stderr  # the probe really measured the import
    assert "tomlkit" not in proc.stderr and "filelock" not in proc.stderr


def test_the_documented_example_loads(tmp_path: Path) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "recipes.md").read_text()
    blocks = docs.split("## Full example")[1].split("```toml\n")[1:]
    assert len(blocks) == 2
    for block in blocks:
        body = block.split("```")[0]
        write(tmp_path / body.splitlines()[0].removeprefix("# "), body)
    r = load_recipe(tmp_path / "recipes" / "torch.toml")
    assert dict(r.env) == {"USE_CUDA": "0", "USE_ROCM": "1", "PYTORCH_ROCM_ARCH": "gfx942"}
    assert r.build.passthrough == ("MAX_JOBS", "CCACHE_DIR") and r.build.timeout == 8 * 3600.0
