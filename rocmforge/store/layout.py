"""The store's on-disk layout: every file and directory name, the input hash and entry names.

This module is the one owner of those facts; every other module spells them through it. It
imports nothing (not even ``re``): the realize memo's fast path (:mod:`rocmforge.pipeline.memo`)
imports
it before anything else is loaded, and the source modules (``rocmforge.sources``) may import it
too although they sit above the store. Checks use plain ``str`` methods.

Layout under the store root::

    entries/<hash>-<name>-<version>/   published, read-only: the wheels, derivation.json,
                                       build.log.zst, provenance.json, meta.json,
                                       telemetry.json.zst (when recorded)
    tmp/<hash>.<pid>.<rand>/           builds in progress, each guarded by tmp/<same>.lock
    locks/<hash>.lock                  per-hash build locks
    failed/<entry name>.log.zst        logs of failed builds (and a .json diagnosis beside each)
    sources/git/  wheels/  trees/      source caches: git mirrors, requirement wheels, tree stat
    sources/git-resolved/  inputs/     caches, resolved remote refs, extra build inputs
    sources/wheels-unpacked/           requirement wheels installed once, hard-linked into venvs
    sources/rocm-sdk/<key>/            ROCm SDK wheels unpacked once (read-only, shared by builds)
    cache/                             other caches (the realize memo)
    ccache/<namespace>/                compiler cache (ccache), one per toolchain fingerprint
    roots/auto/  roots/pins/           gc roots: result links, named pins,
    roots/live/                        temp roots of running realizes
    used/<hash>                        mtime = last use of the entry
    trash/                             entries gc is deleting
    pending/<entry name>               publishes not yet indexed (flock held while publishing)
    quarantine/<entry name>.<time>.<rand>   damaged entries and stray files moved aside (gc
                                       removes them)
    accepted/<hash>/<run>.json         GPU acceptance runs of the entry (``rocmforge test``): an
                                       in-toto statement, or a DSSE envelope over one when
                                       signed; kept and collected with the entry
    index.sqlite                       SQLite index (WAL), rebuildable from entries/
    gc.lock                            store-wide lock (shared for realize, exclusive for gc)
    ROCMFORGE-STORE                    marker: this directory is a store (found by walking up)
"""

from __future__ import annotations

#: Length of an input hash: the first 32 hex digits (128 bits) of the derivation's blake3.
HASH_LEN = 32
#: The shortest hash prefix a command accepts.
MIN_PREFIX = 4
HEX_DIGITS = "0123456789abcdef"

# -- files of an entry ----------------------------------------------------------------------------
META = "meta.json"
DERIVATION = "derivation.json"
BUILD_LOG = "build.log.zst"
PROVENANCE = "provenance.json"
#: The build's telemetry record: samples, step usage, the ninja logs (rocmforge.observe.record).
TELEMETRY = "telemetry.json.zst"
#: DSSE envelope over provenance.json, signed with the store's ed25519 key (absent when unsigned).
PROVENANCE_DSSE = "provenance.dsse.json"
WHEEL_SUFFIX = ".whl"
#: An sdist kept beside the wheels in ``sources/wheels`` (the ``rocm`` sdist, source of the
#: ``rocm_sdk`` module of a ``kind = "rocm-sdk"`` toolchain).
SDIST_SUFFIX = ".tar.gz"

#: The plain-text log inside a build directory ``tmp/<hash>.<pid>.<rand>/`` while it runs.
BUILD_DIR_LOG = "build.log"

# -- files and directories at the store root ------------------------------------------------------
INDEX = "index.sqlite"
GC_LOCK = "gc.lock"
ENTRIES = "entries"
TMP = "tmp"
LOCKS = "locks"
FAILED = "failed"
SOURCES = "sources"
CACHE = "cache"
ROOTS = "roots"
USED = "used"
TRASH = "trash"
PENDING = "pending"
QUARANTINE = "quarantine"
#: ``accepted/<hash>/``: the entry's acceptance runs (entries are sealed, so they live beside).
ACCEPTED = "accepted"
#: An acceptance run's file: ``<UTC time>-<tier>-<rand><ACCEPTED_SUFFIX>``.
ACCEPTED_SUFFIX = ".json"
#: The file that marks a directory as a rocmforge store (``rocmforge.store.locate`` looks for it).
MARKER = "ROCMFORGE-STORE"
#: The conventional name of a project's store directory (``<project>/store``).
DEFAULT_NAME = "store"
#: The compiler cache (ccache): one directory per toolchain fingerprint; never hashed.
CCACHE = "ccache"
#: The subdirectories :func:`rocmforge.store.store.open_store` creates.
CREATED_DIRS = (ENTRIES, TMP, LOCKS, FAILED, SOURCES, CACHE)

# -- below roots/ ---------------------------------------------------------------------------------
ROOTS_AUTO = "auto"
ROOTS_PINS = "pins"
ROOTS_LIVE = "live"

# -- below sources/ -------------------------------------------------------------------------------
SOURCES_GIT = "git"
SOURCES_WHEELS = "wheels"
SOURCES_TREES = "trees"
# A tree's stat cache: ``trees/<id>.head`` and the bucket files under ``trees/<id>.files/``.
TREE_HEAD_SUFFIX = ".head"
TREE_FILES_SUFFIX = ".files"
SOURCES_GIT_RESOLVED = "git-resolved"
SOURCES_INPUTS = "inputs"
#: Below ``sources/``: each requirement wheel installed once into a venv-shaped tree, named
#: ``<wheel file name>.<key>`` (key: the wheel's sha256, the venv Python and the shebang), whose
#: files are hard-linked into build venvs. Collected by gc with the wheel it came from.
SOURCES_WHEELS_UNPACKED = "wheels-unpacked"
#: Below ``sources/``: a ROCm SDK's wheels unpacked and initialised once, read-only, named by a
#: digest of the wheels' sha256s (:mod:`rocmforge.toolchain.rocmsdk`); gc collects a tree no
#: kept entry lists in its ``sources``.
SOURCES_ROCM_SDK = "rocm-sdk"
#: Stat caches of host facts, in the per-user host cache shared by every store of the user
#: (:func:`~rocmforge.store.locate.host_cache`): the toolchain probe, the system package
#: manifest, the toolchain Python's prefix, a non-packaged ROCm root's content, declared views
#: (their farms are made under the store's ``cache/`` by the build).
CACHE_TOOLCHAIN = "toolchain.json"
CACHE_MANIFEST = "manifest.json"
#: Without a package database (ROCMFORGE_SYSTEM_MANIFEST=content): that manifest, every /usr
#: file's stat signature and blake3 and every directory's signature (marshal), so a warm
#: resolve checks them and a rescan hashes only the files that changed.
CACHE_MANIFEST_CONTENT = "manifest-content.marshal"
CACHE_PYPREFIX = "pyprefix.json"
CACHE_ROCMROOT = "rocmroot.json"
CACHE_VIEW = "view.json"
CACHE_VIEWS = "views"
#: The host's ROCm packages' paths a build on SDK wheels hides (keyed by dpkg's database).
CACHE_ROCMSDK = "rocmsdk.json"
#: A successful bwrap trial run, keyed by the binary's stat and the user-namespace settings.
CACHE_BWRAP = "bwrap.json"
#: Below ``sources/inputs``: downloaded archives and their unpacked trees.
INPUTS_ARCHIVES = "archives"
INPUTS_UNPACKED = "unpacked"
SOURCES_TMP = "tmp"
#: Below ``cache/``: the recipe files of matrix cells (``realize --matrix``) run here.
CACHE_MATRIX = "matrix"

# -- a cluster job directory (``realize --executor slurm --job-dir DIR``, docs/cluster.md) ------
#: ``DIR/jobs/<hash>.json``: the Slurm job of each derivation (id, log, attempt), for re-attaching.
JOBDIR_JOBS = "jobs"
#: ``DIR/logs/<hash>-<name>-<version>.log``: a job's stdout and stderr (the build log, live).
JOBDIR_LOGS = "logs"
#: ``DIR/scripts/<hash>.sh``: the batch script sbatch was given.
JOBDIR_SCRIPTS = "scripts"
#: ``DIR/cells/``: the recipe files of ``--matrix`` cells (compute nodes read them).
JOBDIR_CELLS = "cells"
JOB_RECORD_SUFFIX = ".json"
JOB_LOG_SUFFIX = ".log"
JOB_SCRIPT_SUFFIX = ".sh"

# -- suffixes -------------------------------------------------------------------------------------
LOCK_SUFFIX = ".lock"
FAILED_LOG_SUFFIX = ".log.zst"

_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
_VERSION_CHARS = _NAME_CHARS + "+!"


def is_hex(text: str) -> bool:
    """True if ``text`` is one or more lowercase hex digits."""
    return bool(text) and not text.strip(HEX_DIGITS)


def is_hash(text: str) -> bool:
    """True if ``text`` is an input hash: exactly 32 lowercase hex digits."""
    return len(text) == HASH_LEN and not text.strip(HEX_DIGITS)


def _word(text: str, chars: str) -> bool:
    return (
        bool(text)
        and text.isascii()
        and text[0].isalnum()
        and text[-1].isalnum()
        and not text.strip(chars)
    )


def is_name(text: str) -> bool:
    """True if ``text`` may be the package name of an entry: ASCII letters, digits, ``._-``,
    starting and ending with a letter or digit."""
    return _word(text, _NAME_CHARS)


def normal_name(text: str) -> str:
    """Return ``text`` in PEP 503 normal form, as pip compares names: lowercase, every run of
    ``-``, ``_`` and ``.`` one ``-`` (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    out: list[str] = []
    for ch in text.lower():
        if ch in "-_.":
            if not out or out[-1] != "-":
                out.append("-")
        else:
            out.append(ch)
    return "".join(out)


def is_version(text: str) -> bool:
    """True if ``text`` may be the version of an entry: like a name, plus ``+`` and ``!``."""
    return _word(text, _VERSION_CHARS)


def entry_problem(hash: str, name: str, version: str) -> str | None:
    """Return what is wrong with the parts of an entry name, or None when all three are valid."""
    if not is_hash(hash):
        return f"not an input hash ({HASH_LEN} lowercase hex characters): {hash!r}"
    if not is_name(name):
        return f"invalid package name for a store entry: {name!r}"
    if not is_version(version):
        return f"invalid version for a store entry: {version!r}"
    return None


def entry_name(hash: str, name: str, version: str) -> str:
    """Return the directory name ``<hash>-<name>-<version>`` (check the parts with
    :func:`entry_problem` first)."""
    return f"{hash}-{name}-{version}"


def is_entry_name(dirname: str) -> bool:
    """True if ``dirname`` has the form ``<hash>-<name>-<version>`` with all three parts valid.

    Names and versions may both hold ``-``, so the split is not unique; one valid split is enough.
    An empty name or version is never valid.
    """
    if len(dirname) < HASH_LEN + 4 or dirname[HASH_LEN] != "-" or not is_hash(dirname[:HASH_LEN]):
        return False
    rest = dirname[HASH_LEN + 1 :]
    i = rest.find("-")
    while i > 0:
        if is_name(rest[:i]) and is_version(rest[i + 1 :]):
            return True
        i = rest.find("-", i + 1)
    return False


def build_dir_name(hash: str, pid: int, rand: str) -> str:
    """Return ``<hash>.<pid>.<rand>``, the name of a build directory under ``tmp/``."""
    return f"{hash}.{pid}.{rand}"


def parse_build_dir_name(name: str) -> tuple[str, str] | None:
    """Return ``(hash, pid)`` of a build directory name ``<hash>.<pid>.<rand>``, else None."""
    parts = name.split(".")
    if len(parts) != 3:
        return None
    hash, pid, rand = parts
    if not (is_hash(hash) and pid.isascii() and pid.isdigit() and is_hex(rand)):
        return None
    return hash, pid


def failed_log_name(hash: str, name: str, version: str) -> str:
    """Return the file name under ``failed/`` of the log of a failed build."""
    return entry_name(hash, name, version) + FAILED_LOG_SUFFIX
