"""The benchmarks' import graph (``bench/``) has no cycle: every ``import`` of a ``bench``
module counts, at module level or inside a function (a deferred import only hides a cycle
from the interpreter, not from the reader). The graph and the cycle finder are
:mod:`tests.import_graph`'s, shared with ``tests/unit/test_layering.py`` (which checks the
whole tree)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import find_cycle, import_graph

pytestmark = pytest.mark.unit

PACKAGE = "bench"


def bench_imports() -> dict[str, set[str]]:
    """Each module of ``bench`` -> the modules of ``bench`` it imports (anywhere in it; the
    reading is :mod:`tests.import_graph`'s)."""
    return import_graph([PACKAGE])


def test_bench_has_no_import_cycle() -> None:
    graph = bench_imports()
    assert "bench.common" in graph and "bench.loadgen" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in bench/: " + " -> ".join(cycle or [])


def test_common_and_loadgen_share_a_leaf() -> None:
    graph = bench_imports()
    assert graph["bench.basics"] == set()
    assert "bench.basics" in graph["bench.loadgen"] and "bench.common" not in graph["bench.loadgen"]
    assert "bench.loadgen" in graph["bench.common"]


def test_the_check_sees_deferred_and_package_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import thing\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text("from . import a\n")
    (pkg / "d.py").write_text("import pkg.a\nimport os\n")
    graph = import_graph(["pkg"], tmp_path)
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.c"},
        "pkg.c": {"pkg.a"},
        "pkg.d": {"pkg.a"},
    }
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None
