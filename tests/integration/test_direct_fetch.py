"""The reader's direct fetch (``fetcher=direct``, the default) reads exactly what a
confluent-kafka consumer reads (``fetcher=librdkafka``), from Millrace and from Apache Kafka
3.9.1: every codec, null keys and values, headers, create and log-append time, committed and
aborted transactions under both isolation levels, ranges starting and ending inside batches.

``read_range`` is what a Spark task runs (``spark_connector.read.consumer``); calling it here needs
no Spark. Apache Kafka is the JVM started from ``make setup``'s jars on the module cluster's
ZooKeeper under a chroot, stopped by its own pid afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from spark_connector.read.consumer import read_range, record_schema
from spark_connector.read.options import parse_read_options
from spark_connector.read.planner import OffsetRange

pytestmark = pytest.mark.integration

SCHEMA = record_schema(include_headers=True)
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module", params=["millrace", "kafka"])
def system(request: pytest.FixtureRequest, cluster: Any, tmp_path_factory: Any) -> Iterator[Any]:
    """``(bootstrap, create_topic)`` of a Millrace cluster or an Apache Kafka 3.9.1 broker."""
    if request.param == "millrace":
        yield (
            cluster.bootstrap,
            lambda topic, configs: cluster.create_topic(topic, 1, configs),
        )
        return
    from bench.systems import KafkaSystem, kafka_available

    if not kafka_available():
        pytest.fail("Apache Kafka 3.9.1 is not in .cache/jvm/kafka-dist: run `make setup`")
    kafka = KafkaSystem(tmp_path_factory.mktemp("kafka"), 1, str(cluster.json["zookeeper"]))
    try:
        yield kafka.bootstrap, lambda topic, configs: kafka.create_topic(topic, 1, 1, configs)
    finally:
        kafka.stop()


def _produce(bootstrap: str, topic: str) -> tuple[set[bytes], set[bytes]]:
    """Mixed traffic into partition 0; returns the aborted and the committed values."""
    for i, codec in enumerate(CODECS):
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "linger.ms": 20,
                "enable.idempotence": i % 2 == 0,
            }
        )
        for j in range(400):
            key = None if j % 7 == 0 else b"k%d" % j
            value = None if j % 11 == 0 else (b"%s-%d-" % (codec.encode(), j)) * (j % 5 + 1)
            headers = [("h", b"x"), ("n", None), ("\u00e9", b"")] if j % 3 == 0 else None
            p.produce(topic, value=value, key=key, partition=0, headers=headers, timestamp=j + 1)
        p.flush(30)
    aborted: set[bytes] = set()
    committed: set[bytes] = set()
    tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx"})
    tp.init_transactions(30)
    for n, commit in enumerate((False, True, False, True)):
        tp.begin_transaction()
        for j in range(120):
            value = b"txn%d-%d" % (n, j)
            tp.produce(topic, value=value, key=b"t", partition=0)
            (committed if commit else aborted).add(value)
        plain = Producer({"bootstrap.servers": bootstrap})
        plain.produce(topic, value=b"plain%d" % n, partition=0)  # interleaved, outside
        plain.flush(30)
        committed.add(b"plain%d" % n)
        tp.flush(30)
        if commit:
            tp.commit_transaction(30)
        else:
            tp.abort_transaction(30)
    return aborted, committed


def _read(bootstrap: str, topic: str, r: tuple[int, int], fetcher: str, iso: str) -> list[Any]:
    options = parse_read_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "fetcher": fetcher,
            "kafka.isolation.level": iso,
            "includeHeaders": "true",
        },
        streaming=False,
    )
    batches = list(read_range(options, OffsetRange(topic, 0, *r), SCHEMA))
    for b in batches:
        assert b.schema.equals(SCHEMA), b.schema
    return pa.Table.from_batches(batches, SCHEMA).to_pylist()


@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_direct_fetch_reads_what_librdkafka_reads(
    system: Any, topic_name: str, timestamps: str
) -> None:
    bootstrap, create_topic = system
    topic = f"{topic_name}-{timestamps.lower()}"
    create_topic(topic, {"message.timestamp.type": timestamps})
    aborted, committed = _produce(bootstrap, topic)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x"})
    _, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.close()
    for iso in ("read_uncommitted", "read_committed"):
        for r in ((0, end), (1, end - 3), (777, 1300)):
            direct = _read(bootstrap, topic, r, "direct", iso)
            consumer = _read(bootstrap, topic, r, "librdkafka", iso)
            assert direct == consumer, (iso, r)
        rows = _read(bootstrap, topic, (0, end), "direct", iso)
        values = {row["value"] for row in rows}
        assert committed <= values
        if iso == "read_committed":
            assert not aborted & values
            assert len(rows) == 5 * 400 + len(committed)
        else:
            assert aborted <= values
        offsets = [row["offset"] for row in rows]
        assert offsets == sorted(set(offsets))
        if timestamps == "LogAppendTime":
            assert {row["timestampType"] for row in rows} == {1}
        else:
            assert {row["timestampType"] for row in rows} == {0}
            assert rows[0]["timestamp"].timestamp() == 0.001
        assert any(row["headers"] for row in rows)
        assert any(row["key"] is None for row in rows)
        assert any(row["value"] is None for row in rows)
