"""Build requirements: exact pins fetched once as wheels into the store, identified by digest.

Fetching happens before the build (the build itself has no network) through a :class:`Fetcher`.
The default :class:`PipFetcher` runs ``pip download --no-deps --only-binary=:all:``; extra pip
arguments (an internal index, ``--no-index --find-links DIR`` for air-gapped machines) come from
``ROCMFORGE_PIP_ARGS``. A cache hit (wheel already in the store) runs no process at all.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rocmforge.errors import RequirementError
from rocmforge.recipe.model import RequirementPin
from rocmforge.util.hashing import file_blake3, file_digests
from rocmforge.util.statcache import StatCache


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedRequirement:
    """A pinned requirement resolved to a wheel file in the store."""

    name: str
    version: str
    wheel: Path
    blake3: str
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """Return what enters the derivation: name, version, wheel file name and digest."""
        return {
            "name": self.name,
            "version": self.version,
            "wheel": self.wheel.name,
            "blake3": self.blake3,
        }


class Fetcher(Protocol):
    """Downloads the wheel for one pin into ``dest`` and returns its path."""

    def fetch(self, pin: RequirementPin, *, python_version: str, dest: Path) -> Path:
        """Fetch one wheel for ``pin`` usable by Python ``python_version`` into ``dest``."""
        ...


class PipFetcher:
    """Fetch wheels with ``pip download`` (binary only, no dependencies: pins are explicit)."""

    def __init__(self, extra_args: Sequence[str] | None = None) -> None:
        if extra_args is None:
            extra_args = shlex.split(os.environ.get("ROCMFORGE_PIP_ARGS", ""))
        self.extra_args = tuple(extra_args)

    def fetch(self, pin: RequirementPin, *, python_version: str, dest: Path) -> Path:
        """Run pip download for ``pin`` into an empty temp dir and move the wheel to ``dest``."""
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest, prefix=".fetch-") as tmp:
            argv = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "--python-version",
                python_version,
                "--dest",
                tmp,
                *self.extra_args,
                f"{pin.name}=={pin.version}",
            ]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            except OSError as exc:
                raise RequirementError(
                    f"cannot run pip to fetch {pin.name}=={pin.version}: {exc}"
                ) from exc
            wheels = sorted(Path(tmp).glob("*.whl"))
            if proc.returncode != 0 or not wheels:
                lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")]
                why = lines[0] if lines else (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise RequirementError(
                    f"could not fetch a wheel for {pin.name}=={pin.version}: {why}"
                )
            final = dest / wheels[0].name
            os.replace(wheels[0], final)
            return final


def resolve_requirements(
    pins: Sequence[str],
    *,
    python_version: str,
    wheel_dir: Path,
    cache_dir: Path,
    fetcher: Fetcher | None,
    locked: Mapping[str, tuple[str, str, str]] | None = None,
) -> tuple[ResolvedRequirement, ...]:
    """Resolve every pin to a wheel in ``wheel_dir``, fetching only what is missing.

    With ``fetcher=None`` a missing wheel raises instead of fetching (used by ``plan``).
    ``locked`` (pin -> wheel file name, blake3, sha256: a lock file's record) answers for a
    wheel not fetched yet, so a locked recipe is hashed without downloading; the build fetches
    it then and :func:`check_wheels` holds it to that blake3.
    """
    cache = StatCache(cache_dir / "wheels.json")
    out: list[ResolvedRequirement] = []
    for text in pins:
        pin = RequirementPin.parse(text)
        key = f"{pin.name}=={pin.version}|py{python_version}"
        hit = cache.get(key)
        known = (locked or {}).get(f"{pin.name}=={pin.version}")
        if hit is None and known is not None:
            hit = {"wheel": str(wheel_dir / known[0]), "blake3": known[1], "sha256": known[2]}
        if hit is None:
            if fetcher is None:
                raise RequirementError(f"{pin.name}=={pin.version} has not been fetched yet")
            wheel = fetcher.fetch(pin, python_version=python_version, dest=wheel_dir)
            b3, sha = file_digests(wheel)
            hit = {"wheel": str(wheel), "blake3": b3, "sha256": sha}
            cache.put(key, hit, [wheel])
        out.append(
            ResolvedRequirement(
                name=pin.name,
                version=pin.version,
                wheel=Path(hit["wheel"]),
                blake3=hit["blake3"],
                sha256=hit["sha256"],
            )
        )
    return tuple(sorted(out, key=lambda r: r.name))


def check_wheels(
    requirements: Sequence[ResolvedRequirement],
    *,
    python_version: str,
    fetcher: Fetcher | None,
    quarantine: Callable[[Path, str], Path],
) -> None:
    """Re-hash each requirement wheel against the digest recorded when it was fetched, before a
    build uses it.

    A wheel that changed in the store (even with its size and mtime kept) is moved aside with
    ``quarantine`` and fetched again; the new download must hash as recorded (the derivation
    names that digest), else :class:`RequirementError`.
    """
    for q in requirements:
        try:
            digest: str | None = file_blake3(q.wheel)
        except FileNotFoundError:
            digest = None
        except OSError as exc:
            raise RequirementError(f"cannot read requirement wheel {q.wheel}: {exc}") from exc
        if digest == q.blake3:
            continue
        if digest is not None:
            quarantine(
                q.wheel,
                f"requirement wheel changed since it was fetched (blake3 {digest[:16]}.., "
                f"recorded {q.blake3[:16]}..)",
            )
        if fetcher is None:
            raise RequirementError(
                f"{q.name}=={q.version}: the wheel {q.wheel} must be fetched again"
            )
        pin = RequirementPin.parse(f"{q.name}=={q.version}")
        got = fetcher.fetch(pin, python_version=python_version, dest=q.wheel.parent)
        if got != q.wheel or file_blake3(got) != q.blake3:
            again = "fetched again" if digest is not None else "fetched"
            raise RequirementError(
                f"{q.name}=={q.version}: the wheel {again} ({got.name}) does not have the "
                f"recorded blake3 {q.blake3[:16]}.. (the lock file's, or the first fetch's); "
                "if the lock is wrong, run rocmforge lock again"
            )
