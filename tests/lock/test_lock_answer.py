"""``lock --check``: one answer per recipe. A recipe whose notes say something is not locked yet
(the ROCm SDK without its index) never ends in "already locked"."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import rf_in

from rocmforge.lock.locker import LockReport

REPO = Path(__file__).resolve().parents[2]


def test_pending_splits_the_notes_into_not_locked_and_not_checked() -> None:
    report = LockReport(recipe=Path("r.toml"), changes=(), written=False, notes=(
        "provisional: toolchain.wheels: the ROCm SDK 7.14.0 is not locked (rocm-sdk-core)",
        "provisional: requirements.build-file: X is not fetched here, so ... could not be compared",
        "not checked: the pins its tree decides (Triton's LLVM, AOTriton): Y is not in the cache",
        "source.rev: not pinned yet: the pins its tree decides are checked once it is",
        "provisional: toolchain.wheels: again",
    ))  # fmt: skip
    assert report.pending() == (
        ["toolchain.wheels", "source.rev"],
        ["requirements.build-file", "the pins its tree decides (Triton's LLVM, AOTriton)"],
    )


@pytest.mark.slow  # a real run of seconds: the quick tier stays under a minute
def test_the_flagship_stack_gets_one_consistent_answer_per_recipe(tmp_path: Path) -> None:
    stack = REPO / "recipes" / "mi300x-stack.toml"
    proc = rf_in("lock", "--check", stack, "--store", tmp_path / "store",
                 env={"ROCMFORGE_SDK_ARGS": ""})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_recipe: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        recipe, _, text = line.partition(": ")
        by_recipe.setdefault(recipe, []).append(text)
    assert {Path(r).name for r in by_recipe} == {
        "mi300x.toml", "torchvision-mi300x.toml", "torchaudio-mi300x.toml"
    }  # fmt: skip
    for recipe, lines in by_recipe.items():
        *notes, answer = lines
        unlocked = any("is not locked" in n for n in notes)
        assert not any(n == "already locked" for n in notes), lines
        if unlocked:
            assert answer.startswith("not locked yet: toolchain.wheels"), (recipe, answer)
            assert f"`rocmforge lock {recipe}`" in answer
        elif notes:
            assert answer.startswith("locked as far as this machine can check: "), answer
        else:
            assert answer == "already locked"
    torch = by_recipe[str(REPO / "recipes" / "mi300x.toml")]
    assert torch[-1].startswith("not locked yet: toolchain.wheels"), torch
