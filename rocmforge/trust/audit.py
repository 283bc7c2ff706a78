"""``audit``: what produced this wheel? Verified by digest, claimed by stamp, tampered, or unknown.

- ``verified``: the wheel's blake3 digest is in this store's index — it is byte-identical to a wheel
  rocmforge built and published here; the facts come from that entry (derivation, provenance).
- ``claimed``: not in the index, but it carries a consistent stamp and a consistent RECORD: the
  facts are what the wheel says about itself, unverified.
- ``diverged``: the stamp is intact and hashes to its input hash, RECORD matches the archive, but
  this store built the same input hash into other bytes: an honest wheel, and a reproducibility
  failure or an input the hash does not cover (``realize --check`` and ``explain`` narrow it).
- ``tampered``: it carries a stamp, but RECORD does not match the archive or the stamp's
  derivation does not hash to its input hash.
- ``unknown``: no stamp (built outside rocmforge) or not readable as a wheel at all.

A verified wheel's RECORD is not re-read: its bytes are those of a wheel whose RECORD was verified
when it was built, so the audit costs one blake3 pass plus one index lookup.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import os
import stat
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmforge.errors import StoreError, UsageError
from rocmforge.store import layout
from rocmforge.store.audittext import (
    CLAIMED,
    DIVERGED,
    EXIT_CODES,
    TAMPERED,
    UNKNOWN,
    VERIFIED,
    audit_facts,
    report_json,
    worst_status_code,
)
from rocmforge.store.entry import DerivationDoc, read_derivation, read_meta
from rocmforge.store.showtext import input_facts as input_facts
from rocmforge.store.store import Store
from rocmforge.trust.provenance import read_statement
from rocmforge.trust.signing import PublicKey, SignatureCheck, check_entry
from rocmforge.util.hashing import file_blake3, file_sha256
from rocmforge.wheel.stamp import Stamp, StampError, read_stamp

_UNSIGNED = ("RECORD", "RECORD.jws", "RECORD.p7s")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditReport:
    """Everything ``audit`` learned about one wheel file."""

    wheel: Path
    status: str
    blake3: str
    sha256: str
    size: int
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    input_hash: str | None = None
    derivation: Mapping[str, Any] | None = None
    entry_path: Path | None = None
    statement: Mapping[str, Any] | None = field(default=None)
    stamped_by: str | None = None
    archs: Mapping[str, Any] | None = None
    links: tuple[Mapping[str, str], ...] = ()
    #: The entry's DSSE signature, checked against the trusted keys (verified wheels only).
    signature: SignatureCheck | None = None
    #: the entries it was built against: name, version, hash, wheel sha256, and their env flags
    #: when this store has them (see :func:`dependency_facts`)
    dependencies: tuple[Mapping[str, Any], ...] = ()
    #: Where a substituted entry came from (meta.json ``origin``): None when built in this store.
    origin: Mapping[str, Any] | None = None
    #: The entry's acceptance runs that tested this wheel (``AcceptedRun.facts``, signatures
    #: checked against the trusted keys), oldest first.
    accepted: tuple[Mapping[str, Any], ...] = ()

    @property
    def exit_code(self) -> int:
        """The exit status this report alone would give."""
        return EXIT_CODES[self.status]

    def facts(self) -> dict[str, Any]:
        """Return the traceability facts: package, recipe, source, toolchain, env, run
        (:func:`rocmforge.store.audittext.audit_facts`)."""
        return audit_facts(self.derivation, self.statement)

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return report_json(
            wheel=str(self.wheel),
            status=self.status,
            blake3=self.blake3,
            sha256=self.sha256,
            size=self.size,
            facts=self.facts(),
            problems=self.problems,
            notes=self.notes,
            input_hash=self.input_hash,
            store_path=str(self.entry_path) if self.entry_path else None,
            stamped_by=self.stamped_by,
            archs=self.archs,
            links=self.links,
            signature=self.signature.to_json() if self.signature else None,
            origin=self.origin,
            derivation=self.derivation,
            built_against=self.dependencies,
            accepted=self.accepted,
        )


def dependency_facts(
    derivation: Mapping[str, Any] | None, statement: Mapping[str, Any] | None, store: Store
) -> tuple[dict[str, Any], ...]:
    """The entries a wheel was built against (``recipes`` of its derivation), each with the
    digest of the wheel installed (from provenance) and its ``[env]`` flags (from the store)."""
    recipes = (derivation or {}).get("recipes")
    if not isinstance(recipes, list):
        return ()
    digests: dict[str, str] = {}
    if statement:
        bd = statement.get("predicate", {}).get("buildDefinition", {})
        for dep in bd.get("resolvedDependencies", []):
            if isinstance(dep, dict) and str(dep.get("name", "")).startswith("recipes/"):
                h = (dep.get("annotations") or {}).get("inputHash")
                if isinstance(h, str):
                    digests[h] = str((dep.get("digest") or {}).get("sha256", ""))
    out = []
    for item in recipes:
        if not isinstance(item, dict):
            continue
        fact: dict[str, Any] = {k: item.get(k) for k in ("name", "version", "hash")}
        fact["wheel_sha256"] = digests.get(str(item.get("hash")))
        fact["env"] = None  # not in this store: the hash is still the proof
        with contextlib.suppress(StoreError, UsageError):
            fact["env"] = DerivationDoc(
                read_derivation(store.resolve(str(item.get("hash"))).path)
            ).env
        out.append(fact)
    return tuple(out)


def worst_exit_code(reports: list[AuditReport]) -> int:
    """Return the exit status for several wheels: that of the least trustworthy one."""
    return worst_status_code([r.status for r in reports])


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def record_problems(zf: zipfile.ZipFile) -> list[str]:
    """Return how the archive disagrees with its RECORD (empty when consistent)."""
    names = zf.namelist()
    tops = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    if len(tops) != 1:
        return [f"expected one .dist-info directory, found {sorted(tops)}"]
    dist_info = tops.pop()
    try:
        text = zf.read(f"{dist_info}/RECORD").decode("utf-8")
    except KeyError:
        return [f"{dist_info}/RECORD is missing"]
    except (zipfile.BadZipFile, zlib.error, UnicodeDecodeError, OSError) as exc:
        return [f"{dist_info}/RECORD is unreadable: {exc}"]
    rows: dict[str, tuple[str, str]] = {}
    for line in csv.reader(text.splitlines()):
        if len(line) == 3:
            rows[line[0]] = (line[1], line[2])
    problems: list[str] = []
    unsigned = {f"{dist_info}/{n}" for n in _UNSIGNED}
    for info in zf.infolist():
        if info.is_dir() or info.filename in unsigned:
            continue
        row = rows.pop(info.filename, None)
        if row is None:
            problems.append(f"{info.filename} is not listed in RECORD")
            continue
        algo, _, want = row[0].partition("=")
        if algo not in ("sha256", "sha384", "sha512", "blake2b"):
            problems.append(f"{info.filename}: RECORD has no usable hash ({row[0]!r})")
            continue
        h = hashlib.new(algo)
        size = 0
        try:
            with zf.open(info) as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
                    size += len(chunk)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
            problems.append(f"{info.filename}: corrupt data in the archive ({exc})")
            continue
        if _b64(h.digest()) != want:
            problems.append(f"{info.filename}: {algo} does not match RECORD")
        elif row[1] and row[1] != str(size):
            problems.append(f"{info.filename}: size {size} does not match RECORD ({row[1]})")
    problems.extend(
        f"{p} is listed in RECORD but not in the archive"
        for p in sorted(rows)
        if p not in unsigned and not p.endswith("/")
    )
    return problems


def audit_wheel(
    wheel: Path, *, store: Store | None, trusted: Mapping[str, PublicKey] | None = None
) -> AuditReport:
    """Audit the wheel file at ``wheel`` against ``store``; see the module doc for statuses.

    ``store`` None: there is no store where the command looked, so nothing can be verified.
    ``trusted``: the keys a signature is checked with (default: :func:`signing.trusted_keys`).
    """
    try:
        st = os.stat(wheel)
    except FileNotFoundError:
        raise UsageError(f"{wheel}: no such file") from None
    except OSError as exc:  # a name too long, a loop of links, no permission
        raise UsageError(f"{wheel}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block, /dev/zero never ends
        raise UsageError(f"{wheel}: not a regular file")
    try:
        size = st.st_size
        b3 = file_blake3(wheel)
    except FileNotFoundError:
        raise UsageError(f"{wheel}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{wheel}: cannot read: {exc.strerror or exc}") from exc
    rows = store.index.by_wheel_digest(b3) if store is not None else []
    if rows:
        row = rows[0]
        sha = next((w.sha256 for w in row.wheels if w.blake3 == b3), "")
        notes: list[str] = []
        derivation = statement = None
        archs = None
        links: tuple[Mapping[str, str], ...] = ()
        meta = None
        if os.path.isdir(row.path):
            derivation = read_derivation(row.path)
            statement = read_statement(row.path / layout.PROVENANCE)
            # what the check read from this very wheel's offload bundles when it was built
            name = next((w.filename for w in row.wheels if w.blake3 == b3), None)
            meta = read_meta(row.path)
            archs = ((meta.archs if meta is not None else None) or {}).get(name or "", {})
            links = tuple(((meta.links if meta is not None else None) or {}).get(name or "", ()))
            if statement is None:
                notes.append("the store entry has no provenance statement (built before it)")
        else:
            notes.append(f"the store entry {row.path} no longer exists; facts from the stamp")
            derivation = _stamp_derivation(wheel)
        signature = check_entry(row.path, trusted) if os.path.isdir(row.path) else None
        problems: list[str] = []
        if signature is not None and signature.status == "invalid":
            # A trusted key's signature that fails means the entry's provenance was altered.
            problems.append(f"provenance signature by {signature.keyid}: {signature.detail}")
        if statement is not None:
            problems += _coverage_problems(row.path, statement, signature)
        return AuditReport(
            wheel=wheel,
            status=TAMPERED if problems else VERIFIED,
            problems=tuple(problems),
            signature=signature,
            blake3=b3,
            sha256=sha or file_sha256(wheel),
            size=size,
            notes=tuple(notes),
            input_hash=row.hash,
            derivation=derivation,
            entry_path=row.path,
            statement=statement,
            archs=archs,
            links=links,
            dependencies=dependency_facts(derivation, statement, store) if store else (),
            origin=meta.origin if meta is not None else None,
            accepted=accepted_facts(store, row.hash, sha, trusted) if store else (),
        )
    return _audit_unverified(wheel, store=store, b3=b3, size=size)


def _coverage_problems(
    entry_dir: Path, statement: Mapping[str, Any], signature: SignatureCheck | None
) -> list[str]:
    """The entry's files its provenance statement does not cover (a file a cache added, such as
    a ``sitecustomize.py``) and those it names that are gone: a valid signature vouches for
    the statement, never for a file the statement does not name."""
    from rocmforge.store.coverage import OLD_STATEMENT, coverage, uncovered_files

    try:
        extra, gone = uncovered_files(entry_dir, statement)
    except OSError as exc:
        return [f"cannot list the store entry {entry_dir}: {exc.strerror or exc}"]
    try:
        old = "" if coverage(statement).complete else OLD_STATEMENT
    except ValueError:
        old = ""
    signed = signature is not None and signature.status == "valid"
    vouch = " (the valid signature covers the statement only)" if signed else ""
    out = [
        f"{name}: in the store entry, but no provenance statement covers it{vouch}{old}: added "
        "after the build (by a cache?); `rocmforge verify --repair` moves it aside"
        for name in extra
    ]
    out += [f"{name}: named by the provenance statement, but gone from the store entry"
            for name in gone]  # fmt: skip
    return out


def accepted_facts(
    store: Store, hash: str, sha256: str, trusted: Mapping[str, PublicKey] | None = None
) -> tuple[Mapping[str, Any], ...]:
    """The facts of entry ``hash``'s acceptance runs whose subjects include the wheel
    ``sha256``, each signature checked against ``trusted`` (default: the trusted keys)."""
    from rocmforge.store.accepted import read_runs
    from rocmforge.trust.signing import trusted_keys, verify_envelope

    runs = [r for r in read_runs(store.root, hash) if sha256 in r.digests]
    keys = None
    out = []
    for r in runs:
        status = "unsigned"
        if r.envelope is not None:
            keys = keys if keys is not None else (trusted_keys() if trusted is None else trusted)
            check = verify_envelope(r.envelope, keys)
            status = check.status + (f" (key {check.keyid})" if check.keyid else "")
        out.append(r.facts(status))
    return tuple(out)


def _read_archs(wheel: Path) -> dict[str, Any] | None:
    """Read the GPU archs of each library in `wheel` from its offload bundles (None: unreadable)."""
    from rocmforge.toolchain.offload import OffloadError, wheel_archs

    try:
        return {lib: found.to_json() for lib, found in wheel_archs(wheel).items()}
    except OffloadError:
        return None


def _stamp_derivation(wheel: Path) -> dict[str, Any] | None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            stamp = read_stamp(zf, wheel)
    except (OSError, zipfile.BadZipFile, zlib.error, StampError):
        return None
    return dict(stamp.derivation) if stamp else None


def _audit_unverified(wheel: Path, *, store: Store | None, b3: str, size: int) -> AuditReport:
    sha = file_sha256(wheel)

    def report(status: str, problems: list[str], **more: Any) -> AuditReport:
        return AuditReport(
            wheel=wheel,
            blake3=b3,
            sha256=sha,
            size=size,
            status=status,
            problems=tuple(problems),
            **more,
        )

    stamp: Stamp | None = None
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                stamp = read_stamp(zf, wheel)
            except StampError as exc:
                return report(TAMPERED, [str(exc), *record_problems(zf)])
            problems = record_problems(zf)
    except (zipfile.BadZipFile, zlib.error, OSError) as exc:
        return report(UNKNOWN, [f"not a readable wheel (zip) archive: {exc}"])
    if stamp is None:
        problems.insert(0, "no rocmforge stamp: not built by rocmforge, or the stamp was removed")
        return report(UNKNOWN, problems)
    if not stamp.consistent():
        problems.append(
            f"the stamp's derivation does not hash to its input hash {stamp.input_hash}"
        )
    built = store.index.get(stamp.input_hash) if store is not None else None
    status = TAMPERED if problems else CLAIMED
    links = _links_here(wheel)
    notes = (
        ["links resolved on this machine (the build's own record is in its store)"] if links else []
    )
    if built is not None and built.wheels:
        problems.append(
            f"this store built input hash {stamp.input_hash} into different bytes ("
            + ", ".join(f"{w.filename} sha256 {w.sha256[:16]}..." for w in built.wheels)
            + ")"
            + (
                ""
                if status == TAMPERED
                else ": the build is not reproducible or reads an input the hash does not "
                "cover (`rocmforge realize --check RECIPE` rebuilds and lists the differing files)"
            )
        )
        status = TAMPERED if status == TAMPERED else DIVERGED
    return report(
        status,
        problems,
        input_hash=stamp.input_hash,
        derivation=stamp.derivation,
        entry_path=built.path if built is not None else None,
        stamped_by=stamp.rocmforge,
        archs=_read_archs(wheel),
        links=links,
        notes=tuple(notes),
    )


def _links_here(wheel: Path) -> tuple[dict[str, str], ...]:
    """Resolve the libraries ``wheel``'s ELF files link as this machine would (empty: none)."""
    from rocmforge.toolchain.elf import ElfError, candidate_paths, resolve_links, wheel_dynamic
    from rocmforge.toolchain.manifest import covered_roots, detect_database, find_owners

    try:
        dynamic = wheel_dynamic(wheel)
    except ElfError:
        return ()
    if not dynamic[0]:
        return ()
    db = detect_database()
    owners = find_owners(candidate_paths(dynamic[0]), db)
    roots = covered_roots(db)
    return tuple(link.to_json() for link in resolve_links(dynamic, owner_of=owners, roots=roots))
