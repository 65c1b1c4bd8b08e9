"""Fixtures of the fuzz tier: the integration tier's cluster fixtures (real ZooKeeper and
broker processes, torn down by pid)."""

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
