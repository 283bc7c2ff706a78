"""Hermetic inputs: whatever a build can read is in the input hash, or invisible to the build.

Real files under ``/usr/local``, real dpkg packages installed, upgraded and removed, real bwrap
builds through the real CLI. A test that installs a package or edits a system file runs whole
inside a private root (``@isolated()``, tests/privroot.py): a mount namespace where ``/usr``,
``/opt`` and the package databases are overlays on a tmpfs, so the host never sees the change;
the CLI and bwrap it starts run in that namespace and see the changed system.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    DATA,
    HIDDEN_PKG,
    VISIBLE_PKG,
    dpkg,
    make_deb,
    purge_test_packages,
    rewrite,
    rf,
)
from tests.privroot import isolated

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

PROBE_RECIPE = """\
schema = 1

[package]
name = "probe"
version = "0.1"

[source]
path = "{src}"

[build]
steps = [{compile}, "python mkwheel.py $OUT probe 0.1"]
"""
#: PROBE_RECIPE's compile step for the probe.c tests
PROBE_COMPILE = '"cc -c probe.c -o probe.o"'


def plan_json(recipe: Path, store: Path) -> dict[str, Any]:
    """Return what ``plan --json`` says about ``recipe``."""
    done = rf("plan", recipe, "--store", store, "--json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def plan_hash(recipe: Path, store: Path) -> str:
    """Return the input hash ``plan --json`` computes for ``recipe``."""
    return str(plan_json(recipe, store)["hash"])


def install_local_header() -> str:
    """Install a header by hand under /usr/local/include (no package owns it) and return its
    name; only inside a private root."""
    name = f"rfprobe_{uuid.uuid4().hex[:8]}.h"
    path = Path("/usr/local/include") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#define RF_PROBE 1\n")
    return name


@needs_bwrap
@pytest.mark.slow
@isolated()
def test_usr_local_header_is_hidden_not_silently_used(tmp_path: Path, store: Path) -> None:
    local_header = install_local_header()
    src = tmp_path / "src"
    (src / "probe").mkdir(parents=True)
    shutil.copy(DATA / "mkwheel.py", src / "mkwheel.py")
    (src / "probe" / "__init__.py").write_text("")
    (src / "probe.c").write_text(
        f"#include <{local_header}>\nint probe(void) {{ return RF_PROBE; }}\n"
    )
    # On the host the header is found: only the sandbox hides it.
    subprocess.run(["cc", "-c", "probe.c", "-o", "/dev/null"], cwd=src, check=True)
    recipe = tmp_path / "probe.toml"
    recipe.write_text(PROBE_RECIPE.format(src=src, compile=PROBE_COMPILE))

    before = plan_hash(recipe, store)
    Path("/usr/local/include", local_header).write_text("#define RF_PROBE 2\n")
    assert plan_hash(recipe, store) == before  # hidden, so not an input: the hash stays

    done = rf("realize", recipe, "--store", store, "--sandbox", "bwrap")
    assert done.returncode != 0
    assert f"{local_header}: No such file or directory" in done.stderr
    assert "not visible in the sandbox" in done.stderr
    assert "/usr/local" in done.stderr


@pytest.mark.slow
@isolated()
def test_visible_package_install_upgrade_remove_changes_the_hash(
    tmp_path: Path, store: Path, tiny_recipe: Path, dpkg_root: None
) -> None:
    purge_test_packages()
    header = f"/usr/include/{VISIBLE_PKG}/probe.h"
    v1 = make_deb(tmp_path, VISIBLE_PKG, "1.0-1", {header: "#define V 1\n"})
    v2 = make_deb(tmp_path, VISIBLE_PKG, "1.0-2", {header: "#define V 2\n"})
    base = plan_hash(tiny_recipe, store)
    dpkg("-i", str(v1))
    installed = plan_hash(tiny_recipe, store)
    assert installed != base
    done = rf("realize", tiny_recipe, "--store", store)
    assert done.returncode == 0, done.stderr
    dpkg("-i", str(v2))  # an upgrade
    upgraded = plan_hash(tiny_recipe, store)
    assert upgraded not in (base, installed)
    shown = rf("explain", installed, tiny_recipe, "--store", store)
    assert shown.returncode == 0, shown.stderr
    assert f"toolchain.packages.{VISIBLE_PKG}: 1.0-1 -> 1.0-2" in shown.stdout
    dpkg("--purge", VISIBLE_PKG)
    assert plan_hash(tiny_recipe, store) == base


@pytest.mark.slow
@isolated()
def test_package_the_sandbox_cannot_see_leaves_the_hash(
    tmp_path: Path, store: Path, tiny_recipe: Path, dpkg_root: None
) -> None:
    purge_test_packages()
    deb = make_deb(tmp_path, HIDDEN_PKG, "1.0-1", {f"/opt/{HIDDEN_PKG}/data.txt": "x\n"})
    base = plan_hash(tiny_recipe, store)
    dpkg("-i", str(deb))
    assert plan_hash(tiny_recipe, store) == base


@pytest.mark.slow
def test_toolchain_python_headers_libpython_and_stdlib_are_hashed(
    tmp_path: Path, store: Path, tiny_src: Path, python_copy: Path
) -> None:
    import sys

    short = f"{sys.version_info[0]}.{sys.version_info[1]}"
    recipe = tmp_path / "tiny.toml"
    from tests.conftest import TINY_RECIPE

    recipe.write_text(
        TINY_RECIPE.format(src=tiny_src).replace(
            "[build]", f'[toolchain]\npython = "{python_copy}/bin/python{short}"\n\n[build]'
        )
    )
    seen = {plan_hash(recipe, store)}
    site = python_copy / "lib" / f"python{short}" / "site-packages"
    site.mkdir()
    (site / "unrelated.py").write_text("X = 1\n")
    assert plan_hash(recipe, store) in seen  # site-packages is masked, not hashed
    changes = {
        "headers": python_copy / "include" / f"python{short}" / "Python.h",
        "stdlib": python_copy / "lib" / f"python{short}" / "textwrap.py",
        "libpython": next((python_copy / "lib").glob("libpython*.so*")),
    }
    for part, path in changes.items():
        before = plan_json(recipe, store)["derivation"]["toolchain"]["python"]["prefix_files"]
        rewrite(path, b"\n/* changed */\n" if part == "headers" else b"\n# changed\n")
        data = plan_json(recipe, store)
        assert data["hash"] not in seen, part
        seen.add(data["hash"])
        after = data["derivation"]["toolchain"]["python"]["prefix_files"]
        assert [k for k in after if after[k] != before[k]] == [part]


LINK_RECIPE = """\
schema = 1

[package]
name = "probe"
version = "0.1"

[source]
path = "{src}"

[build]
steps = [{steps}, "python mkwheel.py $OUT probe 0.1"]
"""


def dpkg_version(package: str) -> str:
    """Return the installed version of ``package`` (dpkg-query)."""
    return subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=True
    ).stdout


def link_src(tmp_path: Path, code: str) -> Path:
    """A project whose build compiles ``code`` into probe/_native.so and packs it."""
    src = tmp_path / "src"
    (src / "probe").mkdir(parents=True)
    shutil.copy(DATA / "mkwheel.py", src / "mkwheel.py")
    (src / "probe" / "__init__.py").write_text("")
    (src / "native.c").write_text(code)
    return src


@needs_bwrap
@pytest.mark.slow
def test_wheel_links_are_recorded_with_their_package(tmp_path: Path, store: Path) -> None:
    if not Path("/usr/include/yaml.h").exists() or shutil.which("dpkg-query") is None:
        pytest.skip("needs libyaml-dev from dpkg")
    src = link_src(
        tmp_path, "#include <yaml.h>\nconst char *v(void) { return yaml_get_version_string(); }\n"
    )
    recipe = tmp_path / "probe.toml"
    steps = '"cc -shared -fPIC native.c -lyaml -o probe/_native.so"'
    recipe.write_text(LINK_RECIPE.format(src=src, steps=steps))
    done = rf("realize", recipe, "--store", store, "--sandbox", "bwrap")
    assert done.returncode == 0, done.stderr
    [entry] = (store / "entries").iterdir()
    [wheel] = entry.glob("*.whl")
    version = dpkg_version("libyaml-0-2")
    meta = json.loads((entry / "meta.json").read_text())
    links = meta["links"][wheel.name]
    assert {
        "member": "probe/_native.so",
        "soname": "libyaml-0.so.2",
        "provider": "package",
        "package": "libyaml-0-2",
        "version": version,
    }.items() <= next(lk for lk in links if lk["soname"] == "libyaml-0.so.2").items()
    line = f"links libyaml-0.so.2 from libyaml-0-2 {version}"
    assert line in rf("show", entry.name.split("-")[0], "--store", store).stdout
    assert line in rf("audit", wheel, "--store", store).stdout
    claimed = rf("audit", wheel, "--store", store.parent / "another-store")
    assert claimed.returncode == 5 and line in claimed.stdout
    assert "links resolved on this machine" in claimed.stdout
    statement = json.loads((entry / "provenance.json").read_text())
    byproducts = statement["predicate"]["runDetails"]["byproducts"]
    assert any(b["name"] == f"links/{wheel.name}" for b in byproducts)


@needs_bwrap
@pytest.mark.slow
def test_a_library_from_an_unhashed_place_is_a_build_error(tmp_path: Path, store: Path) -> None:
    hidden = tmp_path / "unowned-lib"
    hidden.mkdir()
    (tmp_path / "foo.c").write_text("int foo(void) { return 1; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", str(tmp_path / "foo.c"), "-o", str(hidden / "libfoo.so")],
        check=True,
    )
    src = link_src(tmp_path, "int foo(void);\nint bar(void) { return foo(); }\n")
    (src / "foo.c").write_text("int foo(void) { return 2; }\n")
    steps = (
        '"cc -shared -fPIC foo.c -o libfoo.so", '
        f'"cc -shared -fPIC native.c -L. -lfoo -Wl,-rpath,{hidden} -o probe/_native.so"'
    )
    recipe = tmp_path / "probe.toml"
    recipe.write_text(LINK_RECIPE.format(src=src, steps=steps))
    done = rf("realize", recipe, "--store", store, "--sandbox", "bwrap")
    assert done.returncode == 1, done.stderr
    assert (
        f"links libfoo.so from {hidden}/libfoo.so (no package owns it: not hashed)" in done.stderr
    )
    assert not (store / "entries").exists() or not any((store / "entries").iterdir())


ROCM_RECIPE = """\
schema = 1

[package]
name = "tiny"
version = "0.1"

[source]
path = "{src}"

[toolchain]
kind = "rocm"
rocm = "5.2"
root = "{root}"

[build]
steps = ["python mkwheel.py $OUT tiny 0.1"]
"""


def coverage(recipe: Path, store: Path) -> tuple[str, dict[str, Any]]:
    """Return the input hash and ``toolchain.rocm.coverage`` that ``plan`` computes."""
    data = plan_json(recipe, store)
    return str(data["hash"]), data["derivation"]["toolchain"]["rocm"]["coverage"]


@pytest.mark.slow
@isolated()
def test_packaged_rocm_root_is_covered_by_versions_and_dpkg_md5sums(
    tmp_path: Path, store: Path, tiny_src: Path
) -> None:
    header = Path("/usr/include/hip/hip_runtime.h")
    if shutil.which("hipcc") is None or not header.exists() or shutil.which("dpkg-query") is None:
        pytest.skip("needs Debian's hipcc / libamdhip64-dev (apt-get install hipcc)")
    recipe = tmp_path / "rocm.toml"
    recipe.write_text(ROCM_RECIPE.format(src=tiny_src, root="/usr"))
    before, cov = coverage(recipe, store)
    assert cov["packages"]["libamdhip64-dev"] == dpkg_version("libamdhip64-dev")
    assert cov["modified"] == {}
    original = header.read_bytes()
    st = header.stat()
    with open(header, "ab") as f:  # an edit in place: the package version stays
        f.write(b"\n/* edited by hand */\n")
    after, cov = coverage(recipe, store)
    assert after != before
    assert list(cov["modified"]) == ["include/hip/hip_runtime.h"]
    with open(header, "r+b") as f:  # undone, to the old bytes and mtime: the old hash again
        f.truncate(len(original))
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert header.read_bytes() == original
    assert coverage(recipe, store)[0] == before


@pytest.mark.slow
def test_rocm_root_installed_otherwise_is_covered_by_content(
    tmp_path: Path, store: Path, tiny_src: Path
) -> None:
    clang = shutil.which("clang-15") or shutil.which("clang")
    if clang is None or not Path("/usr/include/hip/hip_version.h").exists():
        pytest.skip("needs a clang and Debian's HIP headers to assemble a copied ROCm root")
    root = tmp_path / "rocm-copy"
    shutil.copytree("/usr/include/hip", root / "include" / "hip")
    (root / "llvm" / "bin").mkdir(parents=True)
    (root / "llvm" / "bin" / "clang").symlink_to(os.path.realpath(clang))
    (root / "lib").mkdir()
    recipe = tmp_path / "rocm.toml"
    recipe.write_text(ROCM_RECIPE.format(src=tiny_src, root=root))
    first, cov = coverage(recipe, store)
    assert cov["packages"] == {} and set(cov["unowned"]) == {"include", "llvm"}
    with open(root / "include" / "hip" / "hip_runtime.h", "ab") as f:
        f.write(b"\n/* edited */\n")
    second, cov2 = coverage(recipe, store)
    assert second != first
    assert [k for k in cov["unowned"] if cov["unowned"][k] != cov2["unowned"][k]] == ["include"]
    (root / "lib" / "librocblas.so.4").write_bytes(b"\x7fELF not really\n")
    third, cov3 = coverage(recipe, store)
    assert third not in (first, second) and cov3["unowned"]["lib"]["files"] == 1


@pytest.mark.slow
@isolated()
def test_doctor_shows_the_manifest_and_the_masked_count() -> None:
    if not Path("/var/lib/dpkg/status").exists():
        pytest.skip("needs dpkg")
    local_header = install_local_header()
    done = rf("doctor", "--json")
    assert done.returncode == 0, done.stderr
    system = json.loads(done.stdout)["system"]
    assert system["database"] == "dpkg" and "/usr/local" in system["masked"]
    assert system["packages"]["dpkg"] == dpkg_version("dpkg")
    before = system["masked_files"]
    extra = Path("/usr/local/include") / f"more-{local_header}"
    extra.write_text("\n")
    assert json.loads(rf("doctor", "--json").stdout)["system"]["masked_files"] == before + 1
    text = rf("doctor").stdout
    assert f"{len(system['packages'])} dpkg packages visible to builds" in text
    assert "directories hidden from builds: /usr/local" in text


def view_recipe(tmp_path: Path, src: Path, packages: list[str], steps: str) -> Path:
    """A recipe declaring ``[toolchain] packages`` (the declared view of /usr)."""
    recipe = tmp_path / f"view-{len(packages)}-{uuid.uuid4().hex[:6]}.toml"
    recipe.write_text(
        LINK_RECIPE.format(src=src, steps=steps).replace(
            "[build]", f"[toolchain]\npackages = {json.dumps(packages)}\n\n[build]"
        )
    )
    return recipe


@needs_bwrap
@pytest.mark.slow
def test_declared_view_shows_only_declared_packages(tmp_path: Path, store: Path) -> None:
    if not Path("/usr/include/yaml.h").exists() or shutil.which("dpkg-query") is None:
        pytest.skip("needs libyaml-dev from dpkg")
    src = link_src(
        tmp_path, "#include <yaml.h>\nconst char *v(void) { return yaml_get_version_string(); }\n"
    )
    steps = '"cc -shared -fPIC native.c -lyaml -o probe/_native.so"'
    undeclared = view_recipe(tmp_path, src, [], steps)
    done = rf("realize", undeclared, "--store", store, "--sandbox", "bwrap")
    assert done.returncode == 1
    assert "yaml.h is shipped by libyaml-dev, which [toolchain] packages does not declare" in (
        done.stderr
    )
    assert 'packages = [..., "libyaml-dev"]' in done.stderr

    declared = view_recipe(tmp_path, src, ["libyaml-dev"], steps)
    data = plan_json(declared, store)
    packages = data["derivation"]["toolchain"]["packages"]
    assert packages["libyaml-dev"] == dpkg_version("libyaml-dev")
    assert "build-essential" in packages and "masked" not in data["derivation"]["toolchain"]
    done = rf("realize", declared, "--store", store, "--sandbox", "bwrap")
    assert done.returncode == 0, done.stderr
    shown = rf("show", data["hash"], "--store", store).stdout
    assert f"links libyaml-0.so.2 from libyaml-0-2 {dpkg_version('libyaml-0-2')}" in shown


@pytest.mark.slow
@isolated()
def test_declared_view_hash_changes_iff_a_view_package_changes(
    tmp_path: Path, store: Path, tiny_src: Path, dpkg_root: None
) -> None:
    purge_test_packages()
    shutil.copy(DATA / "mkwheel.py", tiny_src / "mkwheel.py")
    steps = '"true"'
    src = tiny_src
    (src / "probe").mkdir(exist_ok=True)
    (src / "probe" / "__init__.py").write_text("")
    narrow = view_recipe(tmp_path, src, ["libyaml-dev"], steps)
    wide = view_recipe(tmp_path, src, [VISIBLE_PKG], steps)
    header = f"/usr/include/{VISIBLE_PKG}/probe.h"
    v1 = make_deb(tmp_path, VISIBLE_PKG, "1.0-1", {header: "#define V 1\n"})
    v2 = make_deb(tmp_path, VISIBLE_PKG, "1.0-2", {header: "#define V 2\n"})
    before = plan_hash(narrow, store)
    dpkg("-i", str(v1))
    assert plan_hash(narrow, store) == before  # installed, but not in this recipe's view
    seen = plan_hash(wide, store)
    done = rf("realize", wide, "--store", store)
    assert done.returncode == 0, done.stderr
    dpkg("-i", str(v2))
    assert plan_hash(narrow, store) == before
    assert plan_hash(wide, store) != seen
    shown = rf("explain", seen, wide, "--store", store)
    assert f"toolchain.packages.{VISIBLE_PKG}: 1.0-1 -> 1.0-2" in shown.stdout


@needs_bwrap
@pytest.mark.slow
@isolated()
def test_rocm_root_under_usr_local_is_mounted_and_hashed(tmp_path: Path, tiny_src: Path) -> None:
    clang = shutil.which("clang-15") or shutil.which("clang")
    if clang is None or not Path("/usr/include/hip/hip_version.h").exists():
        pytest.skip("needs a clang and Debian's HIP headers to assemble a copied ROCm root")
    root = Path("/usr/local") / f"rocm-test-{uuid.uuid4().hex[:8]}"
    shutil.copytree("/usr/include/hip", root / "include" / "hip")
    (root / "llvm" / "bin").mkdir(parents=True)
    (root / "llvm" / "bin" / "clang").symlink_to(os.path.realpath(clang))
    recipe = tmp_path / "rocm.toml"
    recipe.write_text(
        ROCM_RECIPE.format(src=tiny_src, root=root).replace(
            'steps = ["python',
            'steps = ["test -f $ROCM_PATH/include/hip/hip_version.h", "python',
        )
    )
    store = tmp_path / "store"
    _, cov = coverage(recipe, store)
    assert "include" in cov["unowned"]  # no package owns it: hashed by content
    done = rf("realize", recipe, "--store", store, "--sandbox", "bwrap")
    assert done.returncode == 0, done.stderr  # visible although /usr/local is masked


#: PROBE_RECIPE's compile step for the rftool test: a C extension that includes the header
RFTOOL_COMPILE = '"cc -shared -fPIC -I/usr/local/rftool-1.0/include native.c -o probe/_native.so"'


@needs_bwrap
@pytest.mark.slow
@isolated()
def test_a_package_owning_files_under_usr_local_is_visible_and_hashed(
    tmp_path: Path, store: Path, dpkg_root: None
) -> None:
    """Like CUDA's and some ROCm .debs: a package installs /usr/local/<tool>-X.Y; its files are
    owned (hashed by the package's version), so a build sees them although /usr/local is
    masked, and another version of the package is another input hash."""
    header = "/usr/local/rftool-1.0/include/rftool.h"
    v1 = make_deb(tmp_path, VISIBLE_PKG, "1.0-1", {header: "#define RFTOOL 1\n"})
    v2 = make_deb(tmp_path, VISIBLE_PKG, "1.0-2", {header: "#define RFTOOL 2\n"})
    purge_test_packages()
    dpkg("-i", str(v1))
    src = link_src(tmp_path, "#include <rftool.h>\nint rftool(void) { return RFTOOL; }\n")
    recipe = tmp_path / "probe.toml"
    recipe.write_text(PROBE_RECIPE.format(src=src, compile=RFTOOL_COMPILE))
    first = plan_json(recipe, store)
    assert first["derivation"]["toolchain"]["packages"][VISIBLE_PKG] == "1.0-1"
    dpkg("-i", str(v2))  # an upgrade: another input hash
    assert plan_hash(recipe, store) != first["hash"]
    dpkg("-i", str(v1))  # and back
    assert plan_hash(recipe, store) == first["hash"]
    # Its header is visible in the sandbox although /usr/local is masked (issue 26.1: until the
    # masks compose, bwrap fails with "Can't mkdir /usr/local/bin: Read-only file system").
    done = rf("realize", recipe, "--store", store, "--sandbox", "bwrap")
    assert done.returncode == 0, done.stderr
    dpkg("-i", str(v2))
    done = rf("realize", recipe, "--store", store, "--sandbox", "bwrap")
    assert done.returncode == 0, done.stderr
    shown = rf("explain", first["hash"], recipe, "--store", store)
    assert f"toolchain.packages.{VISIBLE_PKG}: 1.0-1 -> 1.0-2" in shown.stdout
