"""Tests for rocmforge.wheel (names, venvs, installs, the writer) against a real wheel
built from examples/demo by setuptools."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import blake3
import pytest
from installer.sources import WheelFile

from rocmforge.errors import CheckError, RequirementError, ToolchainError
from rocmforge.wheel.digests import wheel_digests
from rocmforge.wheel.install import install_wheels
from rocmforge.wheel.names import WheelName, parse_wheel_name
from rocmforge.wheel.venv import create_venv, venv_site_packages
from rocmforge.wheel.writer import normalize_wheel

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo"
SETUPTOOLS_WHEEL = "setuptools-75.6.0-py3-none-any.whl"
EPOCH = 1_700_000_000  # 2023-11-14T22:13:20Z
EPOCH_DATE_TIME = (2023, 11, 14, 22, 13, 20)
FRONTEND = "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))"


@dataclass(frozen=True, slots=True, kw_only=True)
class Demo:
    """A build venv with setuptools, the fixed source path used for builds, and the built wheel."""

    build_venv: Path
    src: Path
    wheel: Path


def _wheelhouse() -> Path:
    return Path(os.environ.get("ROCMFORGE_TEST_WHEELHOUSE", REPO / ".ci" / "wheelhouse"))


def _build_demo(
    demo_build_venv: Path, src: Path, out: Path, *, sde: str | None, mtime: int | None = None
) -> Path:
    """Copy examples/demo to ``src`` (always the same path: gcc -g records it) and build a wheel.

    ``sde`` is the SOURCE_DATE_EPOCH of the build (None: unset); ``mtime`` is set on every source
    file when given.
    """
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(DEMO, src, ignore=shutil.ignore_patterns("build", "*.so", "*.egg-info"))
    if mtime is not None:
        for p in src.rglob("*"):
            os.utime(p, (mtime, mtime))
    out.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    if sde is not None:
        env["SOURCE_DATE_EPOCH"] = sde
    proc = subprocess.run(
        [str(demo_build_venv / "bin" / "python"), "-c", FRONTEND, str(out)],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    setuptools_wheel = _wheelhouse() / SETUPTOOLS_WHEEL
    if not setuptools_wheel.is_file():
        pytest.skip(
            f"{setuptools_wheel} is missing; fetch it with `pip download --no-deps -d "
            f"{_wheelhouse()} setuptools==75.6.0` (as .ci/run does)"
        )
    base = tmp_path_factory.mktemp("demo")
    venv = base / "build-venv"
    create_venv(Path(sys.executable), venv)
    install_wheels([setuptools_wheel], venv, interpreter=str(venv / "bin" / "python"))
    wheel = _build_demo(venv, base / "src", base / "out1", sde=None)
    return Demo(build_venv=venv, src=base / "src", wheel=wheel)


def _copy(wheel: Path, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(wheel, directory / wheel.name))


def _rezip(
    src: Path,
    dst: Path,
    *,
    order: Callable[[list[zipfile.ZipInfo]], list[zipfile.ZipInfo]] = list,
    content: Callable[[str, bytes], bytes | None] = lambda _n, data: data,
    mode: Callable[[str], int] = lambda _n: 0o100644,
    extra_files: dict[str, bytes] | None = None,
) -> Path:
    """Write a differently laid out copy of a wheel (order, content, modes, junk metadata)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for n, info in enumerate(order(zin.infolist())):
            data = content(info.filename, zin.read(info))
            if data is None:
                continue
            new = zipfile.ZipInfo(info.filename, date_time=(2001, 2, 3, 4, 5, 6 + n % 2 * 2))
            new.external_attr = mode(info.filename) << 16
            new.comment = b"built on my laptop"
            new.extra = b"\x75\x70\x05\x00\x01junk"
            zout.writestr(new, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
        for name, data in (extra_files or {}).items():
            zout.writestr(name, data)
        zout.comment = b"archive comment"
    return dst


def _entry_modes(wheel: Path) -> dict[str, int]:
    with zipfile.ZipFile(wheel) as z:
        return {i.filename: i.external_attr >> 16 for i in z.infolist()}


# --- names ------------------------------------------------------------------------------------


def test_parse_wheel_name_of_demo_wheel(demo: Demo) -> None:
    cp = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert parse_wheel_name(demo.wheel.name) == WheelName(
        distribution="rfdemo", version="1.0.0", build=None, tags=f"{cp}-{cp}-{platform}"
    )
    assert parse_wheel_name(str(demo.wheel)).distribution == "rfdemo"


def test_parse_wheel_name_build_tag_and_normalization() -> None:
    name = parse_wheel_name("/some/dir/Foo_Bar-01.2-1abc-py2.py3-none-any.whl")
    assert name == WheelName(
        distribution="foo-bar", version="1.2", build="1abc", tags="py2.py3-none-any"
    )


@pytest.mark.parametrize(
    "bad",
    ["rfdemo-1.0.0.tar.gz", "rfdemo-1.0.0-py3-none.whl", "rfdemo-not!a!version-py3-none-any.whl"],
)
def test_parse_wheel_name_rejects_non_wheels(bad: str) -> None:
    with pytest.raises(CheckError, match="not a wheel file name"):
        parse_wheel_name(bad)


# --- venvs ------------------------------------------------------------------------------------


def test_create_venv_has_no_pip_and_site_packages_matches_interpreter(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    create_venv(Path(sys.executable), venv)
    reported = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert venv_site_packages(venv) == Path(reported)
    assert not list(venv_site_packages(venv).glob("pip*"))
    no_pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip"], capture_output=True)
    assert no_pip.returncode != 0


def test_create_venv_errors_are_toolchain_errors(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="not found"):
        create_venv(tmp_path / "no-such-python", tmp_path / "v1")
    with pytest.raises(ToolchainError, match="exit status"):
        create_venv(Path("/bin/false"), tmp_path / "v2")


def test_venv_site_packages_needs_a_venv(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match=r"pyvenv\.cfg"):
        venv_site_packages(tmp_path)


# --- normalization ----------------------------------------------------------------------------


def test_two_builds_are_byte_identical_after_normalization(demo: Demo, tmp_path: Path) -> None:
    # Other times on the source files and another SOURCE_DATE_EPOCH (the first build had none).
    second = _build_demo(
        demo.build_venv, demo.src, tmp_path / "out2", sde="1234567890", mtime=1_500_000_000
    )
    first = _copy(demo.wheel, tmp_path / "first")
    assert first.read_bytes() != second.read_bytes(), "identical already: the test proves nothing"
    normalize_wheel(first, epoch=EPOCH)
    normalize_wheel(second, epoch=EPOCH)
    assert first.read_bytes() == second.read_bytes()
    # Idempotent: normalizing a normalized wheel changes nothing.
    before = first.read_bytes()
    normalize_wheel(first, epoch=EPOCH)
    assert first.read_bytes() == before


def test_layout_and_metadata_are_normalized(demo: Demo, tmp_path: Path) -> None:
    def odd_modes(name: str) -> int:
        return 0o100700 if name.endswith(".so") else 0o100664

    messy = _rezip(demo.wheel, tmp_path / demo.wheel.name, order=lambda i: i[::-1], mode=odd_modes)
    normalize_wheel(messy, epoch=EPOCH)
    with zipfile.ZipFile(messy) as z:
        infos = z.infolist()
        assert z.comment == b""
    names = [i.filename for i in infos]
    dist_info = "rfdemo-1.0.0.dist-info/"
    assert names[-1] == dist_info + "RECORD"
    payload = [n for n in names if not n.startswith(dist_info)]
    meta = [n for n in names if n.startswith(dist_info)]
    assert names == payload + meta
    assert payload == sorted(payload)
    assert meta[:-1] == sorted(meta[:-1])
    for info in infos:
        assert info.date_time == EPOCH_DATE_TIME, info.filename
        assert info.create_system == 3
        assert info.compress_type == zipfile.ZIP_DEFLATED
        assert info.extra == b""
        assert info.comment == b""
        expected = 0o100755 if info.filename.endswith(".so") else 0o100644
        assert info.external_attr >> 16 == expected, info.filename
    # The same bytes as normalizing the untouched build: layout noise is gone entirely.
    clean = _copy(demo.wheel, tmp_path / "clean")
    normalize_wheel(clean, epoch=EPOCH)
    assert clean.read_bytes() == messy.read_bytes()


def test_record_still_verifies_and_contents_are_unchanged(demo: Demo, tmp_path: Path) -> None:
    wheel = _copy(demo.wheel, tmp_path)
    normalize_wheel(wheel, epoch=EPOCH)
    with WheelFile.open(wheel) as source:
        source.validate_record(validate_contents=True)
    with zipfile.ZipFile(demo.wheel) as a, zipfile.ZipFile(wheel) as b:
        assert {n: a.read(n) for n in a.namelist()} == {n: b.read(n) for n in b.namelist()}


@pytest.mark.parametrize(
    ("epoch", "date_time"),
    [(0, (1980, 1, 1, 0, 0, 0)), (EPOCH + 1, EPOCH_DATE_TIME), (-5, (1980, 1, 1, 0, 0, 0))],
)
def test_epoch_is_clamped_and_in_utc(
    demo: Demo, tmp_path: Path, epoch: int, date_time: tuple[int, ...]
) -> None:
    wheel = _copy(demo.wheel, tmp_path)
    normalize_wheel(wheel, epoch=epoch)
    with zipfile.ZipFile(wheel) as z:
        assert {i.date_time for i in z.infolist()} == {date_time}


def _tamper_init(name: str, data: bytes) -> bytes:
    if name == "rfdemo/__init__.py":
        return data.replace(b"1.0.0", b"1.0.1")
    return data


def _drop_init(name: str, data: bytes) -> bytes | None:
    return None if name == "rfdemo/__init__.py" else data


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content": _tamper_init}, r"rfdemo/__init__\.py: sha256 does not match RECORD"),
        ({"extra_files": {"rfdemo/evil.py": b"x = 1\n"}}, r"rfdemo/evil\.py is not listed"),
        ({"content": _drop_init}, r"rfdemo/__init__\.py is listed in RECORD but not in"),
    ],
    ids=["changed-byte", "unlisted-file", "missing-file"],
)
def test_record_mismatch_raises_and_leaves_wheel_untouched(
    demo: Demo, tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    bad = _rezip(demo.wheel, tmp_path / demo.wheel.name, **kwargs)  # type: ignore[arg-type]
    before = bad.read_bytes()
    with pytest.raises(CheckError, match=message):
        normalize_wheel(bad, epoch=EPOCH)
    assert bad.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [demo.wheel.name]


def test_not_a_zip_is_a_check_error(tmp_path: Path) -> None:
    junk = tmp_path / "rfdemo-1.0.0-py3-none-any.whl"
    junk.write_bytes(b"not a zip")
    with pytest.raises(CheckError, match="not a valid zip"):
        normalize_wheel(junk, epoch=EPOCH)
    assert junk.read_bytes() == b"not a zip"


def test_file_mode_of_the_wheel_is_kept(demo: Demo, tmp_path: Path) -> None:
    wheel = _copy(demo.wheel, tmp_path)
    wheel.chmod(0o640)
    normalize_wheel(wheel, epoch=EPOCH)
    assert wheel.stat().st_mode & 0o777 == 0o640


# --- installing -------------------------------------------------------------------------------


def test_normalized_wheel_installs_and_imports(demo: Demo, tmp_path: Path) -> None:
    wheel = _copy(demo.wheel, tmp_path / "dist")
    normalize_wheel(wheel, epoch=EPOCH)
    venv = tmp_path / "venv"
    create_venv(Path(sys.executable), venv)
    install_wheels([wheel], venv, interpreter=str(venv / "bin" / "python"))
    proc = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-I",
            "-c",
            "import rfdemo; assert rfdemo.add(2, 3) == 5; "
            "print(rfdemo.fib(10), rfdemo.__version__, rfdemo.__file__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    fib, version, location = proc.stdout.split()
    assert (fib, version) == ("55", "1.0.0")
    assert Path(location).is_relative_to(venv_site_packages(venv))
    dist_info = venv_site_packages(venv) / "rfdemo-1.0.0.dist-info"
    assert (dist_info / "INSTALLER").read_text() == "rocmforge\n"
    assert "rfdemo/_native." in (dist_info / "RECORD").read_text()


def test_install_needs_no_network(demo: Demo, tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) not available")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr!r}")
    venv = tmp_path / "venv"
    create_venv(Path(sys.executable), venv)
    code = (
        "import socket, sys\n"
        "from pathlib import Path\n"
        "from rocmforge.wheel.install import install_wheels\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 443), timeout=2)\n"
        "    sys.exit('network is reachable: the test proves nothing')\n"
        "except OSError:\n"
        "    pass\n"
        "install_wheels([Path(sys.argv[1])], Path(sys.argv[2]), interpreter='/x/bin/python')\n"
    )
    subprocess.run(
        ["unshare", "--net", sys.executable, "-c", code, str(demo.wheel), str(venv)],
        check=True,
        capture_output=True,
    )
    assert (venv_site_packages(venv) / "rfdemo" / "__init__.py").is_file()
    assert not list(venv_site_packages(venv).glob("pip*"))


def test_install_rejects_tampered_wheel(demo: Demo, tmp_path: Path) -> None:
    bad = _rezip(demo.wheel, tmp_path / demo.wheel.name, content=_tamper_init)
    venv = tmp_path / "venv"
    create_venv(Path(sys.executable), venv)
    with pytest.raises(CheckError, match=demo.wheel.name):
        install_wheels([bad], venv, interpreter="/x/bin/python")
    with pytest.raises(RequirementError, match=demo.wheel.name):
        install_wheels([bad], venv, interpreter="/x/bin/python", error=RequirementError)
    assert not (venv_site_packages(venv) / "rfdemo").exists()
    with pytest.raises(RequirementError, match="not a wheel file name"):
        install_wheels([tmp_path / "x.zip"], venv, interpreter="/x", error=RequirementError)
    with pytest.raises(CheckError, match="No such file"):
        install_wheels([tmp_path / "gone-1.0-py3-none-any.whl"], venv, interpreter="/x")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def _handmade_wheel(directory: Path) -> Path:
    """A pure wheel with a console script and a header, as a build backend would write it."""
    files = {
        "hello/__init__.py": b"def main():\n    print('hello from', __name__)\n",
        "hello-2.0.data/headers/hello.h": b"#define HELLO 1\n",
        "hello-2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: hello\nVersion: 2.0\n",
        "hello-2.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        "hello-2.0.dist-info/entry_points.txt": b"[console_scripts]\nhello = hello:main\n",
    }
    record = "".join(_record_line(n, d) for n, d in files.items())
    record += "hello-2.0.dist-info/RECORD,,\n"
    wheel = directory / "hello-2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("hello-2.0.dist-info/RECORD", record)
    return wheel


def test_install_scripts_use_given_interpreter_and_headers_go_to_venv(tmp_path: Path) -> None:
    wheel = _handmade_wheel(tmp_path)
    venv = tmp_path / "venv"
    create_venv(Path(sys.executable), venv)
    install_wheels([wheel], venv, interpreter="/build/venv/bin/python")
    script = venv / "bin" / "hello"
    assert script.read_text().splitlines()[0] == "#!/build/venv/bin/python"
    assert script.stat().st_mode & 0o111
    xy = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert (venv / "include" / "site" / f"python{xy}" / "hello" / "hello.h").is_file()
    out = subprocess.run(
        [str(venv / "bin" / "python"), str(script)], capture_output=True, text=True, check=True
    )
    assert out.stdout == "hello from hello\n"


def test_install_several_wheels_in_order(demo: Demo, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    create_venv(Path(sys.executable), venv)
    install_wheels([demo.wheel, _handmade_wheel(tmp_path)], venv, interpreter="/x/bin/python")
    site = venv_site_packages(venv)
    assert (site / "rfdemo-1.0.0.dist-info").is_dir()
    assert (site / "hello-2.0.dist-info").is_dir()


# --- digests ----------------------------------------------------------------------------------


def test_wheel_digests(demo: Demo) -> None:
    data = demo.wheel.read_bytes()
    assert wheel_digests(demo.wheel) == {
        "sha256": hashlib.sha256(data).hexdigest(),
        "blake3": blake3.blake3(data).hexdigest(),
    }


def test_wheel_digests_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CheckError, match="cannot read"):
        wheel_digests(tmp_path / "nope.whl")


@pytest.mark.parametrize("damaged", [False, True])
def test_a_big_member_is_verified_with_the_digest_computed_beside_the_write(
    tmp_path: Path, damaged: bool
) -> None:
    """A member over the threaded size is hashed in a worker thread while it is written: the
    RECORD check must still see every byte (one flipped byte in the RECORD digest is refused),
    and file_digests' threaded path must equal a plain hash."""
    from rocmforge.util.hashing import THREADED, file_digests

    data = os.urandom(THREADED + 12345)
    digest = hashlib.sha256(data).digest()
    if damaged:
        digest = bytes([digest[0] ^ 1]) + digest[1:]
    b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    wheel = tmp_path / "big-1.0-py3-none-any.whl"
    small = {
        "big-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: big\nVersion: 1.0\n",
        "big-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n",
    }
    rows = [f"big/data.bin,sha256={b64},{len(data)}"]
    for name, text in small.items():
        h = base64.urlsafe_b64encode(hashlib.sha256(text).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={h},{len(text)}")
    rows.append("big-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("big/data.bin", data)
        for name, text in small.items():
            zf.writestr(name, text)
        zf.writestr("big-1.0.dist-info/RECORD", "\n".join(rows) + "\n")
    if damaged:
        with pytest.raises(CheckError, match="sha256 does not match RECORD"):
            normalize_wheel(wheel, epoch=0)
        return
    normalize_wheel(wheel, epoch=0)
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("big/data.bin") == data
    raw = wheel.read_bytes()
    assert file_digests(wheel) == (blake3.blake3(raw).hexdigest(), hashlib.sha256(raw).hexdigest())
