"""Requirement wheels installed once into the store and hard-linked into venvs (wheelcache).

A linked install must give a venv exactly what pypa/installer gives it directly (RECORD, scripts
with the given shebang, entry points, headers, INSTALLER), reuse the installed tree across
venvs, refuse a tampered wheel as the direct install does, and be collected by gc with its wheel.
"""

from __future__ import annotations

import base64
import hashlib
import os
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rocmforge.errors import RequirementError
from rocmforge.store.gc import SourceItem, SourceRefs, plan_sources
from rocmforge.wheel.install import install_wheels
from rocmforge.wheel.venv import create_venv
from rocmforge.wheel.wheelcache import install_linked, tree_name

SETUPTOOLS_WHEEL = "setuptools-75.6.0-py3-none-any.whl"
XY = f"{sys.version_info.major}.{sys.version_info.minor}"
SHEBANG = "/build/venv/bin/python"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def _wheel(directory: Path, name: str = "hello", *, tamper: bool = False) -> Path:
    """A pure wheel with a console script, a header and a data file."""
    files = {
        f"{name}/__init__.py": b"def main():\n    print('hello from', __name__)\n",
        f"{name}-2.0.data/headers/{name}.h": b"#define HELLO 1\n",
        f"{name}-2.0.data/data/share/{name}.txt": b"data\n",
        f"{name}-2.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 2.0\n"
        .encode(),
        f"{name}-2.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{name}-2.0.dist-info/entry_points.txt": f"[console_scripts]\n{name} = {name}:main\n"
        .encode(),
    }
    record = "".join(_record_line(n, d) for n, d in files.items())
    record += f"{name}-2.0.dist-info/RECORD,,\n"
    if tamper:
        files[f"{name}/__init__.py"] = b"import os  # not what RECORD says\n"
    wheel = directory / f"{name}-2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
        z.writestr(f"{name}-2.0.dist-info/RECORD", record)
    return wheel


def _tree(root: Path) -> dict[str, tuple[bytes | str, int]]:
    """Every file below ``root``: content (or symlink target) and its x bits."""
    out: dict[str, tuple[bytes | str, int]] = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath, f)
            rel = os.path.relpath(p, root)
            if p.is_symlink():
                out[rel] = (os.readlink(p), 0)
            else:
                out[rel] = (p.read_bytes(), p.stat().st_mode & 0o111)
    return out


def _direct_and_linked(tmp_path: Path, wheels: list[Path]) -> tuple[Path, Path, Path]:
    sources = tmp_path / "sources"
    direct, linked = tmp_path / "direct", tmp_path / "linked"
    for v in (direct, linked):
        create_venv(Path(sys.executable), v, version=platform.python_version())
    install_wheels(wheels, direct, interpreter=SHEBANG, error=RequirementError)
    install_linked(
        [(w, _sha(w)) for w in wheels],
        linked,
        sources_dir=sources,
        python_xy=XY,
        interpreter=SHEBANG,
    )
    return direct, linked, sources


def test_linked_install_equals_direct_install_for_setuptools(
    tmp_path: Path, wheelhouse: Path
) -> None:
    wheel = wheelhouse / SETUPTOOLS_WHEEL
    direct, linked, sources = _direct_and_linked(tmp_path, [wheel])
    assert _tree(linked) == _tree(direct)  # RECORD, INSTALLER and every member included
    record = next((linked / "lib" / f"python{XY}" / "site-packages").glob("*.dist-info/RECORD"))
    assert record.stat().st_nlink == 2  # a hard link to the tree in the store
    assert not record.stat().st_mode & 0o222  # shared files are read-only
    out = subprocess.run(
        [str(linked / "bin" / "python"), "-c", "import setuptools; print(setuptools.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "75.6.0"
    assert [p.name for p in (sources / "wheels-unpacked").iterdir()] == [
        tree_name(wheel, _sha(wheel), python_xy=XY, interpreter=SHEBANG)
    ]


def test_scripts_headers_and_data_match_and_the_tree_is_reused(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    direct, linked, sources = _direct_and_linked(tmp_path, [wheel])
    assert _tree(linked) == _tree(direct)
    script = linked / "bin" / "hello"
    assert script.read_text().splitlines()[0] == f"#!{SHEBANG}"
    assert script.stat().st_mode & 0o111
    assert (linked / "include" / "site" / f"python{XY}" / "hello" / "hello.h").is_file()
    assert (linked / "share" / "hello.txt").read_text() == "data\n"
    # A second venv reuses the tree: nothing is unpacked again, the files share inodes.
    again = tmp_path / "again"
    create_venv(Path(sys.executable), again, version=platform.python_version())
    got = install_linked(
        [(wheel, _sha(wheel))], again, sources_dir=sources, python_xy=XY, interpreter=SHEBANG
    )
    linked_files = len(_tree(direct)) - 4  # all but pyvenv.cfg and bin/python*
    assert [g.unpacked for g in got] == [False] and got[0].files == linked_files
    assert (again / "bin" / "hello").stat().st_ino == script.stat().st_ino
    # Another shebang is another tree: scripts embed it.
    other = tmp_path / "other"
    create_venv(Path(sys.executable), other, version=platform.python_version())
    got = install_linked(
        [(wheel, _sha(wheel))], other, sources_dir=sources, python_xy=XY, interpreter="/x/python"
    )
    assert got[0].unpacked and (other / "bin" / "hello").read_text().startswith("#!/x/python\n")


def test_a_tampered_wheel_is_refused_and_leaves_no_tree(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, tamper=True)
    venv = tmp_path / "venv"
    create_venv(Path(sys.executable), venv, version=platform.python_version())
    sources = tmp_path / "sources"
    with pytest.raises(RequirementError, match=wheel.name):
        install_linked(
            [(wheel, _sha(wheel))], venv, sources_dir=sources, python_xy=XY, interpreter=SHEBANG
        )
    assert list((sources / "wheels-unpacked").iterdir()) == []
    assert list((sources / "tmp").iterdir()) == []


def test_two_wheels_writing_one_file_are_refused_like_installer(tmp_path: Path) -> None:
    a = _wheel(tmp_path)
    (tmp_path / "b").mkdir()
    b = _wheel(tmp_path / "b")  # the same files again, as a conflicting second requirement
    b = b.rename(tmp_path / "b" / "hello-2.0-py3-none-any.whl")
    venv = tmp_path / "venv"
    create_venv(Path(sys.executable), venv, version=platform.python_version())
    with pytest.raises(RequirementError, match="already exists"):
        install_linked(
            [(a, _sha(a)), (b, _sha(b))],
            venv,
            sources_dir=tmp_path / "sources",
            python_xy=XY,
            interpreter=SHEBANG,
        )


def test_gc_plans_an_unpacked_tree_with_its_wheel() -> None:
    tree = "wheels-unpacked/x-1-py3-none-any.whl." + "a" * 24
    items = [SourceItem(rel=tree, size=5), SourceItem(rel="wheels/x-1-py3-none-any.whl", size=5)]
    kept = SourceRefs(refs=frozenset({"wheels/x-1-py3-none-any.whl"}))
    assert plan_sources(items, kept) == ()
    got = plan_sources(items, SourceRefs())
    assert [i.rel for i in got] == [tree, "wheels/x-1-py3-none-any.whl"]
    assert got[0].kind == "unpacked wheel"


def test_a_large_tree_is_linked_by_threads_file_for_file(tmp_path: Path) -> None:
    from rocmforge.wheel.wheelcache import LINK_THREADS_ABOVE, link_tree

    tree = tmp_path / "tree"
    for i in range(LINK_THREADS_ABOVE + 500):
        d = tree / "lib" / f"pkg{i % 37}" / f"sub{i % 5}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.py").write_text(str(i))
    os.symlink("pkg0", tree / "lib" / "alias")
    venv = tmp_path / "venv"
    venv.mkdir()
    n = link_tree(tree, venv)
    assert n == LINK_THREADS_ABOVE + 500
    for src in tree.rglob("*.py"):
        dst = venv / src.relative_to(tree)
        assert os.path.samefile(src, dst)  # a hard link, not a copy
    assert os.readlink(venv / "lib" / "alias") == "pkg0"
    again = tmp_path / "again"
    again.mkdir()
    (again / "lib" / "pkg3" / "sub3").mkdir(parents=True)
    (again / "lib" / "pkg3" / "sub3" / "f3.py").write_text("mine")
    with pytest.raises(FileExistsError):
        link_tree(tree, again)
