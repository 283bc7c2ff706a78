"""``explain``: name, key by key, why two derivations differ.

Derivations are flattened into dotted key paths — ``env.PYTORCH_ROCM_ARCH``,
``source.submodules.third_party/fbgemm``, ``source.patches.fix.patch``, ``requirements.numpy``
(its version; ``requirements.numpy.blake3`` when only the wheel changed), ``toolchain.cc.version``,
``build.steps[0]``, ``toolchain.rocm-sdk.rocm-sdk-core`` (an SDK wheel's version; ``.sha256``
when only the wheel changed) — and compared. A key whose value differs hides the keys below it,
so a bumped requirement shows as one line, not three.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmforge.errors import StoreError, UsageError
from rocmforge.store.entry import DerivationDoc, read_derivation
from rocmforge.store.showtext import ABSENT as ABSENT
from rocmforge.store.showtext import flatten as flatten
from rocmforge.store.showtext import show_value as show_value

if TYPE_CHECKING:
    from rocmforge.sources.requirements import Fetcher
    from rocmforge.store.store import Store

MAX_SHOWN = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    """One key path whose value differs between A and B (``ABSENT`` where a side lacks it)."""

    key: str
    old: Any
    new: Any

    def to_json(self) -> dict[str, Any]:
        """Return ``{"key", "a", "b"}``; an absent side is ``null`` with a flag."""
        return {
            "key": self.key,
            "a": None if self.old is ABSENT else self.old,
            "b": None if self.new is ABSENT else self.new,
            "only_in": "b" if self.old is ABSENT else "a" if self.new is ABSENT else None,
        }

    def __str__(self) -> str:
        return f"{self.key}: {show_value(self.key, self.old)} -> {show_value(self.key, self.new)}"


def _parents(key: str) -> list[str]:
    out = []
    for i, ch in enumerate(key):
        if ch in ".[" and i:
            out.append(key[:i])
    return out


def _prune(a: Any, b: Any) -> tuple[Any, Any]:
    """Drop the keys whose values are equal on both sides, at every mapping level (a toolchain
    fingerprint of ~1,000 keys is compared in C, not flattened). A mapping that pruning would
    empty on one side is kept whole: an empty mapping flattens to a key of its own."""
    if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
        return a, b
    pa: dict[str, Any] = {}
    pb: dict[str, Any] = {}
    for k in a.keys() | b.keys():
        if k in a and k in b:
            if a[k] != b[k]:
                pa[k], pb[k] = _prune(a[k], b[k])
        elif k in a:
            pa[k] = a[k]
        else:
            pb[k] = b[k]
    if (a and not pa) or (b and not pb):
        return a, b
    return pa, pb


def diff_derivations(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[Difference, ...]:
    """Return the key paths whose values differ between derivations ``a`` and ``b``, sorted."""
    if a == b:
        return ()
    fa, fb = (flatten(x) for x in _prune(a, b))
    differing = {
        k for k in fa.keys() | fb.keys() if fa.get(k, ABSENT) != fb.get(k, ABSENT)
    }
    return tuple(
        Difference(key=k, old=fa.get(k, ABSENT), new=fb.get(k, ABSENT))
        for k in sorted(differing)
        if not any(p in differing for p in _parents(k))
    )


def descend(
    differences: tuple[Difference, ...], store: Store, depth: int = 8
) -> tuple[Difference, ...]:
    """Replace a differing dependency (``recipes.NAME``: two input hashes) by what differs
    inside it, as ``recipes.NAME -> env.KEY``, when both entries are in ``store``."""
    out: list[Difference] = []
    for d in differences:
        name = d.key.removeprefix("recipes.")
        hashes = isinstance(d.old, str) and isinstance(d.new, str)
        if depth and hashes and d.key.startswith("recipes.") and "." not in name:
            try:
                a = read_derivation(store.resolve(d.old).path)
                b = read_derivation(store.resolve(d.new).path)
            except (StoreError, UsageError):
                out.append(d)
                continue
            inner = descend(diff_derivations(a, b), store, depth - 1)
            out.extend(
                Difference(key=f"{d.key} -> {i.key}", old=i.old, new=i.new) for i in inner
            )
            if inner:
                continue
        out.append(d)
    return tuple(out)


def summarize(differences: tuple[Difference, ...], limit: int = MAX_SHOWN) -> str:
    """Return ``"key: a -> b; ..."`` with at most ``limit`` items (and how many more)."""
    shown = "; ".join(str(d) for d in differences[:limit])
    more = len(differences) - limit
    return shown + (f"; ... and {more} more" if more > 0 else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Side:
    """One side of a comparison: what it was given as, its input hash and derivation."""

    label: str
    kind: str
    hash: str | None
    derivation: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """Return the side as JSON-ready data (without the derivation)."""
        return {"target": self.label, "kind": self.kind, "hash": self.hash}


def load_side(target: str, *, store: Store, fetcher: Fetcher | None) -> Side:
    """Return the derivation named by ``target``: a wheel (its stamp), a recipe file (resolved),
    or a store entry (input hash, unique prefix, entry directory name or a path inside it)."""
    if target.endswith(".whl") and os.path.isfile(target):
        from rocmforge.wheel.stamp import read_wheel_stamp

        stamp = read_wheel_stamp(Path(target))
        if stamp is None:
            raise UsageError(f"{target}: the wheel has no rocmforge stamp; nothing to compare")
        return Side(label=target, kind="wheel", hash=stamp.input_hash, derivation=stamp.derivation)
    if os.path.isfile(target) and not _inside(store.entries_dir, target):
        from rocmforge.plan.graph import load_graph, plan_dependencies
        from rocmforge.plan.resolve import resolve

        graph = load_graph([target])
        [file] = graph.targets
        deps = plan_dependencies(graph, file, store=store, fetcher=fetcher)
        resolved = resolve(graph.recipes[file], store=store, fetcher=fetcher, dependencies=deps)
        drv = resolved.derivation
        return Side(label=target, kind="recipe", hash=drv.hash, derivation=drv.data)
    entry = store.resolve(target)
    return Side(
        label=target, kind="store", hash=entry.hash, derivation=read_derivation(entry.path)
    )


def _inside(root: Path, target: str) -> bool:
    rel = os.path.relpath(os.path.realpath(target), os.path.realpath(root))
    return not rel.startswith("..")


@dataclass(frozen=True, slots=True, kw_only=True)
class Nearest:
    """The cached build of the same package that differs from a derivation in the fewest keys."""

    hash: str
    name: str
    version: str
    path: Path
    differences: tuple[Difference, ...]

    def message(self) -> str:
        """One line for a reporter: which build, and what differs."""
        return (
            f"not in the store; nearest cached build {self.hash[:12]} ({self.name} "
            f"{self.version}) differs in: {summarize(self.differences)}"
        )

    def to_json(self) -> dict[str, Any]:
        """Return the finding as JSON-ready data."""
        return {
            "hash": self.hash,
            "path": str(self.path),
            "differences": [d.to_json() for d in self.differences],
        }


#: How many of a package's newest builds a miss compares itself with (each is a file read and a
#: diff of ~1,000 keys; a store with hundreds of builds of one package must not pay for all).
NEAREST_LIMIT = 16


def nearest_cached(store: Store, derivation: Mapping[str, Any]) -> Nearest | None:
    """Return the indexed build of the same package nearest to ``derivation``, or None.

    Nearest means the fewest differing keys; ties go to the newest build. Only the
    :data:`NEAREST_LIMIT` newest builds of the package are compared. Entries whose
    directory or derivation cannot be read are skipped (the index may lag behind the store).
    """
    name = DerivationDoc(derivation).package_name
    if name is None:
        return None
    best: tuple[int, float, Nearest] | None = None
    for row in store.index.by_name(name)[-NEAREST_LIMIT:]:
        try:
            other = read_derivation(row.path)
        except StoreError:
            continue
        diffs = diff_derivations(other, derivation)
        if not diffs:
            continue
        key = (len(diffs), -row.created)
        if best is None or key < best[:2]:
            found = Nearest(
                hash=row.hash, name=row.name, version=row.version, path=row.path,
                differences=diffs,
            )  # fmt: skip
            best = (key[0], key[1], found)
    return best[2] if best else None
