"""A reading task (``fetcher=direct``) whose partition leader is SIGKILLed mid-read finds the
new leader and reads the whole range, exactly once and in order.

Three Millrace brokers, RF=3, min ISR 2, acks=all: every record of the range is on the
surviving replicas. The task fetches 64 KiB at a time and is paused after its first Arrow
batch (the generator is not advanced) while the leader is killed, so the next fetch goes to
a dead broker: connection refused, then NOT_LEADER_OR_FOLLOWER or a stale leader in metadata,
all retried until the new leader answers."""

from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from spark_connector.read.consumer import ARROW_BATCH_ROWS, read_range, record_schema
from spark_connector.read.options import parse_read_options
from spark_connector.read.planner import OffsetRange
from tests.harness.cluster import Cluster

PROPS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "5000",
    "min.insync.replicas": "2",
    "controlled.shutdown.retry.backoff.ms": "500",
}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.fault,
    pytest.mark.cluster_config(PROPS, brokers=3),
    pytest.mark.timeout(300),
]

SCHEMA = record_schema()
RECORDS = 60_000


def test_leader_killed_mid_read(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1, None, replication_factor=3)
    cluster.wait_isr_complete(topic_name)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(topic_name, value=b"v%d" % i, partition=0)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    leader = cluster.leader_of(topic_name)
    options = parse_read_options(
        {
            "kafka.bootstrap.servers": cluster.bootstrap,
            "subscribe": topic_name,
            "fetcher": "direct",
            "kafka.max.partition.fetch.bytes": "65536",
            "kafkaConsumer.pollTimeoutMs": "60000",
        },
        streaming=False,
    )
    batches = read_range(options, OffsetRange(topic_name, 0, 0, RECORDS), SCHEMA)
    first = next(batches)
    assert first.num_rows >= ARROW_BATCH_ROWS
    cluster.stop_broker(hard=True, broker_id=leader)
    try:
        rest = list(batches)
        assert cluster.leader_of(topic_name) != leader
    finally:
        cluster.start_broker(leader)
    table = pa.Table.from_batches([first, *rest], SCHEMA)
    assert table.column("offset").to_pylist() == list(range(RECORDS))
    assert table.column("value").to_pylist() == [b"v%d" % i for i in range(RECORDS)]
