"""The package's layering: wings that are the pipeline, no cycles, no import from a later stage.

Every ``import`` in every module under ``rocmforge/`` counts, wherever it is: at module level,
inside a function (lazy imports) or under ``TYPE_CHECKING``. Every module lives in a wing (a
subpackage named for its stage or role); only ``errors.py``, ``config.py`` and the entry points
sit at the top. The wings, in the order of the pipeline, lowest first (:data:`WINGS`):

0. ``util`` (with ``errors.py``, ``config.py``, ``__init__.py``): no stage at all
1. ``recipe``: load and lint a recipe
2. ``store``: the content-addressed store, its index and locks
3. ``sources``: fetch and identify sources and build requirements
4. ``toolchain``: probe and fingerprint compilers, Python, ROCm, the host system
5. ``wheel``: wheel names, the writer, stamps, venvs and installs
6. ``lock``: pins (refs, requirement closures, companions, SDK wheels)
7. ``plan``: resolve a recipe or a graph into a derivation and its hash
8. ``trust``: provenance, signing, audit, explain (it reads plans, never reaches into a build)
9. ``observe``: build telemetry (ninja logs, process-tree samples, ETA, stalls, trace, report)
10. ``build``: the sandbox, the build, the check
11. ``cache``: binary caches (substitute, push, export)
12. ``executor``: Slurm
13. ``accept``: GPU acceptance of what was built (the checks, their sandbox, the proof)
14. ``pipeline``: realize one recipe or a graph (lookup, substitute, build, publish), the memo
15. ``cli``: the parser, the verb table, the commands (the only printers)
16. the entry points: ``console.py``, ``__main__.py``

A module may import from its own wing or a lower one. ``store/layout.py`` is import-free (only
the stdlib ``os`` and ``stat``) and may be imported from any wing.
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rocmforge"

#: Violations tolerated while they are being removed, each an (importer, imported) pair of dotted
#: module names; none are left. It may only shrink: a pair that no longer occurs fails the test.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()

LAYOUT = "rocmforge.store.layout"
LAYOUT_ALLOWED = {"os", "stat", "__future__"}

#: The wings, lowest first: a module may import from its own wing or an earlier one.
WINGS = ("util", "recipe", "store", "sources", "toolchain", "wheel", "lock", "plan", "trust",
         "observe", "build", "cache", "executor", "accept", "pipeline", "cli")  # fmt: skip
_SUBPACKAGE_LAYER = {name: i for i, name in enumerate(WINGS)}
#: The modules allowed at the top of the package, and their layer.
_TOP_LAYER = {"__init__": 0, "errors": 0, "config": 0, "console": len(WINGS),
              "__main__": len(WINGS)}  # fmt: skip


def modules() -> dict[str, Path]:
    """Return every module of the package: dotted name -> file."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def layer(module: str) -> int | None:
    """Return the layer of a dotted module name (None for store/layout.py: any layer)."""
    if module == LAYOUT:
        return None
    parts = module.split(".")
    if len(parts) == 1:
        return 0  # rocmforge/__init__.py
    if parts[1] in _SUBPACKAGE_LAYER:
        return _SUBPACKAGE_LAYER[parts[1]]
    if len(parts) == 2 and parts[1] in _TOP_LAYER:
        return _TOP_LAYER[parts[1]]
    raise AssertionError(f"{module} is in no wing: move it into one (tests/test_layers.py WINGS)")


def imported_names(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """Yield (dotted name, line) of every import in ``path``, wherever it sits.

    ``from X import Y`` yields ``X`` and ``X.Y``; the caller keeps the longest module name.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):  # walks function bodies and `if TYPE_CHECKING:` blocks too
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            yield name, node.lineno
            for alias in node.names:
                yield f"{name}.{alias.name}", node.lineno


def import_graph() -> dict[tuple[str, str], str]:
    """Return every import edge inside the package: (importer, imported) -> "file:line"."""
    return dict(_import_graph())


@functools.cache
def _import_graph() -> dict[tuple[str, str], str]:
    """:func:`import_graph`, parsed once a session (every module's AST: ~1.2 s a parse)."""
    mods = modules()
    edges: dict[tuple[str, str], str] = {}
    for module, path in mods.items():
        names = dict(imported_names(path, module))
        for name, line in names.items():
            if name.split(".")[0] != "rocmforge":
                continue
            target = name
            while target not in mods:
                target = target.rpartition(".")[0]
            if target != module:
                where = f"{path.relative_to(PACKAGE.parent)}:{line}"
                edges.setdefault((module, target), where)
    return edges


def layer_violations(edges: Mapping[tuple[str, str], str]) -> set[tuple[str, str]]:
    """Return the edges that import from a higher layer."""
    bad = set()
    for importer, imported in edges:
        low, high = layer(importer), layer(imported)
        if low is not None and high is not None and high > low:
            bad.add((importer, imported))
    return bad


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components of ``graph`` with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cycle_path(graph: Mapping[str, set[str]], component: list[str]) -> list[str]:
    """Return one shortest cycle through the first module of ``component``, as a path."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                return [*paths[v], start]
            if w in members and w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def cycles(edges: Mapping[tuple[str, str], str] | set[tuple[str, str]]) -> list[list[str]]:
    """Return one cycle path per strongly connected component of the import graph."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    return [cycle_path(graph, comp) for comp in strongly_connected(graph)]


def describe(pairs: set[tuple[str, str]], edges: Mapping[tuple[str, str], str]) -> str:
    """Format pairs as ``importer -> imported (file:line)`` lines."""
    return "\n".join(f"  {a} -> {b}  ({edges[(a, b)]})" for a, b in sorted(pairs))


def test_the_scan_sees_every_kind_of_import() -> None:
    edges = import_graph()
    assert ("rocmforge.pipeline.realize", "rocmforge.pipeline.memo") in edges  # lazy
    assert ("rocmforge.plan.resolve", "rocmforge.plan.derivation") in edges  # module level
    assert ("rocmforge.console", "rocmforge.pipeline.memo") in edges
    assert layer("rocmforge.util.fsutil") == 0 and layer("rocmforge.errors") == 0
    rank = {m: layer(m) or 0 for m in modules()}
    assert rank["rocmforge.recipe.model"] < rank["rocmforge.store.store"]
    assert rank["rocmforge.plan.resolve"] < rank["rocmforge.build.builder"]
    assert rank["rocmforge.trust.audit"] < rank["rocmforge.build.sandbox"]
    assert rank["rocmforge.cli.main"] == len(WINGS) - 1 < rank["rocmforge.__main__"]


def test_every_module_is_in_a_wing() -> None:
    """No loose modules: only errors, config and the entry points at the top."""
    loose = [
        m for m, path in modules().items()
        if path.parent == PACKAGE and path.name != "__init__.py"
        and m.split(".")[1] not in _TOP_LAYER
    ]  # fmt: skip
    assert not loose, f"modules outside every wing: {loose}"
    wings = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert wings == set(WINGS), f"subpackages not in WINGS (or gone): {wings ^ set(WINGS)}"


def test_the_cycle_finder_reports_a_path() -> None:
    found = cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")})
    assert found == [["a", "b", "c", "a"]]


def test_no_import_cycles() -> None:
    edges = import_graph()
    found = cycles({e for e in edges if e not in KNOWN_VIOLATIONS})
    assert not found, "import cycles:\n" + "\n".join(
        "  "
        + " -> ".join(path)
        + "\n"
        + "\n".join(f"      {a} -> {b}  ({edges[(a, b)]})" for a, b in itertools.pairwise(path))
        for path in found
    )


def test_no_import_from_a_higher_layer() -> None:
    edges = import_graph()
    bad = layer_violations(edges) - KNOWN_VIOLATIONS
    assert not bad, "imports from a higher layer:\n" + describe(bad, edges)


def test_known_violations_still_occur() -> None:
    """KNOWN_VIOLATIONS only shrinks: a pair that no longer occurs must be taken off it."""
    edges = import_graph()
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    component = {m: i for i, comp in enumerate(strongly_connected(graph)) for m in comp}
    upward = layer_violations(edges)
    still = {
        (a, b)
        for a, b in KNOWN_VIOLATIONS
        if (a, b) in edges and ((a, b) in upward or component.get(a, -1) == component.get(b, -2))
    }
    gone = KNOWN_VIOLATIONS - still
    assert not gone, "fixed, take these off KNOWN_VIOLATIONS:\n" + "\n".join(
        f"  {a} -> {b}" for a, b in sorted(gone)
    )


def test_subpackage_inits_import_nothing() -> None:
    for path in sorted(PACKAGE.glob("*/__init__.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        assert not imports, f"{path.relative_to(PACKAGE.parent)}: imports on lines {imports}"


def test_store_layout_imports_only_os_and_stat() -> None:
    path = PACKAGE / "store" / "layout.py"
    if not path.exists():
        pytest.skip("store/layout.py does not exist yet")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            top.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            top.add("." * n.level + (n.module or ""))
    assert top <= LAYOUT_ALLOWED, f"store/layout.py imports {sorted(top - LAYOUT_ALLOWED)}"
