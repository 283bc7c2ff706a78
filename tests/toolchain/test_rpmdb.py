"""rpm hosts and hosts without a package database: real rpms, real rpm databases, no mocks.

Tiny packages are built with ``rpmbuild`` and installed with ``rpm --root ROOT`` into throwaway
roots (never the real ``/``); the manifest, owner lookups and ROCm root coverage then read those
databases through the real ``rpm``. Without rpmbuild (``apt-get install rpm``) the tests that
need it skip, except under ``CI=true`` where they fail (scripts/setup.sh installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rocmforge.errors import EXIT_ENVIRONMENT, SystemDatabaseError, ToolchainError
from rocmforge.toolchain import manifest, rpmdb
from rocmforge.toolchain.manifest import HostDatabase, detect_database, system_manifest
from rocmforge.toolchain.rocmroot import scan_root
from tests.conftest import pip_args, rf

DBPATH = "/var/lib/rpm"
NATIVE = os.uname().machine
NO_ENV: dict[str, str] = {}
CONTENT = {manifest.SYSTEM_MANIFEST_ENV: "content"}


@pytest.fixture(scope="module")
def rpms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build the test packages once: ``{label: .rpm}``."""
    if shutil.which("rpmbuild") is None or shutil.which("rpm") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("rpmbuild is missing in CI: scripts/setup.sh should install it (apt rpm)")
        pytest.skip("needs rpm and rpmbuild (apt-get install rpm)")
    top = tmp_path_factory.mktemp("rpmbuild")
    a = {"/usr/share/rftest/link": "->a.txt", "/etc/rftest.conf": "conf\n"}
    a_files = (
        "%dir /usr/share/rftest\n/usr/share/rftest/a.txt\n/usr/share/rftest/link\n"
        "%config(noreplace) /etc/rftest.conf\n%ghost /usr/share/rftest/ghost.log\n"
    )
    rocm = "/opt/rocm-rftest"
    return {
        # epoch 2, noarch, a symlink, a %config and a %ghost file; then an upgrade (release 2)
        "a1": _build(
            top,
            "rftest-a",
            "1.0-1",
            "noarch",
            {**a, "/usr/share/rftest/a.txt": "one\n"},
            epoch="2",
            files=a_files,
        ),
        "a2": _build(
            top,
            "rftest-a",
            "1.0-2",
            "noarch",
            {**a, "/usr/share/rftest/a.txt": "two\n"},
            epoch="2",
            files=a_files,
        ),
        # only under /opt: the sandbox cannot show it
        "opt": _build(top, "rftest-opt", "1.0-1", NATIVE, {"/opt/rftest-opt/d.txt": "opt\n"}),
        # a foreign architecture (multilib)
        "lib32": _build(top, "rftest-lib", "3.1-7", "i686", {"/usr/lib/rftest-i686/l": "l\n"}),
        # a ROCm root of packages, with a versioned library and its symlink
        "rocm": _build(
            top,
            "rftest-rocm",
            "6.0-1",
            NATIVE,
            {
                f"{rocm}/include/hip/hip_version.h": "#define HIP_VERSION 600\n",
                f"{rocm}/lib/librocblas.so.4.0": "elf\n",
                f"{rocm}/lib/librocblas.so.4": "->librocblas.so.4.0",
            },
        ),
        "late": _build(top, "rftest-late", "1-1", "noarch", {"/usr/share/rftest-late/x": "x\n"}),
    }


def _build(
    top: Path,
    name: str,
    version_release: str,
    arch: str,
    contents: dict[str, str],
    *,
    epoch: str = "",
    files: str = "",
) -> Path:
    """Build one binary rpm with rpmbuild holding ``contents`` (``->T``: a symlink to T)."""
    version, _, release = version_release.partition("-")
    install = []
    for path, text in contents.items():
        at = "%{buildroot}" + path
        install.append(f"mkdir -p $(dirname {at})")
        if text.startswith("->"):
            install.append(f"ln -s {text[2:]} {at}")
        else:
            install.append(f"printf '%%s' '{text}' > {at}")
    tops = sorted(
        {"/" + "/".join(p.split("/")[1:3]) if p.startswith("/opt/") else p for p in contents}
    )
    spec = top / f"{name}-{release}.spec"
    spec.write_text(
        f"Name: {name}\nVersion: {version}\nRelease: {release}\n"
        + (f"Epoch: {epoch}\n" if epoch else "")
        + "Summary: rocmforge test package\nLicense: MIT\n"
        + ("BuildArch: noarch\n" if arch == "noarch" else "")
        + "%description\nrocmforge test package\n%install\n"
        + "\n".join(install)
        + "\n%files\n"
        + (files or "\n".join(tops) + "\n")
    )
    argv = ["rpmbuild", "-bb", "--define", f"_topdir {top}", "--define", "_build_id_links none"]
    if arch != "noarch":
        argv += ["--target", arch]
    done = subprocess.run([*argv, str(spec)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    [built] = (top / "RPMS" / arch).glob(f"{name}-{version}-{release}.*.rpm")
    return built


def rpm_in(root: Path, *args: str) -> None:
    """Run rpm on the database of the throwaway ``root`` (never the machine's)."""
    argv = ["rpm", "--root", str(root), "--dbpath", DBPATH, "--nodeps", "--ignorearch", *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def rpm_root(tmp_path: Path, rpms: dict[str, Path]) -> Callable[..., Path]:
    """Make a throwaway root with some of the test packages installed."""

    def make(*labels: str, name: str = "root") -> Path:
        root = tmp_path / name
        root.mkdir()
        if labels:
            rpm_in(root, "-i", *(str(rpms[label]) for label in labels))
        return root

    return make


def rpm_db(root: Path) -> HostDatabase:
    db = detect_database(root, NO_ENV)
    assert db.kind == "rpm", db
    return db


def test_parse_query_is_a_pure_function_of_rpm_output() -> None:
    fs, rs = "\x1f", "\x1e"
    text = (
        f"P{fs}kernel{fs}(none){fs}5.14.0{fs}1.el9{fs}x86_64{fs}8{rs}"
        f"F{fs}/usr/lib/modules/5.14.0/vmlinuz{fs}AB12{fs}0{fs}33188{fs}0{fs}{rs}"
        f"F{fs}/etc/kernel.conf{fs}cd34{fs}17{fs}33188{fs}0{fs}{rs}"
        f"F{fs}/usr/share/doc/k{fs}ef56{fs}2{fs}33188{fs}2{fs}{rs}"
        f"F{fs}/usr/lib/k.link{fs}{fs}0{fs}41471{fs}0{fs}vmlinuz{rs}"
        f"P{fs}gpg-pubkey{fs}(none){fs}fd431d51{fs}4ae0493b{fs}(none){fs}(none){rs}"
        f"P{fs}old{fs}1{fs}2.0{fs}3{fs}i686{fs}(none){rs}"
        f"F{fs}/usr/lib/old.so{fs}0123{fs}64{fs}33188{fs}0{fs}{rs}"
    )
    # The same packages whether the text arrives whole or cut anywhere (rpm's output streams).
    whole = list(rpmdb.parse_query(text))
    assert list(rpmdb.parse_query(text[i : i + 7] for i in range(0, len(text), 7))) == whole
    kernel, key, old = whole
    assert (kernel.name, kernel.version, kernel.arch, kernel.digest_algo) == (
        "kernel",
        "5.14.0-1.el9",
        "x86_64",
        "sha256",
    )
    assert kernel.files[0].digest == "ab12" and kernel.files[0].verifiable
    assert not kernel.files[1].verifiable  # %config
    assert not kernel.files[2].installed  # --excludedocs: state "not installed"
    assert kernel.files[3].verifiable and kernel.files[3].linkto == "vmlinuz"  # a symlink
    assert (key.arch, key.files) == ("", ())
    assert (old.version, old.digest_algo) == ("1:2.0-3", "md5")  # epoch; pre-4.6 package
    assert not old.files[0].verifiable  # %ghost
    assert rpmdb.native_arch(p.arch for p in whole) in ("x86_64", "i686")
    assert rpmdb.package_key(old, "x86_64") == "old.i686"
    versions: dict[str, str] = {}
    rpmdb.add_version(versions, "kernel", "5.14.0-2.el9")
    rpmdb.add_version(versions, "kernel", "5.14.0-1.el9")  # installonly: both count
    assert versions == {"kernel": "5.14.0-1.el9, 5.14.0-2.el9"}
    with pytest.raises(rpmdb.RpmError, match="unexpected rpm query output"):
        list(rpmdb.parse_query(f"P{fs}only-three{fs}fields{rs}"))
    with pytest.raises(rpmdb.RpmError, match="ends inside a record"):
        list(rpmdb.parse_query(text[:-1]))


def test_rpm_database_read_through_rpm(rpm_root: Callable[..., Path]) -> None:
    root = rpm_root("a1", "opt", "lib32")
    assert rpmdb.find_database(root) == (DBPATH, "sqlite")
    assert rpmdb.rpm_version().startswith("rpm 4.")
    found = {(p.name, p.arch): p for p in rpmdb.query(DBPATH, root)}
    assert set(found) == {("rftest-a", "noarch"), ("rftest-opt", NATIVE), ("rftest-lib", "i686")}
    a = found["rftest-a", "noarch"]
    assert a.version == "2:1.0-1" and a.digest_algo == "sha256"
    assert {f.path for f in a.files} == {
        "/usr/share/rftest",
        "/usr/share/rftest/a.txt",
        "/usr/share/rftest/link",
        "/usr/share/rftest/ghost.log",
        "/etc/rftest.conf",
    }
    assert found["rftest-lib", "i686"].version == "3.1-7"


def test_modified_files_are_the_ones_rpm_verify_flags(rpm_root: Callable[..., Path]) -> None:
    root = rpm_root("a1")
    packages = list(rpmdb.query(DBPATH, root))
    assert rpmdb.modified(packages, root) == {}
    (root / "usr/share/rftest/ghost.log").write_text("a log the package only names\n")
    with open(root / "etc/rftest.conf", "a") as f:  # %config: the administrator's to edit
        f.write("edited = yes\n")
    assert rpmdb.modified(packages, root) == {}
    with open(root / "usr/share/rftest/a.txt", "a") as f:  # in place: same inode
        f.write("edited by hand\n")
    assert rpmdb.modified(packages, root) == {"/usr/share/rftest/a.txt": ("rftest-a", "2:1.0-1")}
    link = root / "usr/share/rftest/link"
    link.unlink()
    link.symlink_to("ghost.log")
    assert set(rpmdb.modified(packages, root)) == {
        "/usr/share/rftest/a.txt",
        "/usr/share/rftest/link",
    }
    # rpm -V agrees on both (5: digest, L: link target) and also flags the %config file.
    done = subprocess.run(
        ["rpm", "--root", str(root), "--dbpath", DBPATH, "-V", "rftest-a"],
        capture_output=True,
        text=True,
        check=False,
    )
    flagged = {line.split()[-1] for line in done.stdout.splitlines()}
    assert {"/usr/share/rftest/a.txt", "/usr/share/rftest/link", "/etc/rftest.conf"} <= flagged


def test_manifest_of_an_rpm_root(tmp_path: Path, rpm_root: Callable[..., Path]) -> None:
    root = rpm_root("a1", "opt", "lib32")
    (root / "usr/share/handmade").mkdir(parents=True)
    (root / "usr/share/handmade/tool.sh").write_text("echo hand\n")
    (root / "usr/share/rftest/loose.txt").write_text("copied in by hand\n")
    (root / "usr/local/include").mkdir(parents=True)
    (root / "usr/local/include/x.h").write_text("\n")
    m = system_manifest(cache_dir=tmp_path / "cache", sysroot=root, environ=NO_ENV)
    assert m.database == "rpm"
    # rftest-opt lives under /opt only: the sandbox cannot show it, so it is not hashed.
    assert m.packages == {"rftest-a": "2:1.0-1", "rftest-lib.i686": "3.1-7"}
    assert "/usr/share/handmade" in m.masked and "/usr/local" in m.masked
    assert m.masked_files == 2
    assert set(m.unowned) == {"/usr/share/rftest/loose.txt"}
    assert m.info["source"] == "/var/lib/rpm (sqlite)" and m.info["reader"].startswith("rpm ")
    fp = m.fingerprint()
    assert fp["database"] == "rpm" and "content" not in fp


def test_upgrade_changes_the_fingerprint_and_the_cache_follows_the_database(
    tmp_path: Path, rpm_root: Callable[..., Path], rpms: dict[str, Path]
) -> None:
    root = rpm_root("a1")
    cache = tmp_path / "cache"
    first = system_manifest(cache_dir=cache, sysroot=root, environ=NO_ENV)
    # A file dropped into a packaged directory is not seen while the database is unchanged:
    # the cached manifest answers (the hole docs/hermetic.md names) ...
    (root / "usr/share/rftest/dropped.txt").write_text("late\n")
    assert system_manifest(cache_dir=cache, sysroot=root, environ=NO_ENV) == first
    # ... and any rpm transaction invalidates it.
    rpm_in(root, "-i", str(rpms["late"]))
    second = system_manifest(cache_dir=cache, sysroot=root, environ=NO_ENV)
    assert "/usr/share/rftest/dropped.txt" in second.unowned
    assert second.packages["rftest-late"] == "1-1"
    rpm_in(root, "-U", str(rpms["a2"]))
    third = system_manifest(cache_dir=cache, sysroot=root, environ=NO_ENV)
    assert third.packages["rftest-a"] == "2:1.0-2"
    assert third.fingerprint() != second.fingerprint()
    assert (root / "usr/share/rftest/a.txt").read_text() == "two\n"


def test_owners_and_packages_shipping_from_rpm(rpm_root: Callable[..., Path]) -> None:
    root = rpm_root("a1", "lib32", "opt")
    db = rpm_db(root)
    owners = manifest.find_owners(
        ["/usr/share/rftest/a.txt", "/usr/lib/rftest-i686/l", "/usr/share/nobody"], db
    )
    assert owners == {
        "/usr/share/rftest/a.txt": ("rftest-a", "2:1.0-1"),
        "/usr/lib/rftest-i686/l": ("rftest-lib.i686", "3.1-7"),
    }
    assert manifest.packages_shipping("/rftest/a.txt", db) == ["rftest-a"]
    assert manifest.packages_shipping("/no/such.h", db) == []


def test_rocm_root_from_rpm_is_checked_against_rpm_digests(rpm_root: Callable[..., Path]) -> None:
    root = rpm_root("rocm", "opt")
    db = rpm_db(root)
    rocm = root / "opt/rocm-rftest"
    part, guards, _ = scan_root(rocm, db)
    assert part == {"packages": {"rftest-rocm": "6.0-1"}, "modified": {}, "unowned": {}}
    assert str(rocm / "include/hip/hip_version.h") in guards
    with open(rocm / "include/hip/hip_version.h", "a") as f:
        f.write("/* edited */\n")
    (rocm / "lib/librocblas.so.4").unlink()
    (rocm / "lib/librocblas.so.4").symlink_to("/elsewhere/librocblas.so")
    (rocm / "lib/extra.so").write_text("hand-copied\n")
    part, _, _ = scan_root(rocm, db)
    assert set(part["modified"]) == {"include/hip/hip_version.h", "lib/librocblas.so.4"}
    assert part["modified"]["lib/librocblas.so.4"] == "link:/elsewhere/librocblas.so"
    assert part["unowned"]["lib"]["files"] == 1


def _dpkg_status(root: Path) -> None:
    (root / "var/lib/dpkg/info").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(
        "Package: base-files\nStatus: install ok installed\nArchitecture: amd64\nVersion: 12\n\n"
    )


def test_which_database_wins(tmp_path: Path, rpm_root: Callable[..., Path]) -> None:
    root = rpm_root("a1")
    assert rpm_db(root).path == DBPATH
    _dpkg_status(root)
    both = detect_database(root, NO_ENV)
    assert both.kind == "dpkg" and "rpm database (/var/lib/rpm) is present too" in both.note
    forced = detect_database(root, {manifest.SYSTEM_MANIFEST_ENV: "rpm"})
    assert forced.kind == "rpm"
    empty = tmp_path / "empty"
    (empty / "var/lib/dpkg").mkdir(parents=True)
    (empty / "var/lib/dpkg/status").write_text("")  # a dpkg that knows no package: no database
    assert detect_database(empty, NO_ENV).kind == "none"
    with pytest.raises(SystemDatabaseError, match="=dpkg but /var/lib/dpkg/status"):
        detect_database(empty, {manifest.SYSTEM_MANIFEST_ENV: "dpkg"})
    with pytest.raises(ToolchainError, match="expected one of auto, dpkg, rpm, content"):
        detect_database(empty, {manifest.SYSTEM_MANIFEST_ENV: "pacman"})
    # The newer place wins when both hold a database (Fedora links one to the other).
    rpm_in_sysimage = tmp_path / "sysimage"
    rpm_in_sysimage.mkdir()
    (rpm_in_sysimage / "usr/lib/sysimage/rpm").mkdir(parents=True)
    (rpm_in_sysimage / "usr/lib/sysimage/rpm/rpmdb.sqlite").write_bytes(b"")
    (rpm_in_sysimage / "var/lib/rpm").mkdir(parents=True)
    (rpm_in_sysimage / "var/lib/rpm/Packages").write_bytes(b"")
    assert rpmdb.find_database(rpm_in_sysimage) == ("/usr/lib/sysimage/rpm", "sqlite")


@pytest.fixture
def bare_root(tmp_path: Path) -> Path:
    """A system with files under /usr and no package database (distroless, Arch, NixOS)."""
    root = tmp_path / "bare"
    for rel, text in {
        "usr/bin/tool": "#!/bin/sh\n",
        "usr/include/thing.h": "#define THING 1\n",
        "usr/lib/libthing.so.1": "elf\n",
        "usr/local/include/hidden.h": "\n",
        "usr/lib/python3/__pycache__/x.pyc": "bytecode\n",
        "usr/lib/os-release": "ID=bare\n",
        "etc/ssl/certs/ca.pem": "a certificate\n",
        "etc/passwd": "root:x:0:0::/root:/bin/sh\n",  # the host's identity: not hashed
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "usr/bin/thing").symlink_to("tool")
    (root / "etc/os-release").symlink_to("../usr/lib/os-release")
    return root


def test_no_database_is_refused_naming_what_was_looked_for(tmp_path: Path, bare_root: Path) -> None:
    assert detect_database(bare_root, NO_ENV).kind == "none"
    with pytest.raises(SystemDatabaseError) as info:
        system_manifest(cache_dir=tmp_path / "cache", sysroot=bare_root, environ=NO_ENV)
    said = str(info.value)
    assert info.value.exit_code == EXIT_ENVIRONMENT == 3
    assert "\n" not in said
    for what in ("/var/lib/dpkg/status", "/var/lib/rpm", "/usr/lib/sysimage/rpm", "content"):
        assert what in said


def test_content_fallback_hashes_every_file_and_rescans_only_changes(
    tmp_path: Path, bare_root: Path
) -> None:
    cache = tmp_path / "cache"
    m = system_manifest(cache_dir=cache, sysroot=bare_root, environ=CONTENT)
    assert m.database == "content" and m.packages == {} and m.masked == ("/usr/local",)
    assert {k: v["files"] for k, v in m.content.items()} == {
        "/etc": 2,  # the sandbox's /etc entries: ssl/ and the os-release link
        "bin": 2,
        "include": 1,
        "lib": 2,
    }
    assert m.masked_files == 1 and m.info["hashed_bytes"] == m.info["bytes"] > 0
    assert set(m.fingerprint()["content"]) == {"/etc", "bin", "include", "lib"}
    assert str(bare_root / "usr/include") in manifest.memo_guards(m)
    assert system_manifest(cache_dir=cache, sysroot=bare_root, environ=CONTENT) == m  # warm
    header = bare_root / "usr/include/thing.h"
    inode = header.stat().st_ino
    with open(header, "a") as f:  # in place: the directory does not change, the file does
        f.write("#define MORE 2\n")
    assert header.stat().st_ino == inode
    again = system_manifest(cache_dir=cache, sysroot=bare_root, environ=CONTENT)
    assert [k for k in m.content if m.content[k] != again.content[k]] == ["include"]
    assert again.info["hashed_bytes"] == header.stat().st_size  # only the changed file is read
    (bare_root / "usr/bin/thing").unlink()
    (bare_root / "usr/bin/thing").symlink_to("/usr/lib/libthing.so.1")
    third = system_manifest(cache_dir=cache, sysroot=bare_root, environ=CONTENT)
    assert [k for k in m.content if again.content[k] != third.content[k]] == ["bin"]
    assert third.info["hashed_bytes"] == 0
    (bare_root / "usr/local/include/more.h").write_text("\n")  # masked: never an input
    (bare_root / "etc/passwd").write_text("root:x:0:0::/root:/bin/bash\n")
    assert system_manifest(cache_dir=cache, sysroot=bare_root, environ=CONTENT).content == (
        third.content
    )
    (bare_root / "etc/os-release").unlink()
    (bare_root / "etc/os-release").symlink_to("/usr/include/thing.h")
    fourth = system_manifest(cache_dir=cache, sysroot=bare_root, environ=CONTENT)
    assert [k for k in m.content if third.content[k] != fourth.content[k]] == ["/etc"]


# -- through the real CLI, in a bwrap view of this machine with its databases swapped ---------


def cli_in_view(
    *args: str | Path, rpm_db_dir: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI where this machine has no package database: /var/lib is an empty
    tmpfs (and /usr/lib/sysimage too), or holds only the rpm database ``rpm_db_dir``."""
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    view = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/var/lib"]
    if os.path.isdir("/usr/lib/sysimage"):
        view += ["--tmpfs", "/usr/lib/sysimage"]
    if rpm_db_dir is not None:
        view += ["--bind", str(rpm_db_dir), DBPATH]
    full = dict(os.environ)
    full.setdefault("ROCMFORGE_PIP_ARGS", pip_args())
    for key in ("ROCMFORGE_STORE", manifest.SYSTEM_MANIFEST_ENV):
        full.pop(key, None)
    full.update(env or {})
    return subprocess.run(
        [*view, "--", sys.executable, "-m", "rocmforge", *map(str, args)],
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_cli_refuses_a_machine_without_a_database(tiny_recipe: Path, store: Path) -> None:
    done = cli_in_view("realize", tiny_recipe, "--store", store)
    assert done.returncode == 3, done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if "no package database" in ln]
    assert "looked for /var/lib/dpkg/status" in line and "ROCMFORGE_SYSTEM_MANIFEST=content" in line
    # plan names it as what keeps its hash provisional (as for any toolchain it cannot resolve)
    planned = json.loads(cli_in_view("plan", tiny_recipe, "--store", store, "--json").stdout)
    assert any("no package database" in why for why in planned["provisional"])
    system = json.loads(cli_in_view("doctor", "--json").stdout)["system"]
    assert system["database"] == "none" and "/var/lib/rpm" in system["looked_for"]
    assert system["fallback"] == "ROCMFORGE_SYSTEM_MANIFEST=content"
    assert "realize refuses (plan's hash stays provisional)" in cli_in_view("doctor").stdout
    content = json.loads(cli_in_view("doctor", "--json", env=CONTENT).stdout)["system"]
    assert content["database"] == "content" and content["files"] > 1000 and content["bytes"] > 0
    text = cli_in_view("doctor", env=CONTENT).stdout
    assert "ROCMFORGE_SYSTEM_MANIFEST=content: every file under /usr is content-hashed" in text
    bad = rf("realize", tiny_recipe, "--store", store, env={manifest.SYSTEM_MANIFEST_ENV: "apk"})
    assert bad.returncode == 2 and "ROCMFORGE_SYSTEM_MANIFEST='apk'" in bad.stderr


@pytest.mark.slow
def test_cli_on_an_rpm_machine(
    tiny_recipe: Path, store: Path, rpm_root: Callable[..., Path]
) -> None:
    root = rpm_root("a1", "opt")
    db = root / DBPATH.lstrip("/")
    plan = cli_in_view("plan", tiny_recipe, "--store", store, "--json", rpm_db_dir=db)
    assert plan.returncode == 0, plan.stderr
    toolchain = json.loads(plan.stdout)["derivation"]["toolchain"]
    assert toolchain["database"] == "rpm"
    assert toolchain["packages"] == {"rftest-a": "2:1.0-1"}
    system = json.loads(cli_in_view("doctor", "--json", rpm_db_dir=db).stdout)["system"]
    assert system["database"] == "rpm" and system["source"] == "/var/lib/rpm (sqlite)"
    assert system["reader"].startswith("rpm 4.")
    text = cli_in_view("doctor", rpm_db_dir=db).stdout
    assert "1 rpm packages visible to builds" in text
    assert "database:  /var/lib/rpm (sqlite), read by rpm 4." in text


def test_the_realize_memo_key_names_the_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocmforge.pipeline import memo

    monkeypatch.delenv(manifest.SYSTEM_MANIFEST_ENV, raising=False)
    before = memo.memo_key("r.toml", str(tmp_path))
    monkeypatch.setenv(manifest.SYSTEM_MANIFEST_ENV, "content")
    assert memo.memo_key("r.toml", str(tmp_path)) not in (before, None)
