"""The acceptance runs kept beside a store entry: ``accepted/<hash>/<run>.json``.

An entry directory is sealed once published, so the proof that its wheels work on a node's GPUs
(``rocmforge test``: an in-toto Statement with the test-result predicate, made by
:mod:`rocmforge.accept.attest`) lives beside it, keyed by the entry's input hash. Each file is
that statement, or a DSSE envelope over it when the run was signed (the signature is checked by
:mod:`rocmforge.trust.signing`: this module only reads). gc removes an entry's runs with it;
push and substitution carry them (:mod:`rocmforge.cache.push`, :mod:`rocmforge.cache.substitute`).

This module is the one reader of those files: show, audit, query, last-known-good and the
``--require-accepted`` gates all take an :class:`AcceptedRun`.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import RocmforgeError, StoreError
from rocmforge.store import layout
from rocmforge.store.showtext import PASSING
from rocmforge.util.fsutil import write_atomic

if TYPE_CHECKING:
    from rocmforge.store.entry import Entry

#: the predicate of a run (``https://in-toto.io/attestation/test-result/v0.1``)
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"


def _annotations(statement: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for item in statement.get("predicate", {}).get("configuration", ()):
        if isinstance(item, Mapping) and item.get("name") == name:
            value = item.get("annotations")
            return value if isinstance(value, Mapping) else {}
    return {}


def _size(n: float) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


@dataclass(frozen=True, slots=True)
class AcceptedRun:
    """One acceptance run of an entry: the statement (and its envelope when signed)."""

    hash: str
    file: Path
    statement: Mapping[str, Any]
    envelope: Mapping[str, Any] | None = None

    @property
    def result(self) -> str:
        """``PASSED``, ``WARNED`` or ``FAILED``."""
        return str(self.statement.get("predicate", {}).get("result", "FAILED"))

    @property
    def passed(self) -> bool:
        """Whether the run accepts the entry (passed, or passed with a check skipped)."""
        return self.result in PASSING

    @property
    def run(self) -> Mapping[str, Any]:
        """The run's facts: tier, rocmforge version, started, seconds, sandbox."""
        return _annotations(self.statement, "rocmforge-acceptance")

    @property
    def tier(self) -> str:
        """``smoke``, ``comm`` or ``project`` (a recipe's ``[test]`` script alone)."""
        return str(self.run.get("tier", "?"))

    @property
    def started(self) -> str:
        """When the run started (RFC 3339, UTC)."""
        return str(self.run.get("started", ""))

    @property
    def node(self) -> Mapping[str, Any]:
        """The node's facts: GPU model and count, archs, driver and runtime versions."""
        return _annotations(self.statement, "node")

    def check(self, name: str) -> Mapping[str, Any] | None:
        """One check's annotations (status, seconds, figures, detail), or None."""
        found = _annotations(self.statement, f"check:{name}")
        return found or None

    @property
    def digests(self) -> frozenset[str]:
        """The sha256 of every subject (the wheels the run installed and tested)."""
        out = set()
        for s in self.statement.get("subject", ()):
            digest = s.get("digest", {}).get("sha256") if isinstance(s, Mapping) else None
            if isinstance(digest, str):
                out.add(digest)
        return frozenset(out)

    @property
    def bandwidth(self) -> tuple[int, float] | None:
        """The comm tier's largest in-place row: (bytes, busbw GB/s), or None."""
        sweep = self.check("sweep")
        rows = (sweep or {}).get("figures", {}).get("rows") if sweep else None
        if not rows:
            return None
        last = rows[-1]
        try:
            return int(last["bytes"]), float(last["busbw"])
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def node_kind(self) -> tuple[str, int] | None:
        """(GPU model, count): what last-known-good compares a run with."""
        model, count = self.node.get("gpu_model"), self.node.get("gpu_count")
        if isinstance(model, str) and isinstance(count, int):
            return model, count
        return None

    def headline(self) -> str:
        """One line: ``8x AMD Instinct MI300X (gfx942), 2026-12-01, all-reduce 8 GB in-place
        312 GB/s busbw`` (comm), ``..., smoke tier PASSED`` (the others)."""
        node = self.node
        archs = ", ".join(str(a) for a in node.get("archs") or ())
        who = f"{node.get('gpu_count', '?')}x {node.get('gpu_model')}"
        if not node.get("gpu_model"):
            who = f"{node.get('hostname') or 'a node'} ({node.get('gpus_found') or 'no'} GPU)"
        if archs:
            who += f" ({archs})"
        day = self.started[:10] or "undated"
        bw = self.bandwidth
        if self.tier == "comm" and bw is not None and int(node.get("gpu_count") or 0) > 1:
            what = f"all-reduce {_size(bw[0])} in-place {bw[1]:.0f} GB/s busbw"
        else:
            what = f"{self.tier} tier {self.result}"
        failed = self.statement.get("predicate", {}).get("failedTests") or []
        if failed:
            what += " (failed: " + ", ".join(str(f) for f in failed) + ")"
        return f"{who}, {day}, {what}"

    def facts(self, signature: str | None = None) -> dict[str, Any]:
        """What ``audit`` and ``show`` say of the run (plain data, as their reports hold it):
        result, tier, when, the headline, the file and ``signature`` (a checked status such as
        ``valid``; default ``signed`` or ``unsigned`` unchecked)."""
        sig = signature or ("signed" if self.envelope is not None else "unsigned")
        return {"result": self.result, "tier": self.tier, "started": self.started,
                "headline": self.headline(), "file": str(self.file), "signature": sig}  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The run as JSON (``show --json``, ``query --accepted --json``)."""
        return {"hash": self.hash, "file": str(self.file), "result": self.result,
                "tier": self.tier, "started": self.started, "node": dict(self.node),
                "signed": self.envelope is not None, "headline": self.headline(),
                "bandwidth": list(self.bandwidth) if self.bandwidth else None}  # fmt: skip


def runs_dir(root: Path | str, hash: str) -> Path:
    """``accepted/<hash>`` under the store ``root``."""
    return Path(root) / layout.ACCEPTED / hash


def run_name(started: str, tier: str) -> str:
    """A new run's file name: ``20261202T085300Z-smoke-1a2b3c4d.json`` (sorts by time)."""
    stamp = "".join(ch for ch in started if ch.isalnum()) or time.strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{tier}-{os.urandom(4).hex()}{layout.ACCEPTED_SUFFIX}"


def parse_run(hash: str, file: Path, raw: bytes) -> AcceptedRun:
    """Read one run's file (a statement, or a DSSE envelope over one); StoreError naming it."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise StoreError(f"{file}: not JSON: {exc}") from exc
    envelope = None
    if isinstance(data, dict) and "payloadType" in data:
        envelope = data
        try:
            data = json.loads(base64.b64decode(str(data.get("payload", "")), validate=True))
        except (ValueError, binascii.Error) as exc:
            raise StoreError(f"{file}: the envelope's payload is not a statement: {exc}") from exc
    if not isinstance(data, dict) or data.get("predicateType") != TEST_RESULT:
        raise StoreError(f"{file}: not an in-toto statement with the test-result predicate")
    if not isinstance(data.get("predicate"), dict) or not isinstance(data.get("subject"), list):
        raise StoreError(f"{file}: the statement has no predicate or no subject list")
    return AcceptedRun(hash, file, data, envelope)


def is_run_name(name: str) -> bool:
    """Whether ``name`` is a run's file name (plain, ``.json``, not hidden)."""
    return (name.endswith(layout.ACCEPTED_SUFFIX) and not name.startswith(".")
            and "/" not in name and len(name) > len(layout.ACCEPTED_SUFFIX))  # fmt: skip


def run_files(root: Path | str, hash: str) -> list[Path]:
    """The files of the entry's runs, oldest first (none: an empty list)."""
    d = runs_dir(root, hash)
    try:
        names = sorted(n for n in os.listdir(d) if is_run_name(n))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise StoreError(f"{d}: cannot list the acceptance runs: {exc}") from exc
    return [d / n for n in names]


def read_runs(root: Path | str, hash: str) -> list[AcceptedRun]:
    """The entry's runs, oldest first; a damaged file raises StoreError naming it."""
    out = []
    for f in run_files(root, hash):
        try:
            raw = f.read_bytes()
        except OSError as exc:
            raise StoreError(f"{f}: cannot read: {exc}") from exc
        out.append(parse_run(hash, f, raw))
    return sorted(out, key=lambda r: (r.started, r.file.name))


def write_run(root: Path | str, hash: str, name: str, raw: bytes) -> Path:
    """Keep one run (its statement or envelope bytes) with the entry ``hash``, atomically;
    an existing file of that name is left as it is (runs are content, never rewritten)."""
    if not layout.is_hash(hash) or not is_run_name(name):
        raise StoreError(f"not an acceptance run's place: {hash}/{name}")
    parse_run(hash, Path(name), raw)
    d = runs_dir(root, hash)
    path = d / name
    try:
        d.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            write_atomic(path, raw)
    except OSError as exc:
        raise StoreError(f"{path}: cannot keep the acceptance run: {exc}") from exc
    return path


def accepted_hashes(root: Path | str) -> list[str]:
    """The input hashes that have at least one run kept (passing or not)."""
    d = Path(root) / layout.ACCEPTED
    try:
        return sorted(n for n in os.listdir(d) if layout.is_hash(n) and run_files(root, n))
    except FileNotFoundError:
        return []


def last_known_good(
    root: Path | str, kind: tuple[str, int], *, before: str | None = None
) -> AcceptedRun | None:
    """The newest passing comm run, of any entry, on a node of ``kind`` (GPU model, count)
    that has a bandwidth figure: the line a new run of that kind must not fall far below."""
    best: AcceptedRun | None = None
    for h in accepted_hashes(root):
        for run in read_runs(root, h):
            if (run.tier != "comm" or not run.passed or run.node_kind != kind
                    or run.bandwidth is None or (before and run.started >= before)):  # fmt: skip
                continue
            if best is None or run.started > best.started:
                best = run
    return best


def passing(runs: Sequence[AcceptedRun], arch: str | None = None) -> list[AcceptedRun]:
    """The runs that accept their entry, on a node with ``arch`` when given (``gfx942``)."""
    return [r for r in runs if r.passed and (arch is None or arch in (r.node.get("archs") or ()))]


# -- the --require-accepted gates (push, export) and query --accepted --------------------------


class NotAccepted(RocmforgeError):
    """``--require-accepted``: an entry has no passing run (exit 1, before anything is written)."""

    exit_code = 1


def sound_runs(root: Path | str, hash: str) -> list[AcceptedRun]:
    """The entry's runs, oldest first, leaving out any damaged file (``show``/``audit`` name
    those; a damaged run accepts nothing)."""
    out = []
    for f in run_files(root, hash):
        try:
            out.append(parse_run(hash, f, f.read_bytes()))
        except (OSError, StoreError):
            continue
    return sorted(out, key=lambda r: (r.started, r.file.name))


def unaccepted(root: Path | str, entries: Sequence[Entry], arch: str | None = None) -> list[Entry]:
    """The ``entries`` (of the store at ``root``) no passing run accepts, on a node with
    ``arch`` when given. An entry is accepted by a passing run of its own, or by a passing run
    of another of ``entries`` whose subjects hold every wheel of it by sha256 (a dependency
    tested in its dependent's closure: ``rocmforge test`` keeps the run with the entries named,
    its subjects are every wheel installed)."""
    ok = {e.hash: passing(sound_runs(root, e.hash), arch) for e in entries}
    tested: set[str] = set()
    for runs in ok.values():
        for r in runs:
            tested |= r.digests
    out = []
    for e in entries:
        wheels = {w.sha256 for w in e.meta.wheels}
        if not ok[e.hash] and not (wheels and wheels <= tested):
            out.append(e)
    return out


def require_accepted(
    root: Path | str, entries: Sequence[Entry], arch: str | None, *, verb: str
) -> None:
    """Raise :class:`NotAccepted` (one line naming each entry: name, version, hash) unless
    :func:`unaccepted` finds none; ``verb`` (``push``, ``export``) starts the message."""
    lacking = unaccepted(root, entries, arch)
    if lacking:
        on = f" on {arch}" if arch else ""
        names = ", ".join(f"{e.name} {e.version} ({e.hash})" for e in lacking)
        raise NotAccepted(
            f"{verb} --require-accepted: no passing acceptance run{on} for {names} "
            "(rocmforge test; nothing was written)"
        )
