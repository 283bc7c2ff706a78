"""Wheels of torch size: post-processing a > 4 GiB wheel streams and writes ZIP64 that installs.

The wheel is made here (one incompressible member of 4 GiB + 64 MiB, many small ones), run through
what realize does after a build (stamp, normalize, digests) in a child process whose peak RSS is
read back, and installed by ``zipfile``, pip (``--no-deps --target``) and uv (from PyPI; its zip
reader is strict). Everything lives in a temp dir that is removed as soon as it is not needed.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest

BIG = (4 << 30) + (64 << 20)
SMALL = 3000
NAME = "bigwheel"
VERSION = "1.0"

POSTPROCESS = """
import json, sys
from pathlib import Path
from rocmforge.wheel.stamp import STAMP_NAME, stamp_bytes
from rocmforge.wheel.writer import normalize_wheel
w, dest = Path(sys.argv[1]), Path(sys.argv[2])
stamp = stamp_bytes("0" * 64, {"name": "bigwheel"})
digests = normalize_wheel(  # as build.py does
    w, epoch=0, add={STAMP_NAME: stamp}, rehash_big=False, dest=dest
)
# VmHWM: this process's own peak. Not getrusage's ru_maxrss: Linux carries that across exec
# from the forked parent, so under a parallel suite it read the pytest worker's ~350 MB.
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(json.dumps({"digests": digests, "peak_kib": peak}))
"""


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def make_big_wheel(
    directory: Path, big: int = BIG, small: int = SMALL, *, block: bytes | None = None
) -> Path:
    """Write a valid, stored (uncompressed) wheel with one ``big``-byte member and ``small`` files.

    The big member repeats ``block`` (default one random MiB: deflate's 32 KiB window cannot
    compress it).
    """
    wheel = directory / f"{NAME}-{VERSION}-py3-none-any.whl"
    block = os.urandom(1 << 20) if block is None else block
    rows: list[list[str]] = []
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_STORED) as zf:
        info = zipfile.ZipInfo(f"{NAME}/big.bin", date_time=(2026, 1, 1, 0, 0, 0))
        info.file_size = big
        h = hashlib.sha256()
        with zf.open(info, "w") as out:
            left = big
            while left:
                chunk = block[: min(left, len(block))]
                out.write(chunk)
                h.update(chunk)
                left -= len(chunk)
        rows.append([info.filename, f"sha256={_b64(h.digest())}", str(big)])
        for i in range(small):
            data = f"# small file {i}\nVALUE = {i}\n".encode()
            name = f"{NAME}/small/m{i:05d}.py"
            zf.writestr(name, data)
            rows.append([name, f"sha256={_b64(hashlib.sha256(data).digest())}", str(len(data))])
        zf.writestr(f"{NAME}/__init__.py", b"")
        rows.append([f"{NAME}/__init__.py", f"sha256={_b64(hashlib.sha256(b'').digest())}", "0"])
        dist = f"{NAME}-{VERSION}.dist-info"
        meta = {
            "METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
            "WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
        }
        for fname, data in meta.items():
            zf.writestr(f"{dist}/{fname}", data)
            rows.append(
                [f"{dist}/{fname}", f"sha256={_b64(hashlib.sha256(data).digest())}", str(len(data))]
            )
        rows.append([f"{dist}/RECORD", "", ""])
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        zf.writestr(f"{dist}/RECORD", text.getvalue())
    return wheel


def _eocd64(wheel: Path) -> bool:
    """Return True if the archive ends with a ZIP64 end-of-central-directory locator."""
    with wheel.open("rb") as f:
        f.seek(-(22 + 20), os.SEEK_END)
        return f.read(4) == b"PK\x06\x07"


@pytest.mark.slow
def test_post_processing_a_wheel_over_4_gib_streams_and_installs(tmp_path: Path) -> None:
    from rocmforge.wheel.digests import wheel_digests

    if shutil.disk_usage(tmp_path).free < 4 * BIG + (2 << 30):
        pytest.skip("needs ~18 GiB free for the wheel, its temp copy and two installs")
    built = make_big_wheel(tmp_path)
    assert built.stat().st_size > 4 << 30
    (tmp_path / "entry").mkdir()
    wheel = tmp_path / "entry" / built.name
    done = subprocess.run(
        [sys.executable, "-c", POSTPROCESS, os.fspath(built), os.fspath(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["peak_kib"] < 300 * 1024, f"peak RSS {report['peak_kib']} KiB"
    assert report["digests"] == wheel_digests(wheel)  # computed while writing, equal to a re-read
    assert not list(tmp_path.glob("*/.*.tmp")) and not list(tmp_path.glob("*/.*.stamp"))
    built.unlink()  # the build's own copy goes with its scratch directory
    assert _eocd64(wheel)

    with zipfile.ZipFile(wheel) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        big = infos[f"{NAME}/big.bin"]
        assert big.file_size == BIG and big.compress_type == zipfile.ZIP_STORED
        assert len(infos) == SMALL + 6  # big, small files, __init__, METADATA, WHEEL, stamp, RECORD
        names = list(infos)
        assert names[-1] == f"{NAME}-{VERSION}.dist-info/RECORD"
        assert f"{NAME}-{VERSION}.dist-info/rocmforge.json" in infos
        # Members after the 4 GiB one sit at offsets only ZIP64 can express.
        last = infos[f"{NAME}/small/m{SMALL - 1:05d}.py"]
        assert last.header_offset > 0xFFFFFFFF
        assert zf.read(last) == f"# small file {SMALL - 1}\nVALUE = {SMALL - 1}\n".encode()
        small = infos[f"{NAME}/small/m00000.py"]
        assert small.compress_type == zipfile.ZIP_DEFLATED

    target = tmp_path / "pip-target"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--disable-pip-version-check", "--target", os.fspath(target), os.fspath(wheel)],
        check=True,
    )  # fmt: skip
    assert (target / NAME / "big.bin").stat().st_size == BIG
    assert (target / NAME / "small" / f"m{SMALL - 1:05d}.py").is_file()
    shutil.rmtree(target)

    uv = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    assert uv is not None, "uv (from PyPI) is a dev dependency"
    target = tmp_path / "uv-target"
    env = {**os.environ, "UV_CACHE_DIR": os.fspath(tmp_path / "uv-cache"), "UV_NO_CONFIG": "1"}
    subprocess.run(
        [uv, "pip", "install", "-q", "--offline", "--no-deps", "--python", sys.executable,
         "--target", os.fspath(target), os.fspath(wheel)],
        check=True,
        env=env,
    )  # fmt: skip
    assert (target / NAME / "big.bin").stat().st_size == BIG
    assert (target / NAME / "small" / f"m{SMALL - 1:05d}.py").is_file()


@pytest.mark.slow
def test_big_incompressible_member_is_stored_reproducibly(tmp_path: Path) -> None:
    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN
    from rocmforge.wheel.compare import differing_members
    from rocmforge.wheel.writer import normalize_wheel

    one = make_big_wheel(tmp_path, big=STORE_PROBE_MIN, small=5)
    two = tmp_path / "two" / one.name
    two.parent.mkdir()
    shutil.copyfile(one, two)
    normalize_wheel(one, epoch=0)
    normalize_wheel(two, epoch=0)
    assert one.read_bytes() == two.read_bytes()
    with zipfile.ZipFile(one) as zf:
        assert zf.getinfo(f"{NAME}/big.bin").compress_type == zipfile.ZIP_STORED
        assert zf.getinfo(f"{NAME}/small/m00000.py").compress_type == zipfile.ZIP_DEFLATED
    assert differing_members(one, two) == []


def test_big_compressible_member_is_deflated(tmp_path: Path) -> None:
    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN
    from rocmforge.wheel.writer import normalize_wheel

    wheel = make_big_wheel(tmp_path, big=STORE_PROBE_MIN, small=1, block=b"\0" * (1 << 20))
    normalize_wheel(wheel, epoch=0)
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(f"{NAME}/big.bin")
        assert info.compress_type == zipfile.ZIP_DEFLATED and info.compress_size < (1 << 20)


def test_stamping_while_normalizing_equals_stamping_first(tmp_path: Path) -> None:
    from rocmforge.wheel.install import install_wheels
    from rocmforge.wheel.stamp import STAMP_NAME, read_wheel_stamp, stamp_bytes, stamp_wheel
    from rocmforge.wheel.writer import normalize_wheel

    one = make_big_wheel(tmp_path, big=1 << 16, small=20)
    two = tmp_path / "two" / one.name
    two.parent.mkdir()
    shutil.copyfile(one, two)
    derivation = {"name": "bigwheel", "n": 1}
    stamp_wheel(one, input_hash="a" * 64, derivation=derivation)
    normalize_wheel(one, epoch=0)
    normalize_wheel(two, epoch=0, add={STAMP_NAME: stamp_bytes("a" * 64, derivation)})
    assert one.read_bytes() == two.read_bytes()
    # Re-stamping replaces the old stamp and its RECORD row.
    normalize_wheel(two, epoch=0, add={STAMP_NAME: stamp_bytes("b" * 64, derivation)})
    stamp = read_wheel_stamp(two)
    assert stamp is not None and stamp.input_hash == "b" * 64
    venv = tmp_path / "venv"
    _fake_venv(venv)
    install_wheels([two], venv, interpreter=sys.executable)  # RECORD verifies


def _fake_venv(venv: Path) -> None:
    """A venv-shaped tree of this interpreter for install_wheels (no interpreter in it)."""
    xy = f"{sys.version_info.major}.{sys.version_info.minor}"
    (venv / "lib" / f"python{xy}" / "site-packages").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"version = {xy}.0\n")


def test_a_record_that_is_not_utf8_is_a_check_error(tmp_path: Path) -> None:
    from rocmforge.errors import CheckError
    from rocmforge.wheel.stamp import STAMP_NAME
    from rocmforge.wheel.writer import normalize_wheel

    wheel = tmp_path / f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{NAME}/__init__.py", b"")
        zf.writestr(f"{NAME}-{VERSION}.dist-info/RECORD", b"\xff\xfe,,\n")
    before = wheel.read_bytes()
    with pytest.raises(CheckError, match="RECORD is not UTF-8"):
        normalize_wheel(wheel, epoch=0, add={STAMP_NAME: b"{}"})
    assert wheel.read_bytes() == before


def _rezip(src: Path, dest: Path, *, big: int, record: bytes | None = None) -> Path:
    """Copy wheel ``src`` to ``dest`` member by member: the big member deflated (level 1),
    RECORD replaced by ``record`` if given."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if record is not None and info.filename.endswith(".dist-info/RECORD"):
                data = record
            deflate = big and info.filename == f"{NAME}/big.bin"
            kind = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
            zout.writestr(info, data, compress_type=kind, compresslevel=1)
    return dest


def test_normalize_returns_the_digests_of_what_it_wrote(tmp_path: Path) -> None:
    from rocmforge.util.hashing import file_digests
    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN
    from rocmforge.wheel.stamp import STAMP_NAME, stamp_bytes
    from rocmforge.wheel.writer import normalize_wheel

    # a big stored member (copied directly, hashed as written) and small ones (read back)
    big = make_big_wheel(tmp_path, big=STORE_PROBE_MIN + 12345, small=40)
    got = normalize_wheel(big, epoch=0, add={STAMP_NAME: stamp_bytes("c" * 64, {"n": 1})})
    b3, sha = file_digests(big)
    assert got == {"sha256": sha, "blake3": b3}
    (tmp_path / "small").mkdir()
    small = make_big_wheel(tmp_path / "small", big=1000, small=3)
    got = normalize_wheel(small, epoch=0, durable=False)
    b3, sha = file_digests(small)
    assert got == {"sha256": sha, "blake3": b3}


@pytest.mark.slow
def test_a_big_stored_member_copied_directly_gives_the_bytes_of_the_zipfile_path(
    tmp_path: Path,
) -> None:
    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN
    from rocmforge.wheel.writer import normalize_wheel

    stored = make_big_wheel(tmp_path, big=STORE_PROBE_MIN + 1, small=20)
    (tmp_path / "deflated").mkdir()
    # the same members, the big one deflated: it goes through zipfile's inflate and CRC check
    deflated = _rezip(stored, tmp_path / "deflated" / stored.name, big=1)
    one = normalize_wheel(stored, epoch=0)
    two = normalize_wheel(deflated, epoch=0)
    assert stored.read_bytes() == deflated.read_bytes()
    assert one == two


def _flip_crc(wheel: Path) -> bytes:
    """Flip one bit of the big member's CRC in its local header (offset 14) and its central
    directory entry (offset 16); return the wheel's new bytes."""
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(f"{NAME}/big.bin")
    raw = bytearray(wheel.read_bytes())
    local = info.header_offset
    assert raw[local + 14 : local + 18] == info.CRC.to_bytes(4, "little")
    bad = ((info.CRC ^ 1) & 0xFFFFFFFF).to_bytes(4, "little")
    raw[local + 14 : local + 18] = bad
    name = info.filename.encode()
    at = raw.index(b"PK\x01\x02", local)
    while raw[at + 46 : at + 46 + len(name)] != name:
        at = raw.index(b"PK\x01\x02", at + 4)
    raw[at + 16 : at + 20] = bad
    wheel.write_bytes(raw)
    return bytes(raw)


def _lying_record(wheel: Path) -> bytes:
    """The wheel's RECORD with the big member's sha256 replaced by another file's."""
    with zipfile.ZipFile(wheel) as zf:
        record_name = f"{NAME}-{VERSION}.dist-info/RECORD"
        rows = list(csv.reader(zf.read(record_name).decode().splitlines()))
    for row in rows:
        if row[0] == f"{NAME}/big.bin":
            row[1] = f"sha256={_b64(hashlib.sha256(b'something else').digest())}"
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    return text.getvalue().encode()


@pytest.mark.slow
def test_a_big_stored_member_with_a_bad_crc_is_a_check_error(tmp_path: Path) -> None:
    from rocmforge.errors import CheckError
    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN
    from rocmforge.wheel.writer import normalize_wheel

    wheel = make_big_wheel(tmp_path, big=STORE_PROBE_MIN, small=2)
    raw = _flip_crc(wheel)
    with pytest.raises(CheckError, match="CRC"):
        normalize_wheel(wheel, epoch=0)
    assert wheel.read_bytes() == raw
    assert not list(tmp_path.glob(".*.tmp"))
    # realize's way (rehash_big=False) leaves the CRC to the check's install, which refuses it
    from rocmforge.wheel.install import install_wheels

    normalize_wheel(wheel, epoch=0, rehash_big=False)
    venv = tmp_path / "venv"
    _fake_venv(venv)
    with pytest.raises(CheckError, match="CRC"):
        install_wheels([wheel], venv, interpreter=sys.executable)


def test_a_big_stored_member_that_differs_from_record_is_a_check_error(tmp_path: Path) -> None:
    from rocmforge.errors import CheckError
    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN
    from rocmforge.wheel.writer import normalize_wheel

    wheel = make_big_wheel(tmp_path, big=STORE_PROBE_MIN, small=2)
    (tmp_path / "bad").mkdir()
    bad = _rezip(wheel, tmp_path / "bad" / wheel.name, big=0, record=_lying_record(wheel))
    before = bad.read_bytes()
    with pytest.raises(CheckError, match=f"{NAME}/big.bin: sha256 does not match RECORD"):
        normalize_wheel(bad, epoch=0)
    assert bad.read_bytes() == before


@pytest.mark.slow
def test_where_the_kernel_cannot_copy_the_member_is_read_and_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocmforge.util.hashing import file_digests
    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN
    from rocmforge.wheel.writer import normalize_wheel

    one = make_big_wheel(tmp_path, big=STORE_PROBE_MIN + 7, small=5)
    two = tmp_path / "two" / one.name
    two.parent.mkdir()
    shutil.copyfile(one, two)
    first = normalize_wheel(one, epoch=0)

    def refuse(*args: object) -> int:
        raise OSError(18, "Invalid cross-device link")  # what some file systems answer

    monkeypatch.setattr(os, "copy_file_range", refuse)
    second = normalize_wheel(two, epoch=0)
    assert one.read_bytes() == two.read_bytes()
    b3, sha = file_digests(two)
    assert first == second == {"sha256": sha, "blake3": b3}


LIE = """\
import base64, hashlib, sys, zipfile
from pathlib import Path
wheel = next(Path(sys.argv[1]).glob("*.whl"))
lie = base64.urlsafe_b64encode(hashlib.sha256(b"lie").digest()).rstrip(b"=").decode()
with zipfile.ZipFile(wheel) as zf:
    members = {i.filename: zf.read(i) for i in zf.infolist()}
name = next(n for n in members if n.endswith(".dist-info/RECORD"))
rows = members[name].decode().splitlines()
members[name] = "".join(
    (f"tiny/big.bin,sha256={lie},{r.rsplit(',', 1)[1]}" if r.startswith("tiny/big.bin,") else r)
    + "\\n" for r in rows
).encode()
with zipfile.ZipFile(wheel, "w") as zf:
    for n, data in members.items():
        zf.writestr(n, data)
"""


@pytest.mark.slow
def test_a_big_member_is_verified_against_record_once_by_the_check(
    tmp_path: Path, tiny_src: Path
) -> None:
    """realize does not hash a big stored member for RECORD while normalizing (rehash_big=False):
    the check's install verifies it. An honest wheel is published with the member stored; a
    wheel whose RECORD lies about that member fails the build and publishes nothing."""
    from conftest import TINY_RECIPE, rf

    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN

    (tiny_src / "tiny" / "big.bin").write_bytes(os.urandom(STORE_PROBE_MIN))
    (tiny_src / "lie.py").write_text(LIE)
    store = tmp_path / "store"
    honest = tmp_path / "honest.toml"
    honest.write_text(TINY_RECIPE.format(src=tiny_src))
    done = rf("realize", honest, "--store", store)
    assert done.returncode == 0, done.stderr
    (wheel,) = (store / "entries").glob("*/tiny-0.1-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.getinfo("tiny/big.bin").compress_type == zipfile.ZIP_STORED

    lying = tmp_path / "lying.toml"
    lying.write_text(
        TINY_RECIPE.format(src=tiny_src).replace(
            '"python mkwheel.py $OUT tiny 0.1"',
            '"python mkwheel.py $OUT tiny 0.1", "python lie.py $OUT"',
        )
    )
    failed = rf("realize", lying, "--store", store)
    assert failed.returncode != 0
    # the check's install (pypa/installer's validate_record) refused it, not the normalizing
    assert "hash / size of tiny/big.bin didn't match RECORD" in failed.stderr, failed.stderr
    assert len(list((store / "entries").iterdir())) == 1  # only the honest build


def _text_block() -> bytes:
    """One MiB of word salad: deflates to about a third, as a library's code and tables do."""
    rnd = random.Random(7)
    words = [
        bytes(rnd.choices(b"abcdefghijklmnopqrstuvwxyz_", k=rnd.randint(2, 12))) for _ in range(800)
    ]
    out = bytearray()
    while len(out) < 1 << 20:
        out += rnd.choice(words) + b" "
    return bytes(out[: 1 << 20])


@pytest.mark.slow
def test_a_big_member_to_deflate_is_deflated_in_blocks_alike_on_any_number_of_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big compressible member (a torch library) is deflated in 1 MiB blocks on several
    threads: the bytes do not depend on how many, the member reads back whole (its CRC checked)
    and installs with RECORD verified; it is not zlib's one-stream output (the old path)."""
    from rocmforge.wheel import bigmembers
    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN
    from rocmforge.wheel.install import install_wheels
    from rocmforge.wheel.writer import normalize_wheel

    block = _text_block()
    size = STORE_PROBE_MIN + 12345
    made = make_big_wheel(tmp_path, big=size, small=3, block=block)
    (tmp_path / "one").mkdir()
    (tmp_path / "four").mkdir()
    one = _rezip(made, tmp_path / "one" / made.name, big=1)  # deflated at level 1 in the source
    four = shutil.copyfile(one, tmp_path / "four" / made.name)
    monkeypatch.setattr(bigmembers, "_DEFLATERS", 1)
    first = normalize_wheel(one, epoch=0)
    monkeypatch.setattr(bigmembers, "_DEFLATERS", 4)
    second = normalize_wheel(four, epoch=0)
    assert one.read_bytes() == four.read_bytes() and first == second
    content = (block * (size // len(block) + 1))[:size]
    with zipfile.ZipFile(one) as zf:
        info = zf.getinfo(f"{NAME}/big.bin")
        assert info.compress_type == zipfile.ZIP_DEFLATED and info.compress_size < size // 2
        assert zf.read(info) == content
        raw = one.read_bytes()
        start = info.header_offset + 30 + len(info.filename.encode())
        deflater = zlib.compressobj(bigmembers.COMPRESS_LEVEL, zlib.DEFLATED, -15)
        single = deflater.compress(content) + deflater.flush()
        assert raw[start : start + info.compress_size] != single  # blocks: sync flushes
    _fake_venv(tmp_path / "venv")
    install_wheels([one], tmp_path / "venv", interpreter=sys.executable)  # RECORD verifies


@pytest.mark.slow
def test_a_big_deflated_member_with_a_bad_crc_or_a_lying_record_is_refused(
    tmp_path: Path,
) -> None:
    from rocmforge.errors import CheckError
    from rocmforge.wheel.bigmembers import STORE_PROBE_MIN
    from rocmforge.wheel.install import install_wheels
    from rocmforge.wheel.writer import normalize_wheel

    made = make_big_wheel(tmp_path, big=STORE_PROBE_MIN, small=2, block=_text_block())
    (tmp_path / "lie").mkdir()
    lie = _rezip(made, tmp_path / "lie" / made.name, big=1, record=_lying_record(made))
    before = lie.read_bytes()
    with pytest.raises(CheckError, match=f"{NAME}/big.bin: sha256 does not match RECORD"):
        normalize_wheel(lie, epoch=0)
    assert lie.read_bytes() == before
    normalize_wheel(lie, epoch=0, rehash_big=False)  # left to the install, which refuses it
    _fake_venv(tmp_path / "venv")
    with pytest.raises(CheckError, match="RECORD"):
        install_wheels([lie], tmp_path / "venv", interpreter=sys.executable)

    (tmp_path / "crc").mkdir()
    bad = _rezip(made, tmp_path / "crc" / made.name, big=1)
    raw = _flip_crc(bad)
    for rehash in (True, False):  # zipfile checks the CRC as it inflates, either way
        with pytest.raises(CheckError, match="CRC"):
            normalize_wheel(bad, epoch=0, rehash_big=rehash)
        assert bad.read_bytes() == raw
