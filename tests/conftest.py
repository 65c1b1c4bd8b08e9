"""Fixtures and hooks shared by every test tier. Keep this file small; what only one tier
uses lives in that tier's own conftest.py (the Spark tier's ``spark`` session).

* ``zookeeper`` (session-scoped): the connect string (``127.0.0.1:PORT``) of one embedded
  ZooKeeper started from pyspark's jars (tickTime 500 ms, so sessions may be as short as
  1 s); stopped by its pid at teardown, even when tests fail. Tests that need isolation use a
  chroot of their own: ``f"{zookeeper}/{unique_name}"`` (ZkClient creates it).
* ``cluster`` (module-scoped), ``cluster_factory``, ``topic_name``: the real-broker cluster
  harness of the integration, fuzz, console and Spark tiers (``tests/harness/fixtures.py``;
  ``tests/harness/cluster.py`` says what a ``Cluster`` offers). A cluster is started with
  ``millrace cluster up`` in a temporary directory on free loopback ports and torn down
  with ``millrace cluster down``; whatever is still alive afterwards is SIGKILLed by pid, so
  a failing test never leaks ZooKeeper or a broker.
* the report hook that attaches the tail of every running cluster's broker output to a
  failed test's report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.fixtures import (  # noqa: F401 - fixtures used by the tiers
    attach_cluster_output,
    cluster,
    cluster_factory,
    topic_name,
)
from tests.harness.ports import free_port


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On failure, attach the tail of every running cluster's broker output to the report."""
    report = yield
    attach_cluster_output(report)
    return report


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Connect string of a session-wide embedded ZooKeeper."""
    from broker.zk.embedded_server import EmbeddedZooKeeper

    zk = EmbeddedZooKeeper(free_port(), tmp_path_factory.mktemp("zookeeper"), tick_time=500)
    try:
        zk.start(timeout=60)
        yield zk.connect_string
    finally:
        zk.stop()
