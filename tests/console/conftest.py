"""Fixtures of the console's browser tests: the integration tier's cluster harness
(``tests/harness``), so clusters are started and torn down (by pid) the same way."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness.fixtures import (  # noqa: F401 - fixtures used by the tier
    attach_cluster_output,
    cluster,
    topic_name,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cluster_config(props=None, brokers=1, **props): broker count and properties (--set) "
        "for the module's cluster fixture",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    attach_cluster_output(report)
    return report
