"""The layering of DESIGN.md section 2, enforced on the import graph (and, for the sans-IO
protocol layer, on the calls it makes).

The whole-tree rules (no import cycle; the floors that must not reach up) read the graph of
:mod:`tests.import_graph`: every import counts, deferred ones inside functions and those
under ``if TYPE_CHECKING:`` too (a type naming a higher module is still a dependency on it;
the way out is a ``Protocol`` in the lower module naming what it uses).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.import_graph import find_cycles, import_graph, imports_between

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def imported_names(source: str) -> set[str]:
    """Every module a source file imports (absolute imports, anywhere in the file)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def io_calls(source: str) -> list[str]:
    """Calls that do file I/O by name: ``open(...)``, ``io.open``, ``os.open``,
    ``Path(...).read_bytes()`` and friends."""
    bad = []
    file_methods = {"read_bytes", "read_text", "write_bytes", "write_text", "open"}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            bad.append("open()")
        elif isinstance(func, ast.Attribute) and func.attr in file_methods:
            owner = func.value
            owner_name = owner.id if isinstance(owner, ast.Name) else ""
            if func.attr == "open" and owner_name not in ("io", "os", "gzip", "lzma", "bz2"):
                continue
            bad.append(f"{owner_name or '...'}.{func.attr}()")
    return bad


def _sources(package: str) -> dict[str, str]:
    base = ROOT / package.replace(".", "/")
    if not base.exists():
        return {}
    return {str(p.relative_to(ROOT)): p.read_text() for p in base.rglob("*.py")}


def _imports(package: str) -> dict[str, set[str]]:
    return {path: imported_names(src) for path, src in _sources(package).items()}


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path} imports {name}"
        for path, names in _imports(package).items()
        for name in names
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


def test_protocol_imports_nothing_of_ours_but_protocol() -> None:
    ours = (
        "broker.api",
        "broker.log",
        "broker.network",
        "broker.replication",
        "broker.controller",
        "broker.coordinator",
        "broker.metadata",
        "broker.cli",
        "broker.server",
        "spark_connector",
    )
    assert _violations("broker.protocol", ours) == []


def test_protocol_is_sans_io() -> None:
    """No event loop, no sockets, no files in the protocol layer: it turns bytes into
    messages and back, nothing else."""
    io_modules = ("asyncio", "socket", "selectors", "ssl", "pathlib", "shutil", "tempfile")
    assert _violations("broker.protocol", io_modules) == []
    calls = {path: io_calls(src) for path, src in _sources("broker.protocol").items()}
    assert {path: c for path, c in calls.items() if c} == {}


def test_api_does_not_import_network() -> None:
    """Handlers return protocol-level responses; only the network layer owns sockets."""
    assert _violations("broker.api", ("broker.network",)) == []


def test_the_checks_catch_violations() -> None:
    sample = (
        "import asyncio\nfrom broker.network.socket_server import X\n"
        "def f(p):\n    open(p)\n    return p.read_bytes()\n"
    )
    names = imported_names(sample)
    assert "asyncio" in names and "broker.network.socket_server" in names
    assert io_calls(sample) == ["open()", "p.read_bytes()"]
    assert io_calls("import io\nio.open('x')\nos.open('y', 0)\n") == ["io.open()", "os.open()"]
    assert io_calls("registry.open_thing()\nwebbrowser.open('u')\n") == []


def test_log_does_not_import_network_or_api() -> None:
    assert _violations("broker.log", ("broker.network", "broker.api", "broker.server")) == []


def test_kazoo_only_in_the_zookeeper_package() -> None:
    """Only ``broker/zk/`` talks to ZooKeeper; the rest of the broker uses its ``Protocol``
    (``broker.zk.interface.ZkOperations``) or its client, never kazoo itself."""
    bad = [
        f"{path} imports {name}"
        for path, names in _imports("broker").items()
        if not path.startswith("broker/zk/")
        for name in names
        if name == "kazoo" or name.startswith("kazoo.")
    ]
    assert bad == []


def test_api_handlers_reach_storage_only_through_replica_manager() -> None:
    assert _violations("broker.api", ("broker.log",)) == []


def test_spark_connector_never_imports_broker_internals() -> None:
    assert _violations("spark_connector", ("broker",)) == []


def test_the_shared_security_library_imports_neither_side() -> None:
    """``kafka_security`` (TLS, SASL, JAAS, SCRAM, client settings) serves the broker, the
    tools and the Spark connector: it depends on none of them."""
    assert _violations("kafka_security", ("broker", "spark_connector")) == []


# --- the whole tree's import graph ------------------------------------------------------------

PACKAGES = (
    "broker",
    "kafka_security",
    "kio_loader",
    "spark_connector",
    "pyspark_millrace",
    "jobs",
    "bench",
)
"""Every package of ours whose imports are checked (tests and scripts are not)."""

KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}
"""Imports left out of the cycle check, each with why; every one must still exist (a stale
entry would hide the cycle if it came back)."""

CLI_MODULES_USING_THE_CONNECTOR = {
    "broker.cli.demo.spark_jobs": "`millrace demo` submits the jobs and reads their output",
    "broker.cli.table": "`millrace table` reads an exactly-once sink's batch boundaries",
    "broker.cli.web_console.sinks": "the console shows the sinks' batch boundaries",
    "broker.cli.web_console.txn_source": "the console lists transactions with its wire client",
}
"""The ``millrace`` command (``broker/cli``) is the top floor, above the broker and the
connector alike: these of its modules use the connector (each says why); any other module of
``broker`` that imports the connector, and any that imports the jobs, fails."""


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(PACKAGES)


def test_no_import_cycle_anywhere(graph: dict[str, set[str]]) -> None:
    assert "broker.replication.replica_manager" in graph and "bench.common" in graph
    stale = [edge for edge in KNOWN_CYCLE_EDGES if edge[1] not in graph.get(edge[0], set())]
    assert stale == [], f"no longer imported, remove from KNOWN_CYCLE_EDGES: {stale}"
    checked = {
        module: {t for t in targets if (module, t) not in KNOWN_CYCLE_EDGES}
        for module, targets in graph.items()
    }
    assert [" -> ".join(cycle) for cycle in find_cycles(checked)] == []


def test_metadata_and_coordinators_do_not_import_the_controller(
    graph: dict[str, set[str]],
) -> None:
    """The metadata cache and the coordinators sit below the controller: what they need of it
    (creating an internal topic, ZooKeeper's config znodes) is a Protocol of their own."""
    assert (
        imports_between(graph, ["broker.metadata", "broker.coordinator"], ["broker.controller"])
        == []
    )


def test_the_zookeeper_package_imports_none_of_its_users(graph: dict[str, set[str]]) -> None:
    """``broker/zk/`` (the ZooKeeper client, the znodes, the embedded server) sits below the
    controller, the metadata followers and the coordinators that use it."""
    users = ["broker.controller", "broker.metadata", "broker.coordinator", "broker.server"]
    assert imports_between(graph, ["broker.zk"], users) == []


def test_security_and_quotas_import_neither_zookeeper_nor_the_config(
    graph: dict[str, set[str]],
) -> None:
    """broker/security/ and broker/quota/ sit below the ZooKeeper client and the broker's
    configuration: what they use of them is a Protocol of their own (even for type hints)."""
    assert (
        imports_between(graph, ["broker.security", "broker.quota"], ["broker.zk", "broker.config"])
        == []
    )


def test_the_log_imports_no_replication_or_controller(graph: dict[str, set[str]]) -> None:
    """The log floor (segments, the unified log, its validator, the cleaner) knows nothing of
    partitions' roles, the replica manager or the controller."""
    above = ["broker.replication", "broker.controller", "broker.coordinator", "broker.server"]
    assert imports_between(graph, ["broker.log"], above) == []


def test_broker_never_imports_the_connector_or_the_jobs(graph: dict[str, set[str]]) -> None:
    spark_side = ("spark_connector", "pyspark_millrace", "jobs")
    allowed = list(CLI_MODULES_USING_THE_CONNECTOR)
    rest = {m: targets for m, targets in graph.items() if m not in CLI_MODULES_USING_THE_CONNECTOR}
    assert imports_between(rest, ["broker"], spark_side) == []
    assert imports_between(graph, allowed, ["pyspark_millrace", "jobs"]) == []
    stale = [m for m in allowed if not imports_between(graph, [m], ["spark_connector"])]
    assert stale == [], f"no longer import the connector, remove them from the list: {stale}"


def test_the_graph_counts_every_kind_of_import(tmp_path: Path) -> None:
    """Deferred and TYPE_CHECKING imports are edges; a compiled module (known by its stub)
    named with ``from pkg import`` is not ``pkg/__init__.py``; a name taken from a package's
    ``__init__`` is an edge to it; cycles are reported one per group of modules."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n"
    )
    (pkg / "a.py").write_text("def f():\n    from pkg import _native\n    import pkg\n")
    (pkg / "_native.pyi").write_text("def g() -> int: ...\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.c import C\n"
    )
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from ..b import B\nfrom pkg.sub import nothing\n")
    graph = import_graph(["pkg"], tmp_path)
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg"},
        "pkg.b": {"pkg.sub.c"},
        "pkg.sub": set(),
        "pkg.sub.c": {"pkg.b", "pkg.sub"},
    }
    assert find_cycles(graph) == [["pkg", "pkg.a", "pkg"], ["pkg.b", "pkg.sub.c", "pkg.b"]]
    assert find_cycles({"x": {"y"}, "y": set()}) == []
    assert imports_between(graph, ["pkg.sub"], ["pkg.b"]) == ["pkg.sub.c imports pkg.b"]
