"""Masks that compose: any set of hidden and shown paths gives a bwrap sandbox that starts,
hides exactly the hidden ones and shows exactly the shown ones (``sandbox.compose_mounts``).

The property test generates trees, hidden sets and shown sets (nested, overlapping, a hidden
directory holding a shown one and the reverse) and checks every file from inside a real bwrap
sandbox against the rule "the deepest decision wins". The CUDA case (a package's
``/usr/local/cuda-X.Y`` inside an unowned ``/usr/local``) is the one that broke the first realize
on an Ubuntu GPU machine: ``bwrap: Can't mkdir /usr/local/bin: Read-only file system``.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocmforge.build.sandbox import BwrapRunner, Mount, compose_mounts
from rocmforge.toolchain.manifest import scan_dpkg

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None and not os.environ.get("CI"), reason="needs bwrap")


def expected_visible(path: str, shown: Sequence[str], hidden: Sequence[str]) -> bool:
    """The rule: the nearest decision (the path itself or an ancestor) wins; a mount beats a
    hidden path at the same place; no decision at all means the host's view (shown)."""
    best, verdict = -1, True
    for top, vis in [*((h, False) for h in hidden), *((s, True) for s in shown)]:
        under = path == top or path.startswith(top + "/")
        if under and (len(top) > best or (len(top) == best and vis)):
            best, verdict = len(top), vis
    return verdict


def read_inside(files: Sequence[str], mounts: Sequence[Mount]) -> dict[str, str | None]:
    """Read each file from inside a real bwrap sandbox: its content, or None if not readable."""
    assert BWRAP is not None
    script = 'for f in "$@"; do printf "%s\\t" "$f"; cat "$f" 2>/dev/null || printf "\\001"; ' \
        'printf "\\n"; done'
    log = io.BytesIO()
    out: list[str] = []
    result = BwrapRunner(BWRAP).run(
        ["/bin/sh", "-c", script, "sh", *files],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        mounts=mounts,
        timeout=60,
        log=log,
        on_line=out.append,
    )
    assert result.returncode == 0, log.getvalue().decode(errors="replace")
    seen: dict[str, str | None] = {}
    for line in out:
        name, _, content = line.partition("\t")
        seen[name] = None if content == "\x01" else content
    return seen


NAMES = st.sampled_from(["a", "b", "c"])
RELS = st.lists(NAMES, min_size=1, max_size=4).map("/".join)


@needs_bwrap
@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    files=st.sets(RELS, min_size=1, max_size=12),
    hidden=st.sets(RELS, max_size=6),
    shown=st.sets(RELS, max_size=4),
)
def test_any_mask_set_hides_and_shows_exactly(
    files: set[str], hidden: set[str], shown: set[str]
) -> None:
    with tempfile.TemporaryDirectory(prefix="rf-masks-") as tmp:
        top = Path(tmp) / "t"
        made: list[str] = []
        for rel in sorted(files, key=len, reverse=True):
            path = top / rel
            if path.exists() or any(p.is_file() for p in path.parents if p != top.parent):
                continue  # a name already taken by a directory, or below a file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"content of {rel}")
            made.append(str(path))
        paths = {str(p) for p in top.rglob("*")}
        hide = [str(top / h) for h in hidden if str(top / h) in paths]
        show = [str(top / s) for s in shown if str(top / s) in paths]
        mounts = [Mount(host=top, inside=str(top))]
        mounts += [Mount(host=Path(s), inside=s) for s in show]
        composed = compose_mounts(mounts, hide, scratch=Path(tmp) / "scratch")
        seen = read_inside(made, composed)
        for f in made:
            want = expected_visible(f, [str(top), *show], hide)
            assert (seen[f] == Path(f).read_text()) is want, (f, hide, show, seen[f])


@needs_bwrap
def test_hidden_dir_holding_a_shown_one_starts_and_keeps_both_rules(tmp_path: Path) -> None:
    """The CUDA layout: /usr/local unowned, cuda-13.0 packaged, bin and lib unowned; a mask
    inside the shown directory too; nothing needs a mount point in a read-only directory."""
    local = tmp_path / "local"
    for rel in ("bin/tool", "lib/libx.so", "cuda-13.0/bin/nvcc", "cuda-13.0/extras/demo/x",
                "cuda-13.0/include/cuda.h", "share/doc"):
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_text(rel)
    base = Mount(host=tmp_path, inside=str(tmp_path))  # as the host's /usr bind
    cuda = str(local / "cuda-13.0")
    hidden = [str(local), str(local / "bin"), str(local / "lib"), f"{cuda}/extras"]
    composed = compose_mounts(
        [base, Mount(host=Path(cuda), inside=cuda)], hidden, scratch=tmp_path / "scratch"
    )
    # the nested masks below the hidden /usr/local need no mount of their own
    assert [m.inside for m in composed].count(str(local / "bin")) == 0
    files = [str(local / r) for r in ("bin/tool", "lib/libx.so", "cuda-13.0/bin/nvcc",
                                      "cuda-13.0/include/cuda.h", "cuda-13.0/extras/demo/x")]
    seen = read_inside(files, composed)
    assert seen[f"{cuda}/bin/nvcc"] == "cuda-13.0/bin/nvcc"
    assert seen[f"{cuda}/include/cuda.h"] == "cuda-13.0/include/cuda.h"
    assert seen[str(local / "bin/tool")] is None
    assert seen[str(local / "lib/libx.so")] is None
    assert seen[f"{cuda}/extras/demo/x"] is None


def test_hidden_file_and_missing_paths(tmp_path: Path) -> None:
    """A hidden file gets an empty file over it; a hidden path that is not there, or a
    symlink, gets no mount (a mount over a link would land on its target)."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "secret").write_text("x")
    (tmp_path / "d" / "link").symlink_to("secret")
    base = Mount(host=tmp_path / "d", inside="/srv/d")
    composed = compose_mounts(
        [base], ["/srv/d/secret", "/srv/d/nosuch", "/srv/d/link"], scratch=tmp_path / "s"
    )
    extra = composed[1:]
    assert [m.inside for m in extra] == ["/srv/d/secret"]
    assert extra[0].host.is_file() and extra[0].host.stat().st_size == 0


@pytest.mark.slow
def test_usr_local_is_not_masked_whole_when_a_package_owns_files_below_it(
    tmp_path: Path,
) -> None:
    """A dpkg database (a real one, read by the real scanner) whose package owns files under
    /usr/local: the scan must not hide /usr/local whole (that hid the packaged files and nested
    the masks); a database owning nothing there masks /usr/local as always."""
    real = Path("/var/lib/dpkg")
    if not (real / "status").exists():
        pytest.skip("needs a dpkg database to copy")
    if not Path("/usr/local").is_dir() or not any(Path("/usr/local").iterdir()):
        pytest.skip("needs a non-empty /usr/local")
    db = tmp_path / "dpkg"
    (db / "info").mkdir(parents=True)
    shutil.copy(real / "status", db / "status")
    plain = scan_dpkg(db)
    assert "/usr/local" in plain.masked
    # a package that owns one entry of /usr/local (whatever this machine has there)
    child = sorted(p for p in Path("/usr/local").iterdir() if not p.is_symlink())[0]
    (db / "status").write_text(
        (db / "status").read_text()
        + "\nPackage: rf-owns-local\nStatus: install ok installed\nVersion: 1.0\n"
        "Architecture: all\n"
    )
    (db / "info" / "rf-owns-local.list").write_text(f"/usr\n/usr/local\n{child}\n")
    owning = scan_dpkg(db)
    assert "/usr/local" not in owning.masked
    assert str(child) not in owning.masked
    others = [str(p) for p in Path("/usr/local").iterdir() if p != child and p.is_dir()
              and not p.is_symlink()]
    assert all(o in owning.masked for o in others), (others, owning.masked)


@needs_bwrap
def test_a_shown_path_below_two_nested_hidden_ones(tmp_path: Path) -> None:
    """Hidden t/a and t/a/a (the inner one needs no mount), shown t/a/a/a: its mount point
    belongs in t/a's skeleton (found by the property test: bwrap could not mkdir it)."""
    top = tmp_path / "t"
    (top / "a" / "a" / "a").mkdir(parents=True)
    (top / "a" / "a" / "a" / "f").write_text("shown")
    (top / "a" / "a" / "g").write_text("hidden")
    base = Mount(host=top, inside=str(top))
    shown = str(top / "a" / "a" / "a")
    composed = compose_mounts(
        [base, Mount(host=Path(shown), inside=shown)],
        [str(top / "a"), str(top / "a" / "a")],
        scratch=tmp_path / "scratch",
    )
    seen = read_inside([f"{shown}/f", str(top / "a" / "a" / "g")], composed)
    assert seen[f"{shown}/f"] == "shown" and seen[str(top / "a" / "a" / "g")] is None
