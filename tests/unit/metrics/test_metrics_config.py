"""``metrics.http.listener``: its parsing and validation (a bad value names the property),
the broker's recorder (a no-op when unset, so metrics off costs nothing), and the ports
``millrace cluster up`` gives its brokers (broker/cli/cluster_metrics.py)."""

from __future__ import annotations

import socket

import pytest

from broker.cli.cluster_metrics import MetricsPort, plan_metrics_ports
from broker.cli.cluster_process import ClusterError
from broker.config import BrokerConfig, parse_metrics_listener
from broker.config_def import ConfigError
from broker.request_metrics import NOOP_RECORDER, MetricsRecorder
from broker.server import Broker

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("http://127.0.0.1:0", ("127.0.0.1", 0)),
        ("http://127.0.0.1:9404", ("127.0.0.1", 9404)),
        ("HTTP://localhost:9404", ("localhost", 9404)),
        ("http://[::1]:9404", ("::1", 9404)),
        ("", None),
        ("127.0.0.1:9404", None),
        ("https://127.0.0.1:9404", None),
        ("http://127.0.0.1:9404/metrics", None),
        ("http://:9404", None),
        ("http://127.0.0.1:65536", None),
        ("http://127.0.0.1:port", None),
    ],
)
def test_parse(text: str, parsed: tuple[str, int] | None) -> None:
    assert parse_metrics_listener(text) == parsed


def test_unset_means_no_endpoint_and_a_no_op_recorder() -> None:
    config = BrokerConfig({})
    assert config["metrics.http.listener"] == "" and config.metrics_listener is None
    assert Broker(config).metrics is NOOP_RECORDER
    on = BrokerConfig({"metrics.http.listener": "http://127.0.0.1:0"})
    assert on.metrics_listener == ("127.0.0.1", 0)
    assert isinstance(Broker(on).metrics, MetricsRecorder)


@pytest.mark.parametrize("bad", ["9404", "tcp://127.0.0.1:9404", "http://127.0.0.1:99999"])
def test_a_bad_value_names_the_property(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"metrics\.http\.listener.*http://host:port"):
        BrokerConfig({"metrics.http.listener": bad})


def test_cluster_ports_are_free_distinct_and_avoid_the_clusters_own() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        ports = plan_metrics_ports({}, 3, taken=[taken])
    assert all(isinstance(p, MetricsPort) for p in ports)
    numbers = [p.port for p in ports if p is not None]
    assert len(set(numbers)) == 3 and taken not in numbers and 0 not in numbers
    first = ports[0]
    assert first is not None and first.host == "127.0.0.1"
    assert first.listener == f"http://127.0.0.1:{first.port}"
    assert first.url == f"http://127.0.0.1:{first.port}/metrics"


def test_cluster_respects_the_users_setting() -> None:
    assert plan_metrics_ports({"metrics.http.listener": ""}, 2) == [None, None]
    [one] = plan_metrics_ports({"metrics.http.listener": "http://127.0.0.1:19404"}, 1)
    assert one == MetricsPort("127.0.0.1", 19404)
    anywhere = plan_metrics_ports({"metrics.http.listener": "http://127.0.0.1:0"}, 2)
    assert all(p is not None and p.port > 0 for p in anywhere)
    with pytest.raises(ClusterError, match="cannot share port 19404"):
        plan_metrics_ports({"metrics.http.listener": "http://127.0.0.1:19404"}, 2)
    with pytest.raises(ClusterError, match="metrics.http.listener"):
        plan_metrics_ports({"metrics.http.listener": "nonsense"}, 1)
