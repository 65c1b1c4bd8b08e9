"""Fixtures for the integration tier: real ZooKeeper, real broker processes, real clients.

The harness lives in ``tests/harness`` (shared with the Spark tier): a cluster is started
with ``millrace cluster up`` in a temporary directory on free loopback ports and torn down
with ``millrace cluster down``; whatever is still alive afterwards (a pid from
``cluster.json``, or a process whose command line names the cluster's private directory) is
SIGKILLed by pid, so a failing test never leaks ZooKeeper or a broker. See
``tests/harness/fixtures.py`` for the fixtures (``cluster``, ``cluster_factory``,
``topic_name``) and ``tests/harness/cluster.py`` for what a ``Cluster`` offers.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness.fixtures import (  # noqa: F401 - fixtures used by the tier
    attach_cluster_output,
    cluster,
    cluster_factory,
    topic_name,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cluster_config(props=None, brokers=1, **props): broker count and properties (--set) "
        "for the module's cluster fixture; underscores in keyword names become dots",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On failure, attach the tail of every running cluster's broker output to the report."""
    report = yield
    attach_cluster_output(report)
    return report
