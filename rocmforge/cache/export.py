"""``export``: a closure's wheels as a PEP 503 simple index, a find-links directory and constraints.

Layout of ``--to DIR``::

    DIR/*.whl                       the wheels (``pip install --no-index --find-links DIR``)
    DIR/simple/index.html           PEP 503 root: one link per project
    DIR/simple/<project>/index.html one link per wheel, ``#sha256=`` fragment
    DIR/constraints.txt             ``name==version --hash=sha256:...`` for every wheel
    DIR/accepted/<hash>/<run>.json  each exported entry's GPU acceptance runs, byte for byte as
                                    the store keeps them (``accepted/<hash>/`` of the store: an
                                    in-toto statement, or a DSSE envelope over one; its subjects
                                    name the wheels tested by file name and sha256), so
                                    :func:`rocmforge.store.accepted.read_runs` reads DIR too
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import shutil
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.errors import StoreError
from rocmforge.store import layout
from rocmforge.store.accepted import run_files
from rocmforge.store.entry import Entry
from rocmforge.util.fsutil import write_atomic


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportedWheel:
    """One exported wheel: its project, version, file and sha256."""

    project: str
    version: str
    file: str
    sha256: str

    def to_json(self) -> dict[str, str]:
        """Return JSON-ready data."""
        return {
            "project": self.project,
            "version": self.version,
            "file": self.file,
            "sha256": self.sha256,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportedRun:
    """One exported acceptance run: its entry and its file (relative to the export)."""

    hash: str
    name: str
    version: str
    file: str

    def to_json(self) -> dict[str, str]:
        """Return JSON-ready data."""
        return {"hash": self.hash, "name": self.name, "version": self.version, "file": self.file}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportReport:
    """What ``export`` wrote into ``dest``."""

    dest: Path
    wheels: tuple[ExportedWheel, ...]
    runs: tuple[ExportedRun, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return JSON-ready data."""
        return {
            "dest": str(self.dest),
            "wheels": [w.to_json() for w in self.wheels],
            "accepted": [r.to_json() for r in self.runs],
        }


def normalize(name: str) -> str:
    """PEP 503 normal form of a project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _copy_runs(entry: Entry, dest: Path) -> list[ExportedRun]:
    """Copy the entry's acceptance runs into ``dest/accepted/<hash>/`` (a file already there
    with the same bytes is left as it is)."""
    out = []
    for src in run_files(entry.path.parent.parent, entry.hash):
        raw = src.read_bytes()
        rel = Path(layout.ACCEPTED) / entry.hash / src.name
        target = dest / rel
        try:
            same = target.read_bytes() == raw
        except FileNotFoundError:
            same = False
        if not same:
            write_atomic(target, raw)
        out.append(ExportedRun(hash=entry.hash, name=entry.name, version=entry.version,
                               file=str(rel)))  # fmt: skip
    return out


def export(entries: Iterable[Entry], dest: Path) -> ExportReport:
    """Copy every wheel of ``entries`` into ``dest`` and write the index and constraints; each
    entry's acceptance runs go to ``dest/accepted/<hash>/``.

    Two different wheels of one project and version cannot be exported together (an installer
    could not tell them apart): that raises :class:`~rocmforge.errors.StoreError`.
    """
    wheels: dict[str, ExportedWheel] = {}
    pinned: dict[tuple[str, str], str] = {}
    runs: list[ExportedRun] = []
    try:
        os.makedirs(dest, exist_ok=True)
        for entry in entries:
            runs += _copy_runs(entry, dest)
            for wheel in entry.wheels:
                project = normalize(entry.meta.name)
                sha = _sha256(wheel)
                seen = pinned.get((project, entry.meta.version))
                if seen is not None and seen != wheel.name:
                    raise StoreError(
                        f"{project} {entry.meta.version}: two different builds ({seen} and "
                        f"{wheel.name}) in one export; export one variant per directory"
                    )
                pinned[(project, entry.meta.version)] = wheel.name
                target = dest / wheel.name
                if not target.exists() or _sha256(target) != sha:
                    tmp = dest / f".{wheel.name}.{os.getpid()}.tmp"
                    shutil.copyfile(wheel, tmp)
                    os.replace(tmp, target)
                wheels[wheel.name] = ExportedWheel(
                    project=project, version=entry.meta.version, file=wheel.name, sha256=sha
                )
        by_project: dict[str, list[ExportedWheel]] = defaultdict(list)
        for w in wheels.values():
            by_project[w.project].append(w)
        root = ["<!DOCTYPE html>\n<html><body>\n"]
        for project in sorted(by_project):
            root.append(f'<a href="{project}/">{html.escape(project)}</a>\n')
            links = "".join(
                f'<a href="../../{html.escape(w.file)}#sha256={w.sha256}">{html.escape(w.file)}'
                "</a>\n"
                for w in sorted(by_project[project], key=lambda w: w.file)
            )
            page = f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"
            write_atomic(dest / "simple" / project / "index.html", page.encode())
        root.append("</body></html>\n")
        write_atomic(dest / "simple" / "index.html", "".join(root).encode())
        lines = [
            f"{w.project}=={w.version} --hash=sha256:{w.sha256}\n"
            for w in sorted(wheels.values(), key=lambda w: (w.project, w.file))
        ]
        write_atomic(dest / "constraints.txt", "".join(lines).encode())
    except OSError as exc:
        raise StoreError(f"export to {dest}: {exc.strerror or exc}") from exc
    return ExportReport(
        dest=dest,
        wheels=tuple(sorted(wheels.values(), key=lambda w: w.file)),
        runs=tuple(sorted(runs, key=lambda r: r.file)),
    )
