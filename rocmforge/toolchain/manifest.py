"""The system manifest: which system packages a build can see, and what no package owns.

The bwrap sandbox shows the host's ``/usr`` (with the merged-usr aliases) and a few ``/etc``
entries read-only. Everything there is either

* owned by a package of the host's database (dpkg's, or rpm's: :mod:`rocmforge.toolchain.rpmdb`):
  covered by that package's version, which enters the toolchain fingerprint
  (``toolchain.packages.NAME``), or
* not owned by any package: ``/usr/local`` and every other directory under ``/usr`` that holds no
  packaged file are *masked* (an empty directory is mounted over them in the sandbox), and the
  few loose unowned files inside packaged directories (alternatives symlinks, files copied in by
  hand) are content-hashed (``toolchain.unowned``).

Only packages that own a path the sandbox can show count: one whose files all live under
``/opt``, ``/var`` or ``/srv`` cannot change a build and does not change the hash. Generated
bytecode caches (``__pycache__`` directories dpkg's Python triggers write beside packaged ``.py``
files) are neither masked nor hashed: they derive from packaged files (see docs/hermetic.md).

Which database (:func:`detect_database`): dpkg's when ``/var/lib/dpkg/status`` lists packages,
else rpm's (``/usr/lib/sysimage/rpm`` or ``/var/lib/rpm``). When both are present dpkg's wins:
an rpm database on a Debian-family host holds what someone installed with the ``rpm`` tool, not
the system; and choosing either is safe, since the other database's files are then unowned
(masked or content-hashed), never unhashed. A host with neither (distroless, Arch, NixOS) is
refused at resolve time (:class:`~rocmforge.errors.SystemDatabaseError`), unless
``ROCMFORGE_SYSTEM_MANIFEST=content`` asks to content-hash every file under ``/usr`` instead
(``database = "content"``, :func:`scan_content`). The same variable can force ``dpkg`` or
``rpm``; ``auto`` (or unset) detects.

Reading the database and walking ``/usr`` costs about a second; the result is cached by the stat
signature of the database (dpkg's status file and ``info`` directory; rpm's database files), the
alternatives directory and the hashed loose files, so a warm resolve costs a few ``stat`` calls.
"""

from __future__ import annotations

import array
import contextlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmforge.errors import SystemDatabaseError, ToolchainError
from rocmforge.store import layout
from rocmforge.toolchain import rpmdb
from rocmforge.util.fsutil import write_atomic
from rocmforge.util.hashing import blake3_hex, file_blake3
from rocmforge.util.statcache import StatCache

MANIFEST_VERSION = 3

DPKG_ROOT = Path("/var/lib/dpkg")

#: Chooses the database: ``auto`` (the default), ``dpkg``, ``rpm``, or ``content`` (no package
#: database: content-hash every file under /usr).
SYSTEM_MANIFEST_ENV = "ROCMFORGE_SYSTEM_MANIFEST"
CHOICES = ("auto", "dpkg", "rpm", "content")

#: Always hidden from builds: the FHS place for software no package manages.
ALWAYS_MASKED = ("/usr/local",)

#: Top-level directories that merged-usr systems make symlinks into /usr.
USR_ALIASES = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

#: Path prefixes the sandbox can show; a package owning a path below one of them is visible.
VISIBLE_PREFIXES = ("/usr/", *(f"{a}/" for a in USR_ALIASES), "/etc/")

_GENERATED_DIRS = ("__pycache__",)

#: update-alternatives' link farm; re-pointing an alternative renames a link here.
ALTERNATIVES = "/etc/alternatives/"


@dataclass(frozen=True, slots=True, kw_only=True)
class HostDatabase:
    """The package database a manifest is read from.

    ``kind`` is ``dpkg``, ``rpm``, ``content`` (none: every file is hashed) or ``none``;
    ``path`` the dpkg admin directory or rpm's ``dbpath`` as the system sees it, ``backend``
    rpm's format (``sqlite``, ``ndb``, ``bdb``), ``sysroot`` the root the system lies under
    (``/``; a throwaway root in tests), ``note`` why this one was chosen when it was a choice.
    """

    kind: str
    path: str = ""
    backend: str = ""
    sysroot: str = "/"
    note: str = ""

    @property
    def base(self) -> str:
        """The prefix that turns a system path into a path on this machine (``""`` for ``/``)."""
        return self.sysroot.rstrip("/")

    def guards(self) -> list[str]:
        """The files whose stat signature changes with every change of the database."""
        if self.kind == "dpkg":
            return [f"{self.base}{self.path}/status", f"{self.base}{self.path}/info"]
        if self.kind == "rpm":
            return rpmdb.database_files(self.path, self.sysroot)
        return []

    def describe(self) -> str:
        """Where the database is, for doctor (``/var/lib/rpm (sqlite)``)."""
        if self.kind == "dpkg":
            return f"{self.path}/status"
        if self.kind == "rpm":
            return f"{self.path} ({self.backend})"
        return ""


def looked_for() -> str:
    """What :func:`detect_database` looks for, in words (for the refusal and for doctor)."""
    files = ", ".join(name for name, _ in rpmdb.DBFILES)
    return (
        f"{DPKG_ROOT}/status (dpkg) and {files} in {' or '.join(rpmdb.DBPATHS)} (rpm)"
    )


def _dpkg_present(base: str) -> bool:
    try:
        return os.stat(f"{base}{DPKG_ROOT}/status").st_size > 0
    except OSError:
        return False


def detect_database(
    sysroot: Path | str = "/", environ: Mapping[str, str] | None = None
) -> HostDatabase:
    """Return the database the manifest of the system under ``sysroot`` is read from.

    A few ``stat`` calls (every resolve pays them). ``$ROCMFORGE_SYSTEM_MANIFEST`` chooses:
    ``auto`` (or unset) detects (dpkg's status file if it lists anything, else an rpm database;
    both present: dpkg's wins), ``dpkg`` / ``rpm`` insist on one, ``content`` uses none.
    Never raises for a missing database (``kind = "none"``); a bad choice is a ToolchainError.
    """
    env = os.environ if environ is None else environ
    choice = env.get(SYSTEM_MANIFEST_ENV, "") or "auto"
    if choice not in CHOICES:
        raise ToolchainError(
            f"{SYSTEM_MANIFEST_ENV}={choice!r}: expected one of {', '.join(CHOICES)}"
        )
    root = str(sysroot)
    base = root.rstrip("/")
    if choice == "content":
        return HostDatabase(kind="content", sysroot=root, note=f"{SYSTEM_MANIFEST_ENV}=content")
    dpkg = _dpkg_present(base)
    rpm = rpmdb.find_database(root)
    if choice == "dpkg" or (choice == "auto" and dpkg):
        if not dpkg:
            raise SystemDatabaseError(
                f"{SYSTEM_MANIFEST_ENV}=dpkg but {DPKG_ROOT}/status is missing or empty"
            )
        note = f"{SYSTEM_MANIFEST_ENV}=dpkg" if choice == "dpkg" else ""
        if rpm is not None and choice == "auto":
            note = (
                f"an rpm database ({rpm[0]}) is present too: dpkg's wins (on a dpkg system "
                "rpm's holds only what the rpm tool installed; its files count as unowned)"
            )
        return HostDatabase(kind="dpkg", path=str(DPKG_ROOT), sysroot=root, note=note)
    if rpm is not None:
        note = f"{SYSTEM_MANIFEST_ENV}=rpm" if choice == "rpm" else ""
        return HostDatabase(kind="rpm", path=rpm[0], backend=rpm[1], sysroot=root, note=note)
    if choice == "rpm":
        raise SystemDatabaseError(
            f"{SYSTEM_MANIFEST_ENV}=rpm but there is no rpm database: looked for "
            f"{', '.join(n for n, _ in rpmdb.DBFILES)} in {' or '.join(rpmdb.DBPATHS)}"
        )
    return HostDatabase(kind="none", sysroot=root)


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemManifest:
    """What the sandbox shows of the host system, as hashed into the toolchain fingerprint.

    ``packages`` maps each visible package (``name``, or ``name:arch`` for a foreign dpkg
    architecture, ``name.arch`` for a foreign rpm one) to its version; ``masked`` lists the
    unowned directories the sandbox hides (``masked_files`` files under them); ``unowned`` maps
    each loose unowned file under ``/usr`` to its digest (``link:TARGET`` for a symlink).

    Under ``database = "content"`` (no package database) ``content`` holds, per top-level
    directory of ``/usr``, the count and one digest of every file in it, and ``watch`` the
    directories walked. ``db_guards`` are the database's files (their stat signature changes
    with each install), ``sysroot`` the root the system was read under, ``info`` what doctor
    says about the source (never hashed).
    """

    database: str
    packages: Mapping[str, str] = field(default_factory=dict)
    masked: tuple[str, ...] = ALWAYS_MASKED
    masked_files: int = 0
    unowned: Mapping[str, str] = field(default_factory=dict)
    content: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    watch: tuple[str, ...] = ()
    db_guards: tuple[str, ...] = ()
    sysroot: str = "/"
    info: Mapping[str, Any] = field(default_factory=dict)

    def fingerprint(self) -> dict[str, Any]:
        """Return the part of the toolchain fingerprint the manifest contributes."""
        out = {
            "database": self.database,
            "packages": dict(sorted(self.packages.items())),
            "masked": list(self.masked),
            "unowned": {
                "count": len(self.unowned),
                "blake3": blake3_hex(
                    "\n".join(f"{k}\t{v}" for k, v in sorted(self.unowned.items())).encode()
                ),
            },
        }
        if self.database == "content":
            out["content"] = {k: dict(v) for k, v in sorted(self.content.items())}
        return out

    def to_json(self) -> dict[str, Any]:
        """Return the manifest as JSON-ready data (the cache format)."""
        return {
            "database": self.database,
            "packages": dict(self.packages),
            "masked": list(self.masked),
            "masked_files": self.masked_files,
            "unowned": dict(self.unowned),
            "content": {k: dict(v) for k, v in self.content.items()},
            "watch": list(self.watch),
            "db_guards": list(self.db_guards),
            "sysroot": self.sysroot,
            "info": dict(self.info),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SystemManifest:
        """Rebuild a manifest from :meth:`to_json` data."""
        return cls(
            database=str(data["database"]),
            packages=dict(data["packages"]),
            masked=tuple(data["masked"]),
            masked_files=int(data["masked_files"]),
            unowned=dict(data["unowned"]),
            content=dict(data["content"]),
            watch=tuple(data["watch"]),
            db_guards=tuple(data["db_guards"]),
            sysroot=str(data["sysroot"]),
            info=dict(data["info"]),
        )


def _usr_path(path: str, base: str = "") -> str:
    """Map a merged-usr alias path (``/lib/x``) to its real place (``/usr/lib/x``).

    ``base`` is the system root's prefix (:attr:`HostDatabase.base`; empty for ``/``).
    """
    for alias in USR_ALIASES:
        if path.startswith(alias + "/") and os.path.islink(base + alias):
            return "/usr" + path
    return path


def parse_dpkg_status(text: str) -> dict[str, tuple[str, str]]:
    """Return ``{package: (version, architecture)}`` of the installed packages in ``text``.

    ``text`` is dpkg's ``status`` file; only stanzas whose status is ``install ok installed``
    count (half-installed, config-files-only and removed packages do not).
    """
    out: dict[str, tuple[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        name = fields.get("Package")
        if not name or fields.get("Status") != "install ok installed":
            continue
        out[f"{name}:{fields.get('Architecture', '')}"] = (
            fields.get("Version", ""),
            fields.get("Architecture", ""),
        )
    return out


def _native_arch(installed: Mapping[str, tuple[str, str]]) -> str:
    counts: dict[str, int] = {}
    for _, arch in installed.values():
        if arch != "all":
            counts[arch] = counts.get(arch, 0) + 1
    return max(counts, key=lambda a: counts[a]) if counts else ""


def _list_file(info: Path, key: str) -> Path:
    name, _, arch = key.partition(":")
    qualified = info / f"{name}:{arch}.list"
    return qualified if qualified.exists() else info / f"{name}.list"


def _read_list(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    except OSError:
        return []


def _loose_digest(path: str, base: str) -> str:
    """The digest of a loose file at ``path`` (on this machine) of the system under ``base``."""
    if os.path.islink(path):
        target = os.readlink(path)
        # An alternative: what it finally points at is what a build runs.
        final = ""
        if target.startswith(ALTERNATIVES):
            real = os.path.realpath(path)
            final = f"=>{real[len(base):] if base and real.startswith(base + '/') else real}"
        return f"link:{target}{final}"
    try:
        return file_blake3(Path(path))
    except OSError:
        return "unreadable"


def _walk_unowned(
    owned: set[str], owned_parents: set[str], base: str = ""
) -> tuple[list[str], int, dict[str, str]]:
    """Walk /usr: return (unowned directories, files below them, loose unowned files).

    Paths are the system's (``/usr/...``); ``base`` is where that system lies on this machine.
    """
    masked: list[str] = []
    masked_files = 0
    loose: dict[str, str] = {}
    stack = ["/usr"]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(base + top))
        except OSError:
            continue
        for e in entries:
            p = f"{top}/{e.name}"
            if e.is_dir(follow_symlinks=False):
                if p in owned_parents or p in owned:
                    stack.append(p)
                elif e.name not in _GENERATED_DIRS:
                    masked.append(p)
                    masked_files += sum(len(files) for _, _, files in os.walk(e.path))
            elif p not in owned:
                loose[p] = _loose_digest(e.path, base)
    return sorted(masked), masked_files, loose


def _add_owned(paths: Iterable[str], owned: set[str], owned_parents: set[str]) -> None:
    """Add ``paths`` (already mapped by :func:`_usr_path`) and their parents to the sets."""
    for p in paths:
        owned.add(p)
        parent = os.path.dirname(p)
        while parent not in owned_parents and parent != "/":
            owned_parents.add(parent)
            parent = os.path.dirname(parent)


def _finish(
    db: HostDatabase,
    packages: dict[str, str],
    owned: set[str],
    owned_parents: set[str],
    **info: Any,
) -> SystemManifest:
    """The tail both databases share: walk /usr for what no package owns, build the manifest."""
    masked, masked_files, loose = _walk_unowned(owned, owned_parents, db.base)
    for always in ALWAYS_MASKED:
        # Where a package owns files below it (NVIDIA's /usr/local/cuda-X.Y), the walk has
        # masked its unowned parts and hashed its loose files; hiding it whole would hide those.
        if always not in masked and always not in owned_parents and always not in owned:
            masked.insert(0, always)
    return SystemManifest(
        database=db.kind,
        packages=packages,
        masked=tuple(masked),
        masked_files=masked_files,
        unowned=loose,
        db_guards=tuple(db.guards()),
        sysroot=db.sysroot,
        info={"source": db.describe(), "note": db.note, **info},
    )


def scan_dpkg(root: Path = DPKG_ROOT, *, db: HostDatabase | None = None) -> SystemManifest:
    """Read dpkg's database under ``root`` and walk ``/usr``: return the fresh manifest.

    ``db`` says where the system lies (its ``sysroot``); by default ``/``.
    """
    db = db or HostDatabase(kind="dpkg", path=str(root))
    try:
        status = (root / "status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return SystemManifest(database="none")
    installed = parse_dpkg_status(status)
    native = _native_arch(installed)
    owned: set[str] = set()
    owned_parents: set[str] = set()
    packages: dict[str, str] = {}
    for key, (version, arch) in installed.items():
        paths = _read_list(_list_file(root / "info", key))
        name = key.partition(":")[0]
        if any(p.startswith(VISIBLE_PREFIXES) for p in paths):
            packages[name if arch in (native, "all") else key] = version
        _add_owned((_usr_path(p, db.base) for p in paths), owned, owned_parents)
    return _finish(db, packages, owned, owned_parents)


def scan_rpm(db: HostDatabase) -> SystemManifest:
    """Read the rpm database ``db`` (one ``rpm -qa``) and walk ``/usr``: the fresh manifest.

    A package's files count as owned when rpm installed them (``%ghost`` entries too: rpm
    owns the path); packages keyed ``name`` (``name.arch`` for another architecture).
    """
    owned: set[str] = set()
    owned_parents: set[str] = set()
    seen: list[tuple[str, str, str, bool]] = []
    for pkg in rpmdb.query(db.path, db.sysroot):
        paths = [f.path for f in pkg.files if f.installed]
        visible = any(p.startswith(VISIBLE_PREFIXES) for p in paths)
        seen.append((pkg.name, pkg.arch, pkg.version, visible))
        _add_owned((_usr_path(p, db.base) for p in paths), owned, owned_parents)
    native = rpmdb.native_arch(arch for _, arch, _, _ in seen)
    packages: dict[str, str] = {}
    for name, arch, version, visible in seen:
        if visible:
            key = name if arch in ("", "noarch", native) else f"{name}.{arch}"
            rpmdb.add_version(packages, key, version)
    return _finish(db, packages, owned, owned_parents, reader=rpmdb.rpm_version())


#: One stat signature under ``database = "content"``: (size, mtime_ns, ctime_ns, inode); the
#: ctime catches an in-place copy that keeps the mtime (``cp -p``).
Sig = tuple[int, int, int, int]


def _sig(st: os.stat_result) -> Sig:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentScan:
    """What :func:`scan_content` read: the manifest, and the stat signatures that keep it valid
    (every regular file with its digest, every directory walked)."""

    manifest: SystemManifest
    files: Mapping[str, tuple[int, int, int, int, str]]
    dirs: Mapping[str, Sig]


#: Under ``content``, the sandbox's /etc entries hashed too (a package version covers them with a
#: database); left out, as with a database: passwd, group and localtime (the host's identity,
#: owned by no package) and ld.so.cache (derived from the hashed libraries and ld.so.conf).
CONTENT_ETC = ("/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/nsswitch.conf", "/etc/os-release",
               "/etc/ssl")  # fmt: skip


def scan_content(
    db: HostDatabase,
    *,
    previous: Mapping[str, Any] | None = None,
    digests: bool = True,
) -> ContentScan:
    """Content-hash every file under ``/usr`` (no package database), and the /etc entries of
    :data:`CONTENT_ETC` and ``/etc/python3*`` that the sandbox shows.

    ``/usr/local`` stays masked and ``__pycache__`` directories are skipped (as with a
    database). A symlink counts by its target (an alternative also by its final target), a
    special file by its mode. A file whose stat signature equals its entry in ``previous``
    (the ``files`` of the last scan) keeps that digest unread: after an upgrade only what
    changed is read. ``digests=False`` only counts (doctor: what a cold scan would read).
    Content is grouped per top-level directory of ``/usr`` (``bin``, ``lib``, ...; ``/etc``).
    """
    import glob
    import time

    start = time.perf_counter()
    base = db.base
    old = previous or {}
    files: dict[str, tuple[int, int, int, int, str]] = {}
    dirs: dict[str, Sig] = {}
    areas: dict[str, list[str]] = {}
    size = hashed = local = 0

    def record(p: str, physical: str, area: str) -> None:
        nonlocal size, hashed
        if os.path.islink(physical):
            digest = _loose_digest(physical, base)
        else:
            try:
                st = os.lstat(physical)
            except OSError:
                return
            if not stat.S_ISREG(st.st_mode):
                digest = f"special:{st.st_mode:o}"
            else:
                sig = _sig(st)
                prev = old.get(physical)
                if not digests:
                    digest = ""
                elif isinstance(prev, tuple) and len(prev) == 5 and prev[:4] == sig:
                    digest = str(prev[4])
                else:
                    digest = _loose_digest(physical, base)
                    hashed += st.st_size
                files[physical] = (*sig, digest)
                size += st.st_size
        areas.setdefault(area, []).append(f"{p}\t{digest}")

    etc = [*CONTENT_ETC, *sorted(g[len(base) :] for g in glob.glob(f"{base}/etc/python3*"))]
    stack = ["/usr", *(x for x in etc if os.path.isdir(base + x) and not os.path.islink(base + x))]
    for x in etc:
        if x not in stack and os.path.lexists(base + x):
            record(x, base + x, "/etc")
            if os.path.islink(base + x):  # no directory of ours watches /etc: check the link
                files[base + x] = (*_sig(os.lstat(base + x)), "link")
    while stack:
        top = stack.pop()
        try:
            dirs[base + top] = _sig(os.stat(base + top))  # before the listing: a race reads stale
            entries = list(os.scandir(base + top))
        except OSError:
            continue
        for e in entries:
            p = f"{top}/{e.name}"
            if e.is_dir(follow_symlinks=False):
                if p in ALWAYS_MASKED:
                    local += sum(len(fs) for _, _, fs in os.walk(e.path))
                elif e.name not in _GENERATED_DIRS:
                    stack.append(p)
            elif p.startswith("/etc/"):
                record(p, e.path, "/etc")
            else:
                record(p, e.path, p.split("/")[2] if p.count("/") > 2 else ".")
    alternatives = base + ALTERNATIVES
    with contextlib.suppress(OSError):
        dirs[alternatives] = _sig(os.stat(alternatives))
    content = {
        area: {"files": len(lines), "blake3": blake3_hex("\n".join(sorted(lines)).encode())}
        for area, lines in sorted(areas.items())
    }
    manifest = SystemManifest(
        database="content",
        masked=ALWAYS_MASKED,
        masked_files=local,
        content=content,
        watch=tuple(sorted(d for d in dirs if d != alternatives)),
        sysroot=db.sysroot,
        info={
            "source": db.note,
            "note": "no package database: every file under /usr is content-hashed",
            "files": sum(len(lines) for lines in areas.values()),
            "bytes": size,
            "directories": len(dirs),
            "hashed_bytes": hashed,
            "seconds": round(time.perf_counter() - start, 3),
        },
    )
    return ContentScan(manifest=manifest, files=files, dirs=dirs)


def _packed(sigs: Iterable[Sig]) -> bytes:
    """Stat signatures as one int64 array (the inode masked to fit)."""
    return array.array(
        "q", [n for s in sigs for n in (s[0], s[1], s[2], s[3] & 0x7FFF_FFFF_FFFF_FFFF)]
    ).tobytes()


def _content_still_valid(state: Mapping[str, Any]) -> bool:
    """Whether every directory and file of a cached content scan keeps its stat signature."""
    try:
        for d, sig in state["dirs"].items():
            if _sig(os.stat(d)) != sig:
                return False
        for d, (names, packed) in state["checks"].items():
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                now = _packed(_sig(os.stat(n, dir_fd=fd, follow_symlinks=False)) for n in names)
            finally:
                os.close(fd)
            if now != packed:
                return False
    except (OSError, KeyError, AttributeError, TypeError, ValueError):
        return False
    return True


def content_manifest(db: HostDatabase, *, cache_dir: Path) -> SystemManifest:
    """The ``content`` manifest, cached in ``cache_dir``.

    A warm call checks the stat signature of every directory and file the scan hashed (one
    ``stat`` each); any change rescans, reading only the changed files. Kept as marshal, the
    signatures packed per directory and the digests (read only by a rescan) as one blob:
    loading ~110 000 entries as JSON cost more than checking them.
    """
    import marshal

    path = cache_dir / layout.CACHE_MANIFEST_CONTENT
    key = f"manifest|{MANIFEST_VERSION}|content|{db.sysroot}"
    state: Any = None
    with contextlib.suppress(OSError, EOFError, ValueError, TypeError):
        state = marshal.loads(path.read_bytes())
    if isinstance(state, dict) and state.get("key") == key and _content_still_valid(state):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            return SystemManifest.from_json(state["manifest"])
    previous: Any = None
    with contextlib.suppress(KeyError, TypeError, ValueError, EOFError):
        previous = marshal.loads(state["digests"])
    found = scan_content(db, previous=previous if isinstance(previous, dict) else None)
    by_dir: dict[str, tuple[list[str], list[Sig]]] = {}
    for file, entry in found.files.items():
        d, _, name = file.rpartition("/")
        names, sigs = by_dir.setdefault(d, ([], []))
        names.append(name)
        sigs.append(entry[:4])
    data = {
        "key": key,
        "manifest": found.manifest.to_json(),
        "dirs": dict(found.dirs),
        "checks": {d: (tuple(names), _packed(sigs)) for d, (names, sigs) in by_dir.items()},
        "digests": marshal.dumps(dict(found.files)),
    }
    with contextlib.suppress(OSError):  # a read-only store: the next resolve scans again
        write_atomic(path, marshal.dumps(data), durable=False)
    return found.manifest


def _alternatives(manifest: SystemManifest) -> str:
    return manifest.sysroot.rstrip("/") + ALTERNATIVES


def manifest_guards(manifest: SystemManifest) -> list[str]:
    """Return the files whose stat signature keeps a cached ``manifest`` valid.

    (Under ``content`` the hashed files themselves join them: :func:`system_manifest`.)
    """
    base = manifest.sysroot.rstrip("/")
    return [
        *manifest.db_guards,
        _alternatives(manifest),
        *(base + p for p in manifest.unowned),
        *_mask_parents(manifest),
        *manifest.watch,
    ]


def _mask_parents(manifest: SystemManifest) -> list[str]:
    """The directories holding masked ones: a masked directory added or removed changes them."""
    base = manifest.sysroot.rstrip("/")
    return sorted({base + os.path.dirname(m) for m in manifest.masked})


def memo_guards(manifest: SystemManifest) -> list[str]:
    """Return the few paths the realize memo watches for ``manifest``.

    The database plus the directories holding loose unowned files (under ``content``: every
    directory of ``/usr``): a file added, removed, replaced or re-pointed there changes its
    directory. (An in-place rewrite of a loose file is seen by the next full resolve, which
    checks every file; see docs/hermetic.md.)
    """
    base = manifest.sysroot.rstrip("/")
    dirs = sorted(
        {base + os.path.dirname(p) for p in manifest.unowned}
        | set(_mask_parents(manifest))
        | set(manifest.watch)
    )
    return [*manifest.db_guards, _alternatives(manifest), *dirs]


def refusal(db: HostDatabase) -> SystemDatabaseError:
    """The error a resolve raises on a machine without a package database (one line)."""
    where = "" if db.sysroot == "/" else f" under {db.sysroot}"
    return SystemDatabaseError(
        f"no package database{where}: looked for {looked_for()}; without one the input hash "
        f"cannot cover /usr. Install the build's system packages with dpkg or rpm, or set "
        f"{SYSTEM_MANIFEST_ENV}=content to content-hash every file under /usr instead "
        "(docs/hermetic.md)"
    )


def scan(db: HostDatabase) -> SystemManifest:
    """Return the fresh manifest of ``db`` (a ``none`` database is :func:`refusal`)."""
    if db.kind == "dpkg":
        return scan_dpkg(Path(db.base + db.path), db=db)
    if db.kind == "rpm":
        return scan_rpm(db)
    if db.kind == "content":
        return scan_content(db).manifest
    raise refusal(db)


def system_manifest(
    *, cache_dir: Path, sysroot: Path | str = "/", environ: Mapping[str, str] | None = None
) -> SystemManifest:
    """Return the manifest of this machine, rescanning only when its database changed.

    Raises :class:`~rocmforge.errors.SystemDatabaseError` where there is no package database
    and ``$ROCMFORGE_SYSTEM_MANIFEST`` does not ask for ``content``.
    """
    db = detect_database(sysroot, environ)
    if db.kind == "none":
        raise refusal(db)
    if db.kind == "content":
        return content_manifest(db, cache_dir=cache_dir)
    cache = StatCache(cache_dir / layout.CACHE_MANIFEST)
    key = f"manifest|{MANIFEST_VERSION}|{db.kind}|{db.sysroot}|{db.path}"
    hit = cache.get(key)
    if isinstance(hit, dict):
        return SystemManifest.from_json(hit)
    manifest = scan(db)
    cache.put(key, manifest.to_json(), manifest_guards(manifest))
    return manifest


def _database(db: HostDatabase | Path | None) -> HostDatabase:
    """``db``, detected when None; a Path is a dpkg admin directory (the older signature)."""
    if db is None:
        return detect_database()
    if isinstance(db, Path):
        return HostDatabase(kind="dpkg", path=str(db))
    return db


def covered_roots(db: HostDatabase | None = None) -> dict[str, list[str]]:
    """The host directories the manifest covers by content rather than by package, as
    :func:`~rocmforge.toolchain.elf.resolve_links` roots: under ``content`` every directory of
    ``/usr`` but ``/usr/local`` (``{"system": [...]}``); otherwise none."""
    db = _database(db)
    if db.kind != "content":
        return {}
    try:
        names = sorted(os.listdir(db.base + "/usr"))
    except OSError:
        return {}
    return {"system": [f"/usr/{n}" for n in names if f"/usr/{n}" not in ALWAYS_MASKED]}


def find_owners(
    paths: Iterable[str], db: HostDatabase | Path | None = None
) -> dict[str, tuple[str, str]]:
    """Return ``{path: (package, version)}`` for those of ``paths`` a package owns.

    Reads every file list once (about 0.2 s with dpkg; one ``rpm -qa`` with rpm); used after a
    build, never on the resolve path. ``db``: the database (detected when None; a Path is a
    dpkg admin directory). Without a package database nothing is owned.
    """
    db = _database(db)
    want = {_usr_path(p, db.base): p for p in paths}
    if not want:
        return {}
    if db.kind == "rpm":
        return _rpm_owners(want, db)
    if db.kind != "dpkg":
        return {}
    root = Path(db.base + db.path)
    try:
        status = (root / "status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    installed = parse_dpkg_status(status)
    native = _native_arch(installed)
    found: dict[str, tuple[str, str]] = {}
    for key, (version, arch) in installed.items():
        hits = [
            want[q] for q in map(_usr_path, _read_list(_list_file(root / "info", key))) if q in want
        ]
        name = key.partition(":")[0]
        for hit in hits:
            found[hit] = (name if arch in (native, "all") else key, version)
    return found


def _rpm_owners(want: Mapping[str, str], db: HostDatabase) -> dict[str, tuple[str, str]]:
    hits: list[tuple[str, str, str, list[str]]] = []
    arches: list[str] = []
    for pkg in rpmdb.query(db.path, db.sysroot):
        arches.append(pkg.arch)
        mine = [
            want[q] for f in pkg.files if f.installed and (q := _usr_path(f.path, db.base)) in want
        ]
        if mine:
            hits.append((pkg.name, pkg.arch, pkg.version, mine))
    native = rpmdb.native_arch(arches)
    found: dict[str, tuple[str, str]] = {}
    for name, arch, version, mine in hits:
        for hit in mine:
            found[hit] = (name if arch in ("", "noarch", native) else f"{name}.{arch}", version)
    return found


def packages_shipping(suffix: str, db: HostDatabase | Path | None = None) -> list[str]:
    """Return the installed packages owning a path that ends with ``suffix`` (for diagnoses).

    Reads every file list (about 0.2 s); used only to explain a failed build.
    """
    db = _database(db)
    if db.kind == "rpm":
        return sorted(
            {
                pkg.name
                for pkg in rpmdb.query(db.path, db.sysroot)
                if any(f.path.endswith(suffix) for f in pkg.files if f.installed)
            }
        )
    if db.kind != "dpkg":
        return []
    root = Path(db.base + db.path)
    try:
        names = sorted(os.listdir(root / "info"))
    except OSError:
        return []
    out = []
    for name in names:
        if name.endswith(".list") and any(
            p.endswith(suffix) for p in _read_list(root / "info" / name)
        ):
            out.append(name.removesuffix(".list").partition(":")[0])
    return sorted(set(out))
