"""The import graph of the `tessera` package has no circles, and validation sits above what it checks.

The graph is read statically with `ast` from every module of the package, with `dialects/`, `passes/` and
`tools/` under the names pyproject.toml maps them to (`tessera.dialects`, ...). Every import counts: at module
level, inside a function (a lazy import that closes a loop is still a circle), and under `if TYPE_CHECKING:`.
A package's `__init__` is a node like any module; the implicit import of a parent package when a submodule is
imported is not an edge (every module would otherwise depend on `tessera/__init__.py`).

docs/layout.md describes the folders and the direction of their imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = {"tessera": ROOT / "tessera", "tessera.dialects": ROOT / "dialects",
                "tessera.passes": ROOT / "passes", "tessera.tools": ROOT / "tools"}

ALLOWED_CYCLES: list[tuple[set[str], str]] = []
"""Strongly connected components allowed to have more than one module, each with the reason (none today)."""


def modules_of(dirs: dict[str, Path]) -> dict[str, tuple[Path, bool]]:
    """{module name: (file, is a package's __init__)} for every .py file under `dirs`."""
    found = {}
    for prefix, folder in dirs.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((prefix, *parts)) if prefix else ".".join(parts)] = (path, path.name == "__init__.py")
    return found


def import_graph(modules: dict[str, tuple[Path, bool]], roots: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """{module: {imported module: line of the first such import}} for the imports of names under `roots`; an
    import of a name that is not a module (`from tessera.ir import verify`) is an edge to the module defining it
    (here the package `tessera.ir`)."""

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] in roots and (found := owner(target)) is not None and found != name:
                    graph[name].setdefault(found, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    inside = set(component)
    return "; ".join(f"{m} -> {', '.join(f'{t} (line {line})' for t, line in sorted(graph[m].items()) if t in inside)}"
                     for m in component)


def unexplained(graph: dict[str, dict[str, int]]) -> list[str]:
    return [describe(c, graph) for c in cycles(graph) if not any(set(c) == allowed for allowed, _ in ALLOWED_CYCLES)]


TESSERA = modules_of(PACKAGE_DIRS)
GRAPH = import_graph(TESSERA, ("tessera",))


def test_the_graph_sees_every_kind_of_import():
    assert {"tessera.ir.parser", "tessera.graph.graph_runtime", "tessera.dialects.tile", "tessera.passes",
            "tessera.tools.tessera_opt", "tessera.interpreters.sm90.cta"} <= set(GRAPH)
    assert "tessera.ir.diagnostics" in GRAPH["tessera.kernel_abi"]  # at module level
    assert "tessera.interpreters.ptx.printed" in GRAPH["tessera.api"]  # inside interpret()
    assert "tessera.interpreters.sm90.cta_view" in GRAPH["tessera.interpreters.sm90.tma"]  # under TYPE_CHECKING
    assert "tessera.ir" in GRAPH["tessera.api"]  # `from tessera import ir`


def test_a_circle_is_found_and_named(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import f\n")
    (package / "b.py").write_text("def f():\n    from pkg import a\n")
    (package / "c.py").write_text("import pkg.a\n")
    graph = import_graph(modules_of({"pkg": package}), ("pkg",))
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert describe(["pkg.a", "pkg.b"], graph) == "pkg.a -> pkg.b (line 1); pkg.b -> pkg.a (line 2)"


def test_the_package_has_no_import_circle():
    assert unexplained(GRAPH) == []


def test_the_bench_scripts_have_no_import_circle():
    bench = modules_of({"": ROOT / "bench"})
    graph = import_graph(bench, tuple(bench))
    assert unexplained(graph) == []
    assert "harness" in graph["attention"]  # the scripts import each other by their plain names


def _importers_of(prefixes: tuple[str, ...], importers: tuple[str, ...]) -> list[str]:
    return [f"{m} -> {t} (line {line})" for m, targets in sorted(GRAPH.items()) for t, line in sorted(targets.items())
            if m.startswith(importers) and (t in prefixes or t.startswith(tuple(p + "." for p in prefixes)))]


@pytest.mark.parametrize("layer", ["tessera.interpreters", "tessera.runtime", "tessera.ir", "tessera.dialects",
                                   "tessera.sm90", "tessera.ptx", "tessera.kernels", "tessera.graph"])
def test_validation_is_above_what_it_checks(layer):
    """Validation runs the interpreters and compares them; nothing it checks calls back into it."""
    assert _importers_of(("tessera.validation", "tessera.validate"), (layer,)) == []


@pytest.mark.parametrize("layer", ["tessera.ir", "tessera.dialects", "tessera.sm90", "tessera.interpreters",
                                   "tessera.graph", "tessera.runtime", "tessera.passes"])
def test_the_layers_below_the_tools_do_not_import_them(layer):
    assert _importers_of(("tessera.tools",), (layer,)) == []


def test_the_interpreters_do_not_import_the_runtime():
    """The runtime runs kernels in the interpreters (`level=`); the interpreters never reach up to it."""
    assert _importers_of(("tessera.runtime",), ("tessera.interpreters",)) == []


def test_the_layers_below_the_api_do_not_import_the_package_init():
    """`tessera/__init__.py` imports the runtime (on first use) and `tessera.api`; the runtime, the interpreters and
    the IR call `tessera.api`, so that the package's own `__init__` is never part of a circle."""
    below = ("tessera.runtime", "tessera.interpreters", "tessera.ir")
    assert [m for m, targets in sorted(GRAPH.items()) if m.startswith(below) and "tessera" in targets] == []


ALLOWED_UPWARD = {
    # The graph-level attention op stands for a call of Tessera's attention kernels: its verifier refuses a head_dim
    # no kernel is built for, reading the one list of them, and block sizes the builders refuse, with their own
    # rule (lazy imports, not circles: kernels never import it).
    "tessera.dialects.attention -> tessera.kernels",
    "tessera.dialects.attention -> tessera.kernels.common",
}


@pytest.mark.parametrize("layer", ["tessera.ir", "tessera.dialects", "tessera.sm90"])
def test_the_ir_the_dialects_and_the_hardware_facts_do_not_import_the_layers_above(layer):
    above = ("tessera.passes", "tessera.interpreters", "tessera.runtime", "tessera.graph", "tessera.kernels",
             "tessera.validation", "tessera.api")
    assert [e for e in _importers_of(above, (layer,)) if e.rsplit(" (line", 1)[0] not in ALLOWED_UPWARD] == []
