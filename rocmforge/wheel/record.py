"""A wheel's RECORD: parse its rows (refusing weak hashes), list new members, encode digests."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmforge.errors import CheckError

__all__ = ["RecordRow", "parse_record", "record_with", "urlsafe_b64"]

_WEAK_HASHES = frozenset({"md5", "sha1"})


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordRow:
    """One RECORD line: the hash algorithm and urlsafe-base64 digest, and the size, if given."""

    algorithm: str | None
    digest: str | None
    size: int | None


def parse_record(text: str, wheel: Path, record_path: str) -> dict[str, RecordRow]:
    """Parse RECORD into ``{path: row}``; raise CheckError on malformed or duplicate rows."""
    rows: dict[str, RecordRow] = {}
    problems: list[str] = []
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row:
            continue
        if len(row) != 3:
            problems.append(f"line {lineno}: expected 3 fields, got {len(row)}")
            continue
        path, hash_field, size_field = row
        algorithm = digest = None
        if hash_field:
            algorithm, sep, digest = hash_field.partition("=")
            if not sep or algorithm not in hashlib.algorithms_guaranteed:
                problems.append(f"line {lineno}: {path}: bad hash field {hash_field!r}")
                continue
            if algorithm in _WEAK_HASHES:
                problems.append(f"line {lineno}: {path}: weak hash {algorithm} not allowed")
                continue
        size = None
        if size_field:
            if not size_field.isdigit():
                problems.append(f"line {lineno}: {path}: bad size {size_field!r}")
                continue
            size = int(size_field)
        if path in rows:
            problems.append(f"line {lineno}: {path}: listed twice")
            continue
        rows[path] = RecordRow(algorithm=algorithm, digest=digest, size=size)
    if problems:
        raise CheckError(f"{wheel}: malformed {record_path}: " + "; ".join(problems))
    return rows


def urlsafe_b64(digest: bytes) -> str:
    """Encode a digest the way RECORD does: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def record_with(record: str, members: Mapping[str, bytes]) -> str:
    """Return RECORD text listing ``members`` (replacing their old rows), RECORD's own row last."""
    rows = [r for r in csv.reader(record.splitlines()) if r and r[0] not in members]
    record_rows = [r for r in rows if r[0].endswith(".dist-info/RECORD")]
    rows = [r for r in rows if r not in record_rows]
    for name, data in members.items():
        rows.append([name, f"sha256={urlsafe_b64(hashlib.sha256(data).digest())}", str(len(data))])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([*rows, *record_rows])
    return out.getvalue()
