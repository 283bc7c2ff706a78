"""The system manifest: which system packages a build can see, and what no package owns.

The bwrap sandbox shows the host's ``/usr`` (with the merged-usr aliases) and a few ``/etc``
entries read-only. Everything there is either

* owned by a dpkg package: covered by that package's version, which enters the toolchain
  fingerprint (``toolchain.packages.NAME``), or
* not owned by any package: ``/usr/local`` and every other directory under ``/usr`` that holds no
  packaged file are *masked* (an empty directory is mounted over them in the sandbox), and the
  few loose unowned files inside packaged directories (alternatives symlinks, files copied in by
  hand) are content-hashed (``toolchain.unowned``). ``/usr/local`` is no exception once a
  package owns files below it (NVIDIA's CUDA ``.deb``s install ``/usr/local/cuda-X.Y``): then its
  unowned subdirectories are masked one by one and the packaged ones stay visible.

Only packages that own a path the sandbox can show count: one whose files all live under
``/opt``, ``/var`` or ``/srv`` cannot change a build and does not change the hash. Generated
bytecode caches (``__pycache__`` directories dpkg's Python triggers write beside packaged ``.py``
files) are neither masked nor hashed: they derive from packaged files (see docs/hermetic.md).

Reading the database and walking ``/usr`` costs about a second; the result is cached by the stat
signature of the dpkg status file, its ``info`` directory and the hashed loose files, so a warm
resolve costs a few ``stat`` calls. On a machine without dpkg the manifest is empty
(``database = "none"``) and only ``/usr/local`` is masked.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmforge.store import layout
from rocmforge.util.hashing import blake3_hex, file_blake3
from rocmforge.util.statcache import StatCache

MANIFEST_VERSION = 2

DPKG_ROOT = Path("/var/lib/dpkg")

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
class SystemManifest:
    """What the sandbox shows of the host system, as hashed into the toolchain fingerprint.

    ``packages`` maps each visible package (``name``, or ``name:arch`` for a foreign
    architecture) to its version; ``masked`` lists the unowned directories the sandbox hides
    (``masked_files`` files under them); ``unowned`` maps each loose unowned file under ``/usr``
    to its digest (``link:TARGET`` for a symlink).
    """

    database: str
    packages: Mapping[str, str] = field(default_factory=dict)
    masked: tuple[str, ...] = ALWAYS_MASKED
    masked_files: int = 0
    unowned: Mapping[str, str] = field(default_factory=dict)

    def fingerprint(self) -> dict[str, Any]:
        """Return the part of the toolchain fingerprint the manifest contributes."""
        return {
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

    def to_json(self) -> dict[str, Any]:
        """Return the manifest as JSON-ready data (the cache format)."""
        return {
            "database": self.database,
            "packages": dict(self.packages),
            "masked": list(self.masked),
            "masked_files": self.masked_files,
            "unowned": dict(self.unowned),
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
        )


def _usr_path(path: str) -> str:
    """Map a merged-usr alias path (``/lib/x``) to its real place (``/usr/lib/x``)."""
    for alias in USR_ALIASES:
        if path.startswith(alias + "/") and os.path.islink(alias):
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


def _walk_unowned(
    owned: set[str], owned_parents: set[str]
) -> tuple[list[str], int, dict[str, str]]:
    """Walk /usr: return (unowned directories, files below them, loose unowned files)."""
    masked: list[str] = []
    masked_files = 0
    loose: dict[str, str] = {}
    stack = ["/usr"]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for e in entries:
            p = e.path
            if e.is_dir(follow_symlinks=False):
                if p in owned_parents or p in owned:
                    stack.append(p)
                elif e.name not in _GENERATED_DIRS:
                    masked.append(p)
                    masked_files += sum(len(files) for _, _, files in os.walk(p))
            elif p not in owned:
                if e.is_symlink():
                    target = os.readlink(p)
                    # An alternative: what it finally points at is what a build runs.
                    final = f"=>{os.path.realpath(p)}" if target.startswith(ALTERNATIVES) else ""
                    loose[p] = f"link:{target}{final}"
                else:
                    try:
                        loose[p] = file_blake3(Path(p))
                    except OSError:
                        loose[p] = "unreadable"
    return sorted(masked), masked_files, loose


def scan_dpkg(root: Path = DPKG_ROOT) -> SystemManifest:
    """Read dpkg's database under ``root`` and walk ``/usr``: return the fresh manifest."""
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
        for raw in paths:
            p = _usr_path(raw)
            owned.add(p)
            parent = os.path.dirname(p)
            while parent not in owned_parents and parent != "/":
                owned_parents.add(parent)
                parent = os.path.dirname(parent)
    masked, masked_files, loose = _walk_unowned(owned, owned_parents)
    for always in ALWAYS_MASKED:
        # Where a package owns files below it (NVIDIA's /usr/local/cuda-X.Y), the walk has
        # masked its unowned parts and hashed its loose files; hiding it whole would hide those.
        if always not in masked and always not in owned_parents and always not in owned:
            masked.insert(0, always)
    return SystemManifest(
        database="dpkg",
        packages=packages,
        masked=tuple(masked),
        masked_files=masked_files,
        unowned=loose,
    )


def manifest_guards(manifest: SystemManifest, root: Path = DPKG_ROOT) -> list[str]:
    """Return the files whose stat signature keeps a cached ``manifest`` valid."""
    return [
        str(root / "status"),
        str(root / "info"),
        ALTERNATIVES,
        *manifest.unowned,
        *_mask_parents(manifest),
    ]


def _mask_parents(manifest: SystemManifest) -> list[str]:
    """The directories holding masked ones: a masked directory added or removed changes them."""
    return sorted({os.path.dirname(m) for m in manifest.masked})


def memo_guards(manifest: SystemManifest, root: Path = DPKG_ROOT) -> list[str]:
    """Return the few paths the realize memo watches for ``manifest``.

    The dpkg database plus the directories holding loose unowned files: a file added, removed,
    replaced or re-pointed there changes its directory. (An in-place rewrite of a loose file is
    seen by the next full resolve, which checks every file; see docs/hermetic.md.)
    """
    dirs = sorted({os.path.dirname(p) for p in manifest.unowned} | set(_mask_parents(manifest)))
    return [str(root / "status"), str(root / "info"), ALTERNATIVES, *dirs]


def system_manifest(*, cache_dir: Path, root: Path = DPKG_ROOT) -> SystemManifest:
    """Return the manifest of this machine, rescanning only when the dpkg database changed."""
    cache = StatCache(cache_dir / layout.CACHE_MANIFEST)
    key = f"manifest|{MANIFEST_VERSION}|{root}"
    hit = cache.get(key)
    if isinstance(hit, dict):
        return SystemManifest.from_json(hit)
    manifest = scan_dpkg(root)
    cache.put(key, manifest.to_json(), manifest_guards(manifest, root))
    return manifest


def find_owners(paths: Iterable[str], root: Path = DPKG_ROOT) -> dict[str, tuple[str, str]]:
    """Return ``{path: (package, version)}`` for those of ``paths`` a dpkg package owns.

    Reads every file list once (about 0.2 s); used after a build, never on the resolve path.
    """
    want = {_usr_path(p): p for p in paths}
    if not want:
        return {}
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


def packages_shipping(suffix: str, root: Path = DPKG_ROOT) -> list[str]:
    """Return the installed packages owning a path that ends with ``suffix`` (for diagnoses).

    Reads every file list (about 0.2 s); used only to explain a failed build.
    """
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
