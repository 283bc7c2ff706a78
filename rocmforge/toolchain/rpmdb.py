"""The rpm database: installed packages, their files, and which files changed since install.

What :mod:`rocmforge.toolchain.manifest` reads from dpkg's ``status`` and ``info/*.list`` (and
:mod:`rocmforge.toolchain.rocmroot` from ``info/*.md5sums``), read from rpm's database on RHEL,
Fedora, SUSE and their kin: every installed package's name, ``[epoch:]version-release`` and
architecture, and its file list with the digest, flags, mode, state and link target rpm recorded
for each file.

The database is read through the ``rpm`` command, never its files: their format differs across
rpm versions (Berkeley DB up to RHEL 8, ndb on SUSE, sqlite on Fedora 33+ and RHEL 9) and only
rpm itself reads every one. One ``rpm --root R --dbpath D -qa --queryformat FORMAT`` process
prints the whole database and its output is parsed as it streams (:func:`query`); the parsing is
a pure function of that text (:func:`parse_query`). Fields are separated by ASCII unit and record
separators (``\\x1f``, ``\\x1e``), which no file name in a package plausibly holds (a tab or a
newline in one would not break it).

A packaged file counts as *modified* (:func:`modified`) when its content no longer has the digest
rpm recorded (``FILEDIGESTS``, in the package's ``FILEDIGESTALGO``: md5 for old packages, sha256
today), or a packaged symlink no longer points where rpm recorded (``FILELINKTOS``): the checks
``rpm -V`` makes as ``5`` and ``L``. Skipped, with their reason:

* ``%ghost`` files: the package ships no content for them (no digest; a log file, a cache);
* ``%config`` files: edited on purpose by the administrator. ``rpm -V`` does check them (and
  marks them ``c``); they are skipped for parity with dpkg, whose ``md5sums`` leave conffiles
  out, so both databases cover the same set (docs/hermetic.md names this hole);
* files rpm did not install (state ``not installed``: ``--excludedocs``, another language;
  ``wrong color``: the other architecture's copy of a multilib file; ``net shared``): the bytes
  on disk, if any, are not this package's.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rocmforge.errors import SystemDatabaseError

#: Where rpm keeps its database, newest convention first (Fedora 36+ and openSUSE use
#: ``/usr/lib/sysimage/rpm``, with ``/var/lib/rpm`` a symlink to it).
DBPATHS = ("/usr/lib/sysimage/rpm", "/var/lib/rpm")
#: The file that makes a directory an rpm database, and the backend it names.
DBFILES = (("rpmdb.sqlite", "sqlite"), ("Packages.db", "ndb"), ("Packages", "bdb"))

#: rpm's file flags (``RPMFILE_*``) and states (``RPMFILE_STATE_*``) this module reads.
CONFIG = 1 << 0
GHOST = 1 << 6
STATE_NORMAL = 0

#: rpm's hash algorithm numbers (``PGPHASHALGO_*``) as hashlib names.
DIGEST_ALGOS = {1: "md5", 2: "sha1", 8: "sha256", 9: "sha384", 10: "sha512", 11: "sha224"}

_FS = "\x1f"
_RS = "\x1e"
_NONE = "(none)"
QUERY_FORMAT = (
    _FS.join(["P", *(f"%{{{t}}}" for t in ("NAME", "EPOCH", "VERSION", "RELEASE", "ARCH"))])
    + f"{_FS}%{{FILEDIGESTALGO}}{_RS}["
    + _FS.join(
        ["F", *(f"%{{{t}}}" for t in ("FILENAMES", "FILEDIGESTS", "FILEFLAGS", "FILEMODES"))]
    )
    + f"{_FS}%{{FILESTATES}}{_FS}%{{FILELINKTOS}}{_RS}]"
)


class RpmError(SystemDatabaseError):
    """The rpm database cannot be read (no ``rpm`` command, or ``rpm -qa`` failed)."""


@dataclass(frozen=True, slots=True)
class RpmFile:
    """One entry of a package's file list, as rpm recorded it at install time."""

    path: str
    digest: str
    flags: int
    mode: int
    state: int
    linkto: str

    @property
    def installed(self) -> bool:
        """Whether rpm put this entry on disk for this package (state ``normal``)."""
        return self.state == STATE_NORMAL

    @property
    def verifiable(self) -> bool:
        """Whether :func:`modified` checks it: an installed regular file with a digest, or an
        installed symlink, and neither ``%config`` nor ``%ghost``."""
        if not self.installed or self.flags & (CONFIG | GHOST):
            return False
        return (stat.S_ISREG(self.mode) and bool(self.digest)) or stat.S_ISLNK(self.mode)


@dataclass(frozen=True, slots=True)
class RpmPackage:
    """One installed package: name, ``[epoch:]version-release``, architecture and files."""

    name: str
    version: str
    arch: str
    digest_algo: str
    files: tuple[RpmFile, ...]


def _int(text: str, default: int = 0) -> int:
    return default if text in ("", _NONE) else int(text)


def _records(chunks: Iterable[str]) -> Iterator[list[str]]:
    tail = ""
    for chunk in chunks:
        parts = (tail + chunk).split(_RS)
        tail = parts.pop()
        for part in parts:
            yield part.split(_FS)
    if tail.strip():
        raise RpmError(f"rpm's query output ends inside a record: {tail[:80]!r}")


def parse_query(text: str | Iterable[str]) -> Iterator[RpmPackage]:
    """Yield the packages of ``rpm -qa --queryformat QUERY_FORMAT`` output, in its order.

    ``text`` is the whole output or its chunks as they arrive. An epoch, when set, prefixes
    the version (``2:1.0-1``, as rpm writes an EVR); a package without ``FILEDIGESTALGO`` (built
    before rpm 4.6) has md5 digests. Malformed output is an :class:`RpmError`.
    """
    current: list[str] | None = None
    files: list[RpmFile] = []

    def package(head: list[str]) -> RpmPackage:
        name, epoch, version, release, arch, algo = head
        evr = f"{version}-{release}" if epoch in ("", _NONE) else f"{epoch}:{version}-{release}"
        number = _int(algo, 1)
        if number not in DIGEST_ALGOS:
            raise RpmError(f"{name}: rpm file digest algorithm {number} is not known")
        return RpmPackage(
            name=name,
            version=evr,
            arch="" if arch == _NONE else arch,
            digest_algo=DIGEST_ALGOS[number],
            files=tuple(files),
        )

    for fields in _records([text] if isinstance(text, str) else text):
        kind = fields[0].lstrip("\n")
        try:
            if kind == "P" and len(fields) == 7:
                if current is not None:
                    yield package(current)
                current, files = fields[1:], []
            elif kind == "F" and len(fields) == 7 and current is not None:
                path, digest, flags, mode, state, linkto = fields[1:]
                files.append(
                    RpmFile(
                        path=path,
                        digest="" if digest == _NONE else digest.lower(),
                        flags=_int(flags),
                        mode=_int(mode),
                        state=_int(state),
                        linkto="" if linkto == _NONE else linkto,
                    )
                )
            else:
                raise ValueError
        except ValueError:
            raise RpmError(f"unexpected rpm query output: {_RS.join(fields)[:120]!r}") from None
    if current is not None:
        yield package(current)


def find_database(sysroot: Path | str = "/") -> tuple[str, str] | None:
    """Return ``(dbpath, backend)`` of the rpm database under ``sysroot``, or None.

    ``dbpath`` is the path as the system sees it (``/var/lib/rpm``), ``backend`` what its files
    say (``sqlite``, ``ndb``, ``bdb``). A few ``stat`` calls: fit for every resolve.
    """
    base = str(sysroot).rstrip("/")
    for dbpath in DBPATHS:
        for name, backend in DBFILES:
            if os.path.isfile(f"{base}{dbpath}/{name}"):
                return dbpath, backend
    return None


def _volatile(name: str) -> bool:
    """Files a mere read touches: sqlite's shared-memory index, Berkeley DB's environment
    regions, the lock files."""
    return name.endswith("-shm") or name.startswith("__db.") or name.endswith(".lock")


def database_files(dbpath: str, sysroot: Path | str = "/") -> list[str]:
    """Return the database directory and its files, whose stat signatures change with every
    rpm transaction whichever the backend (and not with a query: see :func:`_volatile`)."""
    where = f"{str(sysroot).rstrip('/')}{dbpath}"
    try:
        names = sorted(e.name for e in os.scandir(where) if e.is_file() and not _volatile(e.name))
    except OSError:
        names = []
    return [where, *(f"{where}/{n}" for n in names)]


def _rpm() -> str:
    rpm = shutil.which("rpm")
    if rpm is None:
        raise RpmError(
            "this machine has an rpm database but no rpm command to read it "
            "(install rpm, or see docs/hermetic.md for ROCMFORGE_SYSTEM_MANIFEST=content)"
        )
    return rpm


def rpm_version() -> str:
    """Return the version of the ``rpm`` that reads the database (``rpm 4.18.0``)."""
    done = subprocess.run(
        [_rpm(), "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    words = done.stdout.split()
    return f"rpm {words[-1]}" if done.returncode == 0 and words else "rpm (version unknown)"


def query(dbpath: str, sysroot: Path | str = "/") -> Iterator[RpmPackage]:
    """Yield every installed package of the rpm database ``dbpath`` under ``sysroot``.

    One ``rpm -qa`` process; its output is parsed while rpm still writes it.
    """
    argv = [_rpm(), "--root", str(sysroot), "--dbpath", dbpath, "-qa", "--qf", QUERY_FORMAT]
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: rpm never blocks on its warnings
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=err, env={**os.environ, "LC_ALL": "C"}
        )
        assert proc.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")

        def chunks() -> Iterator[str]:
            assert proc.stdout is not None
            while block := proc.stdout.read(1 << 20):
                yield decoder.decode(block)
            yield decoder.decode(b"", final=True)

        try:
            yield from parse_query(chunks())
        finally:
            proc.stdout.close()
            rc = proc.wait()
        if rc != 0:
            err.seek(0)
            said = err.read(2000).decode(errors="replace").strip()
            raise RpmError(f"rpm -qa --dbpath {dbpath} failed (exit {rc}): {said}")


def native_arch(arches: Iterable[str]) -> str:
    """The architecture whose packages are keyed by bare name, given every installed package's
    architecture: this machine's (``uname -m``) when a package has it, else the most common
    one (``noarch`` aside)."""
    counts: dict[str, int] = {}
    for arch in arches:
        if arch not in ("", "noarch"):
            counts[arch] = counts.get(arch, 0) + 1
    machine = os.uname().machine
    if machine in counts:
        return machine
    return max(counts, key=lambda a: counts[a]) if counts else ""


def package_key(package: RpmPackage, native: str) -> str:
    """``name``, or ``name.arch`` for a package of another architecture (rpm's own spelling)."""
    if package.arch in ("", "noarch", native):
        return package.name
    return f"{package.name}.{package.arch}"


def add_version(versions: dict[str, str], key: str, version: str) -> None:
    """Record ``version`` of ``key``; several installed at once (``kernel``, ``installonly``
    packages) are all kept, sorted and comma-separated, so each one's change counts."""
    have = versions.get(key)
    if have is None:
        versions[key] = version
    else:
        versions[key] = ", ".join(sorted({*have.split(", "), version}))


def file_digest(path: str, algo: str) -> str:
    """Return the hex digest of the file at ``path`` in the hashlib algorithm ``algo``."""
    h = hashlib.new(algo, usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def is_modified(file: RpmFile, algo: str, where: str) -> bool:
    """Whether the verifiable ``file``, found at ``where``, differs from what rpm installed.

    A missing file is not *modified* (the package version still says what it was, as for
    dpkg); an unreadable one raises :class:`OSError`.
    """
    if stat.S_ISLNK(file.mode):
        try:
            return os.readlink(where) != file.linkto
        except FileNotFoundError:
            return False
        except OSError:
            return True  # no longer a symlink
    if not os.path.lexists(where):
        return False
    if os.path.islink(where):
        return True
    return file_digest(where, algo) != file.digest


def modified(
    packages: Iterable[RpmPackage], sysroot: Path | str = "/"
) -> dict[str, tuple[str, str]]:
    """Return ``{path: (package key, version)}`` of the packaged files changed since install.

    Reads every verifiable file of ``packages`` (``rpm -V``'s digest and link checks; see the
    module docstring for what is skipped and why).
    """
    base = str(sysroot).rstrip("/")
    pkgs = list(packages)
    native = native_arch(p.arch for p in pkgs)
    out: dict[str, tuple[str, str]] = {}
    for p in pkgs:
        for f in p.files:
            if f.verifiable and is_modified(f, p.digest_algo, base + f.path):
                out[f.path] = (package_key(p, native), p.version)
    return out
