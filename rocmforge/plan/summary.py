"""A derivation, and how two derivations differ, in a few lines sized for people.

``plan`` prints :func:`summary_lines` by default (``--full`` and ``--json`` give the whole
derivation); a cache miss names the nearest cached build and :func:`difference_groups` says what
differs by kind ("toolchain: 68 system packages added, 2 changed (clang-15, clang-19, ...)",
"env: CFLAGS") instead of a wall of keys; ``explain`` lists every key.
Pure functions over the JSON forms: nothing here reads a file or prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from rocmforge.store.showtext import ABSENT, show_value


class KeyDifference(Protocol):
    """One differing key path (:class:`rocmforge.trust.explain.Difference` is one)."""

    @property
    def key(self) -> str:
        """The dotted key path."""

    @property
    def old(self) -> Any:
        """The value in the cached build (``ABSENT`` where it lacks the key)."""

    @property
    def new(self) -> Any:
        """The value in the derivation asked for (``ABSENT`` where it lacks the key)."""


#: At most this many names are shown for one kind of difference; the rest are counted.
NAMES_SHOWN = 3
#: A kind with at most this many differing keys shows each key with both values.
SHOWN_IN_FULL = 2

_TOOLCHAIN_COUNTED = ("packages", "masked", "unowned", "database", "kind", "machine")


def _short_version(text: str) -> str:
    """``x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14) 12.2.0`` -> ``12.2.0``: the last word of the
    first line (a version string's usual end)."""
    words = text.strip().splitlines()[0].split() if text.strip() else []
    return words[-1] if words else text


def _tool(name: str, value: Any) -> str | None:
    """One toolchain component as ``name version``, or None when it has no version to show."""
    if not isinstance(value, Mapping):
        return None
    version = value.get("version")
    if isinstance(version, str) and version:
        label = value.get("implementation") if name == "python" else name
        return f"{label or name} {_short_version(version)}"
    inner = [t for k, v in sorted(value.items()) if (t := _tool(k, v)) is not None]
    return f"{name} ({', '.join(inner)})" if inner else None


def _sdk(value: Any) -> str:
    """The ``toolchain.rocm-sdk`` part: its wheels' count and ROCm version, or that it is not
    locked."""
    if isinstance(value, Mapping) and value.get("provisional"):
        return "rocm-sdk (not locked)"
    wheels = value if isinstance(value, list) else []
    versions = sorted(
        {str(w["version"]) for w in wheels if isinstance(w, Mapping) and "version" in w}
    )
    return f"rocm-sdk {'/'.join(versions) or '?'} ({len(wheels)} wheels)"


def toolchain_line(toolchain: Mapping[str, Any], system: Any = None) -> str:
    """``system on x86_64-linux: cc 12.2.0, cxx 12.2.0, cpython 3.11.7``: the toolchain's kind and
    the version of each component it fingerprints, without the system packages."""
    parts = []
    for name, value in sorted(toolchain.items()):
        if name in _TOOLCHAIN_COUNTED:
            continue
        text = _sdk(value) if name == "rocm-sdk" else _tool(name, value)
        if text is not None:
            parts.append(text)
    where = f" on {system}" if isinstance(system, str) else ""
    return f"{toolchain.get('kind', '?')}{where}: {', '.join(parts) or '-'}"


def system_line(toolchain: Mapping[str, Any]) -> str | None:
    """``1022 dpkg packages, 664 unowned files, 54 directories hidden``: the counted part of a
    system fingerprint (None when the toolchain has none)."""
    packages, unowned = toolchain.get("packages"), toolchain.get("unowned")
    masked = toolchain.get("masked")
    parts = []
    if isinstance(packages, Mapping):
        parts.append(f"{len(packages)} {toolchain.get('database') or 'system'} packages")
    if isinstance(unowned, Mapping) and isinstance(unowned.get("count"), int):
        parts.append(f"{unowned['count']} files no package owns")
    if isinstance(masked, list):
        parts.append(f"{len(masked)} unowned directories hidden from the build")
    return ", ".join(parts) or None


def source_line(source: Mapping[str, Any]) -> str:
    """``git 5c4886908584, 3 submodules, 1 patch`` or ``path tree blake3:a6e64aa9de21..``."""
    kind = str(source.get("kind", "?"))
    commit, tree = source.get("commit"), source.get("tree")
    ident = (
        commit[:12]
        if isinstance(commit, str)
        else show_value("tree", tree) if isinstance(tree, str) else ""
    )
    text = f"{kind} {ident}".strip() if kind == "git" else f"{kind} tree {ident or '?'}"
    for label, key in (("submodule", "submodules"), ("patch", "patches")):
        items = source.get(key)
        if isinstance(items, list) and items:
            plural = ("es" if label == "patch" else "s") if len(items) > 1 else ""
            text += f", {len(items)} {label}{plural}"
    return text


def _named(items: Any, key: str = "name") -> list[str]:
    out = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, Mapping) and key in item:
            out.append(f"{item[key]} {item.get('version', '')}".strip())
    return out


def summary_lines(derivation: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Return the derivation as ``(label, text)`` rows: source, toolchain, hashed env,
    requirements, recipes built against, inputs and the counted system fingerprint; a row only
    where the derivation has something to say."""
    rows: list[tuple[str, str]] = []
    source = derivation.get("source")
    if isinstance(source, Mapping):
        rows.append(("source", source_line(source)))
    toolchain = derivation.get("toolchain")
    if isinstance(toolchain, Mapping):
        rows.append(("toolchain", toolchain_line(toolchain, derivation.get("system"))))
    env = derivation.get("env")
    if isinstance(env, Mapping):
        shown = " ".join(f"{k}={show_value('env.' + k, v)}" for k, v in sorted(env.items()))
        rows.append(("env", shown or "(none)"))
    requirements = _named(derivation.get("requirements"))
    rows.append(("requires", ", ".join(requirements) or "(none)"))
    recipes = _named(derivation.get("recipes"))
    if recipes:
        rows.append(("against", ", ".join(recipes)))
    inputs = derivation.get("inputs")
    if isinstance(inputs, Mapping) and inputs:
        rows.append(("inputs", ", ".join(sorted(inputs))))
    if isinstance(toolchain, Mapping) and (system := system_line(toolchain)) is not None:
        rows.append(("system", system))
    return rows


def _kind(key: str) -> str:
    """The kind of a differing key: its top-level table, ``system packages`` for
    ``toolchain.packages.*`` and ``unowned files`` for the rest of the system fingerprint."""
    head = key.split(".", 1)[0].split("[", 1)[0]
    if key.startswith("toolchain.packages"):
        return "system packages"
    if key.startswith(("toolchain.masked", "toolchain.unowned")):
        return "unowned files"
    return {"recipes": "dependencies"}.get(head, head)


def _item(key: str, kind: str) -> str:
    """The name a key is listed by within its kind (``env.CFLAGS`` -> ``CFLAGS``)."""
    if kind == "system packages":
        return key.removeprefix("toolchain.packages.") or "packages"
    rest = key.split(".", 1)[1] if "." in key else key
    if kind in ("requirements", "dependencies", "toolchain", "inputs"):
        rest = rest.split(".", 1)[0]
    return rest.split(" -> ", 1)[0]


def full_line(d: KeyDifference) -> str:
    """``env.CFLAGS: "-O2" -> "-O3"``: one difference with both values."""
    return f"{d.key}: {show_value(d.key, d.old)} -> {show_value(d.key, d.new)}"


def _names(names: Sequence[str]) -> str:
    shown = list(dict.fromkeys(names))
    more = ", ..." if len(shown) > NAMES_SHOWN else ""
    return ", ".join(shown[:NAMES_SHOWN]) + more


_ORDER = ("source", "dependencies", "requirements", "inputs", "toolchain", "system packages",
          "unowned files", "env", "build", "package")  # fmt: skip


def difference_groups(differences: Sequence[KeyDifference]) -> list[str]:
    """Return what differs, one line per kind (source, dependencies, requirements, inputs,
    toolchain, system packages, env, build, ...): a kind with few keys lists each with both
    values, a larger one is counted and named (``toolchain: 68 system packages added, 2
    changed (clang-15, clang-19, ...)``)."""
    groups: dict[str, list[KeyDifference]] = {}
    for d in differences:
        groups.setdefault(_kind(d.key), []).append(d)
    order = {k: i for i, k in enumerate(_ORDER)}
    lines: list[str] = []
    for kind in sorted(groups, key=lambda k: (order.get(k, len(order)), k)):
        items = groups[kind]
        if len(items) <= SHOWN_IN_FULL:
            lines.extend(full_line(d) for d in items)
        elif kind in ("system packages", "unowned files"):
            lines.append(f"toolchain: {_counted(kind, items)}")
        else:
            names = [_item(d.key, kind) for d in items]
            lines.append(f"{kind}: {len(items)} keys ({_names(names)})")
    return lines


def _counted(kind: str, items: Sequence[KeyDifference]) -> str:
    """``68 system packages added, 2 changed (clang-15, clang-19, ...)``: changed names first."""
    added = [d for d in items if d.old is ABSENT]
    removed = [d for d in items if d.new is ABSENT]
    changed = [d for d in items if d.old is not ABSENT and d.new is not ABSENT]
    counts = [f"{len(group)} {label}" for group, label in
              ((added, "added"), (removed, "removed"), (changed, "changed")) if group]  # fmt: skip
    names = [_item(d.key, kind) for d in (*changed, *added, *removed)]
    head, _, rest = ", ".join(counts).partition(" ")
    return f"{head} {kind} {rest} ({_names(names)})"


def miss_line(name: str, version: str, hash: str, differences: Sequence[KeyDifference],
              explain: str) -> str:  # fmt: skip
    """The one line a realize prints on a miss: the nearest cached build, what differs by kind,
    and the ``explain`` command that lists every key."""
    return (
        f"not in the store; nearest cached build {hash[:12]} ({name} {version}) differs in: "
        f"{'; '.join(difference_groups(differences))} (`{explain}` lists every key)"
    )
