"""Lints: each rule fires on a minimal bad recipe, stays quiet on a good one and on the shipped
recipes; acknowledged lints do not stop a build; an error lint stops realize before any fetch."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO, TINY_RECIPE, pip_args, rf, rf_in

from rocmforge.errors import RecipeError
from rocmforge.recipe.aotriton import AOTRITON_0_13B, inputs_toml, parse_asset
from rocmforge.recipe.lints import (
    GIB,
    RULES,
    Finding,
    LintError,
    LintFacts,
    enforce,
    lint_recipe,
    preflight,
)
from rocmforge.recipe.load import load_recipe, parse_recipe_text
from rocmforge.recipe.model import Recipe

# A PyTorch ROCm recipe that every lint accepts; each case below breaks one thing.
GOOD = """\
schema = 1

[package]
name = "torch"
version = "2.5.1+rocm6.2"

[source]
path = "src"

[toolchain]
kind = "rocm"
rocm = "6.2.4"
root = "/opt/rocm-6.2.4"

[requirements]
build = ["setuptools==75.6.0", "cmake==3.31.1"]

[inputs.aotriton]
path = "aotriton"
env = "AOTRITON_INSTALLED_PREFIX"

[env]
USE_ROCM = "1"
USE_CUDA = "0"
USE_RCCL = "1"
USE_NCCL = "1"
PYTORCH_ROCM_ARCH = "gfx942"
PYTORCH_BUILD_VERSION = "2.5.1+rocm6.2"
PYTORCH_BUILD_NUMBER = "0"

[build]
steps = ["python tools/amd_build/build_amd.py", "python setup.py bdist_wheel -d $OUT"]
passthrough = ["MAX_JOBS"]

[check]
archs = ["gfx942"]
"""

BIG = LintFacts(ram_bytes=1024 * GIB, cpu_count=2, host_env={})


def env(name: str, value: str) -> Callable[[str], str]:
    """Set ``[env] name = value`` (replacing an existing line)."""

    def edit(text: str) -> str:
        lines = [ln for ln in text.splitlines() if not ln.startswith(f"{name} = ")]
        i = lines.index("[env]")
        lines.insert(i + 1, f'{name} = "{value}"')
        return "\n".join(lines) + "\n"

    return edit


def drop(prefix: str) -> Callable[[str], str]:
    """Remove every line starting with ``prefix``."""
    return lambda text: "\n".join(ln for ln in text.splitlines() if not ln.startswith(prefix))


def sub(old: str, new: str) -> Callable[[str], str]:
    """Replace ``old`` (which must occur) by ``new``."""

    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new)

    return edit


def chain(*edits: Callable[[str], str]) -> Callable[[str], str]:
    """Apply ``edits`` in order."""

    def edit(text: str) -> str:
        for e in edits:
            text = e(text)
        return text

    return edit


ARCHS = 'archs = ["gfx942"]'
BUILD_STEP = '"python setup.py bdist_wheel -d $OUT"'
HIPIFY = '"python tools/amd_build/build_amd.py", '
DEVELOP = '"python setup.py develop", "python setup.py bdist_wheel -d $OUT"'

#: a torch recipe compiled for gfx90a only, for an extension to be built against
TORCH_GFX90A = parse_recipe_text(
    env("PYTORCH_ROCM_ARCH", "gfx90a")(GOOD), file=Path("/recipes/torch-gfx90a.toml")
)

# (lint id, expected severity, edit, facts, a word the message must contain)
AOT_INPUTS = '[inputs.aotriton]\npath = "aotriton"\nenv = "AOTRITON_INSTALLED_PREFIX"\n'
TRITON_INPUTS = (
    '[inputs.llvm]\npath = "llvm"\nenv = "LLVM_SYSPATH"\n'
    '[inputs.json]\npath = "json"\nenv = "JSON_SYSPATH"\n'
)
MERGE = (
    '"mkdir -p $HOME/aot && cp -r $AOTRITON_RUNTIME/. $AOTRITON_IMAGES_GFX942/. $HOME/aot/", '
    '"AOTRITON_INSTALLED_PREFIX=$HOME/aot python -m build --wheel --no-isolation -o $OUT"'
)


def _torch_214(inputs: str | None = None, steps: str = MERGE) -> Callable[[str], str]:
    """Make GOOD a torch 2.14.1 recipe on ROCm 7.15 whose AOTriton 0.13b comes from its release
    assets (runtime + gfx942 image pack, the [inputs] aotriton.inputs_toml writes), merged into one
    prefix by the build step."""
    if inputs is None:
        inputs = inputs_toml(AOTRITON_0_13B, "7.15", ["gfx942"])
    return chain(
        sub('version = "2.5.1+rocm6.2"', 'version = "2.14.1"'),
        env("PYTORCH_BUILD_VERSION", "2.14.1"),
        sub('rocm = "6.2.4"', 'rocm = "7.15.0"'),
        sub('root = "/opt/rocm-6.2.4"', 'root = "/opt/rocm-7.15.0"'),
        sub(AOT_INPUTS, inputs),
        sub(f"steps = [{HIPIFY}{BUILD_STEP}]", f"steps = [{steps}]"),
    )


ROCM_TC = 'kind = "rocm"\nrocm = "6.2.4"\nroot = "/opt/rocm-6.2.4"'
SDK_TC = 'kind = "rocm-sdk"\nversion = "10.0.0"\nfamilies = ["gfx942"]\nindex = "{index}"'

CASES: dict[str, tuple[str, str, Callable[[str], str], LintFacts, str]] = {
    "unknown-allow": (
        "RF001",
        "error",
        lambda t: t + '[lint]\nallow = { RF999 = "x" }\n',
        BIG,
        "RF999",
    ),
    "comma": (
        "RF101",
        "error",
        chain(env("PYTORCH_ROCM_ARCH", "gfx90a,gfx942"), drop("archs")),
        BIG,
        "','",
    ),
    "cmake-list-space": (
        "RF101",
        "error",
        chain(env("AMDGPU_TARGETS", "gfx942 gfx90a"), drop("archs")),
        BIG,
        "spaces",
    ),
    "upper": ("RF101", "error", env("PYTORCH_ROCM_ARCH", "GFX942"), BIG, "gfx942"),
    "feature": ("RF101", "error", env("PYTORCH_ROCM_ARCH", "gfx90a:xnack"), BIG, "xnack"),
    "old-rocm": ("RF102", "error", sub('rocm = "6.2.4"', 'rocm = "5.7.1"'), BIG, ">= 6.0"),
    "unverified": (
        "RF102",
        "warning",
        chain(
            env("PYTORCH_ROCM_ARCH", "gfx950"),
            sub(ARCHS, 'archs = ["gfx950"]'),
            env("USE_FLASH_ATTENTION", "0"),
            env("USE_MEM_EFF_ATTENTION", "0"),
        ),
        BIG,
        "unverified",
    ),
    "probed-old": ("RF103", "error", lambda t: t, LintFacts(rocm_version="5.2"), "5.2"),
    "targets": (
        "RF103",
        "error",
        lambda t: t,
        LintFacts(targets=frozenset({"gfx90a", "gfx940"})),
        "cannot target gfx942",
    ),
    "typo": (
        "RF104",
        "warning",
        chain(env("PYTORCH_ROCM_ARCH", "gfx9420"), drop("archs")),
        BIG,
        "gfx9420",
    ),
    "no-arch": (
        "RF105",
        "error",
        chain(drop("PYTORCH_ROCM_ARCH"), drop("archs")),
        BIG,
        "No GPU arch specified",
    ),
    "check-mismatch": ("RF106", "error", sub(ARCHS, 'archs = ["gfx90a"]'), BIG, "gfx90a"),
    "cuda-on": ("RF111", "error", env("USE_CUDA", "1"), BIG, "Both CUDA and ROCm"),
    "cuda-unset": ("RF111", "error", drop("USE_CUDA"), BIG, "explicit"),
    "cudnn": ("RF112", "warning", env("USE_CUDNN", "0"), BIG, "MIOpen"),
    "rccl-home": ("RF121", "warning", env("RCCL_HOME", "/opt/rocm/rccl"), BIG, "find_package"),
    "cpath": ("RF122", "warning", env("CPATH", "/opt/rocm/include"), BIG, "two ROCm versions"),
    "cplus": ("RF122", "warning", env("CPLUS_INCLUDE_PATH", "/opt/rocm/include"), BIG, "headers"),
    "hip-path": ("RF123", "warning", env("HIP_PATH", "/opt/rocm/hip"), BIG, "build_amd.py"),
    "hcc": ("RF124", "warning", env("HCC_AMDGPU_TARGET", "gfx942"), BIG, "PYTORCH_ROCM_ARCH"),
    "visible": ("RF131", "error", env("HIP_VISIBLE_DEVICES", "0"), BIG, "runs"),
    "nccl": ("RF131", "error", env("NCCL_SOCKET_IFNAME", "eth0"), BIG, "NCCL_SOCKET_IFNAME"),
    "hsa": ("RF131", "error", env("HSA_OVERRIDE_GFX_VERSION", "9.4.2"), BIG, "hash"),
    "net-plugin": ("RF131", "error", env("RCCL_NET_PLUGIN", "none"), BIG, "NCCL_NET_PLUGIN"),
    "log-level": ("RF131", "error", env("AMD_LOG_LEVEL", "4"), BIG, "AMD_LOG_LEVEL"),
    "no-nccl": ("RF141", "error", env("USE_NCCL", "0"), BIG, "USE_NCCL"),
    "no-distributed": ("RF141", "error", env("USE_DISTRIBUTED", "OFF"), BIG, "USE_DISTRIBUTED"),
    "no-hipify": ("RF151", "error", sub(HIPIFY, ""), BIG, "HIPConfig.h.in"),
    "hipify-late": (
        "RF151",
        "error",
        sub(f"{HIPIFY}{BUILD_STEP}", f'{BUILD_STEP}, "python tools/amd_build/build_amd.py"'),
        BIG,
        "before",
    ),
    "hipify-twice": ("RF151", "error", sub(HIPIFY, HIPIFY * 2), BIG, "once"),
    "pep517-torch": (
        "RF151",
        "error",
        sub(f"steps = [{HIPIFY}{BUILD_STEP}]", "steps = []"),
        BIG,
        "hipify",
    ),
    "cmake4": ("RF152", "error", sub("cmake==3.31.1", "cmake==4.0.2"), BIG, "CMake < 3.5"),
    "cmake-unpinned": ("RF152", "warning", sub(', "cmake==3.31.1"', ""), BIG, "not pinned"),
    "setuptools80": (
        "RF153",
        "error",
        chain(sub("setuptools==75.6.0", "setuptools==80.9.0"), sub(BUILD_STEP, DEVELOP)),
        BIG,
        "pytorch#152276",
    ),
    "setup-py-removed": (
        "RF154",
        "error",
        chain(
            sub('version = "2.5.1+rocm6.2"', 'version = "2.14.0"'),
            env("PYTORCH_BUILD_VERSION", "2.14.0"),
        ),
        BIG,
        "scikit-build-core",
    ),
    "setuptools-unpinned": (
        "RF153",
        "warning",
        chain(sub('"setuptools==75.6.0", ', ""), sub(BUILD_STEP, DEVELOP)),
        BIG,
        "not pinned",
    ),
    "rocm-path": ("RF125", "error", env("ROCM_PATH", "/opt/rocm-6.1.0"), BIG, "ROCM_HOME"),
    "hip-path-root": ("RF125", "error", env("HIP_PATH", "/opt/rocm-6.1.0"), BIG, "HIP_PATH"),
    "no-aotriton": (
        "RF161",
        "error",
        chain(drop("[inputs"), drop('path = "aotriton"'), drop('env = "AOT')),
        BIG,
        "downloads",
    ),
    "aotriton-env": (
        "RF161",
        "warning",
        chain(
            drop("[inputs"),
            drop('path = "aotriton"'),
            drop('env = "AOT'),
            env("AOTRITON_INSTALLED_PREFIX", "/opt/rocm/aotriton"),
        ),
        BIG,
        "not hashed",
    ),
    "aotriton-arch": (
        "RF162",
        "warning",
        chain(env("PYTORCH_ROCM_ARCH", "gfx942;gfx1100"), drop("archs")),
        BIG,
        "gfx1100",
    ),
    "aotriton-no-image-pack": (
        "RF163",
        "error",
        _torch_214(
            inputs=inputs_toml(AOTRITON_0_13B, "7.15", []),
            steps=MERGE.replace(" $AOTRITON_IMAGES_GFX942/.", ""),
        ),
        BIG,
        "amd-gfx942",
    ),
    "aotriton-other-release": (
        "RF164",
        "error",
        chain(
            _torch_214(),
            sub(
                "download/0.13b/aotriton-0.13b-manylinux", "download/0.12b/aotriton-0.12b-manylinux"
            ),
        ),
        BIG,
        "0.12b",
    ),
    "aotriton-runtime-other-rocm": (
        "RF164",
        "error",
        chain(
            _torch_214(),
            sub('rocm = "7.15.0"', 'rocm = "7.14.0"'),
            sub('root = "/opt/rocm-7.15.0"', 'root = "/opt/rocm-7.14.0"'),
        ),
        BIG,
        "7a139797c16b002fd5d9bcd706d36dc9819bb108877150f8186da21d0590eaa6",
    ),
    "bad-version": (
        "RF171",
        "error",
        env("PYTORCH_BUILD_VERSION", "2.5.1-rocm 6.2"),
        BIG,
        "PEP 440",
    ),
    "version-mismatch": (
        "RF172",
        "error",
        sub('version = "2.5.1+rocm6.2"', 'version = "2.5.1"'),
        BIG,
        "2.5.1+rocm6.2",
    ),
    "post": ("RF172", "error", env("PYTORCH_BUILD_NUMBER", "3"), BIG, ".post3"),
    "ram-default": (
        "RF181",
        "warning",
        lambda t: t,
        LintFacts(ram_bytes=8 * GIB, cpu_count=64),
        "CPU count",
    ),
    "ram-host": (
        "RF181",
        "warning",
        lambda t: t,
        LintFacts(ram_bytes=16 * GIB, cpu_count=2, host_env={"MAX_JOBS": "8"}),
        "passthrough",
    ),
    "max-jobs-env": (
        "RF182",
        "warning",
        chain(sub('passthrough = ["MAX_JOBS"]', ""), env("MAX_JOBS", "8")),
        BIG,
        "hashed",
    ),
    "compiler-cache-off": (
        "RF194",
        "warning",
        sub('passthrough = ["MAX_JOBS"]', 'passthrough = ["MAX_JOBS"]\ncompiler-cache = false'),
        BIG,
        "--no-compiler-cache",
    ),
    "force-cuda": ("RF191", "error", sub('name = "torch"', 'name = "torchvision"'), BIG, "FORCE"),
    "force-cuda-audio": (
        "RF191",
        "error",
        chain(sub('name = "torch"', 'name = "torchaudio"'), drop("USE_ROCM")),
        BIG,
        "USE_ROCM",
    ),
    "extension-check-archs": (
        "RF192",
        "error",
        chain(sub('name = "torch"', 'name = "torchvision"'), env("FORCE_CUDA", "1"), drop("archs")),
        BIG,
        "CPU-only",
    ),
    "input-unlocked": (
        "RF135",
        "warning",
        sub('path = "aotriton"', 'url = "https://example.invalid/aotriton.tar.gz"'),
        BIG,
        "rocmforge lock",
    ),
    "triton-offline": (
        "RF195",
        "error",
        chain(sub('name = "torch"', 'name = "triton"'), sub(AOT_INPUTS, TRITON_INPUTS)),
        BIG,
        "TRITON_OFFLINE_BUILD",
    ),
    "triton-deps": (
        "RF196",
        "error",
        chain(
            sub('name = "torch"', 'name = "pytorch-triton-rocm"'),
            sub(AOT_INPUTS, TRITON_INPUTS.split("[inputs.json]")[0]),
            env("TRITON_OFFLINE_BUILD", "1"),
        ),
        BIG,
        "JSON_SYSPATH",
    ),
    "sdk-legacy-index": (
        "RF197",
        "warning",
        sub(ROCM_TC, SDK_TC.format(index="https://repo.amd.com/rocm/whl-multi-arch/")),
        BIG,
        "stable.repo.amd.com",
    ),
    "sdk-device-extra": (
        "RF198",
        "warning",
        chain(
            sub(ROCM_TC, SDK_TC.format(index="https://stable.repo.amd.com/rocm/whl-next/")),
            env("PYTORCH_EXTRA_INSTALL_REQUIREMENTS", "rocm[libraries]==10.0.0"),
        ),
        BIG,
        "rocm[libraries,device-gfx942]",
    ),
    "arch-not-in-torch": (
        "RF193",
        "error",
        chain(sub('name = "torch"', 'name = "torchvision"'), env("FORCE_CUDA", "1")),
        replace(BIG, dependencies=(TORCH_GFX90A,)),
        "gfx942",
    ),
}


def _load(text: str, tmp_path: Path) -> Recipe:
    return parse_recipe_text(text, file=tmp_path / "r.toml")


def test_good_recipe_is_clean(tmp_path: Path) -> None:
    assert lint_recipe(_load(GOOD, tmp_path), BIG) == ()


@pytest.mark.parametrize("case", sorted(CASES))
def test_lint_fires(case: str, tmp_path: Path) -> None:
    lint_id, severity, edit, facts, word = CASES[case]
    findings = lint_recipe(_load(edit(GOOD), tmp_path), facts)
    assert [f.id for f in findings] == [lint_id], findings
    f = findings[0]
    assert f.severity == severity and f.name == RULES[lint_id].name
    assert word in f.message or word in f.fix, f
    assert f.key and f.fix and f.allowed is None


def test_every_rule_has_a_case() -> None:
    assert {c[0] for c in CASES.values()} == set(RULES)


def test_runtime_env_spares_build_time_nccl_locators(tmp_path: Path) -> None:
    recipe = _load(env("NCCL_ROOT", "/opt/nccl")(GOOD), tmp_path)
    assert lint_recipe(recipe, BIG) == ()


def test_lints_only_rocm_rules_on_rocm_builds(tmp_path: Path, tiny_src: Path) -> None:
    text = TINY_RECIPE.format(src=tiny_src).replace("[build]", '[env]\nCPATH = "/x"\n\n[build]')
    assert lint_recipe(_load(text, tmp_path), LintFacts(ram_bytes=GIB, cpu_count=64)) == ()


def test_acknowledged_lint_is_kept_with_its_reason_and_does_not_block(tmp_path: Path) -> None:
    text = env("USE_CUDA", "1")(GOOD) + '\n[lint]\nallow = { RF111 = "no CUDA here" }\n'
    recipe = _load(text, tmp_path)
    [f] = lint_recipe(recipe, BIG)
    assert f.id == "RF111" and f.allowed == "no CUDA here" and not f.blocking
    assert enforce(recipe, (f,)) == ()


def test_lint_error_names_file_line_key_and_fix(tmp_path: Path) -> None:
    file = tmp_path / "r.toml"
    file.write_text(env("USE_CUDA", "1")(GOOD))
    recipe = load_recipe(file)
    with pytest.raises(LintError) as info:
        preflight(recipe, BIG)
    assert isinstance(info.value, RecipeError) and info.value.exit_code == 2
    [problem] = info.value.problems
    assert problem.file == file and problem.key == "env.USE_CUDA"
    assert (
        file.read_text()
        .splitlines()[problem.line - 1 if problem.line else 0]
        .startswith("USE_CUDA")
    )
    assert "RF111 use-cuda" in problem.message and "Fix: set USE_CUDA" in problem.message


def test_finding_in_a_base_recipe_names_the_base(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text('schema = 1\n\n[env]\nRCCL_HOME = "/opt/rocm"\n')
    (tmp_path / "top.toml").write_text(
        'schema = 1\nextends = "base.toml"\n'
        + TINY_RECIPE.removeprefix("schema = 1\n").format(src=tmp_path)
    )
    recipe = load_recipe(tmp_path / "top.toml")
    [f] = lint_recipe(recipe, BIG)
    from rocmforge.recipe.lints import to_problem

    p = to_problem(recipe, f)
    assert p.file == tmp_path / "base.toml" and p.line == 4


def _shipped() -> list[Path]:
    """The shipped recipes, without base recipes (only ever used through `extends`, and linted
    there: alone they lack [package] and [source])."""
    import tomllib

    paths = sorted([*(REPO / "recipes").glob("*.toml"), *(REPO / "recipes").glob("torch-*/*.toml")])
    bases = set()
    for p in paths:
        base = tomllib.loads(p.read_text()).get("extends")
        if base:
            bases.add((p.parent / base).resolve())
    # a recipe that others extend but that also builds something itself (mi300x) stays
    return [
        p
        for p in paths
        if (p.resolve() not in bases or "package" in tomllib.loads(p.read_text()))
        and "stack" not in tomllib.loads(p.read_text())  # a stack file names recipes
    ]


SHIPPED = _shipped()


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_recipes_are_clean(path: Path) -> None:
    recipe = load_recipe(path)
    findings: tuple[Finding, ...] = lint_recipe(recipe, BIG)
    assert [f for f in findings if f.allowed is None] == [], findings


# --- through the real CLI ---------------------------------------------------------------------


def _tiny(tmp_path: Path, tiny_src: Path, extra: str) -> Path:
    path = tmp_path / "tiny.toml"
    text = TINY_RECIPE.format(src=tiny_src).replace("[build]", f"{extra}\n[build]")
    text = text.replace(
        "[build]\n", '[requirements]\nbuild = ["setuptools==75.6.0"]\n\n[build]\n', 1
    )
    path.write_text(text)
    return path


def test_error_lint_stops_realize_before_anything_is_fetched(
    tmp_path: Path, tiny_src: Path
) -> None:
    recipe = _tiny(tmp_path, tiny_src, '[env]\nHIP_VISIBLE_DEVICES = "0"\n')
    store = tmp_path / "store"
    # Any fetch would fail loudly: the only index is an empty directory.
    empty = tmp_path / "empty-index"
    empty.mkdir()
    for command in ("realize", "plan"):
        proc = rf_in(
            command,
            recipe,
            "--store",
            store,
            env={"ROCMFORGE_PIP_ARGS": f"--no-index --find-links {empty}"},
        )
        assert proc.returncode == 2, proc.stderr
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "RF131 runtime-env" in errors[0], proc.stderr
        assert f"{recipe}:" in errors[0] and "env.HIP_VISIBLE_DEVICES" in errors[0]
        assert "note: " in proc.stderr and "[lint] allow" in proc.stderr
        assert "Traceback" not in proc.stderr
    fetched = [p for p in (store / "sources").rglob("*") if p.is_file()] if store.exists() else []
    assert fetched == []
    assert not (store / "entries").exists() or not any((store / "entries").iterdir())
    assert not (store / "failed").exists() or not any((store / "failed").iterdir())


@pytest.mark.slow
def test_acknowledged_error_lint_builds(tmp_path: Path, tiny_src: Path) -> None:
    recipe = _tiny(
        tmp_path,
        tiny_src,
        '[env]\nHIP_VISIBLE_DEVICES = "0"\n\n[lint]\n'
        'allow = { RF131 = "the test harness reads it" }\n',
    )
    proc = rf("realize", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith(".whl")
    assert "RF131" not in proc.stderr


@pytest.mark.slow
def test_warning_lint_is_printed_and_does_not_stop(tmp_path: Path, tiny_src: Path) -> None:
    recipe = _tiny(tmp_path, tiny_src, '[env]\nRCCL_HOME = "/opt/rocm"\n')
    proc = rf("realize", recipe, "--store", tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    warnings = [
        ln for ln in proc.stderr.splitlines() if ln.startswith("warning:") and "RF121" in ln
    ]
    assert len(warnings) == 1 and "env.RCCL_HOME" in warnings[0], proc.stderr
    plan = rf("plan", recipe, "--store", tmp_path / "store", "--json")
    assert plan.returncode == 0, plan.stderr
    assert "RF121" in plan.stderr
    import json

    assert [f["id"] for f in json.loads(plan.stdout)["lints"]] == ["RF121"]


def test_every_lint_id_is_documented() -> None:
    doc = (REPO / "docs" / "lints.md").read_text()
    for rule in RULES.values():
        assert f"| {rule.id} | {rule.name} |" in doc, rule.id


def test_error_lint_in_a_later_recipe_stops_the_earlier_build_too(
    tmp_path: Path, tiny_src: Path
) -> None:
    good = _tiny(tmp_path, tiny_src, "")
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace("[build]", '[env]\nAMD_LOG_LEVEL = "4"\n\n[build]', 1))
    store = tmp_path / "store"
    proc = rf_in("realize", good, bad, "--store", store)
    assert proc.returncode == 2 and "RF131" in proc.stderr, proc.stderr
    assert not (store / "entries").exists() or not any((store / "entries").iterdir())


@pytest.mark.slow
def test_realize_probes_and_lints_once(
    tmp_path: Path,
    tiny_src: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The CLI lints every recipe before building any; realize must not lint (or probe) again.

    Counted at the lint probe (``lint_facts``), not at ``/proc/meminfo``: the build's telemetry
    records the host's RAM too, and that is not a second lint."""
    from rocmforge.cli import main as cli
    from rocmforge.pipeline import realize as realize_mod
    from rocmforge.recipe import lints
    from rocmforge.toolchain import machine

    probes: list[str] = []
    real_facts = machine.lint_facts

    def facts_spy(recipe: Recipe, env: Mapping[str, str] | None = None) -> LintFacts:
        probes.append(recipe.package.name)
        return real_facts(recipe, env)

    runs: list[str] = []
    first = lints.LINTS[0]

    def lint_spy(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
        runs.append(recipe.package.name)
        return first(recipe, facts)

    monkeypatch.setattr(machine, "lint_facts", facts_spy)
    monkeypatch.setattr(realize_mod, "lint_facts", facts_spy)
    monkeypatch.setattr(lints, "LINTS", (lint_spy, *lints.LINTS[1:]))
    monkeypatch.setenv("ROCMFORGE_PIP_ARGS", pip_args())
    monkeypatch.delenv("ROCMFORGE_STORE", raising=False)
    recipe = _tiny(tmp_path, tiny_src, '[env]\nRCCL_HOME = "/opt/rocm"\n')
    assert cli.main(["realize", str(recipe), "--store", str(tmp_path / "store")]) == 0
    err = capsys.readouterr().err
    assert len(probes) == 1 and runs == ["tiny"], (probes, runs)
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning:") and "RF121" in ln]
    assert len(warnings) == 1, err


def _torch(version: str) -> Callable[[str], str]:
    """Make GOOD a recipe of torch ``version`` (with a matching PYTORCH_BUILD_VERSION)."""
    return chain(
        sub('version = "2.5.1+rocm6.2"', f'version = "{version}"'),
        env("PYTORCH_BUILD_VERSION", version),
    )


# (case, edit, lint ids expected): each version gate, once on each side of its boundary.
GATES: dict[str, tuple[Callable[[str], str], list[str]]] = {
    "hipify-2.8-needs-step": (chain(_torch("2.8.0"), sub(HIPIFY, "")), ["RF151"]),
    "hipify-2.9-runs-it-itself": (chain(_torch("2.9.0"), sub(HIPIFY, "")), []),
    "hipify-2.9-pre-release": (chain(_torch("2.9.0rc1"), sub(HIPIFY, "")), []),
    "aotriton-2.2-no-attention": (
        chain(_torch("2.2.2"), drop("[inputs"), drop('path = "aotriton"'), drop('env = "AOT')),
        [],
    ),
    "aotriton-2.3-needs-input": (
        chain(_torch("2.3.0"), drop("[inputs"), drop('path = "aotriton"'), drop('env = "AOT')),
        ["RF161"],
    ),
    "cmake4-2.6-breaks": (chain(_torch("2.6.0"), sub("cmake==3.31.1", "cmake==4.0.2")), ["RF152"]),
    "cmake4-2.7-configures": (chain(_torch("2.7.0"), sub("cmake==3.31.1", "cmake==4.0.2")), []),
    # AOTriton: torch 2.14 pins 0.13b, split into a runtime per ROCm and an image pack per arch.
    "aotriton-2.14-release-assets": (_torch_214(), []),
    "aotriton-2.14-nothing-declared": (
        _torch_214(inputs="", steps=MERGE.split(", ")[1]),
        ["RF161"],
    ),
    "aotriton-2.14-assets-not-used": (
        _torch_214(steps='"python -m build --wheel --no-isolation -o $OUT"'),
        ["RF161"],
    ),
    "aotriton-2.14-gfx950-has-images": (
        chain(_torch_214(), env("PYTORCH_ROCM_ARCH", "gfx942;gfx950"), drop("archs")),
        ["RF163"],
    ),
    "aotriton-2.5-gfx1100-unsupported": (
        chain(env("PYTORCH_ROCM_ARCH", "gfx942;gfx1100"), drop("archs")),
        ["RF162"],
    ),
    "aotriton-2.14-gfx1100-has-images": (
        chain(_torch_214(), env("PYTORCH_ROCM_ARCH", "gfx942;gfx1100"), drop("archs")),
        ["RF163"],
    ),
    "aotriton-2.14-gfx1030-unsupported": (
        chain(_torch_214(), env("PYTORCH_ROCM_ARCH", "gfx942;gfx1030"), drop("archs")),
        ["RF162"],
    ),
    "aotriton-2.13-no-version-facts": (
        chain(_torch("2.13.0"), sub('rocm = "6.2.4"', 'rocm = "7.2.0"')),
        [],
    ),
    "aotriton-2.14-preinstalled-prefix": (
        _torch_214(inputs=AOT_INPUTS, steps='"python -m build --wheel --no-isolation -o $OUT"'),
        [],
    ),
    "setuptools80-bdist-wheel-works": (sub("setuptools==75.6.0", "setuptools==80.9.0"), []),
    "setuptools80-develop-breaks": (
        chain(sub("setuptools==75.6.0", "setuptools==80.9.0"), sub(BUILD_STEP, DEVELOP)),
        ["RF153"],
    ),
    "setuptools80-install-breaks": (
        chain(
            sub("setuptools==75.6.0", "setuptools==80.9.0"),
            sub(BUILD_STEP, '"python setup.py install", "cp dist/*.whl $OUT"'),
        ),
        ["RF153"],
    ),
    "setuptools80-not-torch": (
        chain(
            sub('name = "torch"', 'name = "msgpack"'),
            sub("setuptools==75.6.0", "setuptools==80.9.0"),
            sub(BUILD_STEP, DEVELOP),
            drop("PYTORCH_BUILD"),
        ),
        [],
    ),
    # 2.13.0 (release/2.13 cut 2026-06-08) still has setup.py; 2.14 (cut 2026-08-10) has none.
    "setup-py-2.13-still-works": (_torch("2.13.0"), []),
    "setup-py-2.13.1-still-works": (_torch("2.13.1+rocm7.2"), []),
    "setup-py-2.14-removed": (_torch("2.14.0"), ["RF154"]),
    "setup-py-2.14-pre-release": (_torch("2.14.0rc1"), ["RF154"]),
    "setup-py-2.14-pep517-build": (
        chain(
            _torch("2.14.1"), sub(BUILD_STEP, '"python -m build --wheel --no-isolation -o $OUT"')
        ),
        [],
    ),
    # RF153 (setuptools 80 breaks torch's setup.py develop) only while torch has a setup.py.
    "setuptools80-develop-2.13-breaks": (
        chain(
            _torch("2.13.0"),
            sub("setuptools==75.6.0", "setuptools==80.9.0"),
            sub(BUILD_STEP, DEVELOP),
        ),
        ["RF153"],
    ),
    "setuptools80-develop-2.14-is-rf154": (
        chain(
            _torch("2.14.0"),
            sub("setuptools==75.6.0", "setuptools==80.9.0"),
            sub(BUILD_STEP, DEVELOP),
        ),
        ["RF154"],
    ),
    "rocm-path-without-rocm-toolchain": (
        chain(drop("kind = "), drop("rocm = "), drop("root = "), env("ROCM_PATH", "/x")),
        [],
    ),
}


@pytest.mark.parametrize("case", sorted(GATES))
def test_version_gated_rules_on_each_side(case: str, tmp_path: Path) -> None:
    edit, expected = GATES[case]
    findings = lint_recipe(_load(edit(GOOD), tmp_path), BIG)
    assert [f.id for f in findings] == expected, findings


def test_errors_and_warnings_are_shown_at_once_errors_first(tmp_path: Path) -> None:
    file = tmp_path / "r.toml"
    file.write_text(chain(env("PYTORCH_ROCM_ARCH", "gfx90a,gfx942"), drop("archs"),
                          env("RCCL_HOME", "/opt/rocm/rccl"))(GOOD))  # fmt: skip
    r = rf_in("plan", str(file), "--store", str(tmp_path / "store"))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    error = next(i for i, ln in enumerate(lines) if "RF101" in ln)
    warning = next(i for i, ln in enumerate(lines) if "RF121" in ln)
    assert lines[error].startswith("error:") and lines[warning].startswith("warning:")
    assert error < warning


def test_rf102_names_the_declared_version_readably(tmp_path: Path) -> None:
    [f] = lint_recipe(_load(sub('rocm = "6.2.4"', 'rocm = "5.2.0"')(GOOD), tmp_path), BIG)
    assert f.id == "RF102"
    assert f.message.endswith("but [toolchain] rocm declares ROCm 5.2.0"), f.message


def test_aotriton_assets_are_named_and_matched_like_aotriton_cmake_does() -> None:
    rel = AOTRITON_0_13B
    runtime = parse_asset(rel.url(rel.runtime_name("7.15")))
    assert runtime is not None and runtime.is_runtime
    assert (runtime.version, runtime.rocm) == ("0.13b", "7.15")
    assert rel.url(rel.runtime_name("7.15")) == (
        "https://github.com/ROCm/aotriton/releases/download/0.13b/"
        "aotriton-0.13b-manylinux_2_28_x86_64-rocm7.15-shared.tar.gz"
    )
    image = parse_asset(rel.image_name("amd-gfx942"))
    assert image is not None and not image.is_runtime and image.image == "amd-gfx942"
    assert parse_asset("aotriton.tar.gz") is None and parse_asset("/opt/aotriton") is None
    assert rel.image_for("gfx942:sramecc+") == "amd-gfx942"
    assert rel.image_for("gfx1101") == "amd-gfx110x" and rel.image_for("gfx1030") is None
    text = inputs_toml(rel, "7.15", ["gfx942", "gfx90a", "gfx942"])
    assert text.count("[inputs.") == 3 and rel.images["amd-gfx90a"] in text
    assert inputs_toml(rel, "6.2", ["gfx942"]).count("[inputs.") == 1  # no 6.2 runtime in 0.13b


SDK_RECIPE = """\
schema = 1

[package]
name = "torch"
version = "2.15.0+rocm10.0"

[source]
path = "src"

[toolchain]
kind = "rocm-sdk"
version = "10.0.0"
families = ["gfx942", "gfx950"]
index = "{index}"

[env]
PYTORCH_ROCM_ARCH = "gfx942;gfx950"
PYTORCH_EXTRA_INSTALL_REQUIREMENTS = "{extra}|triton==3.9.0"
"""


@pytest.mark.parametrize(
    ("index", "extra", "expected"),
    [
        (
            "https://stable.repo.amd.com/rocm/whl-next/",
            "rocm[libraries,device-gfx942,device-gfx950]==10.0.0",
            set(),
        ),
        ("https://stable.repo.amd.com/rocm/whl-next/", "rocm[libraries,device-all]==10.0.0", set()),
        (
            "https://repo.amd.com/rocm/whl-multi-arch/",
            "rocm[libraries,device-gfx942,device-gfx950]==10.0.0",
            {"RF197"},
        ),
        (
            "https://stable.repo.amd.com/rocm/whl-next/",
            "rocm[libraries,device-gfx942]==10.0.0",
            {"RF198"},
        ),
    ],
)
def test_sdk_index_and_device_extras(
    tmp_path: Path, index: str, extra: str, expected: set[str]
) -> None:
    """RF197: the legacy repo.amd.com/rocm/ folder; RF198: a device wheel per declared ISA."""
    path = tmp_path / "sdk.toml"
    path.write_text(SDK_RECIPE.format(index=index, extra=extra))
    found = {f.id for f in lint_recipe(load_recipe(path), BIG) if f.id in ("RF197", "RF198")}
    assert found == expected
    if "RF198" in expected:
        (f,) = [f for f in lint_recipe(load_recipe(path), BIG) if f.id == "RF198"]
        assert "gfx950" in f.message and "gfx942" not in f.message.split("for ")[1]
        assert "rocm[device-gfx942,libraries,device-gfx950]" in f.fix
