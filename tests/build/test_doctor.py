"""doctor: ROCm installs laid out as /opt/rocm-X and as Debian's /usr, GPU tools with and without a
GPU, a machine with no ROCm at all, recipe lints and arch coverage, and the real CLI."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf, rf_in

from rocmforge.build.doctor import doctor, probe_gpus
from rocmforge.recipe.load import parse_recipe_text
from rocmforge.toolchain.machine import find_rocm, lint_facts, rocm_version


def script(path: Path, body: str) -> Path:
    """Write an executable shell script."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def opt_rocm(sysroot: Path, version: str = "6.2.4") -> Path:
    """A fake /opt/rocm-X: rocm_version.h and an llvm/bin/clang++."""
    root = sysroot / "opt" / f"rocm-{version}"
    major, minor, patch = version.split(".")
    header = root / "include" / "rocm-core" / "rocm_version.h"
    header.parent.mkdir(parents=True)
    header.write_text(
        f"#define ROCM_VERSION_MAJOR   {major}\n#define ROCM_VERSION_MINOR   {minor}\n"
        f"#define ROCM_VERSION_PATCH   {patch}\n"
    )
    script(root / "llvm" / "bin" / "clang++", 'echo "AMD clang version 18.0.0git (roc-6.2.4)"')
    return root


def debian_usr(sysroot: Path) -> Path:
    """A fake Debian layout: /usr/include/hip/hip_version.h, hipcc and clang++-15 in /usr/bin."""
    usr = sysroot / "usr"
    header = usr / "include" / "hip" / "hip_version.h"
    header.parent.mkdir(parents=True)
    header.write_text(
        "#define HIP_VERSION_MAJOR 5\n#define HIP_VERSION_MINOR 2\n"
        "#define HIP_VERSION_PATCH 21153\n"
    )
    script(usr / "bin" / "hipcc", "exit 0")
    script(usr / "bin" / "clang++-15", 'echo "Debian clang version 15.0.6"')
    return usr


def test_versions_from_opt_and_debian_layouts(tmp_path: Path) -> None:
    opt = opt_rocm(tmp_path)
    usr = debian_usr(tmp_path)
    assert rocm_version(opt)[:2] == ("6.2.4", "6.2.4")
    assert rocm_version(usr)[:2] == ("5.2", "5.2.21153")
    found = find_rocm({"PATH": ""}, tmp_path)
    assert [(r.root, r.version) for r in found] == [(opt, "6.2.4"), (usr, "5.2")]
    assert found[0].hip_clang == opt / "llvm" / "bin" / "clang++"
    assert found[0].hip_clang_version == "AMD clang version 18.0.0git (roc-6.2.4)"
    assert found[1].hip_clang == usr / "bin" / "clang++-15"
    assert found[1].hip_clang_version == "Debian clang version 15.0.6"


def test_rocm_path_is_looked_at_first_and_not_twice(tmp_path: Path) -> None:
    opt = opt_rocm(tmp_path, "6.1.0")
    elsewhere = opt_rocm(tmp_path / "x", "6.2.4")
    found = find_rocm({"ROCM_PATH": str(elsewhere)}, tmp_path)
    assert [r.version for r in found] == ["6.2.4", "6.1.0"]
    assert find_rocm({"ROCM_PATH": str(opt)}, tmp_path)[0].root == opt
    assert len(find_rocm({"ROCM_PATH": str(opt)}, tmp_path)) == 1


def test_gpus_when_tools_fail_without_a_gpu(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    script(
        bin_dir / "rocminfo",
        r'printf "\033[31mROCk module is NOT loaded, possibly no GPU devices\033[0m\n"; exit 1',
    )
    script(
        bin_dir / "rocm_agent_enumerator",
        'echo "FileNotFoundError: [Errno 2] No such file or directory" >&2; exit 1',
    )
    probes = {p.tool: p for p in probe_gpus({"PATH": str(bin_dir)})}
    assert probes["rocminfo"].archs == ()
    assert probes["rocminfo"].detail == (
        "exited 1: ROCk module is NOT loaded, possibly no GPU devices"
    )
    assert probes["amdgpu-arch"].detail == "not installed"
    assert "FileNotFoundError" in probes["rocm_agent_enumerator"].detail


def test_gpus_from_rocminfo_and_amdgpu_arch(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    agents = [
        "*******", "Agent 1", "*******", "  Name:                    AMD EPYC 9454",
        "  Device Type:             CPU", "*******", "Agent 2", "*******",
        "  Name:                    gfx942", "  Marketing Name:          AMD Instinct MI300X",
        "*******", "Agent 3", "*******", "  Name:                    gfx942",
    ]  # fmt: skip
    script(bin_dir / "rocminfo", "\n".join(f"echo '{line}'" for line in agents))
    script(bin_dir / "amdgpu-arch", "echo gfx942; echo gfx942")
    script(bin_dir / "rocm_agent_enumerator", "echo gfx000; echo gfx942; echo gfx942")
    probes = probe_gpus({"PATH": str(bin_dir)})
    assert [p.archs for p in probes] == [("gfx942", "gfx942")] * 3


ARCH_RECIPE = TINY_RECIPE.replace(
    "[build]", '[env]\nUSE_ROCM = "1"\nPYTORCH_ROCM_ARCH = "gfx90a"\nRCCL_HOME = "/x"\n\n[build]'
)


def test_doctor_with_no_rocm_and_no_gpu(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    report = doctor(env={"PATH": str(tmp_path / "bin")}, sysroot=tmp_path)
    m = report.machine
    assert m.rocm == () and m.gpus == ()
    assert {p.detail for p in m.gpu_probes} == {"not installed"}
    assert m.ram_bytes and m.ram_bytes > 0 and m.cpu_count and m.cpu_count >= 1
    assert m.sandbox in ("bwrap", "unavailable")


@pytest.mark.slow
def test_doctor_recipe_lints_and_coverage(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    script(bin_dir / "amdgpu-arch", "echo gfx942")
    recipe = parse_recipe_text(ARCH_RECIPE.format(src=tmp_path), file=tmp_path / "r.toml")
    report = doctor(recipe, env={"PATH": str(bin_dir)}, sysroot=tmp_path)
    assert [f.id for f in report.findings] == ["RF121"]
    cov = report.coverage
    assert cov is not None
    assert cov.recipe_archs == ("gfx90a",) and cov.gpus == ("gfx942",)
    assert cov.missing == ("gfx942",) and cov.covered is False
    script(bin_dir / "amdgpu-arch", "echo gfx90a")
    again = doctor(recipe, env={"PATH": str(bin_dir)}, sysroot=tmp_path).coverage
    assert again is not None and again.covered is True


def test_lint_facts_read_the_recipes_rocm_root(tmp_path: Path) -> None:
    root = opt_rocm(tmp_path, "6.0.2")
    text = ARCH_RECIPE.replace(
        "[build]", f'[toolchain]\nkind = "rocm"\nrocm = "6.2.4"\nroot = "{root}"\n\n[build]'
    )
    recipe = parse_recipe_text(text.format(src=tmp_path), file=tmp_path / "r.toml")
    facts = lint_facts(recipe, {"MAX_JOBS": "3"})
    assert facts.rocm_version == "6.0.2" and facts.host_env == {"MAX_JOBS": "3"}


def test_cli_on_a_machine_without_rocm_or_gpu(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    recipe = tmp_path / "r.toml"
    recipe.write_text(ARCH_RECIPE.format(src=tmp_path))
    env = {"PATH": str(empty), "ROCM_PATH": ""}
    proc = rf_in("doctor", recipe, "--sysroot", tmp_path, env=env)
    # nothing on PATH: no compiler, no python3.11 -> realize would stop, so doctor exits 1
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "toolchain: ERROR: toolchain." in out and "not found on PATH" in out
    assert "1 error(s): realize would stop" in out
    assert "ROCm:      not found" in out
    assert "GPUs:      no GPU visible" in out and "rocminfo: not installed" in out
    assert "cores:" in out and "RAM:" in out and "sandbox:" in out
    assert "RF121 rccl-home" in out and f"{recipe}:" in out
    assert "gfx90a; no GPU visible to compare with" in out
    data = json.loads(rf_in("doctor", recipe, "--sysroot", tmp_path, "--json", env=env).stdout)
    assert data["machine"]["rocm"] == [] and data["machine"]["gpus"] == []
    assert [f["id"] for f in data["lints"]] == ["RF121"]
    assert data["coverage"]["covered"] is None
    assert data["blocking"] is True and "not found" in data["toolchain_error"]


@pytest.mark.slow
def test_cli_recipe_whose_toolchain_is_here_exits_0(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE.format(src=tmp_path))
    proc = rf("doctor", recipe)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "toolchain: system: python 3.11" in proc.stdout


def test_cli_recipe_with_a_missing_rocm_root_exits_1(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tmp_path)
        + f'\n[toolchain]\nkind = "rocm"\nrocm = "6.2.4"\nroot = "{tmp_path / "no-rocm"}"\n'
    )
    proc = rf_in("doctor", recipe)
    assert proc.returncode == 1
    assert "toolchain: ERROR:" in proc.stdout and "no-rocm" in proc.stdout


def test_cli_on_a_controlled_machine(tmp_path: Path) -> None:
    """The CLI's machine report on a fake machine: ROCm roots, GPU tools, one pinned CPU."""
    sysroot = tmp_path / "sys"
    opt = opt_rocm(sysroot, "6.2.4")
    usr = debian_usr(sysroot)
    elsewhere = opt_rocm(tmp_path / "x", "6.1.0")
    bin_dir = tmp_path / "bin"
    script(bin_dir / "rocminfo", "echo '  Name:                    gfx90a'")
    script(bin_dir / "amdgpu-arch", "echo gfx90a")
    script(bin_dir / "rocm_agent_enumerator", "echo 'no kfd here' >&2; exit 2")
    env = dict(os.environ, PATH=str(bin_dir), ROCM_PATH=str(elsewhere))
    env.pop("ROCMFORGE_STORE", None)
    cpu = min(os.sched_getaffinity(0))
    proc = subprocess.run(
        [sys.executable, "-m", "rocmforge", "doctor", "--json", "--sysroot", str(sysroot)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)["machine"]
    assert [(r["root"], r["version"], r["raw_version"]) for r in m["rocm"]] == [
        (str(elsewhere), "6.1.0", "6.1.0"),
        (str(opt), "6.2.4", "6.2.4"),
        (str(usr), "5.2", "5.2.21153"),
    ]
    assert m["rocm"][1]["hip_clang"] == str(opt / "llvm" / "bin" / "clang++")
    assert m["rocm"][1]["hip_clang_version"] == "AMD clang version 18.0.0git (roc-6.2.4)"
    assert m["rocm"][2]["hip_clang_version"] == "Debian clang version 15.0.6"
    assert m["rocm"][2]["version_file"] == str(usr / "include" / "hip" / "hip_version.h")
    assert m["gpus"] == ["gfx90a"]
    assert [(p["tool"], p["archs"], p["detail"]) for p in m["gpu_probes"]] == [
        ("rocminfo", ["gfx90a"], ""),
        ("amdgpu-arch", ["gfx90a"], ""),
        ("rocm_agent_enumerator", [], "exited 2: no kfd here"),
    ]
    assert m["gpu_probes"][1]["path"] == str(bin_dir / "amdgpu-arch")
    assert m["cpu_count"] == 1  # the affinity mask, not the machine's core count
    assert m["bwrap"] is None  # not on this PATH
    meminfo = Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]
    assert m["ram_bytes"] == int(meminfo) * 1024
