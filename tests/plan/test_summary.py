"""``plan``'s summary and the nearest-build note by kind (:mod:`rocmforge.plan.summary`),
over the differences :func:`rocmforge.trust.explain.diff_derivations` really finds."""

from __future__ import annotations

from typing import Any

from rocmforge.plan.summary import difference_groups, miss_line, summary_lines
from rocmforge.trust.explain import diff_derivations


def _derivation(packages: dict[str, str], cflags: str) -> dict[str, Any]:
    return {
        "package": {"name": "rfdemo", "version": "1.0.0"},
        "source": {"kind": "git", "commit": "5c4886908584029761b579af026dcfb627c84070",
                   "submodules": [["third/a", "1" * 40], ["third/b", "2" * 40]],
                   "patches": [["fix.patch", "blake3:" + "3" * 64]], "tree": None},
        "system": "x86_64-linux",
        "toolchain": {
            "kind": "rocm-sdk",
            "database": "dpkg",
            "cc": {"version": "x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14) 12.2.0", "blake3": "x"},
            "python": {"implementation": "cpython", "version": "3.11.7", "blake3": "y"},
            "rocm-sdk": [{"name": "rocm-sdk-core", "version": "7.14.0", "sha256": "z"},
                         {"name": "rocm-sdk-devel", "version": "7.14.0", "sha256": "w"}],
            "packages": packages,
            "unowned": {"count": 664, "blake3": "u"},
            "masked": ["/usr/etc", "/usr/lib/jvm"],
        },
        "env": {"CFLAGS": cflags, "USE_ROCM": "1"},
        "requirements": [{"name": "setuptools", "version": "75.6.0", "blake3": "s"}],
        "recipes": [{"name": "triton", "version": "3.8.0", "hash": "c5995ab265d0"}],
        "inputs": {"aotriton": {"kind": "url", "digest": "blake3:" + "4" * 64}},
        "build": {"pep517": True},
    }


def test_summary_has_one_line_per_part_and_counts_the_system_packages() -> None:
    rows = dict(summary_lines(_derivation({"libc6": "2.36", "gcc-12": "12.2.0"}, "-O2")))
    assert rows == {
        "source": "git 5c4886908584, 2 submodules, 1 patch",
        "toolchain": "rocm-sdk on x86_64-linux: cc 12.2.0, cpython 3.11.7, "
        "rocm-sdk 7.14.0 (2 wheels)",
        "env": 'CFLAGS="-O2" USE_ROCM="1"',
        "requires": "setuptools 75.6.0",
        "against": "triton 3.8.0",
        "inputs": "aotriton",
        "system": "2 dpkg packages, 664 files no package owns, "
        "2 unowned directories hidden from the build",
    }


def test_a_miss_with_70_package_changes_reads_as_two_kinds() -> None:
    old = {f"lib{i}": "1" for i in range(10)} | {"clang-15": "1:15.0.6-4", "clang-19": "1:19.1"}
    new = dict(old, **{"clang-15": "1:15.0.6-4+b1", "clang-19": "1:19.1.7"})
    new.update({f"added{i:02d}": "1" for i in range(68)})
    diffs = diff_derivations(_derivation(old, "-O2"), _derivation(new, "-O3"))
    assert len(diffs) == 71
    groups = difference_groups(diffs)
    assert groups == [
        "toolchain: 68 system packages added, 2 changed (clang-15, clang-19, added00, ...)",
        'env.CFLAGS: "-O2" -> "-O3"',
    ]
    line = miss_line("rfdemo", "1.0.0", "b885f0b32072" + "0" * 20, diffs,
                     "rocmforge explain b885f0b32072 recipes/demo.toml")  # fmt: skip
    assert line == (
        "not in the store; nearest cached build b885f0b32072 (rfdemo 1.0.0) differs in: "
        "toolchain: 68 system packages added, 2 changed (clang-15, clang-19, added00, ...); "
        'env.CFLAGS: "-O2" -> "-O3" (`rocmforge explain b885f0b32072 recipes/demo.toml` lists '
        "every key)"
    )


def test_many_keys_of_one_kind_are_counted_and_named() -> None:
    a = _derivation({}, "-O2")
    b = _derivation({}, "-O2")
    b["env"] = {"CFLAGS": "-O3", "USE_ROCM": "0", "X": "1", "Y": "2"}
    b["toolchain"] = {**b["toolchain"], "cc": {"version": "gcc 13.1.0", "blake3": "q"}}
    groups = difference_groups(diff_derivations(a, b))
    assert groups == ["toolchain.cc.blake3: x -> q", "toolchain.cc.version: "
                      '"x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14) 12.2.0" -> "gcc 13.1.0"',
                      "env: 4 keys (CFLAGS, USE_ROCM, X, ...)"]  # fmt: skip
