"""What an entry's signed statement covers: the file list it carries, and how a set of files is
checked against it.

A provenance statement (:mod:`rocmforge.trust.provenance` writes it) lists every file of the
entry in ``internalParameters.entryFiles``; a substitution (:mod:`rocmforge.cache.substitute`)
and ``verify`` (:mod:`rocmforge.store.verify`) check an entry's files against that list. This
module owns the list's name, what it leaves out and how an older statement is read, so the store
can check an entry without reaching up into ``trust``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.store import layout

#: ``internalParameters.entryFiles``: every file of the entry, ``[{"name", "sha256"}]`` sorted by
#: name, but provenance.json and its envelope (which cannot name themselves) and meta.json (the
#: store's own record, never in a cache). A substitution writes exactly this set.
ENTRY_FILES = "entryFiles"
#: The files of an entry no statement lists (see :data:`ENTRY_FILES`).
UNLISTED = frozenset({layout.PROVENANCE, layout.PROVENANCE_DSSE, layout.META})


def entry_files(entry_dir: Path, known: Mapping[str, str] = {}) -> list[dict[str, str]]:
    """Return the :data:`ENTRY_FILES` list of the staged entry ``entry_dir``; ``known`` gives
    the sha256 of files already hashed (the wheels), the others are read."""
    out = []
    for name in sorted(os.listdir(entry_dir)):
        if name in UNLISTED:
            continue
        sha = known.get(name)
        if sha is None:
            with open(entry_dir / name, "rb") as f:
                sha = hashlib.file_digest(f, "sha256").hexdigest()
        out.append({"name": name, "sha256": sha})
    return out


@dataclass(frozen=True, slots=True)
class Coverage:
    """The files a signed statement covers: name -> sha256 (None: derivation.json of an older
    statement, covered by hashing to the signed input hash), and whether the statement lists
    the entry's files itself (:data:`ENTRY_FILES`) or is older (its subjects and byproducts)."""

    files: Mapping[str, str | None]
    complete: bool


def coverage(statement: Any) -> Coverage:
    """Return what ``statement`` covers; :class:`ValueError` names what is malformed.

    A statement written before :data:`ENTRY_FILES` (rocmforge before issue 34) covers only what
    it names by digest: its subjects (the wheels) and its byproducts that are files (the build
    log, the telemetry record), plus derivation.json, which must hash to its input hash. Such a
    statement is accepted for exactly that set and nothing else (conservative: an extra file in
    an old entry is refused as in a new one; only a missing file it does not name goes unseen).
    """
    try:
        internal = statement["predicate"]["buildDefinition"]["internalParameters"]
        listed = internal.get(ENTRY_FILES)
        if listed is not None:
            files: dict[str, str | None] = {}
            for f in listed:
                name, sha = str(f["name"]), str(f["sha256"])
                if name in files or name in UNLISTED:
                    raise ValueError(f"{ENTRY_FILES} names {name!r} twice or names itself")
                files[name] = sha
            return Coverage(files, True)
        files = {str(s["name"]): str(s["digest"]["sha256"]) for s in statement["subject"]}
        run = statement["predicate"].get("runDetails") or {}
        for b in run.get("byproducts") or ():
            name, digest = str(b["name"]), b.get("digest") or {}
            if "/" not in name and "sha256" in digest:  # links/<wheel> annotate, are no files
                files[name] = str(digest["sha256"])
        files.setdefault(layout.DERIVATION, None)
        return Coverage(files, False)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"the signed statement is malformed ({exc!r})") from None


#: What a refusal adds when the statement predates :data:`ENTRY_FILES`.
OLD_STATEMENT = (
    "; it is an older statement without a file list, which covers only its wheels, its "
    "byproducts and derivation.json"
)


def file_set_problem(cov: Coverage, present: Mapping[str, str | None]) -> str | None:
    """Return why the files ``present`` (name -> sha256, None when not known) are not exactly
    the set ``cov`` covers (None: they are): a file it does not cover, one it names that is
    absent (a changed name is both), or a digest other than the signed one. provenance.json,
    its envelope and meta.json are not part of the set."""
    names = {n for n in present if n not in UNLISTED}
    old = "" if cov.complete else OLD_STATEMENT
    extra = sorted(names - set(cov.files))
    if extra:
        return f"{', '.join(extra)}: not covered by the signed statement{old}"
    missing = sorted(n for n, sha in cov.files.items() if n not in names)
    if missing:
        return f"{', '.join(missing)}: named by the signed statement but absent"
    for name in sorted(names):
        want, got = cov.files[name], present[name]
        if want is not None and got is not None and want != got:
            return f"{name}: its digest is not the one the signed statement names"
    return None


def uncovered_files(entry_dir: Path, statement: Any) -> tuple[list[str], list[str]]:
    """The files of the published entry ``entry_dir`` that ``statement`` (its provenance, read)
    does not cover, and those it names that are gone, both sorted (``verify`` reports them as
    ``uncovered`` and ``missing``; ``audit`` as problems). A statement that is not a readable
    one covers nothing: every file is uncovered. :class:`OSError` if the entry cannot be
    listed."""
    present = set(os.listdir(entry_dir)) - UNLISTED
    try:
        covered = set(coverage(statement).files)
    except ValueError:
        covered = set()
    return sorted(present - covered), sorted(covered - present)
