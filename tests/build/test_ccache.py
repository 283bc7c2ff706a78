"""The compiler cache (ccache) inside the sandbox: real builds of the C demo, the multi-file C++
example (CMake + Ninja) and the HIP demo with the cache off, cold and warm give byte-identical
wheels; warm builds hit; a truncated cache entry is recompiled; two stores share one cache
directory; concurrent builds share it; the stats reach meta.json, the summary line, ``show`` and
``du``; ``gc --compiler-cache`` trims and clears; the setting never changes the input hash."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, TINY_RECIPE, cxx_many, pip_args, rf

from rocmforge.build import ccache
from rocmforge.errors import RecipeError, StoreError
from rocmforge.recipe.model import Recipe
from rocmforge.store.entry import EntryMeta

needs_ccache = pytest.mark.skipif(
    ccache.executable() is None and os.environ.get("CI") != "true",
    reason="ccache not installed (scripts/test.sh installs it)",
)


def _sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _realize(
    recipe: Path, store: Path, cache: Path | None, *extra: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Realize ``recipe``; return the report, the entry's meta.json and stderr."""
    full = dict(env or {})
    if cache is not None:
        full[ccache.ENV_DIR] = str(cache)
    proc = rf("realize", recipe, "--store", store, *extra, env=full)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(rf("realize", recipe, "--store", store, "--json", env=full).stdout)[0]
    meta = json.loads((Path(report["path"]) / "meta.json").read_text())
    return report, meta, proc.stderr


def _wheel_sha(report: dict[str, Any]) -> str:
    [wheel] = report["wheels"]
    return _sha(wheel)


def _demo_recipe(tmp_path: Path, *, extra_env: str = "", name: str = "demo.toml") -> Path:
    text = (REPO / "recipes" / "demo.toml").read_text()
    text = text.replace('path = "../examples/demo"', f'path = "{REPO / "examples" / "demo"}"')
    if extra_env:
        text = text.replace('CFLAGS = "-O2"', f'CFLAGS = "-O2"\n{extra_env}')
    path = tmp_path / name
    path.write_text(text)
    shutil.copy(REPO / "recipes" / "demo.lock", path.with_suffix(".lock"))  # its locked closure
    return path


# -- quick: parsing, settings, meta -------------------------------------------------------------


def test_stats_log_is_counted(tmp_path: Path) -> None:
    (tmp_path / "stats.log").write_text(
        "# 2026-11-30T10:00:00\ndirect_cache_hit\n# x\ncache_miss\ndirect_cache_miss\n"
        "preprocessed_cache_miss\n# y\ncalled_for_link\n# z\npreprocessed_cache_hit\n"
    )
    setup = ccache.CacheSetup(
        directory=tmp_path, namespace="n", mounts=(), env={}, stats_log=tmp_path
    )
    stats = ccache.read_stats(setup)
    assert (stats.compiles, stats.hits, stats.misses, stats.uncacheable) == (4, 2, 1, 1)
    assert stats.summary() == "ccache 2/3 hits (67%), 1 miss, 1 uncacheable"


def test_settings_default_shared_and_bad(tmp_path: Path) -> None:
    got = ccache.settings(tmp_path, {})
    assert (got.root, got.max_size, got.shared) == (tmp_path / "ccache", "20G", False)
    got = ccache.settings(tmp_path, {ccache.ENV_DIR: "/srv/cc", ccache.ENV_SIZE: "1.5Ti"})
    assert (got.root, got.max_size, got.shared) == (Path("/srv/cc"), "1.5Ti", True)
    with pytest.raises(ccache.CompilerCacheError, match=ccache.ENV_SIZE):
        ccache.settings(tmp_path, {ccache.ENV_SIZE: "lots"})
    with pytest.raises(ccache.CompilerCacheError, match="absolute"):
        ccache.settings(tmp_path, {ccache.ENV_DIR: "relative/dir"})


def test_namespace_follows_the_toolchain() -> None:
    a = ccache.namespace({"cc": {"blake3": "1"}})
    assert a == ccache.namespace({"cc": {"blake3": "1"}})
    assert a != ccache.namespace({"cc": {"blake3": "2"}})
    assert len(a) == 16


def test_recipe_key(tmp_path: Path) -> None:
    base = {"schema": 1, "package": {"name": "p", "version": "1"}, "source": {"path": "."}}
    for value, mode in ((True, "wrap"), (False, "off"), ("cmake-launcher", "cmake-launcher")):
        data = {**base, "build": {"compiler-cache": value}}
        recipe = Recipe.from_dict(data, file=tmp_path / "r.toml")
        assert recipe.build.compiler_cache == mode
    with pytest.raises(RecipeError, match=r"build\.compiler-cache"):
        Recipe.from_dict({**base, "build": {"compiler-cache": "yes"}}, file=tmp_path / "r.toml")


def test_meta_field_round_trip_and_bad() -> None:
    base = {"hash": "a" * 32, "name": "p", "version": "1", "created": 1.0, "size": 1, "wheels": []}
    cc = {"compiles": 3, "hits": 2, "misses": 1, "uncacheable": 0, "namespace": "n"}
    meta = EntryMeta.from_json({**base, "compiler_cache": cc}, file="meta.json")
    assert meta.compiler_cache == cc
    assert meta.to_json()["compiler_cache"] == cc
    assert "compiler_cache" not in EntryMeta.from_json(base, file="m").to_json()
    with pytest.raises(StoreError, match="compiler_cache"):
        EntryMeta.from_json({**base, "compiler_cache": {"hits": "2"}}, file="meta.json")


# -- real builds ---------------------------------------------------------------------------------


@needs_ccache
@pytest.mark.slow
def test_c_demo_cache_off_cold_warm_identical(tmp_path: Path, wheelhouse: Path) -> None:
    cache = tmp_path / "shared-cache"
    recipe = _demo_recipe(tmp_path)
    off, off_meta, _ = _realize(recipe, tmp_path / "s0", cache, "--no-compiler-cache")
    assert "compiler_cache" not in off_meta
    assert not cache.exists()  # the cache was not even created
    cold, cold_meta, _ = _realize(recipe, tmp_path / "s1", cache)
    assert cold["hash"] == off["hash"]  # never part of the hash
    assert cold_meta["compiler_cache"]["misses"] >= 1
    assert cold_meta["compiler_cache"]["hits"] == 0
    # A second store pointing at the same cache directory hits every compile.
    warm, warm_meta, err = _realize(recipe, tmp_path / "s2", cache)
    cc = warm_meta["compiler_cache"]
    assert cc["hits"] == cold_meta["compiler_cache"]["misses"] and cc["misses"] == 0, cc
    assert f"ccache {cc['hits']}/{cc['hits']} hits (100%), 0 misses" in err
    assert _wheel_sha(off) == _wheel_sha(cold) == _wheel_sha(warm)
    # An env change the compile ignores: a new hash, and every compile hits.
    other = _demo_recipe(tmp_path, extra_env='RF_IGNORED = "1"', name="demo2.toml")
    changed, changed_meta, _ = _realize(other, tmp_path / "s2", cache)
    assert changed["hash"] != warm["hash"]
    assert changed_meta["compiler_cache"]["misses"] == 0
    assert changed_meta["compiler_cache"]["hits"] >= 1
    show = rf("show", warm["hash"], "--store", tmp_path / "s2", env={ccache.ENV_DIR: str(cache)})
    assert show.returncode == 0, show.stderr
    assert f"compiler     ccache {cc['hits']}/{cc['hits']} hits" in show.stdout
    du = rf("du", "--store", tmp_path / "s2", "--json", env={ccache.ENV_DIR: str(cache)})
    usage = json.loads(du.stdout)["compiler_cache"]
    assert usage["root"] == str(cache) and usage["files"] > 0 and usage["bytes"] > 0
    assert usage["namespaces"] == 1
    # gc --compiler-cache: trim to a tiny cap, then clear.
    env = {ccache.ENV_DIR: str(cache), ccache.ENV_SIZE: "1k"}
    trim = rf("gc", "--store", tmp_path / "s2", "--compiler-cache", "--json", env=env)
    assert trim.returncode == 0, trim.stderr
    got = json.loads(trim.stdout)
    assert got["before"]["entries"] > 0 and got["after"]["entries"] == 0, got
    clear = rf("gc", "--store", tmp_path / "s2", "--compiler-cache", "clear", env=env)
    assert clear.returncode == 0, clear.stderr
    assert "compiler cache cleared" in clear.stdout
    again, again_meta, _ = _realize(recipe, tmp_path / "s3", cache)
    assert again_meta["compiler_cache"]["hits"] == 0  # cleared: everything missed
    assert _wheel_sha(again) == _wheel_sha(off)


@needs_ccache
@pytest.mark.slow
def test_recipe_off_switch_keeps_the_hash(tmp_path: Path, tiny_src: Path) -> None:
    on = tmp_path / "on.toml"
    on.write_text(TINY_RECIPE.format(src=tiny_src))
    off = tmp_path / "off.toml"
    off.write_text(
        TINY_RECIPE.format(src=tiny_src).replace("[build]\n", "[build]\ncompiler-cache = false\n")
    )
    a, a_meta, _ = _realize(on, tmp_path / "a", None)
    b, b_meta, _ = _realize(off, tmp_path / "b", None)
    assert a["hash"] == b["hash"]
    assert a_meta["compiler_cache"]["compiles"] == 0
    assert "compiler_cache" not in b_meta
    assert not (tmp_path / "b" / "ccache").exists()


@needs_ccache
@pytest.mark.slow
def test_truncated_entry_and_concurrent_builds(tmp_path: Path, wheelhouse: Path) -> None:
    cache = tmp_path / "cache"
    recipe = _demo_recipe(tmp_path)
    off, _, _ = _realize(recipe, tmp_path / "s0", None, "--no-compiler-cache")
    _realize(recipe, tmp_path / "s1", cache)
    results = [p for p in cache.rglob("*") if p.is_file() and p.name.endswith("R")]
    assert results, sorted(cache.rglob("*"))
    for p in results:  # every cached object cut in half
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2])
    healed, meta, _ = _realize(recipe, tmp_path / "s2", cache)
    assert meta["compiler_cache"]["hits"] == 0 and meta["compiler_cache"]["misses"] >= 1
    assert _wheel_sha(healed) == _wheel_sha(off)
    # Two realizes at once into two stores sharing the cache: both succeed, same bytes.
    env = dict(os.environ, **{ccache.ENV_DIR: str(cache)})
    env.setdefault("ROCMFORGE_PIP_ARGS", pip_args())
    env.pop("ROCMFORGE_STORE", None)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rocmforge",
                "realize",
                str(recipe),
                "--store",
                str(tmp_path / f"c{i}"),
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    shas = {_wheel_sha(json.loads(out)[0]) for out, _ in outs}
    assert shas == {_wheel_sha(off)}


@needs_ccache
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None,
                    reason="cmake and ninja needed (scripts/test.sh installs them)")  # fmt: skip
def test_cxx_many_cmake_ninja(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    recipe, src = cxx_many(tmp_path, 6)
    off, _, _ = _realize(recipe, tmp_path / "s0", None, "--no-compiler-cache")
    cold, cold_meta, _ = _realize(recipe, tmp_path / "s1", cache)
    warm, warm_meta, _ = _realize(recipe, tmp_path / "s2", cache)
    assert cold_meta["compiler_cache"]["misses"] >= 7  # 6 TUs + main.cpp (+ CMake's probe)
    cc = warm_meta["compiler_cache"]
    assert cc["misses"] == 0 and cc["hits"] == cold_meta["compiler_cache"]["misses"], cc
    assert _wheel_sha(off) == _wheel_sha(cold) == _wheel_sha(warm)
    # One source file edited: one miss, the rest hit.
    tu = src / "src" / "tu_003.cpp"
    tu.write_text(tu.read_text().replace("+ v.front()", "+ v.back()"))
    edited, edited_meta, _ = _realize(recipe, tmp_path / "s2", cache)
    assert edited["hash"] != warm["hash"]
    cc = edited_meta["compiler_cache"]
    assert cc["misses"] == 1 and cc["hits"] == warm_meta["compiler_cache"]["hits"] - 1, cc


@needs_ccache
@pytest.mark.hip
@pytest.mark.slow
def test_hip_demo_warm_cache(tmp_path: Path, wheelhouse: Path) -> None:
    if shutil.which("hipcc") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("hipcc is missing in CI: scripts/test.sh should install it (apt hipcc)")
        pytest.skip("hipcc not installed (apt-get install hipcc: Debian 12's ROCm 5.2)")
    cache = tmp_path / "cache"
    recipe = REPO / "recipes" / "hip-demo.toml"
    off, _, _ = _realize(recipe, tmp_path / "s0", None, "--no-compiler-cache")
    cold, cold_meta, _ = _realize(recipe, tmp_path / "s1", cache)
    warm, warm_meta, _ = _realize(recipe, tmp_path / "s2", cache)
    # Two compiles: kernel.hip (hipcc -> wrapped clang, -x hip, 2 archs) and _hip.c (gcc).
    assert cold_meta["compiler_cache"]["misses"] == 2, cold_meta["compiler_cache"]
    cc = warm_meta["compiler_cache"]
    assert (cc["hits"], cc["misses"]) == (2, 0), cc
    assert _wheel_sha(off) == _wheel_sha(cold) == _wheel_sha(warm)
    assert warm_meta["archs"] == cold_meta["archs"]


def test_pytorch_recipes_use_cmake_launchers() -> None:
    from rocmforge.recipe.lints import lint_recipe
    from rocmforge.recipe.load import load_recipe

    for name in ("mi300x.toml", "torch-2.14/mi300x.toml", "torch-2.14/mi250x.toml",
                 "legacy/mi300x.toml", "legacy/mi250x.toml"):
        recipe = load_recipe(REPO / "recipes" / name)
        assert recipe.build.compiler_cache == "cmake-launcher"
        assert "CCACHE_DIR" not in recipe.build.passthrough  # the cache is rocmforge's
        assert "RF194" not in {f.id for f in lint_recipe(recipe)}


@needs_ccache
def test_prepare_wraps_rocm_clang_and_sets_launchers(tmp_path: Path) -> None:
    from rocmforge.build.sandbox import BwrapRunner, NoneRunner

    rocm = tmp_path / "opt-rocm"
    (rocm / "llvm" / "bin").mkdir(parents=True)
    (rocm / "llvm" / "lib").mkdir()
    for name in ("clang", "clang++", "clang-18", "lld", "clang-offload-bundler"):
        (rocm / "llvm" / "bin" / name).write_text("#!/bin/sh\n")
        (rocm / "llvm" / "bin" / name).chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "CC": "/usr/bin/gcc", "ROCM_PATH": str(rocm)}
    cache = ccache.settings(tmp_path / "store", {})
    fp = {"kind": "rocm", "rocm": {"version": "6.2.4"}}
    launcher = ccache.prepare(
        fingerprint=fp, build_env=env, recipe_name="torch", mode="cmake-launcher",
        root=tmp_path / "b1", cache=cache, runner=BwrapRunner("bwrap"),
    )  # fmt: skip
    assert launcher is not None
    got = launcher.env
    assert got["CCACHE_DIR"] == ccache.CACHE_INSIDE
    assert got["CCACHE_MAXSIZE"] == "20G"  # enforced by ccache as it writes
    assert got["CCACHE_CONFIGPATH"] == f"{ccache.WRAP_INSIDE}/ccache.conf"
    assert "CCACHE_BASEDIR" not in got and "CCACHE_SLOPPINESS" not in got
    assert got["CCACHE_COMPILERCHECK"] == (
        f"string:{ccache.toolchain_key(fp)}{ccache._device_identity(env)}"
    )
    assert ccache._device_identity(env)  # a ROCm toolchain: the LLVM/device libraries count
    assert got["CMAKE_CXX_COMPILER_LAUNCHER"] == ccache.executable()
    assert got["CMAKE_HIP_COMPILER_LAUNCHER"] == ccache.executable()
    assert "CC" not in got and "PATH" not in got  # launchers, not wrappers
    assert got["HIP_CLANG_PATH"] == f"{ccache.WRAP_INSIDE}/hip/bin"
    hip = tmp_path / "b1" / "ccwrap" / "hip"
    assert sorted(p.name for p in (hip / "bin").iterdir()) == ["clang", "clang++", "clang-18"]
    assert (hip / "bin" / "clang++").read_text() == (
        f'#!/bin/sh\nexec {ccache.executable()} {rocm}/llvm/bin/clang++ "$@"\n'
    )
    assert (hip / "lib").resolve() == (rocm / "llvm" / "lib").resolve()
    assert launcher.directory == tmp_path / "store" / "ccache" / ccache.namespace(fp)
    wrapped = ccache.prepare(
        fingerprint=fp, build_env=env, recipe_name="x", mode="wrap",
        root=tmp_path / "b2", cache=cache, runner=NoneRunner(),
    )  # fmt: skip
    assert wrapped is not None
    wrap = tmp_path / "b2" / "ccwrap"
    assert wrapped.env["CC"] == f"{wrap}/bin/gcc"  # host paths: nothing is relocated
    assert wrapped.env["PATH"] == f"{wrap}/bin:/usr/bin:/bin"
    assert "CMAKE_C_COMPILER_LAUNCHER" not in wrapped.env
    done = subprocess.run(
        [f"{wrap}/bin/gcc", "--version"], capture_output=True, text=True, check=False,
        env={**wrapped.env, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0 and "gcc" in done.stdout


@needs_ccache
@pytest.mark.slow
def test_off_means_a_build_calling_ccache_itself_passes_through(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "tiny").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "data" / "mkwheel.py", src)
    (src / "tiny" / "__init__.py").write_text("V = 1\n")
    (src / "a.c").write_text("int f(void) { return 1; }\n")
    text = TINY_RECIPE.format(src=src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]',
        'steps = ["ccache gcc -c a.c -o a.o", "ccache gcc -c a.c -o a.o", '
        # ccache left to its defaults would have cached into the build's HOME
        '"test ! -e $HOME/.cache/ccache && test ! -e $HOME/.ccache", '
        '"python mkwheel.py $OUT tiny 0.1"]',
    )
    recipe = tmp_path / "r.toml"
    recipe.write_text(text)
    _, on, _ = _realize(recipe, tmp_path / "on", None)
    assert (on["compiler_cache"]["misses"], on["compiler_cache"]["hits"]) == (1, 1)
    _, off, _ = _realize(recipe, tmp_path / "off", None, "--no-compiler-cache")
    assert "compiler_cache" not in off
    assert not (tmp_path / "off" / "ccache").exists()


MESON_RECIPE = """\
schema = 1

[package]
name = "mesondemo"
version = "0.1"

[source]
path = "{src}"

[requirements]
build = ["meson==1.6.1"]

[build]
steps = [
  "meson setup build --buildtype=release",
  "ninja -C build",
  "cp build/libmesondemo.so mesondemo/ && python mkwheel.py $OUT mesondemo 0.1",
]

[check]
import = "mesondemo"
"""


@needs_ccache
@pytest.mark.slow
def test_meson_ninja_build_is_cached(tmp_path: Path) -> None:
    from conftest import WHEELHOUSE

    if not list(WHEELHOUSE.glob("meson-1.6.1-*.whl")) or shutil.which("ninja") is None:
        pytest.skip(f"no meson 1.6.1 wheel in {WHEELHOUSE} or no ninja; run scripts/test.sh")
    src = tmp_path / "src"
    (src / "mesondemo").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "data" / "mkwheel.py", src)
    (src / "mesondemo" / "__init__.py").write_text("V = 1\n")
    (src / "meson.build").write_text(
        "project('mesondemo', 'c')\nshared_library('mesondemo', ['a.c', 'b.c'])\n"
    )
    (src / "a.c").write_text("const char *a(void) { return __FILE__; }\n")
    (src / "b.c").write_text("int b(int x) { return x * 3; }\n")
    recipe = tmp_path / "meson.toml"
    recipe.write_text(MESON_RECIPE.format(src=src))
    cache = tmp_path / "cache"
    off, _, _ = _realize(recipe, tmp_path / "s0", None, "--no-compiler-cache")
    cold, cold_meta, _ = _realize(recipe, tmp_path / "s1", cache)
    warm, warm_meta, _ = _realize(recipe, tmp_path / "s2", cache)
    assert cold_meta["compiler_cache"]["misses"] >= 2, cold_meta["compiler_cache"]
    cc = warm_meta["compiler_cache"]
    assert cc["misses"] == 0 and cc["hits"] == cold_meta["compiler_cache"]["misses"], cc
    assert _wheel_sha(off) == _wheel_sha(cold) == _wheel_sha(warm)


def test_hip_key_follows_device_libraries(tmp_path: Path) -> None:
    rocm = tmp_path / "rocm"
    (rocm / "llvm" / "bin").mkdir(parents=True)
    (rocm / "llvm" / "lib").mkdir()
    (rocm / "llvm" / "bin" / "clang").write_text("#!/bin/sh\n")
    (rocm / "llvm" / "lib" / "libLLVM.so.18").write_bytes(b"llvm")
    bitcode = rocm / "amdgcn" / "bitcode"
    bitcode.mkdir(parents=True)
    (bitcode / "ocml.bc").write_bytes(b"0123456789")
    env = {"ROCM_PATH": str(rocm)}
    first = ccache._device_identity(env)
    assert first.startswith("-") and first == ccache._device_identity(env)
    (bitcode / "ocml.bc").write_bytes(b"01234")  # truncated, as measured: no stale hit
    second = ccache._device_identity(env)
    assert second != first
    (rocm / "llvm" / "lib" / "libLLVM.so.18").write_bytes(b"llvm-new")
    assert ccache._device_identity(env) != second
    assert ccache._device_identity({"PATH": "/usr/bin"}) == ""
