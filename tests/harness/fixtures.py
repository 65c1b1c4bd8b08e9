"""The pytest fixtures of the real-broker tiers (integration, fuzz, console, Spark;
``tests/conftest.py`` imports them from here):

* ``cluster`` (module-scoped): one cluster per test module, single-broker unless the
  module's ``pytest.mark.cluster_config({...}, brokers=N)`` marker asks for N brokers
  (``zookeepers=3``: on a ZooKeeper ensemble of 3). Broker properties come from the marker
  (passed as ``--set``).
* ``cluster_factory`` (function-scoped): ``cluster_factory({"k": "v"}, brokers=3,
  security="sasl_ssl", zookeepers=3, k_with_dots=...)`` starts an extra cluster with its own
  properties, torn down after the test.
* Either may be secured (``security=`` in the marker or the factory: ``cluster up
  --security``); ``cluster.conf()``, ``admin()`` and ``raw()`` then connect as the admin
  super user, ``cluster.client_config`` holds the admin's librdkafka settings.
* ``topic_name``: a topic name derived from the test id.

:func:`attach_cluster_output` is the report hook that adds the tail of every running
cluster's broker output to a failed test's report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.harness.cluster import ACTIVE_CLUSTERS, Cluster, merge_props, start_cluster


def attach_cluster_output(report: Any) -> None:
    if report.failed:
        for c in list(ACTIVE_CLUSTERS):
            for name, text in c.output_tails().items():
                report.sections.append((f"{c.dir.name} {name}", text))


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    props: dict[str, str] = {}
    brokers = 1
    zookeepers = 1
    security: str | None = None
    for marker in reversed(list(request.node.iter_markers("cluster_config"))):
        kwargs = dict(marker.kwargs)
        brokers = int(kwargs.pop("brokers", brokers))
        zookeepers = int(kwargs.pop("zookeepers", zookeepers))
        security = kwargs.pop("security", security)
        props.update(merge_props(marker.args[0] if marker.args else None, kwargs))
    c = start_cluster(tmp_path_factory.mktemp("cluster"), props, brokers, security, zookeepers)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def cluster_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def factory(
        props: dict[str, object] | None = None,
        brokers: int = 1,
        security: str | None = None,
        zookeepers: int = 1,
        **kwargs: object,
    ) -> Cluster:
        c = start_cluster(
            tmp_path_factory.mktemp("cluster"),
            merge_props(props, kwargs),
            brokers,
            security,
            zookeepers,
        )
        started.append(c)
        return c

    try:
        yield factory
    finally:
        for c in started:
            c.down()


# --- small shared helpers (exposed as fixtures so test modules need no imports) -------------


def unique_topic(request: pytest.FixtureRequest, suffix: str = "") -> str:
    """A topic name derived from the test id: legal characters only, short enough."""
    name = request.node.name
    for ch in "[]/ :,=":
        name = name.replace(ch, "-")
    name = name.removeprefix("test_").strip("-")[:180]
    return f"{name}{suffix}"


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    return unique_topic(request)
