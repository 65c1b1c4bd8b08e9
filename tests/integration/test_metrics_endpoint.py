"""The broker's Prometheus endpoint on a real one-broker cluster (issue 30, "Metrics").

``cluster up`` gives the broker a metrics port and records its ``metrics_url`` in
cluster.json; after confluent-kafka produces N records with acks=all to a 2-partition topic
and reads them back, a scrape over HTTP (parsed with prometheus_client's own parser) shows:
messages in for the topic equal to N, bytes in and out, Produce requests counted by version
with a latency histogram, this broker as the active controller, its partition and leader
counts, nothing under-replicated, a connected ZooKeeper session, the broker running, and the
process collector's figures. The endpoint stops with the broker, serves on the same port
after ``cluster start-broker``, and ``cluster status`` shows its URL. (The 3-broker figures
under load are tests/integration/test_metrics.py's.)
"""

from __future__ import annotations

import urllib.request
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.waiting import wait_for

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

N = 200
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get(name, {}).get(tuple(sorted(labels.items())))


def test_scrape_after_produce_and_consume(cluster: Cluster, topic_name: str) -> None:
    url = cluster.broker(1).get("metrics_url")
    assert isinstance(url, str) and url.startswith("http://127.0.0.1:"), cluster.broker(1)
    assert url.endswith("/metrics")
    cluster.create_topic(topic_name, partitions=2)

    producer = Producer(cluster.conf({"acks": "all", "linger.ms": 5}))
    errors: list[object] = []
    for i in range(N):
        producer.produce(
            topic_name,
            key=str(i).encode(),
            value=b"v" * 100,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0 and not errors, errors
    consumed = cluster.consume(topic_name, [0, 1], start=0)
    assert sum(len(m) for m in consumed.values()) == N

    s = scrape(url)
    topic = {"topic": topic_name}
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", **topic) == N
    assert (value(s, "kafka_server_brokertopicmetrics_messagesin_total") or 0) >= N
    assert (value(s, "kafka_server_brokertopicmetrics_bytesin_total", **topic) or 0) > N * 100
    assert (value(s, "kafka_server_brokertopicmetrics_bytesout_total", **topic) or 0) > N * 100
    assert (value(s, "kafka_server_brokertopicmetrics_totalproducerequests_total", **topic)) >= 1
    assert (value(s, "kafka_server_brokertopicmetrics_totalfetchrequests_total", **topic)) >= 1
    assert value(s, "kafka_server_brokertopicmetrics_failedproducerequests_total", **topic) == 0

    produce = {
        labels: n
        for labels, n in s["kafka_network_requestmetrics_requests_total"].items()
        if dict(labels)["request"] == "Produce"
    }
    assert produce and sum(produce.values()) > 0, s["kafka_network_requestmetrics_requests_total"]
    produce_count = value(s, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
    assert produce_count == sum(produce.values())
    assert value(s, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf")
    assert (value(s, "kafka_network_requestmetrics_totaltimems_sum", request="Produce") or 0) > 0
    assert value(s, "kafka_network_requestmetrics_totaltimems_count", request="FetchConsumer")

    assert value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert (value(s, "kafka_controller_kafkacontroller_globaltopiccount") or 0) >= 1
    # the topic's 2 partitions, and any internal ones this broker hosts
    hosted = value(s, "kafka_server_replicamanager_partitioncount")
    assert hosted is not None and hosted >= 2
    assert value(s, "kafka_server_replicamanager_leadercount") == hosted
    assert value(s, "kafka_controller_kafkacontroller_globalpartitioncount") == hosted
    assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(s, "kafka_server_replicamanager_offlinereplicacount") == 0
    assert value(s, "kafka_server_sessionexpirelistener_sessionstate", state="CONNECTED") == 1
    assert value(s, "kafka_server_sessionexpirelistener_sessionstate", state="CLOSED") == 0
    assert value(s, "kafka_server_sessionexpirelistener_zookeeperexpires_total") == 0
    assert value(s, "kafka_server_kafkaserver_brokerstate") == 3
    for kind in ("Produce", "Fetch"):
        assert (
            value(
                s,
                "kafka_server_delayedoperationpurgatory_numdelayedoperations",
                delayedOperation=kind,
            )
            is not None
        )
    assert (value(s, "process_resident_memory_bytes") or 0) > 0
    assert "millrace_metrics_collector_errors_total" not in s  # no collector failed


def test_the_port_survives_a_restart_and_status_shows_it(cluster: Cluster) -> None:
    url = str(cluster.broker(1)["metrics_url"])
    assert value(scrape(url), "kafka_server_kafkaserver_brokerstate") == 3
    cluster.stop_broker()
    with pytest.raises(OSError):  # the endpoint stopped with the broker
        urllib.request.urlopen(url, timeout=2)
    cluster.start_broker()
    assert cluster.broker(1)["metrics_url"] == url

    # the same port again (registered before its start-up completes: RUNNING soon after)
    def running() -> Samples | None:
        samples = scrape(url)
        return samples if value(samples, "kafka_server_kafkaserver_brokerstate") == 3 else None

    s = wait_for(running, 30, "broker 1 RUNNING")
    assert value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert url in cluster.cli("cluster", "status", "--dir", str(cluster.dir))
