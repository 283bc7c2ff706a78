"""Bad input and faults through the real CLI (issue 10, items 12-18): a full disk, ``-o LINK``
over something that is not ours, hostile recipe files, unsafe archives, corrupt memos, closed
pipes and unreachable sources all end in a clear error and the right exit code, never exit 4."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf, rf_in


def one_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """Assert ``proc`` failed cleanly with ``code``; return its stderr."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    return proc.stderr


# --- item 12: a full disk -------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB tmpfs (root only), unmounted afterwards."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


FILL_STEPS = {
    # the step itself fills the disk and fails: the failure handler must not hide it
    "step-fails": '"head -c 3000000 /dev/urandom > $OUT/fill; exit 1"',
    # the step succeeds on a full disk: the host's stamping / logging hits ENOSPC
    "host-writes": (
        '"python mkwheel.py $OUT tiny 0.1", "head -c 3000000 /dev/zero > $OUT/pad || true"'
    ),
}


@pytest.mark.parametrize("case", sorted(FILL_STEPS))
@pytest.mark.slow
def test_disk_full_is_an_environment_error(
    case: str, small_fs: Path, tmp_path: Path, tiny_src: Path
) -> None:
    recipe = tmp_path / "fill.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace(
            'steps = ["python mkwheel.py $OUT tiny 0.1"]', f"steps = [{FILL_STEPS[case]}]"
        )
    )
    store = small_fs / "store"
    err = one_error(rf("realize", recipe, "--store", store), 3)
    assert "no space left" in err.lower(), err
    assert str(small_fs) in err  # the path that filled up
    assert "free" in err and "rocmforge gc" in err, err  # what to free
    # nothing of the failed build is left behind to keep the disk full
    assert not any((store / "tmp").iterdir()), list((store / "tmp").iterdir())


# --- item 13: -o LINK ------------------------------------------------------------------------


@pytest.fixture
def built(tiny_recipe: Path, store: Path) -> Path:
    proc = rf("realize", tiny_recipe, "--store", store)
    assert proc.returncode == 0, proc.stderr
    return tiny_recipe


def no_tmp_links(d: Path) -> None:
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")], list(d.iterdir())


@pytest.mark.slow
def test_out_link_never_replaces_a_regular_file(built: Path, store: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.write_text("my data\n")
    err = one_error(rf("realize", built, "--store", store, "-o", precious), 2)
    assert str(precious) in err and "not a symlink" in err
    assert precious.read_text() == "my data\n"
    no_tmp_links(tmp_path)


@pytest.mark.slow
def test_out_link_never_replaces_a_foreign_symlink(
    built: Path, store: Path, tmp_path: Path
) -> None:
    link = tmp_path / "mine"
    link.symlink_to("/etc/hostname")
    err = one_error(rf("realize", built, "--store", store, "-o", link), 2)
    assert str(link) in err and "store" in err
    assert os.readlink(link) == "/etc/hostname"
    no_tmp_links(tmp_path)


@pytest.mark.slow
def test_out_link_missing_parent_and_directory(built: Path, store: Path, tmp_path: Path) -> None:
    err = one_error(rf("realize", built, "--store", store, "-o", tmp_path / "nodir" / "x"), 2)
    assert str(tmp_path / "nodir") in err and "does not exist" in err
    adir = tmp_path / "adir"
    adir.mkdir()
    err = one_error(rf("realize", built, "--store", store, "-o", adir), 2)
    assert str(adir) in err and "directory" in err
    assert adir.is_dir() and not adir.is_symlink()
    no_tmp_links(tmp_path)


@pytest.mark.slow
def test_out_link_replaces_its_own_link(built: Path, store: Path, tmp_path: Path) -> None:
    link = tmp_path / "result"
    assert rf("realize", built, "--store", store, "-o", link).returncode == 0
    first = os.readlink(link)
    other = tmp_path / "other-store"
    proc = rf("realize", built, "--store", other, "-o", link)
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(link) != first and os.readlink(link).startswith(str(other))
    no_tmp_links(tmp_path)


# --- item 14: hostile recipe files -----------------------------------------------------------


def test_deep_nesting_is_bad_input(tmp_path: Path) -> None:
    for i, text in enumerate(
        ["x = " + "[" * 600 + "]" * 600, "x = " + "{a=" * 600 + "1" + "}" * 600]
    ):
        recipe = tmp_path / f"deep{i}.toml"
        recipe.write_text("schema = 1\n" + text + "\n")
        err = one_error(rf_in("plan", recipe, "--store", tmp_path / "store"), 2)
        assert str(recipe) in err and "nest" in err


@pytest.mark.parametrize("where", ["recipe", "extends", "patches"])
@pytest.mark.slow
def test_dev_zero_and_fifo_are_refused(where: str, tmp_path: Path, tiny_src: Path) -> None:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for bad in (Path("/dev/zero"), fifo):
        if where == "recipe":
            recipe = bad
        else:
            recipe = tmp_path / "r.toml"
            text = TINY_RECIPE.format(src=tiny_src)
            if where == "extends":
                text = f'extends = "{bad}"\n' + text
            else:
                text = text.replace("[build]", f'patches = ["{bad}"]\n\n[build]')
            recipe.write_text(text)
        for command in ("plan", "realize"):
            proc = rf(command, recipe, "--store", tmp_path / "store", timeout=20)
            err = one_error(proc, 2)
            assert str(recipe) in err and "not a regular file" in err, err


def test_huge_recipe_file_is_refused(tmp_path: Path) -> None:
    recipe = tmp_path / "huge.toml"
    with open(recipe, "wb") as f:
        f.write(b"schema = 1\n")
        f.write(b"# padding\n" * 1_100_000)
    err = one_error(rf_in("plan", recipe, "--store", tmp_path / "store"), 2)
    assert str(recipe) in err and "too large" in err


def test_huge_name_is_short_bad_input(tmp_path: Path, tiny_src: Path) -> None:
    recipe = tmp_path / "long.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace('name = "tiny"', f'name = "{"a" * 100_000}"')
    )
    for command in ("plan", "realize"):
        err = one_error(rf_in(command, recipe, "--store", tmp_path / "store"), 2)
        assert "package.name" in err and str(recipe) in err
        assert len(err) < 2000, len(err)


# --- item 15: plan and realize agree on an unsafe archive ----------------------------------


def evil_tar(tmp_path: Path) -> Path:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        data = b"owned\n"
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return archive


def evil_zip(tmp_path: Path) -> Path:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../escaped.txt", "owned\n")
    return archive


@pytest.mark.parametrize("make", [evil_tar, evil_zip])
@pytest.mark.slow
def test_plan_and_realize_refuse_an_unsafe_archive(
    make: object, tmp_path: Path, tiny_src: Path
) -> None:
    archive = make(tmp_path)  # type: ignore[operator]
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src) + f'\n[inputs.aot]\npath = "{archive}"\nenv = "AOT"\n'
    )
    for command in ("plan", "realize"):
        err = one_error(rf(command, recipe, "--store", tmp_path / "store"), 2)
        assert str(archive) in err, err
    assert not (tmp_path.parent / "escaped.txt").exists()


# --- item 16: corrupt memo, closed pipe ------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"garbage\x00\xff",
        b"",
        "marshal:{'k': 1}",
        "marshal:{KEY: {'guards': 5, 'result': {}}}",
        "marshal:{KEY: {'guards': [(1, 2)], 'result': {}}}",
        "marshal:{KEY: {'guards': [], 'result': {'wheels': 3}}}",
        "marshal:{KEY: {'guards': [], 'result': {'path': 1, 'wheels': [1]}}}",
        "marshal:{KEY: {'guards': []}}",
        "marshal:[1, 2]",
    ],
)
@pytest.mark.slow
def test_malformed_memo_is_ignored_and_rewritten(
    content: bytes | str, built: Path, store: Path
) -> None:
    import marshal

    from rocmforge.pipeline import memo

    path = Path(memo.memo_path(str(store), memo.memo_key(str(built), str(store)) or ""))
    if isinstance(content, str):
        key = memo.memo_key(str(built), str(store))
        value = eval(content.removeprefix("marshal:"), {"KEY": key})  # a test-made literal
        content = marshal.dumps(value)
    path.write_bytes(content)
    proc = rf("realize", built, "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.strip().endswith(".whl")
    loaded = marshal.loads(path.read_bytes())  # rewritten, valid again
    assert isinstance(loaded, dict) and memo.memo_key(str(built), str(store)) in loaded


@pytest.mark.parametrize("argv", [["--help"], ["realize", "--help"], ["list"], ["realize"]])
@pytest.mark.slow
def test_closed_pipe_exits_quietly(argv: list[str], built: Path, store: Path) -> None:
    if argv == ["realize"]:
        argv = ["realize", str(built), str(built)]
    env = dict(os.environ)
    env.pop("ROCMFORGE_STORE", None)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    if "--help" not in argv:
        argv = [*argv, "--store", str(store)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocmforge", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # like `| head -0`: the reader is gone before we write
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err and "internal error" not in err, err
    assert code in (0, 141), (code, err)


# --- item 17: fetch failures are environment errors ----------------------------------------


def git_recipe(tmp_path: Path, url: str) -> Path:
    recipe = tmp_path / "git.toml"
    recipe.write_text(
        TINY_RECIPE.replace('path = "{src}"', f'git = "{url}"\nrev = "{"a" * 40}"')
    )
    return recipe


@pytest.mark.parametrize(
    "url", ["file:///nonexistent/repo.git", "https://rocmforge-test.invalid/repo.git"]
)
def test_fetch_failure_is_exit_3(url: str, tmp_path: Path) -> None:
    err = one_error(rf_in("realize", git_recipe(tmp_path, url), "--store", tmp_path / "store"), 3)
    assert url in err


def test_readme_exit_codes_match() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    line = " ".join(readme.split("- Exit codes:", 1)[1].split("\n- ", 1)[0].split())
    assert "3 environment (store, sandbox, fetch" in line and "full disk" in line, line
    assert "2 bad input" in line and "141" in line


# --- item 18: every recipe error names the recipe the user ran -----------------------------


def test_extends_into_a_non_recipe_names_the_chain(tmp_path: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text('schema = 1\nextends = "/etc/passwd"\n')
    top = tmp_path / "top.toml"
    top.write_text('schema = 1\nextends = "base.toml"\n')
    err = one_error(rf_in("plan", top, "--store", tmp_path / "store"), 2)
    assert "/etc/passwd" in err
    assert str(top) in err and "base.toml" in err, err


def test_base_error_names_the_recipe(tmp_path: Path, tiny_src: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text(TINY_RECIPE.format(src=tiny_src).replace('version = "0.1"', "version = 1"))
    top = tmp_path / "top.toml"
    top.write_text('schema = 1\nextends = "base.toml"\n')
    err = one_error(rf_in("plan", top, "--store", tmp_path / "store"), 2)
    assert "package.version" in err and str(top) in err, err


def test_source_error_names_the_recipe(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE.format(src=tmp_path / "gone"))
    err = one_error(rf_in("realize", recipe, "--store", tmp_path / "store"), 2)
    assert str(recipe) in err, err
    report = json.dumps(err)
    assert "gone" in report


def test_a_full_disk_under_sqlite_is_recognised(small_fs: Path) -> None:
    import sqlite3

    from rocmforge.util.fsutil import disk_full_error, is_disk_full

    db = sqlite3.connect(small_fs / "index.sqlite")
    with pytest.raises(sqlite3.OperationalError) as info:
        db.execute("CREATE TABLE t (x BLOB)")
        for _ in range(100):
            db.execute("INSERT INTO t VALUES (randomblob(100000))")
        db.commit()
    db.close()
    assert is_disk_full(info.value)
    assert "rocmforge gc" in str(disk_full_error(info.value, store=small_fs))


# --- found by the fuzz corpus ------------------------------------------------------------------


@pytest.mark.slow
def test_commands_on_special_and_overlong_paths(tmp_path: Path, tiny_src: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    store = tmp_path / "store"
    long_name = str(tmp_path / ("x" * 300))
    for argv, code in [
        (["log", "/dev/zero"], 2),
        (["audit", str(fifo)], 2),
        (["audit", "/dev/zero"], 2),
        (["audit", long_name], 2),
        (["lock", str(fifo)], 2),
    ]:
        err = one_error(rf(*argv, "--store", store, timeout=30), code)
        assert argv[-1][:40] in err, (argv, err)
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src) + f'\n[inputs.aot]\npath = "{long_name}"\nenv = "AOT"\n'
    )
    for command in ("plan", "realize"):
        err = one_error(rf(command, recipe, "--store", store), 2)
        assert str(recipe) in err
