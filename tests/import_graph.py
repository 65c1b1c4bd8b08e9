"""The project's import graph, read from the source with ``ast`` (nothing is imported), and
a cycle finder over it. Used by the layering tests (``tests/unit/test_layering.py``,
``tests/unit/bench/test_bench_imports.py``).

Every ``import`` counts: at module level, inside a function (a deferred import only hides a
cycle from the interpreter, not from the reader) and under ``if TYPE_CHECKING:`` (a type
that names a higher module is still a dependency on it; a ``Protocol`` in the lower module
is the way out).

An edge ``a -> b`` means module ``a`` imports module ``b``. ``from p import n`` names the
module ``p.n`` when there is one, else the module ``p`` (a name defined in, or handed on by,
``p/__init__.py``); ``import p.q`` names ``p.q`` (the parents it imports implicitly are not
edges). A relative import is resolved against the importing module. Only modules of the
packages read are nodes; a module's import of itself is dropped.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path) -> str:
    """``broker/log/segment.py`` -> ``broker.log.segment``; a package's ``__init__.py`` is
    named for the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(packages: Iterable[str], root: Path = ROOT) -> dict[str, Path]:
    """Module name -> source file, for every ``.py`` file under each of ``packages`` (folders
    under ``root``, given as dotted names)."""
    modules: dict[str, Path] = {}
    for package in packages:
        base = root / package.replace(".", "/")
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" not in path.parts:
                modules[module_name(path, root)] = path
    return modules


def native_modules(packages: Iterable[str], root: Path = ROOT) -> set[str]:
    """Compiled modules of ``packages``, known by their type stub (``_native_records.pyi``):
    ``from p import _native_records`` names one of them, not ``p/__init__.py``. They import
    nothing of ours, so they are no nodes of the graph."""
    return {
        module_name(path, root)
        for package in packages
        for path in (root / package.replace(".", "/")).rglob("*.pyi")
    }


def imported_modules(
    source: str, name: str, is_package: bool, known: set[str], native: frozenset[str] = frozenset()
) -> set[str]:
    """The modules of ``known`` that the module ``name`` (with source ``source``) imports;
    ``native`` are modules without Python source (never edges)."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule not in native:
                    targets.add(submodule if submodule in known else base)
    return {t for t in targets if t in known and t != name}


def import_graph(packages: Iterable[str], root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of ``packages`` -> the modules of ``packages`` it imports (anywhere in
    it, ``TYPE_CHECKING`` blocks included)."""
    packages = tuple(packages)
    modules = package_modules(packages, root)
    known = set(modules)
    native = frozenset(native_modules(packages, root))
    return {
        name: imported_modules(path.read_text(), name, path.name == "__init__.py", known, native)
        for name, path in modules.items()
    }


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as ``[a, b, ..., a]``, or None."""
    done: set[str] = set()
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> list[str] | None:
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_stack:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in done:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        on_stack.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle through each group of modules that import each other (each strongly
    connected component of more than one module), so a failing test names every circle,
    not only the first."""
    cycles: list[list[str]] = []
    remaining = {node: set(targets) for node, targets in graph.items()}
    while (cycle := find_cycle(remaining)) is not None:
        cycles.append(cycle)
        component = _reachable_both_ways(remaining, cycle[0])
        for node in component:
            remaining.pop(node, None)
        for targets in remaining.values():
            targets.difference_update(component)
    return cycles


def _reachable_both_ways(graph: Mapping[str, set[str]], start: str) -> set[str]:
    forward = _reachable(graph, start)
    reverse: dict[str, set[str]] = {}
    for node, targets in graph.items():
        for target in targets:
            reverse.setdefault(target, set()).add(node)
    return forward & _reachable(reverse, start)


def _reachable(graph: Mapping[str, set[str]], start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def imports_between(
    graph: Mapping[str, set[str]], sources: Iterable[str], targets: Iterable[str]
) -> list[str]:
    """``"a imports b"`` for each edge from a module under one of ``sources`` to one under
    one of ``targets`` (dotted prefixes: ``broker.metadata`` covers ``broker.metadata.cache``)."""

    def under(module: str, prefixes: tuple[str, ...]) -> bool:
        return any(module == p or module.startswith(p + ".") for p in prefixes)

    src, dst = tuple(sources), tuple(targets)
    return sorted(
        f"{module} imports {target}"
        for module, imported in graph.items()
        if under(module, src)
        for target in imported
        if under(target, dst)
    )
