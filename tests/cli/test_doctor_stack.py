"""``doctor STACK``: a stack is accepted, each recipe reported, then the resources and the
numbered next steps naming the stack given."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf_in


@pytest.mark.slow
def test_doctor_accepts_a_stack_and_spells_out_the_next_steps(
    tmp_path: Path, tiny_src: Path
) -> None:
    for name in ("one", "two"):
        text = TINY_RECIPE.format(src=tiny_src).replace('name = "tiny"', f'name = "{name}"')
        (tmp_path / f"{name}.toml").write_text(text)
    stack = 'schema = 1\n[stack]\nname = "both"\nrecipes = ["one.toml", "two.toml"]\n'
    (tmp_path / "both.toml").write_text(stack)
    proc = rf_in("doctor", "both.toml", "--store", tmp_path / "store", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out.count("machine:") == 1
    assert any(ln.startswith("recipe ") and ln.endswith("one.toml:") for ln in out), out
    assert any(ln.startswith("recipe ") and ln.endswith("two.toml:") for ln in out), out
    assert any(ln.startswith("  disk:      ") and " free at " in ln for ln in out), out
    (jobs,) = [ln for ln in out if "MAX_JOBS" in ln]  # one line, the estimate: no build yet
    assert jobs.startswith("  MAX_JOBS:  ") and "no build of one or two with telemetry" in jobs
    steps = out[out.index("next steps:") + 1 :]
    assert steps[0].startswith("  1. rocmforge lock both.toml")
    assert any(ln.startswith("  3. rocmforge realize both.toml -o result") for ln in steps)
    assert any("pip install --find-links wheels -c wheels/constraints.txt one two" in ln
               for ln in steps)  # fmt: skip
    assert steps[-1].startswith("  5. rocmforge test both.toml")
