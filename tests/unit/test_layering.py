"""The layering of DESIGN.md section 2, enforced on the import graph (and, for the sans-IO
protocol layer, on the calls it makes)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
        "import asyncio\nfrom broker.network.server import X\n"
        "def f(p):\n    open(p)\n    return p.read_bytes()\n"
    )
    names = imported_names(sample)
    assert "asyncio" in names and "broker.network.server" in names
    assert io_calls(sample) == ["open()", "p.read_bytes()"]
    assert io_calls("import io\nio.open('x')\nos.open('y', 0)\n") == ["io.open()", "os.open()"]
    assert io_calls("registry.open_thing()\nwebbrowser.open('u')\n") == []


def test_log_does_not_import_network_or_api() -> None:
    assert _violations("broker.log", ("broker.network", "broker.api", "broker.server")) == []


def test_kazoo_only_in_controller() -> None:
    bad = [
        v
        for pkg in (
            "broker.protocol",
            "broker.log",
            "broker.network",
            "broker.api",
            "broker.replication",
            "broker.metadata",
            "broker.coordinator",
        )
        for v in _violations(pkg, ("kazoo",))
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
