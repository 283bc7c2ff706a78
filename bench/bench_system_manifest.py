"""The system manifest without dpkg: an rpm database, and no database at all (issue 26, point 2).

A  rpm: ``--packages`` packages of ``--files`` files each are built with rpmbuild and installed
   with ``rpm --root`` into a throwaway root; timed: the one ``rpm -qa`` query with its parse
   (``rpmdb.query``), the cold manifest (query + walk of that root's /usr) and the warm one (a
   stat-cache hit), medians of ``--runs``.
B  content (``ROCMFORGE_SYSTEM_MANIFEST=content``) on this machine's real /usr: the cold scan
   (every file read; what the page cache holds is what it holds), a warm resolve (every file's
   and directory's stat checked), a rescan after one file changed (a walk, one file read) and
   the realize memo's directory pass.
Usage: python bench/bench_system_manifest.py [--packages 50] [--files 2000] [--runs 5]
                                             [--skip-rpm] [--skip-content]
"""

from __future__ import annotations

import argparse
import marshal
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rocmforge.toolchain import manifest, rpmdb  # noqa: E402

SPEC = """\
Name: rfbench-{i}
Version: 1.0
Release: 1
Summary: bench
License: MIT
BuildArch: noarch
%description
bench
%install
mkdir -p %{{buildroot}}/usr/share/rfbench-{i}
for n in $(seq {files}); do echo $n > %{{buildroot}}/usr/share/rfbench-{i}/f$n; done
%files
/usr/share/rfbench-{i}
"""


def _median(fn: object, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_rpm(work: Path, packages: int, files: int, runs: int) -> None:
    top, root = work / "top", work / "root"
    built = []
    t = time.perf_counter()
    for i in range(packages):
        spec = work / f"b{i}.spec"
        spec.write_text(SPEC.format(i=i, files=files))
        subprocess.run(
            ["rpmbuild", "-bb", "--define", f"_topdir {top}", str(spec)],
            check=True,
            capture_output=True,
        )
        built.append(str(next((top / "RPMS" / "noarch").glob(f"rfbench-{i}-*.rpm"))))
    root.mkdir()
    argv = ["rpm", "--root", str(root), "--dbpath", "/var/lib/rpm", "-i", "--nodeps", *built]
    subprocess.run(argv, check=True, capture_output=True)
    print(f"setup: {packages} packages x {files} files in {time.perf_counter() - t:.1f} s")
    db = manifest.detect_database(root, {})
    n = sum(len(p.files) for p in rpmdb.query(db.path, root))
    q = _median(lambda: sum(1 for _ in rpmdb.query(db.path, root)), runs)
    cold = _median(lambda: manifest.scan(db), runs)
    cache = work / "cache"
    manifest.system_manifest(cache_dir=cache, sysroot=root, environ={})
    warm = _median(
        lambda: manifest.system_manifest(cache_dir=cache, sysroot=root, environ={}), runs
    )
    print(f"rpm: {n} file entries; query+parse {q:.3f} s ({n / q:,.0f} entries/s)")
    print(f"rpm: cold manifest {cold:.3f} s, warm (stat-cache hit) {warm * 1000:.1f} ms")


def bench_content(work: Path, runs: int) -> None:
    db = manifest.HostDatabase(kind="content", note="ROCMFORGE_SYSTEM_MANIFEST=content")
    cache = work / "content-cache"
    cache.mkdir()
    t = time.perf_counter()
    m = manifest.content_manifest(db, cache_dir=cache)
    cold = time.perf_counter() - t
    info = m.info
    print(
        f"content: {info['files']} files, {info['bytes'] / 1e9:.2f} GB, "
        f"{info['directories']} directories; cold {cold:.1f} s"
    )
    warm = _median(lambda: manifest.content_manifest(db, cache_dir=cache), runs)
    size = (cache / "manifest-content.marshal").stat().st_size
    print(f"content: warm resolve {warm:.3f} s (cache file {size / 1e6:.1f} MB)")
    # A rescan: a changed signature anywhere (here: a directory's) walks again, reads no file.
    state = cache / "manifest-content.marshal"
    rescans = []
    for _ in range(runs):
        loaded = marshal.loads(state.read_bytes())
        first = next(iter(loaded["dirs"]))
        loaded["dirs"][first] = (0, 0, 0, 0)
        state.write_bytes(marshal.dumps(loaded))
        t = time.perf_counter()
        again = manifest.content_manifest(db, cache_dir=cache)
        rescans.append(time.perf_counter() - t)
        assert again.info["hashed_bytes"] == 0, again.info
    print(f"content: rescan, nothing changed on disk {statistics.median(rescans):.2f} s")
    guards = manifest.memo_guards(m)
    memo = _median(lambda: [os.stat(p) for p in guards if os.path.exists(p)], runs)
    print(f"content: realize memo guards {len(guards)}, their stat pass {memo * 1000:.0f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--packages", type=int, default=50)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-rpm", action="store_true")
    ap.add_argument("--skip-content", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rf-bench-manifest-"))
    try:
        if not args.skip_rpm:
            if shutil.which("rpmbuild") is None:
                print("rpm: skipped (needs rpmbuild: apt-get install rpm)")
            else:
                bench_rpm(work, args.packages, args.files, args.runs)
        if not args.skip_content:
            bench_content(work, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
