"""``[toolchain] kind = "rocm-sdk"``: ROCm made of SDK wheels, pinned by digest.

No AMD index is reachable from CI, so the HIP tests build stand-in SDK wheels from Debian's ROCm
files (tests/standin_sdk.py: same names, same top-level directories, same ``rocm-sdk path``
answers as AMD's) and serve them from a local directory through ``ROCMFORGE_SDK_ARGS``. With them:
``lock`` pins the SDK by sha256, ``realize`` of ``tests/data/hip-sdk.toml`` (gfx90a + gfx942)
unpacks the SDK once, builds in bwrap with the host's ROCm hidden and proves both archs; a respun
SDK wheel changes the hash and ``explain`` names it; a second recipe reuses the unpacked tree; gc
collects the tree with the last entry that used it. Without any index, plan / lint / doctor /
``lock --check`` work (provisional) and realize stops before building, saying where to point it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import zipfile
from pathlib import Path

import pytest
import standin_sdk
from conftest import REPO, rf

from rocmforge.errors import RecipeError, ToolchainError
from rocmforge.recipe.lints import lint_recipe
from rocmforge.recipe.load import parse_recipe_text
from rocmforge.toolchain.rocmsdk import (
    SdkWheel,
    check_env,
    ensure_tree,
    locked_module,
    locked_pins,
    sdk_env,
    wheel_names,
)
from rocmforge.trust.explain import diff_derivations

RECIPE = REPO / "tests" / "data" / "hip-sdk.toml"
#: A build step writing hipsdkdemo/_rocm_init.py as TheRock's build_prod_wheels.py writes
#: torch/_rocm_init.py (get_rocm_init_contents), strict about the SDK version. The order matters
#: here: Debian's libamdhip64 has no RUNPATH, so its libhsa-runtime64 must already be loaded
#: (AMD's libraries carry $ORIGIN RUNPATHs; torch preloads for the same reason).
ROCM_INIT = """cat > hipsdkdemo/_rocm_init.py <<'EOF'
def initialize():
    import rocm_sdk
    rocm_sdk.initialize_process(
        preload_shortnames=['hsa-runtime64', 'amdhip64'],
        check_version='7.14.0', fail_on_version_mismatch=True)
EOF"""


def _recipe(tmp_path: Path) -> Path:
    text = RECIPE.read_text()
    text = text.replace('"../../examples/hip-sdk-demo"', f'"{REPO / "examples" / "hip-sdk-demo"}"')
    path = tmp_path / "hip-sdk.toml"
    path.write_text(text)
    return path


# -- the recipe model ------------------------------------------------------------------------------


def test_kind_names_the_concrete_wheels_never_the_selector() -> None:
    recipe = parse_recipe_text(RECIPE.read_text(), file=RECIPE, locked=False)
    spec = recipe.toolchain
    assert (spec.kind, spec.sdk_version, spec.families) == (
        "rocm-sdk", "7.14.0", ("gfx94X-dcgpu", "gfx90a")
    )
    names = wheel_names(spec.families)
    assert names == (
        "rocm-sdk-core", "rocm-sdk-devel", "rocm-sdk-libraries", "rocm-sdk-device-gfx90a",
        "rocm-sdk-libraries-gfx94x-dcgpu",
    )
    assert "rocm" not in names
    assert locked_pins(spec) == ({}, names)
    assert locked_module(spec) is None  # the rocm sdist: only the source of rocm_sdk, locked apart
    assert check_env(spec) == {"ROCM_SDK_TARGET_FAMILY": "gfx94X-dcgpu"}  # from the recipe


def test_sdk_keys_are_checked() -> None:
    bad = (
        'schema = 1\n[package]\nname = "x"\nversion = "1"\n[source]\npath = "."\n'
        '[toolchain]\nkind = "rocm-sdk"\nfamilies = ["mi300x"]\nindex = "repo.amd.com"\n'
        '[toolchain.wheels]\n"rocm==7.14.0" = "sha256:00"\n'
    )
    with pytest.raises(RecipeError) as err:
        parse_recipe_text(bad, file=Path("/r/x.toml"), locked=False)
    keys = {p.key for p in err.value.problems}
    assert {"toolchain.version", "toolchain.families[0]", "toolchain.index"} <= keys
    assert "toolchain.wheels.rocm==7.14.0" in keys  # the selector is never a locked wheel
    module = bad.replace('[toolchain.wheels]\n"rocm==7.14.0" = "sha256:00"\n', (
        '[toolchain.module]\n"rocm-sdk-core==7.14.0" = "sha256:' + "0" * 64 + '"\n'
        '"rocm==7.14.0" = "blake3:' + "0" * 64 + '"\n'))  # fmt: skip
    with pytest.raises(RecipeError) as err:
        parse_recipe_text(module, file=Path("/r/x.toml"), locked=False)
    keys = {p.key for p in err.value.problems}
    assert {"toolchain.module.rocm-sdk-core==7.14.0", "toolchain.module.rocm==7.14.0"} <= keys
    system = 'schema = 1\n[package]\nname = "x"\nversion = "1"\n[source]\npath = "."\n'
    with pytest.raises(RecipeError) as err:
        parse_recipe_text(system + '[toolchain]\nfamilies = ["gfx942"]\n', file=Path("/r/x.toml"))
    assert [p.message for p in err.value.problems] == ['only applies to kind = "rocm-sdk"']


def test_explain_names_a_changed_sdk_wheel() -> None:
    def drv(core: str, sha: str) -> dict[str, object]:
        wheels = [
            {"name": "rocm-sdk-core", "version": core, "wheel": f"c-{core}.whl", "sha256": sha},
            {"name": "rocm-sdk-devel", "version": "7.14.0", "wheel": "d.whl", "sha256": "d" * 64},
        ]
        return {"toolchain": {"kind": "rocm-sdk", "rocm-sdk": wheels}}

    bumped = diff_derivations(drv("7.14.0", "a" * 64), drv("7.15.0", "b" * 64))
    assert [str(d) for d in bumped] == ["toolchain.rocm-sdk.rocm-sdk-core: 7.14.0 -> 7.15.0"]
    respun = diff_derivations(drv("7.14.0", "a" * 64), drv("7.14.0", "b" * 64))
    assert [d.key for d in respun] == ["toolchain.rocm-sdk.rocm-sdk-core.sha256"]


# -- without the SDK index (CI, a laptop) ---------------------------------------------------------


@pytest.mark.slow
def test_without_an_index_everything_but_realize_works(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    store = tmp_path / "store"
    env = {"ROCMFORGE_SDK_ARGS": ""}
    plan = rf("plan", recipe, "--store", store, "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    notes = json.loads(plan.stdout)["provisional"]
    assert any("toolchain.index" in n and "not locked" in n for n in notes), notes
    loaded = parse_recipe_text(recipe.read_text(), file=recipe, locked=False)
    assert not [f for f in lint_recipe(loaded) if f.severity == "error"]
    doctor = rf("doctor", recipe, "--store", store, env=env)
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor.stderr
    assert "is not locked" in doctor.stdout and "ROCMFORGE_SDK_ARGS" in doctor.stdout
    check = rf("lock", "--check", recipe, "--store", store, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "provisional" in check.stdout and "ROCMFORGE_SDK_ARGS" in check.stdout
    realize = rf("realize", recipe, "--store", store, env=env)
    assert realize.returncode == 2, realize.stderr
    assert "toolchain.index" in realize.stderr and "ROCMFORGE_SDK_ARGS" in realize.stderr
    assert "[toolchain] index" in realize.stderr
    assert not list((store / "tmp").iterdir()) and not (store / "sources" / "rocm-sdk").exists()


# -- with stand-in SDK wheels ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def sdk_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = standin_sdk.available()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"missing in CI: {why}; scripts/test.sh installs them")
        pytest.skip(f"not installed: {why} (scripts/test.sh)")
    dest = tmp_path_factory.mktemp("sdk-index")
    standin_sdk.build_sdk(dest, "7.14.0", ["gfx94X-dcgpu", "gfx90a"])
    return dest


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.hip
@pytest.mark.slow
def test_sdk_wheels_locked_unpacked_once_and_hashed(tmp_path: Path, sdk_dir: Path) -> None:
    env = {"ROCMFORGE_SDK_ARGS": f"--no-index --find-links {sdk_dir}"}
    store = tmp_path / "store"
    recipe = _recipe(tmp_path)
    lock = rf("lock", recipe, "--store", store, env=env)
    assert lock.returncode == 0, lock.stderr
    locked = parse_recipe_text(recipe.read_text(), file=recipe, locked=False).toolchain
    # the rocm sdist is locked apart, by sha256, as the source of the rocm_sdk module only
    assert locked.sdk_module == {"rocm==7.14.0": f"sha256:{_sha(sdk_dir / 'rocm-7.14.0.tar.gz')}"}
    by_file = {p.name: _sha(p) for p in sdk_dir.glob("*.whl")}
    assert sorted(locked.sdk_wheels) == sorted(
        f"{n}==7.14.0" for n in wheel_names(("gfx94X-dcgpu", "gfx90a"))
    )
    assert sorted(d.removeprefix("sha256:") for d in locked.sdk_wheels.values()) == sorted(
        by_file.values()
    )
    assert rf("lock", "--check", recipe, "--store", store, env=env).returncode == 0
    bumped = tmp_path / "bumped.toml"  # another SDK version declared, the old pins left: stale
    bumped.write_text(recipe.read_text().replace('version = "7.14.0"', 'version = "7.15.0"', 1))
    stale = rf("lock", "--check", bumped, "--store", store, env=env)
    assert stale.returncode == 1 and "toolchain.wheels.rocm-sdk-core==7.14.0" in stale.stdout

    first = rf("realize", recipe, "--store", store, "--json", "-o", tmp_path / "r1", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    [report] = json.loads(first.stdout)
    entry = Path(report["path"])
    again = rf("realize", recipe, "--store", store, "--json", env=env)
    [hit] = json.loads(again.stdout)
    assert hit["cached"] and hit["path"] == str(entry)
    meta = json.loads((entry / "meta.json").read_text())
    [archs] = meta["archs"].values()
    both = {"bundles": 1, "union": ["gfx90a", "gfx942"], "common": ["gfx90a", "gfx942"]}
    assert archs == {"hipsdkdemo/_hip.cpython-311-x86_64-linux-gnu.so": both}
    assert meta["sandbox"] == "bwrap"
    log = rf("log", entry, "--store", store).stdout
    assert "ROCm SDK unpacked" in log and "the host's ROCm is hidden" in log
    assert "links libamdhip64.so.5 from the ROCm SDK wheels" in log
    trees = list((store / "sources" / "rocm-sdk").iterdir())
    assert len(trees) == 1
    core = trees[0] / "_rocm_sdk_core" / "lib" / "libamdhip64.so.5"
    assert not core.stat().st_mode & 0o222 and not trees[0].stat().st_mode & stat.S_IWUSR
    # init ran before sealing: the device wheel's file is linked into the devel tree
    rel = Path("lib", "rocblas", "library", "TensileLibrary_gfx90a.dat")
    devel, libraries = trees[0] / "_rocm_sdk_devel", trees[0] / "_rocm_sdk_libraries"
    assert (devel / rel).samefile(libraries / rel)
    # the rocm_sdk module copied out of the rocm sdist, with a dist-info; its setup.py never ran
    assert (trees[0] / "rocm_sdk" / "__init__.py").is_file()
    assert (trees[0] / "rocm-7.14.0.dist-info" / "METADATA").read_text().startswith(
        "Metadata-Version: 2.1\nName: rocm\nVersion: 7.14.0\n"
    )
    assert not (trees[0] / "setup.py").exists() and not (trees[0] / "src").exists()
    drv = json.loads((entry / "derivation.json").read_text())
    sdk = drv["toolchain"]["rocm-sdk"]
    assert {w["name"]: w["sha256"] for w in sdk} == {
        n.partition("==")[0]: d.removeprefix("sha256:")
        for n, d in [*locked.sdk_wheels.items(), *locked.sdk_module.items()]
    }
    assert "rocm" not in drv["toolchain"]  # nothing of a host ROCm was probed
    deps = json.loads((entry / "provenance.json").read_text())["predicate"]["buildDefinition"]
    names = {d["name"] for d in deps["resolvedDependencies"]}
    assert {f"toolchain/rocm-sdk/{w['name']}" for w in sdk} <= names
    audit = rf("audit", report["wheels"][0], "--store", store)
    assert audit.returncode == 0, audit.stderr
    assert audit.stdout.count("sdk wheel") == 5 and "rocm-sdk-core==7.14.0" in audit.stdout
    assert "sdk module" in audit.stdout and "rocm-7.14.0.tar.gz" in audit.stdout

    # a second recipe on the same SDK reuses the unpacked tree
    other = tmp_path / "other.toml"  # the locked recipe with one more variable
    other.write_text(recipe.read_text().replace("[env]\n", '[env]\nOTHER = "1"\n', 1))
    second = rf("realize", other, "--store", store, "--json", env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    [report2] = json.loads(second.stdout)
    assert report2["hash"] != report["hash"]
    assert "ROCm SDK reused" in rf("log", report2["path"], "--store", store).stdout
    assert list((store / "sources" / "rocm-sdk").iterdir()) == trees
    # the SDK is mounted at a fixed path: a sandbox that does not relocate is refused
    third = tmp_path / "third.toml"
    third.write_text(other.read_text().replace('OTHER = "1"', 'OTHER = "2"'))
    none = rf("realize", third, "--store", store, "--sandbox", "none", env=env)
    assert none.returncode == 1 and "needs a sandbox that mounts the SDK" in none.stderr
    # the check venv gets the SDK runtime because the wheel requires it: without that requirement
    # the import finds no libamdhip64 (the host's is hidden in the check too) and the build fails
    bare = tmp_path / "bare.toml"
    bare.write_text(third.read_text().replace('"rocm-sdk-core==7.14.0"\n', '""\n', 1))
    failed = rf("realize", bare, "--store", store, env=env)
    assert failed.returncode == 1 and "check failed: `import hipsdkdemo`" in failed.stderr, (
        failed.stderr[-2000:]
    )

    # the extension's __init__ runs a _rocm_init.py that imports rocm_sdk and initializes the
    # process as TheRock's torch/_rocm_init.py does: the check venv has the locked module
    init = tmp_path / "init.toml"
    step = f"steps = [\n    '''{ROCM_INIT}''',\n"
    init.write_text(third.read_text().replace("steps = [\n", step))
    good = rf("realize", init, "--store", store, "--json", env=env)
    assert good.returncode == 0, good.stderr[-3000:]
    [inited] = json.loads(good.stdout)
    with zipfile.ZipFile(inited["wheels"][0]) as zf:
        assert "hipsdkdemo/_rocm_init.py" in zf.namelist()
    glog = rf("log", inited["path"], "--store", store).stdout
    [gets] = [ln for ln in glog.splitlines() if "check venv gets the SDK's runtime" in ln]
    shown = set(gets.rpartition(" packages ")[2].split(", "))
    assert {"rocm_sdk", "rocm-7.14.0.dist-info"} <= shown
    # compiled against another SDK version: rocm_sdk's own check stops the import
    other_sdk = tmp_path / "other-sdk.toml"
    other_sdk.write_text(init.read_text().replace("version='7.14.0'", "version='7.15.*'"))
    mismatch = rf("realize", other_sdk, "--store", store, env=env)
    assert mismatch.returncode == 1, mismatch.stderr[-2000:]
    assert "check failed: `import hipsdkdemo`" in mismatch.stderr

    # one SDK wheel respun (a post release): the lock moves, the hash changes, explain names it
    standin_sdk.build_sdk(
        sdk_dir, "7.14.0.post1", ["gfx94X-dcgpu", "gfx90a"], only=["rocm-sdk-core"], tag="respin"
    )
    up = rf("lock", "--upgrade", "rocm-sdk-core", recipe, "--store", store, env=env)
    assert up.returncode == 0, up.stderr
    assert "toolchain.wheels.rocm-sdk-core==7.14.0.post1" in up.stdout
    plan = rf("plan", recipe, "--store", store, "--json", env=env)
    assert json.loads(plan.stdout)["hash"] != report["hash"]
    explain = rf("explain", entry, recipe, "--store", store, env=env)
    assert "toolchain.rocm-sdk.rocm-sdk-core: 7.14.0 -> 7.14.0.post1" in explain.stdout, (
        explain.stdout + explain.stderr
    )
    # the rocm sdist respun: the module's pin moves, the hash changes, explain names it
    standin_sdk.build_sdk(sdk_dir, "7.14.0.post1", ["gfx94X-dcgpu", "gfx90a"], only=["rocm"])
    up = rf("lock", "--upgrade", "rocm", recipe, "--store", store, env=env)
    assert up.returncode == 0, up.stderr
    assert "toolchain.module.rocm==7.14.0.post1" in up.stdout
    plan2 = rf("plan", recipe, "--store", store, "--json", env=env)
    assert json.loads(plan2.stdout)["hash"] not in (report["hash"], json.loads(plan.stdout)["hash"])
    explain = rf("explain", entry, recipe, "--store", store, env=env)
    assert "toolchain.rocm-sdk.rocm: 7.14.0 -> 7.14.0.post1" in explain.stdout, explain.stdout

    # gc keeps the tree while a kept entry uses it, and collects it with the last one
    kept = rf("gc", "--store", store, "--json")
    assert kept.returncode == 0, kept.stderr
    assert list((store / "sources" / "rocm-sdk").iterdir()) == trees
    (tmp_path / "r1").unlink()
    gone = rf("gc", "--store", store, "--json")
    assert gone.returncode == 0, gone.stderr
    assert not list((store / "sources" / "rocm-sdk").iterdir())
    freed = {s["source"] for s in json.loads(gone.stdout)["sources"]}
    assert f"rocm-sdk/{trees[0].name}" in freed
    assert "wheels/rocm-7.14.0.tar.gz" in freed  # the rocm sdist goes with the last user too
    shutil.rmtree(store, ignore_errors=True)


# -- the init step on tiny wheels (no Debian files needed) ----------------------------------------


def _tiny_sdk(dest: Path, *, link: str = "../../_rocm_sdk_core/lib/libx.so.1") -> list[Path]:
    """Three tiny wheels in AMD's layout: core with one library, a device wheel with one kernel
    file and its devel-links manifest, devel with a tarball linking into core."""
    import io
    import tarfile

    dest.mkdir(parents=True)
    core = standin_sdk._Wheel(dest, "rocm-sdk-core", "7.14.0")
    core.add("_rocm_sdk_core/__init__.py", b"")
    core.add("_rocm_sdk_core/lib/libx.so.1", b"ELF-ish\n")
    core.add("_rocm_sdk_core/bin/tool", b"#!/bin/sh\n", exe=True)
    dev = standin_sdk._Wheel(dest, "rocm-sdk-device-gfx942", "7.14.0")
    dev.add("_rocm_sdk_libraries/lib/k/gfx942.co", b"code\n")
    target = "../../../_rocm_sdk_libraries/lib/k/gfx942.co"
    manifest = {"links": [{"relpath": "lib/k/gfx942.co", "target": target}]}
    dev.add("_rocm_sdk_libraries/.devel_links/gfx942.json", json.dumps(manifest).encode())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        standin_sdk._regular(tf, "_rocm_sdk_devel/__init__.py", b"")
        standin_sdk._regular(tf, "_rocm_sdk_devel/include/x.h", b"int x;\n")
        standin_sdk._symlink(tf, "_rocm_sdk_devel/lib/libx.so.1", link)
        standin_sdk._symlink(tf, "_rocm_sdk_devel/lib/libx.so", "libx.so.1")
        standin_sdk._symlink(tf, "_rocm_sdk_devel/bin/amdclang", "../lib/llvm/bin/clang")
        standin_sdk._symlink(tf, "_rocm_sdk_devel/share", "../_rocm_sdk_core/share")
    devel = standin_sdk._Wheel(dest, "rocm-sdk-devel", "7.14.0")
    devel.add("rocm_sdk_devel/__init__.py", b"")
    devel.add("rocm_sdk_devel/_devel.tar", buf.getvalue())
    return [core.close(), dev.close(), devel.close()]


def _sdk_wheels(paths: list[Path]) -> list[SdkWheel]:
    return [
        SdkWheel(name=p.name.split("-", 1)[0].replace("_", "-"), version="7.14.0", wheel=p,
                 sha256=_sha(p))
        for p in paths
    ]  # fmt: skip


def test_init_expands_devel_links_device_files_and_seals(tmp_path: Path) -> None:
    wheels = _sdk_wheels(_tiny_sdk(tmp_path / "index"))
    tree, fresh = ensure_tree(tmp_path / "sources", wheels)
    assert fresh and ensure_tree(tmp_path / "sources", wheels) == (tree, False)
    devel = tree / "_rocm_sdk_devel"
    assert (devel / "lib" / "libx.so.1").samefile(tree / "_rocm_sdk_core" / "lib" / "libx.so.1")
    assert not (devel / "lib" / "libx.so").is_symlink()  # a file symlink becomes a hard link
    assert (devel / "bin" / "amdclang").is_symlink()  # bin/amdclang* stay symlinks
    assert (devel / "share").is_symlink()  # so do directory symlinks
    assert (devel / "lib" / "k" / "gfx942.co").samefile(
        tree / "_rocm_sdk_libraries" / "lib" / "k" / "gfx942.co"
    )  # the device wheel's file, linked by init
    assert not (tree / "rocm_sdk_devel" / "_devel.tar").exists()
    assert os.access(tree / "_rocm_sdk_core" / "bin" / "tool", os.X_OK)
    assert not (devel / "include" / "x.h").stat().st_mode & 0o222
    assert not devel.stat().st_mode & 0o222  # sealed: directories too
    env, path = sdk_env(tree, "/opt/rocm-sdk")
    assert env["ROCM_PATH"] == env["HIP_PATH"] == "/opt/rocm-sdk/_rocm_sdk_devel"
    assert env["CMAKE_PREFIX_PATH"] == "/opt/rocm-sdk/_rocm_sdk_devel/lib/cmake"
    assert path[0] == "/opt/rocm-sdk/_rocm_sdk_devel/bin"


def test_init_refuses_links_out_of_the_sdk_and_changed_wheels(tmp_path: Path) -> None:
    bad = _sdk_wheels(_tiny_sdk(tmp_path / "bad", link="../../../../etc/passwd"))
    with pytest.raises(ToolchainError, match="points outside the SDK"):
        ensure_tree(tmp_path / "sources", bad)
    assert not list((tmp_path / "sources" / "rocm-sdk").iterdir())  # nothing half-made stays
    good = _sdk_wheels(_tiny_sdk(tmp_path / "good"))
    with open(good[0].wheel, "ab") as f:
        f.write(b"\0")  # the wheel changed since it was locked
    with pytest.raises(ToolchainError, match="changed since it was fetched"):
        ensure_tree(tmp_path / "sources", good)


def test_rocm_module_copied_from_the_sdist_never_built(tmp_path: Path) -> None:
    from rocmforge.lock.sdkwheels import _sdists
    from rocmforge.lock.sdkwheels import index_locations as _locations

    index = tmp_path / "index"
    paths = _tiny_sdk(index)
    sdist = standin_sdk.build_module_sdist(index, "7.14.0", ["gfx942"])
    standin_sdk.build_module_sdist(index, "7.14.0.post2", ["gfx942"])
    # found by file name in find-links (pip never sees it: its setup.py would probe the GPU)
    args = ("--index-url", "https://example.invalid/", "--no-index", "--find-links", str(index))
    assert _locations(args) == ([], [str(index)])
    assert [v for v, _ in _sdists(args)] == ["7.14.0", "7.14.0.post2"]
    module = SdkWheel(name="rocm", version="7.14.0", wheel=sdist, sha256=_sha(sdist))
    tree, _ = ensure_tree(tmp_path / "sources", [*_sdk_wheels(paths), module])
    assert sorted(p.name for p in (tree / "rocm_sdk").iterdir()) == [
        "__init__.py", "__main__.py", "_dist_info.py"
    ]
    record = (tree / "rocm-7.14.0.dist-info" / "RECORD").read_text()
    assert "rocm_sdk/__init__.py,sha256=" in record and "Requires-Dist" not in (
        tree / "rocm-7.14.0.dist-info" / "METADATA"
    ).read_text()
    assert not (tree / "setup.py").exists() and not (tree / "rocm-7.14.0").exists()
    # the module is part of the tree's key: another sdist, another tree
    other = tmp_path / "o" / "rocm-7.14.0.tar.gz"
    other.parent.mkdir()
    standin_sdk.build_module_sdist(other.parent, "7.14.0", ["gfx942", "gfx90a"])
    moved = SdkWheel(name="rocm", version="7.14.0", wheel=other, sha256=_sha(other))
    assert ensure_tree(tmp_path / "sources", [*_sdk_wheels(paths), moved])[0] != tree
    # an sdist without src/rocm_sdk is refused, nothing half-made stays
    empty = tmp_path / "e" / "rocm-7.14.0.tar.gz"
    empty.parent.mkdir()
    import tarfile

    with tarfile.open(empty, "w:gz") as tf:
        standin_sdk._regular(tf, "rocm-7.14.0/setup.py", b"")
    bad = SdkWheel(name="rocm", version="7.14.0", wheel=empty, sha256=_sha(empty))
    with pytest.raises(ToolchainError, match="holds no src/rocm_sdk"):
        ensure_tree(tmp_path / "sources", [*_sdk_wheels(paths), bad])


def test_rocm_sdist_found_on_a_pep503_index_and_fetched(tmp_path: Path) -> None:
    """``--index-url URL``: the sdist is found on the ``URL/rocm/`` page (relative links with a
    ``#sha256=`` fragment, as AMD's index has them) and downloaded as a file."""
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from rocmforge.lock.sdkwheels import _download, _sdists

    root = tmp_path / "www"
    files = root / "files"
    sdist = standin_sdk.build_module_sdist(files, "7.14.0", ["gfx942"])
    digest = _sha(sdist)
    (root / "simple" / "rocm").mkdir(parents=True)
    (root / "simple" / "rocm" / "index.html").write_text(
        f'<html><body><a href="../../files/rocm-7.14.0.tar.gz#sha256={digest}">'
        "rocm-7.14.0.tar.gz</a><a href='../../files/rocm_sdk_core-7.14.0-py3-none-any.whl'>"
        "w</a></body></html>"
    )
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
        [(version, where)] = _sdists(("--index-url", url))
        assert version == "7.14.0" and where.endswith(f"/files/rocm-7.14.0.tar.gz#sha256={digest}")
        _download(where, tmp_path / "store" / "rocm-7.14.0.tar.gz")
        assert _sha(tmp_path / "store" / "rocm-7.14.0.tar.gz") == digest
        assert _sdists(("--index-url", f"{url}missing/")) == []  # an unreachable page: none
        with pytest.raises(ToolchainError, match="does not have the sha256 its index gives"):
            _download(where.replace(digest, "0" * 64), tmp_path / "bad" / "rocm-7.14.0.tar.gz")
        assert not list((tmp_path / "bad").iterdir())  # nothing half-written stays
    finally:
        server.shutdown()
        server.server_close()
