"""A second distribution, for real: Debian 13 (trixie) made with mmdebstrap (slow tier).

The root is made from Debian's package registry (the mirror is read from this machine's apt
sources, never written here), rocmforge is installed into a venv inside it from a wheel of this
checkout plus cp313 wheels of its dependencies, and the demo and a C++/CMake recipe are realized
there with rocmforge's own bwrap sandbox, nested inside the bwrap that enters the root. The same
recipes realized on the host get other input hashes, and ``explain`` between the two wheels names
only ``toolchain.`` keys (compilers, Python, system packages): nothing of the source, env, steps
or requirements. The two sides' recipes are the same bytes: the shipped ones, whose
``python = "3"`` takes each host's own Python 3 (the root's 3.13, the host's python3), and the
demo's lock, whose only wheel is pure.

The root is cached under ``.ci/debian13/`` keyed by suite, variant, architecture and package
list (cold, 2 busy cores: mmdebstrap ~120 s, ~670 MB, the whole test ~225 s; warm: no download,
the test ~55-85 s, mostly the four realizes), and is only ever read: the test's venv,
store and recipes live in its ``tmp_path``, bound into the root. Nothing is mounted outside a
private mount namespace (mmdebstrap's unshare mode, bwrap).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, WHEELHOUSE, rf

SUITE = "trixie"
VARIANT = "apt"
PACKAGES = (
    "bubblewrap",
    "build-essential",
    "cmake",
    "git",
    "ninja-build",
    "python3",
    "python3-dev",
    "python3-venv",
)
#: How many translation units the C++ recipe compiles (per side; each is ~2 s of g++ here).
CXX_TUS = 3
CACHE = REPO / ".ci" / "debian13"
APT_SOURCES = Path("/etc/apt")
#: Where the test's own files (venv, store, recipes) and the wheelhouse appear inside the root:
#: directories every Debian root has (base-files), as the root is bound read-only.
WORK, HOUSE = "/mnt", "/srv"


def _deb822(text: str) -> Iterator[tuple[list[str], list[str], list[str]]]:
    """Yield (types, uris, suites) of each enabled stanza of a deb822 ``.sources`` file."""
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0] in " \t" and key:
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        yield (
            fields.get("types", "").split(),
            fields.get("uris", "").split(),
            fields.get("suites", "").split(),
        )


def _one_line(text: str) -> Iterator[tuple[list[str], list[str], list[str]]]:
    """Yield (types, uris, suites) of each ``deb URI SUITE ...`` line of a ``.list`` file."""
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 3 and words[0] == "deb":
            rest = words[1:]
            if rest[0].startswith("["):  # options: [arch=amd64 signed-by=...]
                while rest and not rest[0].endswith("]"):
                    rest = rest[1:]
                rest = rest[1:]
            if len(rest) >= 2:
                yield ["deb"], [rest[0]], [rest[1]]


def debian_mirror(etc_apt: Path = APT_SOURCES) -> str | None:
    """Return the URI of the Debian archive in apt's configured sources, or None.

    The archive is the source of a plain release suite (``bookworm``, not ``-security`` or
    ``-updates``) whose URI ends in ``/debian``: the one mirror that also serves trixie.
    """
    files = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    found: list[str] = []
    for f in files:
        if f.is_file():
            found += [
                u
                for t, us, ss in _one_line(f.read_text())
                for u in us
                if "deb" in t and any("-" not in s for s in ss)
            ]
    for f in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        found += [
            u
            for t, us, ss in _deb822(f.read_text())
            for u in us
            if "deb" in t and any("-" not in s for s in ss)
        ]
    for uri in found:
        if uri.startswith(("http://", "https://")) and uri.rstrip("/").endswith("/debian"):
            return uri
    return None


def test_debian_mirror_reads_deb822_and_one_line_sources(tmp_path: Path) -> None:
    """The mirror is read from both apt formats, and security/updates suites are not it."""
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: trixie-security\n"
        "Components: main\n\nTypes: deb\n# a comment\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"
    (d / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://other.example/debian bookworm main\n"
    )
    assert debian_mirror(tmp_path) == "http://other.example/debian"
    (tmp_path / "sources.list").write_text("")
    assert debian_mirror(tmp_path) is None


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def debian13_root() -> Path:
    """Return the cached trixie root, making it with mmdebstrap first if there is none."""
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    root = CACHE / f"{SUITE}-{_key(SUITE, VARIANT, arch, PACKAGES)}"
    if (root / "etc" / "debian_version").is_file():
        return root
    mirror = debian_mirror()
    if mirror is None:
        pytest.skip(f"no Debian archive in {APT_SOURCES}/sources.list*: nowhere to get {SUITE}")
    partial = root.with_name(f"{root.name}.partial-{os.getpid()}")
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.glob(f"{root.name}.partial-*"):  # left by a killed run
        if not Path("/proc", stale.name.rpartition("-")[2]).exists() or stale == partial:
            shutil.rmtree(stale, ignore_errors=True)
    # unshare mode as root: mmdebstrap unshares the mount (and pid, uts, ipc) namespace, so the
    # /proc, /dev and /sys it mounts while installing never appear on the host.
    cmd = [
        "mmdebstrap",
        "--mode=unshare",
        f"--variant={VARIANT}",
        f"--architectures={arch}",
        "--include=" + ",".join(PACKAGES),
        SUITE,
        str(partial),
        mirror,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        pytest.fail(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    try:
        partial.rename(root)
    except OSError:  # another run finished first: use its root
        shutil.rmtree(partial, ignore_errors=True)
    return root


def _pip(args: Sequence[str]) -> None:
    """Run the test Python's pip with ``args``; fail the test with its last lines on error."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stderr[-3000:]}"


def dependency_wheels(python: str) -> Path:
    """Return a directory of wheels of rocmforge's dependencies for CPython ``python`` (cached)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    out = CACHE / f"wheels-cp{python.replace('.', '')}-{_key(python, deps)}"
    if (out / ".complete").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    platforms = [f"--platform=manylinux_2_{m}_x86_64" for m in (17, 28, 34, 39)]
    _pip(
        [
            "download",
            "-q",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            f"--python-version={python}",
            "--implementation=cp",
            *platforms,
            "--platform=manylinux2014_x86_64",
            "-d",
            str(out),
            *deps,
        ]
    )
    (out / ".complete").touch()
    return out


def rocmforge_wheel(out: Path) -> Path:
    """Build a wheel of this checkout (a copy of it: nothing is written into the tree)."""
    src = out / "src"
    for name in ("rocmforge", "bin"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    _pip(
        [
            "wheel",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-index",
            "--find-links",
            str(WHEELHOUSE),
            "-w",
            str(out),
            str(src),
        ]
    )
    [wheel] = out.glob("rocmforge-*.whl")
    return wheel


def in_root(root: Path, work: Path, argv: Sequence[str], timeout: float = 900) -> str:
    """Run ``argv`` inside ``root`` (read-only, ``work`` at :data:`WORK`) and return its stdout.

    The root is entered with bwrap, not chroot: the kernel refuses user namespaces to a
    chrooted process, so rocmforge's bwrap (``--unshare-all`` tries one) fails there with "No
    permissions to create a new namespace". And the host's /proc is bound rather than a fresh
    ``--proc``: bwrap covers parts of its own /proc (``/proc/sys``, ...) with read-only binds,
    those mounts are locked in the nested sandbox's user namespace, and the kernel then refuses
    it a fresh proc ("Can't mount proc on /proc: Operation not permitted"), since a proc is
    mounted there only where a fully visible one already is. The host /proc is one: no pid
    namespace of its own here, but the nested sandbox has one. It is bound read-write (read-only,
    the nested bwrap cannot write its uid map: "setting up uid map: Read-only file system"), and
    this outer bwrap runs as root with root's capabilities: it isolates the filesystem (root
    read-only, only ``work`` writable) and the network, not the kernel's tunables; only pip,
    rocmforge and the root's compilers run in it. No network: the wheelhouse is bound in and
    pip runs with ``--no-index``.
    """
    env = {
        "PATH": f"{WORK}/venv/bin:/usr/bin:/bin",
        "HOME": f"{WORK}/home",
        "LC_ALL": "C.UTF-8",
        "ROCMFORGE_PIP_ARGS": f"--no-index --find-links {HOUSE}",
        "XDG_CACHE_HOME": f"{WORK}/home/.cache",
        "XDG_DATA_HOME": f"{WORK}/home/.local/share",
    }
    cmd = [
        "bwrap",
        "--ro-bind",
        str(root),
        "/",
        "--dev",
        "/dev",
        "--bind",
        "/proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--bind",
        str(work),
        WORK,
        "--ro-bind",
        str(WHEELHOUSE),
        HOUSE,
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--clearenv",
    ]
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    done = subprocess.run(
        [*cmd, "--chdir", WORK, "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{argv} in the Debian 13 root:\n{done.stderr[-4000:]}"
    return done.stdout


def _recipes(base: Path) -> dict[str, Path]:
    """Write the shipped demo (with its lock) and C++/CMake recipes, sources copied beside them:
    the same bytes on both sides (``python = "3"``: each side's own Python 3)."""
    shutil.copytree(
        REPO / "examples" / "demo",
        base / "demo-src",
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    demo = (REPO / "recipes" / "demo.toml").read_text()
    assert 'python = "3" ' in demo
    (base / "demo.toml").write_text(demo.replace('"../examples/demo"', '"demo-src"'))
    shutil.copy(REPO / "recipes" / "demo.lock", base / "demo.lock")
    cxx = base / "cxx-src"
    shutil.copytree(
        REPO / "examples" / "cxx-many",
        cxx,
        ignore=shutil.ignore_patterns("build", "src", "__pycache__"),
    )
    # CXX_TUS translation units, not the recipe's 12: its first step keeps a src/ that exists.
    subprocess.run([sys.executable, "gen.py", "src", str(CXX_TUS)], cwd=cxx, check=True)
    text = (REPO / "recipes" / "cxx-many.toml").read_text()
    (base / "cxx.toml").write_text(
        text.replace('path = "../examples/cxx-many"', 'path = "cxx-src"')
    )
    return {"rfdemo": base / "demo.toml", "cxxmany": base / "cxx.toml"}


def _one(reports: list[dict[str, Any]]) -> dict[str, Any]:
    [report] = reports
    assert report["sandbox"] == "bwrap", report
    return report


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the cp313 wheels fetched are x86_64")
def test_debian13_root_realizes_with_bwrap_and_explain_names_only_toolchain_keys(
    tmp_path: Path,
) -> None:
    """Demo and C++ recipe realized in a Debian 13 root and on the host: other input hashes,
    and every key ``explain`` names between the two wheels is a toolchain key."""
    for tool in ("mmdebstrap", "bwrap", "dpkg"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/test.sh installs it)")
    if os.geteuid() != 0:
        pytest.skip("entering the root with its files owned by root needs root")
    if not list(WHEELHOUSE.glob("setuptools-75.6.0-*.whl")):
        pytest.skip(f"no setuptools 75.6.0 wheel in {WHEELHOUSE}; run scripts/test.sh")
    root = debian13_root()
    assert (root / "etc" / "debian_version").read_text().startswith("13")
    [root_python] = [
        p.name.removeprefix("python")
        for p in (root / "usr" / "bin").glob("python3.*")
        if p.name.removeprefix("python3.").isdigit()
    ]

    work = tmp_path / "root-work"
    (work / "home").mkdir(parents=True)
    wheels = work / "wheels"
    wheels.mkdir()
    rocmforge_wheel(wheels)
    for w in dependency_wheels(root_python).glob("*.whl"):
        shutil.copy(w, wheels)
    in_root(root, work, ["python3", "-m", "venv", f"{WORK}/venv"])
    in_root(
        root,
        work,
        [
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            f"{WORK}/wheels",
            "rocmforge",
        ],
    )
    inside = _recipes(work)

    host = tmp_path / "host"
    host.mkdir()
    here = _recipes(host)
    for name in ("rfdemo", "cxxmany"):  # one recipe, two hosts
        assert inside[name].read_bytes() == here[name].read_bytes()

    for name in ("rfdemo", "cxxmany"):
        out = in_root(
            root,
            work,
            [
                "rocmforge",
                "realize",
                f"{WORK}/{inside[name].name}",
                "--store",
                f"{WORK}/store",
                "--json",
            ],
        )
        theirs = _one(json.loads(out))
        proc = rf("realize", here[name], "--store", host / "store", "--json")
        assert proc.returncode == 0, proc.stderr
        ours = _one(json.loads(proc.stdout))
        assert theirs["hash"] != ours["hash"]
        their_wheel = work / Path(theirs["wheels"][0]).relative_to(WORK)
        if name == "rfdemo":  # built by the root's Python, not the host's
            assert f"-cp{root_python.replace('.', '')}-" in their_wheel.name

        proc = rf("explain", ours["wheels"][0], their_wheel, "--store", host / "store", "--json")
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert (report["a"]["hash"], report["b"]["hash"]) == (ours["hash"], theirs["hash"])
        assert not report["identical"]
        keys = [d["key"] for d in report["differences"]]
        assert keys and all(k.startswith("toolchain.") for k in keys), [
            k for k in keys if not k.startswith("toolchain.")
        ]
        # ... and the toolchain really is the other distribution's: compilers, Python, packages
        differs = {k.split(".")[1] for k in keys}
        assert {"cc", "cxx", "python", "packages"} <= differs, sorted(differs)
        [base_files] = [d for d in report["differences"] if d["key"].endswith(".base-files")]
        assert str(base_files["b"]).startswith("13"), base_files
