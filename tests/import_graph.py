"""The project's module import graph, read with `ast` (nothing is imported, nothing runs), and the
circles in it. Used by test_import_cycles.py; no tests here.

What counts as an edge from module A to module B (both inside the scanned packages):
- `import B` / `import B as x`, and `from B import name` where `name` is not a submodule of B;
- `from P import m` where `P.m` is a module or package: the edge goes to `P.m`;
- relative forms (`from . import m`, `from ..x import y`), resolved against A's package;
- imports anywhere in the file: inside functions (a lazy import still makes a circle, it only
  hides it until run time) and under `if TYPE_CHECKING:` (such a circle is the one that couples a
  helper to the object that calls it, which is what the rule is about).
Not counted: the parent packages Python initialises on the way (`import a.b.c` also runs
`a/__init__.py`); otherwise every package `__init__` that re-exports its submodules would form a
circle with each submodule importing a sibling. Imports by computed name (`importlib` with a
variable) cannot be read statically and are not counted.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ImportGraph:
    files: dict[str, Path] = field(default_factory=dict)          # module name -> its file
    edges: dict[str, set[str]] = field(default_factory=dict)      # module -> modules it imports

    def knots(self) -> list[list[str]]:
        """Groups of modules that all reach each other through imports (sorted names)."""
        return [group for group in _strongly_connected(self.edges) if len(group) > 1]

    def cycles(self) -> list[list[str]]:
        """One shortest circle (first module repeated at the end) per knot."""
        return [_cycle_through(group, self.edges) for group in self.knots()]

    def describe(self, cycle: list[str]) -> str:
        """The circle with each module's file; other modules of the same knot named after it."""
        text = " -> ".join(f"{name} ({self.files[name]})" for name in cycle)
        knot = next(group for group in self.knots() if cycle[0] in group)
        others = [name for name in knot if name not in cycle]
        return text + (f"\n    also in this knot: {', '.join(str(self.files[n]) for n in others)}" if others else "")


def module_files(root: Path, packages: list[str]) -> dict[str, Path]:
    """Module name -> file for every .py file under each package dir of `root` that exists."""
    files = {}
    for package in packages:
        base = root / package
        if not (base / "__init__.py").is_file():
            continue
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(parts)] = path
    return files


def build_graph(root: Path, packages: list[str]) -> ImportGraph:
    graph = ImportGraph(files=module_files(root, packages))
    for name, path in graph.files.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        # a module naming itself (an __init__ reading its own names) is no circle between modules
        graph.edges[name] = {target for node in ast.walk(tree)
                             for target in _targets(node, name, is_package, graph.files) if target != name}
    return graph


def _targets(node: ast.AST, module: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = _absolute(node, module, is_package)
    found = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in known:            # `from pkg import module`
            found.append(submodule)
        elif base in known:               # `from module import name` (or `*`)
            found.append(base)
    return found


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    # the package a relative import is resolved against: the module itself for an __init__
    package = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        package = package[:len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph has hundreds of modules; no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return groups


def _cycle_through(group: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest circle from the group's first module back to itself, staying inside the group."""
    members, start = set(group), group[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"modules {group} form no circle")   # Tarjan grouped them: unreachable
