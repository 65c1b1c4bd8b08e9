"""The layering of DESIGN.md section 2, enforced on the import graph."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    base = ROOT / package.replace(".", "/")
    if not base.exists():
        return out
    for path in base.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        out[str(path.relative_to(ROOT))] = names
    return out


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
