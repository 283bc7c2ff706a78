"""``doctor`` of the flagship stack: AMD's index in the install step (for the rocm[libraries]
torch's wheel requires, the URL the recipe's [toolchain] index holds) and the expected build
time where it is known."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf_in

from rocmforge.cli.commands._nextsteps import build_time, next_steps
from rocmforge.observe.record import StepUsage, Telemetry, write_record
from rocmforge.recipe.load import load_recipe
from rocmforge.store import layout

REPO = Path(__file__).resolve().parents[2]
TORCH = REPO / "recipes" / "mi300x.toml"


@pytest.mark.slow
def test_doctor_of_the_stack_names_amds_index_and_the_build_time(tmp_path: Path) -> None:
    index = load_recipe(TORCH).toolchain.index  # the owner of the URL: the recipe
    assert index
    proc = rf_in("doctor", REPO / "recipes" / "mi300x-stack.toml", "--store", tmp_path / "s",
                 env={"ROCMFORGE_SDK_ARGS": ""})  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    out = proc.stdout.splitlines()
    steps = out[out.index("next steps:") + 1 :]
    (uv,) = [ln for ln in steps if "uv pip install" in ln]
    assert f"--extra-index-url {index} " in uv and "-c wheels/constraints.txt" in uv
    (pip,) = [ln for ln in steps if "pip install --no-deps" in ln]  # pip: hashes in -c refused
    assert "-r wheels/constraints.txt" in pip
    assert pip.endswith(f"--extra-index-url {index} torch torchvision torchaudio")
    assert any(
        "rocm[libraries,device-gfx942]==10.0.0" in ln and "AMD's index" in ln for ln in steps
    ), steps
    (time,) = [ln for ln in out if ln.startswith("  time:      ")]
    cores = os.cpu_count() or 0
    want = "torch: 1-2 h cold on 64+ cores" if cores >= 64 else f"torch: unknown on {cores} cores"
    assert want in time and "torchvision: unknown" in time, time


def test_a_plain_recipe_gets_no_amd_index(tmp_path: Path, tiny_src: Path) -> None:
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_RECIPE.format(src=tiny_src))
    loaded = load_recipe(recipe)
    steps = next_steps(str(recipe), stack=False, names=["tiny"], recipes=[loaded])
    assert not any("rocm[libraries]" in s for s in steps)
    assert build_time(loaded, 128, None) == "tiny: unknown"


def test_build_time_from_the_table_and_from_the_previous_build(tmp_path: Path) -> None:
    torch = load_recipe(TORCH)  # one arch: gfx942
    assert build_time(torch, 64, None) == "torch: 1-2 h cold on 64+ cores (an estimate)"
    assert build_time(torch, 16, None) == (
        "torch: unknown on 16 cores (1-2 h cold on 64 cores, an estimate)"
    )
    entries = tmp_path / "entries"
    entry = entries / f"{'b' * layout.HASH_LEN}-torch-2.15.0+rocm10.0"
    entry.mkdir(parents=True)
    step = StepUsage(label="build", started=0.0, seconds=5400.0, cpu_seconds=1.0,
                     peak_rss=1, job_peak_rss=1, jobs_peak=1)  # fmt: skip
    write_record(Telemetry(started=0.0, interval=1.0, steps=(step,), phases=(), samples=()),
                 entry / layout.TELEMETRY)  # fmt: skip
    took = build_time(torch, 16, entries)
    assert took == f"torch: about 1h30m (the previous build here, {entry.name})"


@pytest.mark.slow
def test_the_install_commands_of_the_next_steps_install_the_export(tmp_path: Path) -> None:
    """Step 4 as doctor prints it, run (offline: --no-index added) on a real export: uv takes
    the hashed constraints with -c; pip is given them with -r --no-deps, then the name."""
    import shlex
    import subprocess
    import sys

    from conftest import build_tiny_entry, rf

    built = build_tiny_entry(tmp_path)
    steps = rf_in("doctor", built["recipe"], "--store", built["store"]).stdout.splitlines()
    step = steps[next(i for i, ln in enumerate(steps) if ln.startswith("  4. ")) :]
    export, uv_line, pip_line = step[0], step[1], step[3]
    assert rf(*shlex.split(export.split("#")[0])[2:], "--store", built["store"],
              cwd=tmp_path).returncode == 0  # fmt: skip
    uv = str(Path(sys.executable).parent / "uv")
    for name, line in (("uv", uv_line), ("pip", pip_line)):
        venv = tmp_path / f"venv-{name}"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
        if name == "uv":
            cmds = [shlex.split(line.strip())]
            cmds[0][0] = uv
            cmds[0] += ["--offline", "--no-index", "--python", str(venv / "bin" / "python")]
        else:
            first, second = line.split(": ", 1)[1].split(", then ")
            at = ["--python", str(venv / "bin" / "python")]  # before pip's subcommand
            cmds = [[sys.executable, "-m", "pip", *at, *shlex.split(c)[1:], "--no-index"]
                    for c in (first, second)]  # fmt: skip
        for cmd in cmds:
            proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=False)
            assert proc.returncode == 0, (cmd, proc.stdout, proc.stderr)
        check = subprocess.run([venv / "bin" / "python", "-c", "import tiny; print(tiny.VALUE)"],
                               capture_output=True, text=True, check=False)  # fmt: skip
        assert check.stdout.strip() == "42", (name, check.stderr)
