"""The realize memo answers repeated realizes instantly but never serves a stale result."""

from __future__ import annotations

import json
import marshal
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import (
    DATA,
    TINY_RECIPE,
    VISIBLE_PKG,
    commit_all,
    dpkg,
    git,
    make_deb,
    pip_args,
    purge_test_packages,
    rewrite,
    rf,
    tiny_wheel,
)
from privroot import isolated

from rocmforge.pipeline.memo import RACY_SLACK_NS


def realize(recipe: Path, store: Path) -> tuple[str, str]:
    proc = rf("realize", recipe, "--store", store)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1], proc.stderr


@pytest.mark.slow
def test_memo_hit_imports_nothing_heavy(tiny_recipe: Path, store: Path) -> None:
    wheel, _ = realize(tiny_recipe, store)
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "rocmforge",
            "realize",
            str(tiny_recipe),
            "--store",
            str(store),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == wheel
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    assert "rocmforge.pipeline.memo" in imported
    for heavy in (
        "rocmforge.cli.main",
        "rocmforge.recipe.model",
        "tomllib",
        "sqlite3",
        "filelock",
        "argparse",
    ):
        assert heavy not in imported, heavy


@pytest.mark.slow
def test_source_edit_and_new_file_in_empty_dir_are_seen(
    tiny_recipe: Path, tiny_src: Path, store: Path
) -> None:
    first, _ = realize(tiny_recipe, store)
    (tiny_src / "tiny" / "__init__.py").write_text("VALUE = 43\n")
    second, err = realize(tiny_recipe, store)
    assert second != first and "built" in err
    (tiny_src / "empty" / "deeper").mkdir(parents=True)
    third, _ = realize(tiny_recipe, store)
    assert third == second  # empty dirs are not content
    (tiny_src / "empty" / "deeper" / "new.txt").write_text("x")
    fourth, err = realize(tiny_recipe, store)
    assert fourth != third and "built" in err


@pytest.mark.slow
def test_recipe_edit_is_seen(tiny_recipe: Path, store: Path) -> None:
    first, _ = realize(tiny_recipe, store)
    tiny_recipe.write_text(tiny_recipe.read_text() + '\n[env]\nFLAG = "1"\n')
    second, err = realize(tiny_recipe, store)
    assert second != first and "built" in err


@pytest.mark.slow
def test_deleted_entry_is_rebuilt_not_printed(tiny_recipe: Path, store: Path) -> None:
    first, _ = realize(tiny_recipe, store)
    entry = Path(first).parent
    os.chmod(entry, 0o755)
    shutil.rmtree(entry)
    second, err = realize(tiny_recipe, store)
    assert second == first and Path(second).is_file() and "built" in err


# -- every input of the derivation -----------------------------------------------------------------
# Each case: realize, show the memo answers the unchanged recipe, change one input, realize again:
# the memo must fall through and the new hash must come back. KEY_CASES (at the end) maps every key
# of a real derivation to its case, and a meta-test fails when a key has none.

PATCH = """\
diff --git a/tiny/__init__.py b/tiny/__init__.py
--- a/tiny/__init__.py
+++ b/tiny/__init__.py
@@ -1 +1 @@
-VALUE = 42
+VALUE = {value}
"""

ROCM_VERSION_H = """\
#define ROCM_VERSION_MAJOR {0}
#define ROCM_VERSION_MINOR {1}
#define ROCM_VERSION_PATCH {2}
"""


def entry_hash(wheel: str) -> str:
    return Path(wheel).parent.name.split("-", 1)[0]


def answered_by_memo(recipe: Path, store: Path, env: dict[str, str] | None = None) -> bool:
    """Realize ``recipe`` again and tell whether the memo answered (the CLI was never imported)."""
    full = {**os.environ, "ROCMFORGE_PIP_ARGS": pip_args(), **(env or {})}
    full.pop("ROCMFORGE_STORE", None)
    argv = [sys.executable, "-X", "importtime", "-m", "rocmforge", "realize", str(recipe)]
    proc = subprocess.run(
        [*argv, "--store", str(store)],
        env=full,
        cwd=recipe.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    return "rocmforge.cli.main" not in imported


def realize_env(recipe: Path, store: Path, env: dict[str, str] | None = None) -> str:
    proc = rf("realize", recipe, "--store", store, env=env, cwd=recipe.parent)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def assert_change_is_seen(
    recipe: Path, store: Path, change: Callable[[], None], env: dict[str, str] | None = None
) -> tuple[str, str]:
    """Realize, check the memo answers, ``change()``, realize: a new hash, built or re-resolved."""
    first = realize_env(recipe, store, env)
    from rocmforge.pipeline import memo

    kept = memo._load_item(str(store), str(recipe))  # before a fall-through rewrites it
    assert answered_by_memo(recipe, store, env), (
        "the memo did not answer an unchanged recipe: " + memo_state(kept, store, entry_hash(first))
    )
    plan_before = plan_hash(recipe, store, env)
    assert plan_before == entry_hash(first)
    change()
    # A change within RACY_SLACK_NS of a realize's start may have happened during it: that
    # realize then records nothing (by design), and the check below would fail. Python starts
    # in ~15 ms on a quiet machine, so wait the slack out: this is a change between realizes.
    time.sleep(3 * RACY_SLACK_NS / 1e9)
    second = realize_env(recipe, store, env)
    from rocmforge.pipeline import memo

    recorded = memo._load_item(str(store), str(recipe))  # before the checks below rewrite it
    assert entry_hash(second) != entry_hash(first), "the memo answered with the old build"
    assert entry_hash(second) == plan_hash(recipe, store, env)  # what the full pipeline says
    # and the new state is remembered
    assert answered_by_memo(recipe, store, env), memo_state(recorded, store, entry_hash(second))
    return first, second


def memo_state(item: dict[str, object] | None, store: Path, want: str) -> str:
    """Why the memo did not answer: which condition of the record ``item`` (as the realize
    left it, before a fall-through realize rewrote it) fails now (a failure's message)."""
    from rocmforge.pipeline import memo

    if item is None:
        return "the realize recorded nothing"
    result = item.get("result") or {}
    assert isinstance(result, dict)
    moved = []
    for guard, sig, follow in item["guards"]:  # type: ignore[attr-defined]
        now = memo._sig(guard, follow=bool(follow))
        if now != sig:  # which of (mode, size, mtime, ctime, inode) changed, or gone/new
            names = ("mode", "size", "mtime", "ctime", "ino")
            what = ("appeared" if sig is None else "gone" if now is None else
                    "+".join(n for n, a, b in zip(names, sig, now, strict=True) if a != b))
            moved.append(f"{guard} ({what})")
    trees = [t[0] for t in item.get("trees", []) if not memo._trees_hold([t])]  # type: ignore[attr-defined]
    wheels = memo._entry_wheels(os.path.abspath(store), result) if result else None
    # Short enough to survive a CI log's excerpt: the first few of each, and how many.
    return (f"record for {str(result.get('hash'))[:12]} (want {want[:12]}), sandbox "
            f"{result.get('sandbox')}, {len(moved)} moved guards {moved[:4]}, {len(trees)} "
            f"trees that moved {trees[:2]}, wheels as published: {wheels is not None}")


def plan_hash(recipe: Path, store: Path, env: dict[str, str] | None = None) -> str:
    proc = rf("plan", recipe, "--store", store, "--json", env=env, cwd=recipe.parent)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["hash"])


def with_source_lines(recipe: Path, lines: str) -> None:
    text = recipe.read_text()
    recipe.write_text(text.replace("[source]\n", f"[source]\n{lines}\n", 1))


def fake_cc(path: Path, build: str) -> Path:
    """A C compiler wrapper: same version output, different bytes per ``build``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"#!/bin/sh\n# wrapper build {build}\n"
        'if [ "$1" = --version ]; then echo "rfcc 1.0"; exit 0; fi\nexec gcc "$@"\n'
    )
    path.chmod(0o755)
    return path


def fake_rocm_root(parent: Path, version: str) -> Path:
    """A fake ROCm root like /opt/rocm-X: rocm_version.h and a hipcc running a fake clang."""
    root = parent / "rocm"
    header = root / "include" / "rocm-core" / "rocm_version.h"
    header.parent.mkdir(parents=True)
    header.write_text(ROCM_VERSION_H.format(*version.split(".")))
    clang = root / "llvm" / "bin" / "clang"
    clang.parent.mkdir(parents=True)
    clang.write_text('#!/bin/sh\necho "AMD clang version 18.0.0git (roc-6.2.4 24355)"\n')
    hipcc = root / "bin" / "hipcc"
    hipcc.parent.mkdir(parents=True)
    hipcc.write_text(
        f'#!/bin/sh\necho "hipcc-cmd: {clang} --version"\necho "HIP version: 6.2.41134-0"\n'
        f'exec "{clang}" --version\n'
    )
    for exe in (clang, hipcc):
        exe.chmod(0o755)
    return root


@pytest.mark.slow
def test_patch_content_change_is_seen(tiny_recipe: Path, tmp_path: Path, store: Path) -> None:
    patch = tmp_path / "value.patch"
    patch.write_text(PATCH.format(value=43))
    with_source_lines(tiny_recipe, f'patches = ["{patch}"]')
    assert_change_is_seen(tiny_recipe, store, lambda: patch.write_text(PATCH.format(value=44)))


@pytest.mark.slow
def test_extends_parent_change_is_seen(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    parent = tmp_path / "base" / "parent.toml"
    parent.parent.mkdir()
    parent.write_text('schema = 1\n[env]\nLEVEL = "1"\n')
    recipe = tmp_path / "child.toml"
    recipe.write_text('extends = "base/parent.toml"\n' + TINY_RECIPE.format(src=tiny_src))
    assert_change_is_seen(
        recipe, store, lambda: parent.write_text('schema = 1\n[env]\nLEVEL = "2"\n')
    )


@pytest.mark.slow
def test_tree_input_change_is_seen(tiny_recipe: Path, tmp_path: Path, store: Path) -> None:
    data = tmp_path / "data"
    (data / "lib").mkdir(parents=True)
    (data / "lib" / "kernels.txt").write_text("v1\n")
    tiny_recipe.write_text(
        tiny_recipe.read_text() + f'\n[inputs.data]\npath = "{data}"\nenv = "DATA"\n'
    )
    assert_change_is_seen(
        tiny_recipe, store, lambda: (data / "lib" / "kernels.txt").write_text("v2\n")
    )
    assert_change_is_seen(tiny_recipe, store, lambda: (data / "lib" / "new.txt").write_text("n\n"))


@pytest.mark.slow
def test_archive_input_change_is_seen(tiny_recipe: Path, tmp_path: Path, store: Path) -> None:
    archive = tmp_path / "data.tar.gz"

    def pack(content: str) -> None:
        member = tmp_path / "member" / "kernels.txt"
        member.parent.mkdir(exist_ok=True)
        member.write_text(content)
        tmp = tmp_path / "data.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(member, arcname="kernels.txt")
        os.replace(tmp, archive)

    pack("v1\n")
    tiny_recipe.write_text(
        tiny_recipe.read_text() + f'\n[inputs.data]\npath = "{archive}"\nenv = "DATA"\n'
    )
    assert_change_is_seen(tiny_recipe, store, lambda: pack("v2\n"))


@pytest.mark.slow
def test_requirement_wheel_change_is_seen(tiny_recipe: Path, tmp_path: Path, store: Path) -> None:
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, "rfmemo", "1.0", "V = 1\n")
    env = {"ROCMFORGE_PIP_ARGS": pip_args(wheels)}
    text = tiny_recipe.read_text() + '\n[requirements]\nbuild = ["rfmemo==1.0"]\n'
    tiny_recipe.write_text(text)
    cached = store / "sources" / "wheels" / "rfmemo-1.0-py3-none-any.whl"

    def republish() -> None:
        # The index now serves other bytes under the same name, and the store's copy is gone
        # (gc'd, or repaired by hand): the next resolve fetches and digests the new wheel.
        tiny_wheel(wheels, "rfmemo", "1.0", "V = 2\n")
        cached.unlink()

    assert_change_is_seen(tiny_recipe, store, republish, env)


@pytest.mark.slow
def test_toolchain_binary_change_is_seen(tiny_recipe: Path, tmp_path: Path, store: Path) -> None:
    bin_dir = tmp_path / "bin"
    cc = fake_cc(bin_dir / "rfcc", "1")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    tiny_recipe.write_text(tiny_recipe.read_text() + '\n[toolchain]\ncc = "rfcc"\n')
    assert_change_is_seen(tiny_recipe, store, lambda: fake_cc(cc, "2") and None, env)


@pytest.mark.slow
def test_rocm_version_file_change_is_seen(tiny_recipe: Path, tmp_path: Path, store: Path) -> None:
    root = fake_rocm_root(tmp_path, "6.2.4")
    tiny_recipe.write_text(
        tiny_recipe.read_text() + f'\n[toolchain]\nkind = "rocm"\nrocm = "6.2"\nroot = "{root}"\n'
    )
    header = root / "include" / "rocm-core" / "rocm_version.h"
    assert_change_is_seen(
        tiny_recipe, store, lambda: header.write_text(ROCM_VERSION_H.format(6, 2, 5)) and None
    )


@pytest.mark.slow
@isolated()  # installs a package: inside a private root (tests/privroot.py)
def test_system_package_change_is_seen(
    tiny_recipe: Path, tmp_path: Path, store: Path, dpkg_root: None
) -> None:
    """A package installed where the sandbox sees it changes ``toolchain.packages``."""
    purge_test_packages()
    header = f"/usr/include/{VISIBLE_PKG}/memo.h"
    deb = make_deb(tmp_path, VISIBLE_PKG, "1.0-1", {header: "#define V 1\n"})
    assert_change_is_seen(tiny_recipe, store, lambda: dpkg("-i", str(deb)))


@pytest.mark.slow
def test_toolchain_python_prefix_change_is_seen(
    tiny_recipe: Path, tmp_path: Path, store: Path, python_copy: Path
) -> None:
    """A header of the toolchain Python (a Python no package owns) is an input."""
    short = f"{sys.version_info[0]}.{sys.version_info[1]}"
    tiny_recipe.write_text(
        tiny_recipe.read_text() + f'\n[toolchain]\npython = "{python_copy}/bin/python{short}"\n'
    )
    header = python_copy / "include" / f"python{short}" / "Python.h"
    assert_change_is_seen(tiny_recipe, store, lambda: rewrite(header, b"\n/* changed */\n"))


@pytest.mark.slow
def test_hip_clang_device_libs_change_is_seen(
    tiny_recipe: Path, tmp_path: Path, store: Path
) -> None:
    """A plain clang as HIP compiler: a changed device-library file is a new input."""
    from test_hipclang import debian_root, fake_device_libs, fake_hip_clang

    clang = fake_hip_clang(tmp_path)
    libs = fake_device_libs(tmp_path)
    tiny_recipe.write_text(
        tiny_recipe.read_text()
        + f'\n[toolchain]\nkind = "rocm"\nrocm = "5.2"\nroot = "{debian_root(tmp_path)}"\n'
        + f'hip-clang = "{clang}"\ndevice-libs = "{libs}"\n'
    )
    ocml = libs / "ocml.bc"
    assert_change_is_seen(tiny_recipe, store, lambda: ocml.write_bytes(b"BC\xc0\xde v2") and None)


@pytest.mark.slow
def test_hip_clang_binary_change_is_seen(tiny_recipe: Path, tmp_path: Path, store: Path) -> None:
    """A plain clang as HIP compiler: a changed LLVM library behind the driver is a new input."""
    from test_hipclang import debian_root, fake_device_libs, fake_hip_clang

    clang = fake_hip_clang(tmp_path)
    libs = fake_device_libs(tmp_path)
    tiny_recipe.write_text(
        tiny_recipe.read_text()
        + f'\n[toolchain]\nkind = "rocm"\nrocm = "5.2"\nroot = "{debian_root(tmp_path)}"\n'
        + f'hip-clang = "{clang}"\ndevice-libs = "{libs}"\n'
    )
    lib = clang.resolve().parent.parent / "lib" / "libLLVM.so.19.1"
    assert_change_is_seen(tiny_recipe, store, lambda: lib.write_bytes(b"\x7fELF v2") and None)


@pytest.mark.slow
def test_code_change_is_seen(tiny_recipe: Path, tmp_path: Path, store: Path) -> None:
    """A rocmforge upgrade that changes how hashes are made (here BUILDER) is an input too."""
    copy = tmp_path / "pkg" / "rocmforge"
    shutil.copytree(
        Path(__file__).resolve().parents[2] / "rocmforge",
        copy,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    env = {"PYTHONPATH": str(copy.parent)}  # the helpers run from the recipe's directory
    derivation = copy / "plan" / "derivation.py"
    text = derivation.read_text()
    assert 'BUILDER = "rocmforge-build/1"' in text

    def upgrade() -> None:
        derivation.write_text(text.replace('"rocmforge-build/1"', '"rocmforge-build/1-next"'))

    assert_change_is_seen(tiny_recipe, store, upgrade, env)


# -- the meta-test: every key of the derivation has a memo case ------------------------------------

#: Every key path of a derivation (``env`` and ``inputs`` names as ``*``, list items as ``[]``,
#: down to DEPTH levels) -> the test above showing that changing it makes the memo fall through.
KEY_CASES = {
    # [build] repair / repair-policy are recipe keys: a recipe edit is seen.
    "build.repair.tool": "test_recipe_edit_is_seen",
    "build.repair.policy": "test_recipe_edit_is_seen",
    "builder": "test_code_change_is_seen",
    "recipes[].name": "test_dependency_change_is_seen",
    "recipes[].version": "test_dependency_change_is_seen",
    "recipes[].hash": "test_dependency_change_is_seen",
    # The machine: a store shared between machines sees other toolchain executables (other
    # stat signatures), so the toolchain guards stand for it.
    "system": "test_toolchain_binary_change_is_seen",
    "package.name": "test_recipe_edit_is_seen",
    "package.version": "test_recipe_edit_is_seen",
    "source.kind": "test_recipe_edit_is_seen",
    "source.tree": "test_source_edit_and_new_file_in_empty_dir_are_seen",
    "source.patches": "test_patch_content_change_is_seen",
    # A git source's identity is a function of the recipe's `rev` (a full commit: its content,
    # submodules and date never change) and of `submodules`; both are recipe text.
    "source.commit": "test_recipe_edit_is_seen",
    "source.submodules": "test_recipe_edit_is_seen",
    "source.epoch": "test_recipe_edit_is_seen",
    "source.patches[]": "test_patch_content_change_is_seen",
    "env.*": "test_recipe_edit_is_seen",
    "build.steps": "test_recipe_edit_is_seen",
    "build.steps[]": "test_recipe_edit_is_seen",
    "build.pep517": "test_recipe_edit_is_seen",
    # [build] config-settings and reproducible are recipe text; what rocmforge adds for
    # reproducibility is code (the module's constants), like BUILDER.
    "build.config-settings.*": "test_recipe_edit_is_seen",
    "build.reproducible": "test_recipe_edit_is_seen",
    "build.reproducible.protocol": "test_code_change_is_seen",
    "build.reproducible.build-dir": "test_code_change_is_seen",
    "build.reproducible.prefix-map": "test_code_change_is_seen",
    "inputs.*.kind": "test_archive_input_change_is_seen",
    "inputs.*.digest": "test_tree_input_change_is_seen",
    "inputs.*.env": "test_recipe_edit_is_seen",
    "inputs.*.subdir": "test_recipe_edit_is_seen",
    "inputs.*.crates": "test_recipe_edit_is_seen",  # a recipe key (only present when true)
    "requirements[].name": "test_recipe_edit_is_seen",
    "requirements[].version": "test_recipe_edit_is_seen",
    "requirements[].wheel": "test_requirement_wheel_change_is_seen",
    "requirements[].blake3": "test_requirement_wheel_change_is_seen",
    "toolchain.kind": "test_rocm_version_file_change_is_seen",
    "toolchain.machine": "test_toolchain_binary_change_is_seen",
    "toolchain.cc.version": "test_toolchain_binary_change_is_seen",
    "toolchain.cc.blake3": "test_toolchain_binary_change_is_seen",
    "toolchain.cc.cc1": "test_toolchain_binary_change_is_seen",
    "toolchain.cxx.version": "test_toolchain_binary_change_is_seen",
    "toolchain.cxx.blake3": "test_toolchain_binary_change_is_seen",
    "toolchain.cxx.cc1plus": "test_toolchain_binary_change_is_seen",
    # The interpreter is in the same guard list as cc and cxx (every probed executable); a fake
    # interpreter cannot run inside the sandbox, so the cc/cxx case stands for it.
    "toolchain.python.version": "test_toolchain_binary_change_is_seen",
    "toolchain.python.short": "test_toolchain_binary_change_is_seen",
    "toolchain.python.implementation": "test_toolchain_binary_change_is_seen",
    "toolchain.python.soabi": "test_toolchain_binary_change_is_seen",
    "toolchain.python.platform": "test_toolchain_binary_change_is_seen",
    "toolchain.python.blake3": "test_toolchain_binary_change_is_seen",
    "toolchain.rocm.version": "test_rocm_version_file_change_is_seen",
    "toolchain.rocm.version_file": "test_rocm_version_file_change_is_seen",
    "toolchain.rocm.comparable": "test_rocm_version_file_change_is_seen",
    "toolchain.rocm.declared": "test_recipe_edit_is_seen",
    "toolchain.rocm.hip_version": "test_rocm_version_file_change_is_seen",
    "toolchain.rocm.hipcc": "test_rocm_version_file_change_is_seen",
    "toolchain.rocm.clang": "test_rocm_version_file_change_is_seen",
    "toolchain.rocm.coverage": "test_rocm_version_file_change_is_seen",
    # The system manifest: the visible packages, the database it was read from, the unowned
    # directories masked and the unowned files hashed all change with dpkg's database.
    "toolchain.packages.*": "test_system_package_change_is_seen",
    "toolchain.database": "test_system_package_change_is_seen",
    "toolchain.masked[]": "test_system_package_change_is_seen",
    "toolchain.unowned.blake3": "test_system_package_change_is_seen",
    "toolchain.unowned.count": "test_system_package_change_is_seen",
    "toolchain.python.prefix_files": "test_toolchain_python_prefix_change_is_seen",
    "toolchain.rocm.hip_clang": "test_hip_clang_binary_change_is_seen",
    "toolchain.rocm.device_libs": "test_hip_clang_device_libs_change_is_seen",
    # [toolchain] rust: rustc, cargo and librustc_driver are toolchain guards like cc and cxx.
    "toolchain.rust.rustc": "test_toolchain_binary_change_is_seen",
    "toolchain.rust.cargo": "test_toolchain_binary_change_is_seen",
    "toolchain.rust.driver": "test_toolchain_binary_change_is_seen",
    # kind = "rocm-sdk": the wheels' names, versions and sha256s are the recipe's own
    # [toolchain.wheels] text (and [toolchain.module] for the rocm sdist, an entry of the same
    # list); the wheel and sdist files are toolchain guards (tests/toolchain/test_rocmsdk.py).
    "toolchain.rocm-sdk[].name": "test_recipe_edit_is_seen",
    "toolchain.rocm-sdk[].version": "test_recipe_edit_is_seen",
    "toolchain.rocm-sdk[].wheel": "test_recipe_edit_is_seen",
    "toolchain.rocm-sdk[].sha256": "test_recipe_edit_is_seen",
}
DEPTH = 3
USER_NAMED = {"env", "inputs", "toolchain.packages", "build.config-settings"}


def key_paths(value: object, prefix: str = "", depth: int = DEPTH) -> set[str]:
    """Return the key paths of a JSON value down to ``depth`` levels."""
    if depth == 0 or not isinstance(value, dict | list) or not value:
        return {prefix}
    out: set[str] = set()
    if isinstance(value, list):
        for item in value:
            out |= key_paths(item, f"{prefix}[]", depth - 1)
        return out
    for key, sub in value.items():
        name = "*" if prefix in USER_NAMED else key
        out |= key_paths(sub, f"{prefix}.{name}" if prefix else name, depth - 1)
    return out


def dependency(tmp_path: Path) -> Path:
    """A tiny recipe (package ``tinydep``) for another recipe to be built against."""
    src = tmp_path / "dep-src"
    (src / "tinydep").mkdir(parents=True)
    shutil.copy(DATA / "mkwheel.py", src / "mkwheel.py")
    (src / "tinydep" / "__init__.py").write_text("VALUE = 7\n")
    recipe = tmp_path / "dep.toml"
    recipe.write_text(TINY_RECIPE.replace("tiny", "tinydep").format(src=src))
    return recipe


@pytest.mark.slow
def test_dependency_change_is_seen(tiny_recipe: Path, tmp_path: Path, store: Path) -> None:
    dep = dependency(tmp_path)
    tiny_recipe.write_text(tiny_recipe.read_text() + f'\n[requirements]\nrecipes = ["{dep}"]\n')
    assert_change_is_seen(
        tiny_recipe, store, lambda: dep.write_text(dep.read_text() + '\n[env]\nF = "2"\n')
    )


def full_recipe(tmp_path: Path, tiny_src: Path) -> tuple[Path, dict[str, str]]:
    """A recipe using every feature a derivation records, and the env to plan it with."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "parent.toml").write_text('schema = 1\n[env]\nLEVEL = "1"\n')
    patch = tmp_path / "value.patch"
    patch.write_text(PATCH.format(value=43))
    data = tmp_path / "data"
    data.mkdir()
    (data / "kernels.txt").write_text("v1\n")
    archive = tmp_path / "more.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(data / "kernels.txt", arcname="top/kernels.txt")
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, "rfmemo", "1.0", "V = 1\n")
    bin_dir = tmp_path / "bin"
    fake_cc(bin_dir / "rfcc", "1")
    root = fake_rocm_root(tmp_path, "6.2.4")
    recipe = tmp_path / "full.toml"
    recipe.write_text(
        'extends = "base/parent.toml"\n'
        + TINY_RECIPE.format(src=tiny_src).replace(
            "[source]\n", f'[source]\npatches = ["{patch}"]\n'
        )
        + f'\n[toolchain]\nkind = "rocm"\nrocm = "6.2"\nroot = "{root}"\ncc = "rfcc"\n'
        + f'\n[requirements]\nbuild = ["rfmemo==1.0"]\nrecipes = ["{dependency(tmp_path)}"]\n'
        + f'\n[inputs.data]\npath = "{data}"\nenv = "DATA"\n'
        + f'\n[inputs.more]\npath = "{archive}"\nenv = "MORE"\nsubdir = "top"\n'
    )
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "ROCMFORGE_PIP_ARGS": pip_args(wheels)}
    return recipe, env


@pytest.mark.slow
def test_every_derivation_key_has_a_memo_case(tiny_src: Path, tmp_path: Path, store: Path) -> None:
    recipe, env = full_recipe(tmp_path, tiny_src)
    proc = rf("plan", recipe, "--store", store, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["provisional"] == []
    keys = key_paths(plan["derivation"])
    assert {"source.patches[]", "inputs.*.digest", "toolchain.rocm.version"} <= keys
    # A plain clang as HIP compiler adds its own keys under toolchain.rocm.
    from test_hipclang import fake_device_libs, fake_hip_clang

    hip = recipe.read_text().replace(
        "[toolchain]\n",
        f'[toolchain]\nhip-clang = "{fake_hip_clang(tmp_path / "hip")}"\n'
        f'device-libs = "{fake_device_libs(tmp_path / "hip")}"\n',
    )
    recipe.write_text(hip)
    proc = rf("plan", recipe, "--store", store, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    hip_keys = key_paths(json.loads(proc.stdout)["derivation"])
    assert {"toolchain.rocm.hip_clang", "toolchain.rocm.device_libs"} <= hip_keys
    keys |= hip_keys
    missing = sorted(keys - set(KEY_CASES))
    assert not missing, f"derivation keys without a memo case (add one to KEY_CASES): {missing}"
    unknown = sorted({t for t in KEY_CASES.values() if not callable(globals().get(t))})
    assert not unknown, f"KEY_CASES names tests that do not exist: {unknown}"


# -- issue 19: a big tree in one recipe never slows the hits of another ----------------------------


@pytest.mark.slow
def test_memo_is_per_recipe_so_a_big_tree_input_does_not_grow_others(
    tiny_src: Path, tmp_path: Path, store: Path
) -> None:
    from rocmforge.pipeline import memo

    small = tmp_path / "small.toml"
    small.write_text(TINY_RECIPE.format(src=tiny_src))
    big_tree = tmp_path / "big"
    for i in range(2000):
        d = big_tree / f"d{i // 200}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}").write_text(str(i))
    big = tmp_path / "big.toml"
    big.write_text(
        TINY_RECIPE.format(src=tiny_src) + f'\n[inputs.big]\npath = "{big_tree}"\nenv = "BIG"\n'
    )
    assert rf("realize", small, "--store", store).returncode == 0
    small_memo = Path(memo.memo_path(str(store), memo.memo_key(str(small), str(store)) or ""))
    size_before = small_memo.stat().st_size
    assert rf("realize", big, "--store", store).returncode == 0
    big_memo = Path(memo.memo_path(str(store), memo.memo_key(str(big), str(store)) or ""))
    assert big_memo != small_memo and big_memo.stat().st_size > size_before + 100_000
    assert rf("realize", small, "--store", store).returncode == 0
    assert small_memo.stat().st_size == size_before  # none of the big tree's 2,000 guards
    assert answered_by_memo(small, store) and answered_by_memo(big, store)


@pytest.mark.slow
def test_git_source_hit_is_answered_by_the_memo(
    tmp_path: Path, tiny_src: Path, store: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(tiny_src, repo)
    git(repo, "init", "-q")
    rev = commit_all(repo, "tiny")
    recipe = tmp_path / "g.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=repo).replace(f'path = "{repo}"', f'git = "{repo}"\nrev = "{rev}"')
    )
    assert rf("realize", recipe, "--store", store).returncode == 0
    assert answered_by_memo(recipe, store)


@pytest.mark.slow
def test_stack_is_answered_by_the_memo_and_guarded_by_its_members(
    tiny_recipe: Path, tmp_path: Path, store: Path
) -> None:
    dep = dependency(tmp_path)
    stack = tmp_path / "stack.toml"
    stack.write_text(f'schema = 1\n[stack]\nname = "s"\nrecipes = ["{dep}", "{tiny_recipe}"]\n')
    first = rf("realize", stack, "--store", store)
    assert first.returncode == 0, first.stderr
    assert answered_by_memo(stack, store)
    again = rf("realize", stack, "--store", store)
    assert again.stdout == first.stdout and len(again.stdout.split()) == 2
    dep.write_text(dep.read_text() + '\n[env]\nF = "3"\n')  # a member changes
    assert not answered_by_memo(stack, store)
    third = rf("realize", stack, "--store", store)
    assert third.stdout.split()[0] != first.stdout.split()[0]
    assert third.stdout.split()[1] == first.stdout.split()[1]
    stack.write_text(stack.read_text().replace(f', "{tiny_recipe}"', ""))  # the stack changes
    assert not answered_by_memo(stack, store)


def test_closure_guards_are_recorded_once_each(tmp_path: Path) -> None:
    from rocmforge.pipeline import memo

    store = tmp_path / "store"
    store.mkdir()
    files = []
    for i in range(30):  # a chain: node i is built against every node before it
        f = tmp_path / f"n{i}.toml"
        f.write_text(f"# {i}\n")
        files.append(str(f))
        result = {"hash": "0" * 32, "name": f"n{i}", "version": "1", "path": "/x", "wheels": []}
        memo.record(str(store), str(f), files=[str(f)], trees=[], result=result, depends=files[:-1])
    key = memo.memo_key(files[-1], str(store))
    assert key is not None
    with open(memo.memo_path(str(store), key), "rb") as fh:
        data = marshal.load(fh)
    assert len(data[key]["guards"]) == 30  # linear, not 2**29
