"""One spelling of realize's options: :class:`RealizeOptions` round-trips through its child
arguments and the command-line parser, and local ``-j N`` children and Slurm jobs are given the
same option arguments (issue 27 point 3)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from rocmforge.pipeline.options import RealizeOptions


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No caches or keys from the environment, an empty user configuration."""
    for name in ("ROCMFORGE_CACHES", "ROCMFORGE_TRUSTED_KEYS", "ROCMFORGE_JOB_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


def _parse(recipe: Path, *argv: str) -> argparse.Namespace:
    from rocmforge.cli.main import build_parser

    full = ["realize", str(recipe), *argv]
    return build_parser(full).parse_args(full)


def _representative(project: Path) -> RealizeOptions:
    """Every field away from its default."""
    return RealizeOptions(
        sandbox="none",
        keep_failed=True,
        verify=True,
        compiler_cache=False,
        verbose=True,
        heartbeat=7.5,
        config=str(project),
        substitute=True,
        caches=("file:///nowhere/a", "file:///nowhere/b"),
        require_substitute=True,
        push="file:///nowhere/push",
        out_link="result",
        jobs=3,
        keep_going=True,
        stall_after=90.0,
        stall_timeout=1800.5,
    )


def test_every_field_round_trips_through_to_argv_and_the_parser(
    clean_env: Path, tiny_recipe: Path
) -> None:
    from dataclasses import fields, replace

    from rocmforge.cli.commands.realize import options_of

    project = clean_env / "rocmforge.toml"
    project.write_text("")
    o = _representative(project)
    default = RealizeOptions()
    argued = {f.name for f in fields(RealizeOptions) if f.compare}
    # all but substitute (on by default) and check (it goes with no --push)
    assert {n for n in argued if getattr(o, n) != getattr(default, n)} == argued - {
        "substitute",
        "check",
    }
    assert options_of(_parse(tiny_recipe, *o.to_argv())) == o
    # a check asks no cache: its substitution settings stay the defaults
    checked = replace(o, check=True, push=None, config="", caches=(), require_substitute=False)
    assert options_of(_parse(tiny_recipe, *checked.to_argv())) == checked
    plain = RealizeOptions(substitute=False)
    assert options_of(_parse(tiny_recipe, *plain.to_argv())) == plain
    assert options_of(_parse(tiny_recipe, *default.to_argv())) == default
    child = o.for_child()
    assert (child.jobs, child.keep_going, child.out_link, child.push) == (1, False, None, None)
    assert options_of(_parse(tiny_recipe, *child.to_argv())) == child


class _Stop(Exception):
    pass


def test_local_children_and_slurm_jobs_get_the_same_option_arguments(
    clean_env: Path, tiny_recipe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rocmforge.executor.submit as submit
    import rocmforge.pipeline.graph as graph
    from rocmforge.cli.commands.realize import run
    from rocmforge.errors import BuildError

    project = clean_env / "rocmforge.toml"
    project.write_text("")
    store = clean_env / "store"
    given = [
        "--store", str(store), "--sandbox", "none", "--keep-failed", "--verify",
        "--no-compiler-cache", "-v", "--heartbeat", "3", "--config", str(project),
        "--cache", "file:///nowhere/a", "--cache", "file:///nowhere/b",
    ]  # fmt: skip
    started: list[list[str]] = []

    class Child:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            started.append(argv)

        def poll(self) -> int:
            return 1  # "failed": nothing else to do

    monkeypatch.setattr(graph.subprocess, "Popen", Child)
    with pytest.raises(BuildError):
        run(_parse(tiny_recipe, *given, "-j", "2", "--keep-going"))
    [local] = started
    head = local.index("-j")
    assert local[head : head + 2] == ["-j", "1"]
    local_options = local[head + 2 :]

    jobs: list[list[str]] = []

    def fake_submit(*args: Any, realize_args: list[str], **kwargs: Any) -> Any:
        jobs.append(list(realize_args))
        raise _Stop

    monkeypatch.setattr(submit, "submit_graph", fake_submit)
    with pytest.raises(_Stop):
        run(_parse(tiny_recipe, *given, "--executor", "slurm", "--job-dir", str(clean_env)))
    assert jobs == [local_options]
    expected = RealizeOptions(
        sandbox="none", keep_failed=True, verify=True, compiler_cache=False, verbose=True,
        heartbeat=3.0, config=str(project), caches=("file:///nowhere/a", "file:///nowhere/b"),
    ).to_argv()  # fmt: skip
    assert local_options == expected

    # --require-substitute: the local child must not build; a Slurm job is where the build is.
    started.clear()
    with pytest.raises(BuildError):
        run(_parse(tiny_recipe, *given, "-j", "2", "--require-substitute"))
    assert started[0][-1] == "--require-substitute"
    jobs.clear()
    with pytest.raises(_Stop):
        run(_parse(tiny_recipe, *given, "--require-substitute", "--executor", "slurm",
                   "--job-dir", str(clean_env)))  # fmt: skip
    assert jobs == [local_options]
