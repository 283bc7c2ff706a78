"""Pins a pinned tree decides (rocmforge.lock.derived): Triton's LLVM from the Triton tree's
``cmake/llvm-info.json`` (or ``llvm-hash.txt``), AOTriton from torch's ``aotriton.cmake``.

Real git repositories made here hold the tree files; ``lock --check`` must fail naming the key,
both values and the tree file, and ``lock`` must write the tree's values with the recipe's
comments kept. The first test is the case found in recipes/triton-mi300x.toml: a Triton tree
whose llvm-info.json moved to LLVM 5f07f818 (build 1) and a recipe still pinning 4611156032.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import commit_all, git, rf_in

from rocmforge.lock.derived import parse_aotriton_cmake

NEW_LLVM = "5f07f818" + "a" * 32
OLD_LLVM = "4611156032e1ebac68b2b8f6107b1475a7c60800"
SUMS = {"ubuntu-x64": "1" * 64, "almalinux-x64": "2" * 64, "macos-arm64": "3" * 64}


def _repo(root: Path, files: dict[str, str]) -> tuple[Path, str]:
    root.mkdir(parents=True)
    git(root, "init", "-q")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root, commit_all(root, "first")


TRITON = """\
schema = 1

[package]
name = "triton"
version = "3.8.0"

[source]
git = "{git}"
rev = "{rev}"

[build]
steps = ["true"]

# the prebuilt LLVM: a comment lock must keep
[inputs.llvm]
url = "https://oaitriton.blob.core.windows.net/public/llvm-builds/llvm-46111560-{platform}.tar.gz"
sha256 = "{sha}"
env = "LLVM_SYSPATH"
subdir = "llvm-46111560-{platform}"
"""


def _triton(tmp_path: Path, files: dict[str, str], platform: str = "ubuntu-x64") -> Path:
    repo, rev = _repo(tmp_path / "triton", files)
    recipe = tmp_path / "triton.toml"
    recipe.write_text(TRITON.format(git=repo, rev=rev, platform=platform, sha="9" * 64))
    return recipe


def _info(build: int | None = 1, base: str | None = None) -> str:
    data: dict[str, object] = {"llvm_hash": NEW_LLVM, "sha256sum": SUMS}
    if build is not None:
        data["build_number"] = build
    if base is not None:
        data["release_base_url"] = base
    return json.dumps(data, indent=2)


def test_a_triton_recipe_pinning_another_llvm_than_its_tree_fails_the_check(
    tmp_path: Path,
) -> None:
    recipe = _triton(tmp_path, {"cmake/llvm-info.json": _info()})
    before = recipe.read_text()
    store = tmp_path / "store"
    r = rf_in("lock", "--check", recipe, "--store", store)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{recipe}: would change" in r.stdout
    new = "llvm-5f07f818-ubuntu-x64-1"
    base = "https://oaitriton.blob.core.windows.net/public/llvm-builds"
    assert f"inputs.llvm.url: {base}/llvm-46111560-ubuntu-x64.tar.gz -> {base}/{new}.tar.gz" in (
        r.stdout
    )
    assert f"inputs.llvm.sha256: {'9' * 64} -> {SUMS['ubuntu-x64']}" in r.stdout
    assert f"inputs.llvm.subdir: llvm-46111560-ubuntu-x64 -> {new}" in r.stdout
    assert "cmake/llvm-info.json says so" in r.stdout  # the tree file is named
    assert recipe.read_text() == before  # a check writes nothing

    w = rf_in("lock", recipe, "--store", store)
    assert w.returncode == 0, w.stdout + w.stderr
    text = recipe.read_text()
    assert f'url = "{base}/{new}.tar.gz"' in text
    assert f'sha256 = "{SUMS["ubuntu-x64"]}"' in text and f'subdir = "{new}"' in text
    assert "# the prebuilt LLVM: a comment lock must keep" in text
    again = rf_in("lock", "--check", recipe, "--store", store)
    assert again.returncode == 0, again.stdout + again.stderr


def test_the_platform_the_recipe_names_is_kept_and_a_release_base_url_is_followed(
    tmp_path: Path,
) -> None:
    base = "https://github.com/triton-lang/llvm-project/releases/download/llvm-5f07f818-1"
    recipe = _triton(tmp_path, {"cmake/llvm-info.json": _info(base=base)}, "almalinux-x64")
    r = rf_in("lock", recipe, "--store", tmp_path / "store")
    assert r.returncode == 0, r.stdout + r.stderr
    text = recipe.read_text()
    assert f'url = "{base}/llvm-5f07f818-almalinux-x64-1.tar.gz"' in text
    assert f'sha256 = "{SUMS["almalinux-x64"]}"' in text


def test_a_tree_without_build_number_names_the_archive_without_one(tmp_path: Path) -> None:
    recipe = _triton(tmp_path, {"cmake/llvm-info.json": _info(build=None)})
    r = rf_in("lock", recipe, "--store", tmp_path / "store")
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'subdir = "llvm-5f07f818-ubuntu-x64"' in recipe.read_text()


def test_an_older_tree_names_only_the_commit(tmp_path: Path) -> None:
    recipe = _triton(tmp_path, {"cmake/llvm-hash.txt": NEW_LLVM + "\n"})
    r = rf_in("lock", "--check", recipe, "--store", tmp_path / "store")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "inputs.llvm.url (LLVM commit): 46111560 -> 5f07f818" in r.stdout
    assert "names a commit only: the digest is not checked" in r.stdout

    same = _triton(tmp_path / "same", {"cmake/llvm-hash.txt": OLD_LLVM + "\n"})
    ok = rf_in("lock", "--check", same, "--store", tmp_path / "store")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "the digest is not checked" in ok.stdout  # said, not passed over


def test_a_remote_tree_not_here_is_said_not_checked(tmp_path: Path) -> None:
    recipe = tmp_path / "triton.toml"
    recipe.write_text(
        TRITON.format(
            git="https://example.invalid/triton.git",
            rev="a" * 40,
            platform="ubuntu-x64",
            sha="9" * 64,
        )
    )
    r = rf_in("lock", "--check", recipe, "--store", tmp_path / "store")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "not checked: the pins its tree decides" in r.stdout
    assert "is not in the mirror cache" in r.stdout


def test_a_malformed_llvm_info_is_one_line_naming_the_file(tmp_path: Path) -> None:
    recipe = _triton(tmp_path, {"cmake/llvm-info.json": '{"llvm_hash": 12}'})
    r = rf_in("lock", "--check", recipe, "--store", tmp_path / "store")
    assert r.returncode != 0
    assert "cmake/llvm-info.json: llvm_hash: a commit id is needed" in r.stderr
    assert "Traceback" not in r.stderr


# torch's cmake/External/aotriton.cmake, shaped as at v2.14 (0.13b): the default lists first,
# then the ASAN ones, which are not what a plain build downloads.
AOTRITON_CMAKE = """\
  set(__AOTRITON_VER "0.13b")
  set(__AOTRITON_BUILD_VARIANTS "")
  set(__AOTRITON_MANYLINUX_LIST
      "manylinux_2_28"  # rocm7.2
      "manylinux_2_28"  # rocm7.14
      )
  set(__AOTRITON_ROCM_LIST
      "rocm7.2"
      "rocm7.14"
      )
  set(__AOTRITON_SHA256_LIST
      "{r72}"  # rocm7.2
      "{r714}"  # rocm7.14
      )
  set(__AOTRITON_IMAGE_LIST
      "amd-gfx942"
      "amd-gfx950"
     )
  set(__AOTRITON_IMAGE_SHA256_LIST
     "{g942}" # amd-gfx942
     "{g950}" # amd-gfx950
     )
  if(USE_ASAN)
    set(__AOTRITON_BUILD_VARIANTS "+asan")
    set(__AOTRITON_ROCM_LIST
        "rocm7.14"
        )
    set(__AOTRITON_SHA256_LIST
        "{asan}"  # rocm7.14+asan
        )
  endif()
  set(__AOTRITON_BASE_URL "$ENV{{PYTORCH_AOTRITON_BASE_URL}}")
  if(NOT __AOTRITON_BASE_URL)
    set(__AOTRITON_BASE_URL "https://github.com/ROCm/aotriton/releases/download/")
  endif()
  set(__AOTRITON_Z "gz")
"""
DIGESTS = {"r72": "a" * 64, "r714": "b" * 64, "g942": "c" * 64, "g950": "d" * 64, "asan": "e" * 64}

TORCH = """\
schema = 1

[package]
name = "torch"
version = "2.14.1"

[source]
git = "{git}"
rev = "{rev}"

[build]
steps = ["true"]

[inputs.aotriton-runtime]
url = "https://github.com/ROCm/aotriton/releases/download/{ver}/aotriton-{ver}-manylinux_2_28_x86_64-rocm7.14-shared.tar.gz"
sha256 = "{runtime}"
env = "AOTRITON_RUNTIME"

[inputs.aotriton-gfx942]
url = "https://github.com/ROCm/aotriton/releases/download/{ver}/aotriton-{ver}-images-amd-gfx942.tar.gz"
sha256 = "{images}"
env = "AOTRITON_IMAGES_GFX942"
"""


def test_aotriton_inputs_are_held_to_torchs_cmake_file(tmp_path: Path) -> None:
    repo, rev = _repo(
        tmp_path / "torch", {"cmake/External/aotriton.cmake": AOTRITON_CMAKE.format(**DIGESTS)}
    )
    recipe = tmp_path / "torch.toml"
    recipe.write_text(
        TORCH.format(git=repo, rev=rev, ver="0.12b", runtime="0" * 64, images=DIGESTS["g942"])
    )
    r = rf_in("lock", "--check", recipe, "--store", tmp_path / "store")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "inputs.aotriton-runtime.url:" in r.stdout and "0.13b/aotriton-0.13b-manylinux" in (
        r.stdout
    )
    assert f"inputs.aotriton-runtime.sha256: {'0' * 64} -> {DIGESTS['r714']}" in r.stdout
    assert "cmake/External/aotriton.cmake says so" in r.stdout
    assert DIGESTS["asan"] not in r.stdout  # the ASAN lists are not a plain build's

    w = rf_in("lock", recipe, "--store", tmp_path / "store")
    assert w.returncode == 0, w.stdout + w.stderr
    again = rf_in("lock", "--check", recipe, "--store", tmp_path / "store")
    assert again.returncode == 0, again.stdout + again.stderr
    text = recipe.read_text()
    assert "aotriton-0.13b-images-amd-gfx942.tar.gz" in text and DIGESTS["r714"] in text


def test_an_unlocked_aotriton_candidate_is_replaced_from_the_tree_before_any_fetch(
    tmp_path: Path,
) -> None:
    """recipes/mi300x.toml (torch 2.15) names candidate AOTriton URLs without sha256 for lock to
    replace from torch's aotriton.cmake: lock must not fetch a candidate first (one that does
    not exist failed the whole lock)."""
    repo, rev = _repo(
        tmp_path / "torch", {"cmake/External/aotriton.cmake": AOTRITON_CMAKE.format(**DIGESTS)}
    )
    recipe = tmp_path / "torch.toml"
    text = TORCH.format(git=repo, rev=rev, ver="0.12b", runtime="0" * 64, images=DIGESTS["g942"])
    text = text.replace(f'sha256 = "{"0" * 64}"\n', "").replace(
        "https://github.com/ROCm/aotriton/releases/download/0.12b/", "http://127.0.0.1:9/gone/", 1
    )
    recipe.write_text(text)
    check = rf_in("lock", "--check", recipe, "--store", tmp_path / "store")
    assert check.returncode == 1 and "inputs.aotriton-runtime.url:" in check.stdout, check.stdout
    w = rf_in("lock", recipe, "--store", tmp_path / "store")
    assert w.returncode == 0, w.stdout + w.stderr
    assert f"inputs.aotriton-runtime.sha256: (none) -> {DIGESTS['r714']}" in w.stdout, w.stdout
    assert "127.0.0.1:9" not in recipe.read_text()
    again = rf_in("lock", "--check", recipe, "--store", tmp_path / "store")
    assert again.returncode == 0, again.stdout + again.stderr


def test_an_aotriton_rocm_the_tree_does_not_list_is_said(tmp_path: Path) -> None:
    repo, rev = _repo(
        tmp_path / "torch", {"cmake/External/aotriton.cmake": AOTRITON_CMAKE.format(**DIGESTS)}
    )
    recipe = tmp_path / "torch.toml"
    text = TORCH.format(
        git=repo, rev=rev, ver="0.13b", runtime=DIGESTS["r714"], images=DIGESTS["g942"]
    ).replace("rocm7.14-shared", "rocm7.16-shared")
    recipe.write_text(text)
    r = rf_in("lock", "--check", recipe, "--store", tmp_path / "store")
    assert "has no runtime for rocm7.16 (it has rocm7.2, rocm7.14)" in r.stdout


def test_the_cmake_parser_reads_the_default_lists() -> None:
    pins = parse_aotriton_cmake(AOTRITON_CMAKE.format(**DIGESTS), "aotriton.cmake")
    assert pins.version == "0.13b" and pins.variants == ""
    assert pins.runtimes["rocm7.14"] == ("manylinux_2_28", DIGESTS["r714"])
    url, sha = pins.image("amd-gfx950") or ("", "")
    assert url.endswith("/0.13b/aotriton-0.13b-images-amd-gfx950.tar.gz")
    assert sha == DIGESTS["g950"]
