"""The Spark writer's batch producer (``write_record_batches``, what a ``df.write`` task runs)
writes what a user wrote, once, in order, to Millrace and to Apache Kafka 3.9.1 alike:

* every codec (none, gzip, snappy, lz4, zstd): a confluent-kafka consumer reads back exactly
  the rows written (null keys, tombstones, empty strings, non-ASCII text), every keyed row in
  Kafka's default partition for its key and, per partition, in write order; the task's
  commit message counts every row;
* the leader of a partition SIGKILLed in the middle of a write (Millrace, three brokers,
  RF=3, ``min.insync.replicas`` 2): the write completes, and every row is in the topic
  exactly once and in order (the producer is idempotent: a batch whose acknowledgement was
  lost is sent again with the same sequence numbers and not written twice);
* tiny Arrow batches (a few rows each) with up to 5 Produce requests in flight per broker
  connection: the producer does keep 5 in flight, merges a partition's consecutive small
  batches into batches of up to ``batch.size`` (far fewer stored batches than Arrow batches),
  and every row is in the topic once, each partition in write order, the stored batches'
  base sequences running on without a gap and their timestamps within the write;
* a batch the broker refuses for good (larger than the topic's ``max.message.bytes``) fails
  the task with a :class:`DeliveryError` naming the topic-partition and Kafka's error name,
  and nothing is written;
* ``acks=all`` while a partition's ISR is smaller than its ``min.insync.replicas`` fails once
  ``delivery.timeout.ms`` has passed, naming NOT_ENOUGH_REPLICAS, and nothing is written;
  a ``min.insync.replicas`` above the replication factor counts as the replication factor,
  as in Kafka 3.9.

``write_record_batches`` needs no Spark: the tests hand it pyarrow batches. Apache Kafka is
the JVM started from ``make setup``'s jars on the module cluster's ZooKeeper under a chroot,
stopped by its own pid afterwards; a broker a test stops is started again in a ``finally``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer
from pyspark.sql.types import StringType, StructField, StructType

from spark_connector.records.partitioner import partition_for_key
from spark_connector.write.plan import BatchSettings, batch_settings, plan_write
from spark_connector.write.writer import (
    DeliveryError,
    MillraceWriteCommitMessage,
    write_record_batches,
)
from tests.harness.clients import confluent_consume, high_watermark, read_log_batches
from tests.harness.cluster import Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # Three brokers for the failover test; quick failure detection (a SIGKILLed broker's
    # ZooKeeper session expires after 6 s).
    pytest.mark.cluster_config(
        {
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "5000",
            "controlled.shutdown.retry.backoff.ms": "500",
        },
        brokers=3,
    ),
]

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 3

Row = tuple[str | None, str | None]


@dataclass(frozen=True)
class System:
    """A running Millrace cluster or Apache Kafka broker."""

    name: str
    bootstrap: str
    create: Callable[[str, int, dict[str, str], int], None]
    """(topic, partitions, configs, replication factor); Kafka has one broker: RF 1."""
    partition_dir: Callable[[str, int], Path]
    """The directory of a partition's log on its leader."""


@pytest.fixture(scope="module", params=["millrace", "kafka"])
def system(
    request: pytest.FixtureRequest, cluster: Cluster, tmp_path_factory: Any
) -> Iterator[System]:
    if request.param == "millrace":

        def create(topic: str, partitions: int, configs: dict[str, str], rf: int) -> None:
            cluster.create_topic(topic, partitions, configs, replication_factor=rf)

        def leader_dir(topic: str, partition: int) -> Path:
            return cluster.log_dir(topic, partition, cluster.leader_of(topic, partition))

        yield System("millrace", cluster.bootstrap, create, leader_dir)
        return
    from bench.systems import KafkaSystem, kafka_available

    if not kafka_available():
        pytest.fail("Apache Kafka 3.9.1 is not in .cache/jvm/kafka-dist: run `make setup`")
    kafka = KafkaSystem(tmp_path_factory.mktemp("kafka"), 1, str(cluster.json["zookeeper"]))
    try:

        def create_kafka(topic: str, partitions: int, configs: dict[str, str], rf: int) -> None:
            kafka.create_topic(topic, partitions, 1, configs)

        def kafka_dir(topic: str, partition: int) -> Path:
            return kafka.data_dirs[0] / f"{topic}-{partition}"

        yield System("kafka", kafka.bootstrap, create_kafka, kafka_dir)
    finally:
        kafka.stop()


def _settings(bootstrap: str, topic: str, **kafka: str) -> tuple[Any, BatchSettings]:
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic}
    options.update({f"kafka.{k.replace('_', '.')}": v for k, v in kafka.items()})
    plan = plan_write(options, SCHEMA)
    settings = batch_settings(plan)
    assert isinstance(settings, BatchSettings), settings
    return plan, settings


def _arrow(rows: list[Row]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _ in rows], pa.string()),
            pa.array([v for _, v in rows], pa.string()),
        ],
        names=["key", "value"],
    )


def _mixed_rows(n: int, tag: str) -> list[Row]:
    """Keyed and keyless rows, tombstones, empty keys and values, text of every width."""
    rows: list[Row] = []
    for i in range(n):
        if i % 13 == 0:
            key: str | None = None
        elif i % 97 == 0:
            key = ""
        else:
            key = f"k{i % 251}" if i % 5 else f"clé-{i % 17}-ключ"
        if i % 11 == 0:
            value: str | None = None  # a tombstone
        elif i % 89 == 0:
            value = ""
        elif i % 5000 == 250:
            value = f"{tag}-{i}-" + "z" * 40_000  # alone in a batch larger than batch.size
        elif i % 500 == 0:
            value = f"{tag}-{i}-" + "long é 💡 " * 300  # several KiB
        else:
            value = f"{tag}-{i}-" + "x" * (i % 40)
        rows.append((key, value))
    return rows


def _decode(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[Any]]:
    got = confluent_consume(bootstrap, topic, list(range(partitions)), timeout_s=60)
    for p, msgs in got.items():
        assert [m.offset() for m in msgs] == list(range(len(msgs))), f"{topic}[{p}] offsets"
    return got


def _high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{topic}"})
    try:
        return [high_watermark(consumer, topic, p) for p in range(partitions)]
    finally:
        consumer.close()


def _check_placement(written: list[Row], got: dict[int, list[Any]], partitions: int) -> None:
    """The same multiset of rows; each keyed row in its key's partition, in write order."""
    read = [(_decode(m.key()), _decode(m.value())) for msgs in got.values() for m in msgs]
    assert len(read) == len(written)
    assert Counter(read) == Counter(written)
    placed: dict[str, int] = {}
    expected: dict[int, list[Row]] = {p: [] for p in range(partitions)}
    for row in written:
        key = row[0]
        if key is not None:
            if key not in placed:
                placed[key] = partition_for_key(key.encode(), partitions)
            expected[placed[key]].append(row)
    for p, msgs in got.items():
        keyed = [(_decode(m.key()), _decode(m.value())) for m in msgs if m.key() is not None]
        assert keyed == expected[p], f"partition {p}: keyed rows misplaced or out of order"


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_reads_back_exactly(system: System, topic_name: str, codec: str) -> None:
    system.create(topic_name, PARTITIONS, {}, 3)
    plan, settings = _settings(
        system.bootstrap, topic_name, compression_type=codec, batch_size="16384", linger_ms="5"
    )
    assert settings.codec == CODECS.index(codec)
    rows = _mixed_rows(20_000, codec)
    chunks = [
        rows[a:b] for a, b in ((0, 1), (1, 4000), (4000, 4000), (4000, 11_000), (11_000, 20_000))
    ]
    before = time.time()
    msg = write_record_batches(plan, settings, iter([_arrow(c) for c in chunks]))
    after = time.time()
    assert isinstance(msg, MillraceWriteCommitMessage)
    assert msg.rows == len(rows)
    assert msg.transaction is None

    got = _read_all(system.bootstrap, topic_name, PARTITIONS)
    _check_placement(rows, got, PARTITIONS)
    for msgs in got.values():
        for m in msgs:
            kind, ts = m.timestamp()
            assert kind == TIMESTAMP_CREATE_TIME
            assert before - 1 <= ts / 1000 <= after + 1
            assert not m.headers()
    # As stored: whole batches of up to batch.size bytes in the codec asked for, from one
    # idempotent producer whose sequence numbers run on without a gap in each partition.
    for p, msgs in got.items():
        headers = [h for _seg, h, ok in read_log_batches(system.partition_dir(topic_name, p)) if ok]
        assert sum(h.record_count for h in headers) == len(msgs), f"partition {p}"
        assert len(headers) > 1 and max(h.record_count for h in headers) > 100
        assert {h.compression for h in headers} == {CODECS.index(codec)}
        producers = {(h.producer_id, h.producer_epoch) for h in headers}
        assert len(producers) == 1 and min(producers)[0] >= 0, producers
        counts = [h.record_count for h in headers]
        assert [h.base_sequence for h in headers] == [0, *accumulate(counts[:-1])]


def test_tiny_batches_five_in_flight_merged_in_order_once(
    system: System, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_connector.kafka.producer import BatchProducer
    from spark_connector.write import batch_write

    monkeypatch.setattr(batch_write, "COALESCE_ROWS", 1)  # the producer merges, not Arrow
    system.create(topic_name, PARTITIONS, {}, 3)
    plan, settings = _settings(system.bootstrap, topic_name, batch_size="16384")
    assert settings.idempotent and settings.max_in_flight is None  # 5 with idempotence
    most = [0]
    send = BatchProducer._send

    def counting_send(self: BatchProducer, broker: int, batches: list[Any]) -> bool:
        sent = send(self, broker, batches)
        most[0] = max(most[0], len(self._in_flight.get(broker, ())))
        return sent

    monkeypatch.setattr(BatchProducer, "_send", counting_send)
    rows: list[Row] = [(f"k{i % 101}", f"v{i:07d}-" + "x" * (i % 50)) for i in range(60_000)]
    chunks = [rows[at : at + 7] for at in range(0, len(rows), 7)]
    before = time.time()
    msg = write_record_batches(plan, settings, iter([_arrow(c) for c in chunks]))
    after = time.time()
    assert msg.rows == len(rows)
    assert most[0] == 5, f"at most {most[0]} requests in flight"

    got = _read_all(system.bootstrap, topic_name, PARTITIONS)
    values = Counter(_decode(m.value()) for msgs in got.values() for m in msgs)
    assert not [v for v, c in values.items() if c > 1], "rows written twice"
    _check_placement(rows, got, PARTITIONS)
    for msgs in got.values():
        for m in msgs:
            assert before - 1 <= m.timestamp()[1] / 1000 <= after + 1
    stored = 0
    for p, msgs in got.items():
        headers = [h for _seg, h, ok in read_log_batches(system.partition_dir(topic_name, p)) if ok]
        assert sum(h.record_count for h in headers) == len(msgs), f"partition {p}"
        counts = [h.record_count for h in headers]
        assert [h.base_sequence for h in headers] == [0, *accumulate(counts[:-1])]
        assert len({(h.producer_id, h.producer_epoch) for h in headers}) == 1
        assert max(counts) > 7 * 10, f"partition {p}: small batches were not merged"
        stored += len(headers)
    # Unmerged, each 7-row chunk would be about one batch per partition (len(chunks) *
    # PARTITIONS); how far below that depends on how fast the broker answers (merging
    # happens while 5 requests are in flight), so the bound only says most were merged.
    assert stored < len(chunks) * PARTITIONS // 2, f"{stored} batches for {len(chunks)} chunks"


def test_refused_batch_names_partition_and_error(system: System, topic_name: str) -> None:
    system.create(topic_name, 1, {"max.message.bytes": "1000"}, 1)
    plan, settings = _settings(system.bootstrap, topic_name)
    rows: list[Row] = [("a", "small"), (None, "v" * 5000), ("b", "small too")]
    with pytest.raises(DeliveryError) as info:
        write_record_batches(plan, settings, iter([_arrow(rows)]))
    text = str(info.value)
    # Kafka's UnifiedLog refuses a batch larger than max.message.bytes with
    # RecordTooLargeException: error MESSAGE_TOO_LARGE (RECORD_LIST_TOO_LARGE is for a
    # batch over segment.bytes).
    assert f"{topic_name}[0]" in text, text
    assert "MESSAGE_TOO_LARGE" in text, text
    assert "3 of 3 rows were not acknowledged" in text, text
    assert _high_watermarks(system.bootstrap, topic_name, 1) == [0]


@pytest.mark.fault
def test_not_enough_replicas_times_out(cluster: Cluster, topic_name: str) -> None:
    """RF 2, ``min.insync.replicas`` 2, the follower shut down: the ISR is the leader alone,
    so an acks=all Produce is refused with NOT_ENOUGH_REPLICAS (retriable) until
    ``delivery.timeout.ms``."""
    cluster.ensure_all_running()
    leader, follower = 1, 2
    cluster.create_topic(
        topic_name, config={"min.insync.replicas": "2"}, replica_assignment=[[leader, follower]]
    )
    cluster.wait_isr_complete(topic_name)
    plan, settings = _settings(
        cluster.bootstrap,
        topic_name,
        acks="all",
        delivery_timeout_ms="3000",
        retry_backoff_ms="100",
    )
    assert settings.delivery_timeout_ms == 3000
    cluster.stop_broker(hard=False, broker_id=follower)
    try:
        cluster.wait_for(
            lambda: (
                cluster.describe(topic_name, via=leader)[0]
                == (leader, (leader, follower), (leader,))
            ),
            30,
            f"{topic_name}[0]: led by {leader} with ISR [{leader}]",
        )
        start = time.monotonic()
        with pytest.raises(DeliveryError) as info:
            write_record_batches(plan, settings, iter([_arrow([("k", "v1"), (None, "v2")])]))
        elapsed = time.monotonic() - start
        text = str(info.value)
        assert f"{topic_name}[0]" in text, text
        assert "2 of 2 rows were not acknowledged" in text, text
        assert "timed out" in text, text
        assert "NOT_ENOUGH_REPLICAS" in text, text
        assert "NOT_ENOUGH_REPLICAS_AFTER_APPEND" not in text, text
        assert 2.5 <= elapsed < 30, elapsed
        # NOT_ENOUGH_REPLICAS is answered before the append: nothing was written, not even to
        # the leader's log (which a read_uncommitted consumer reads up to the high watermark).
        uncommitted = cluster.consume(
            topic_name, [0], extra={"isolation.level": "read_uncommitted"}
        )
        assert uncommitted == {0: []}
        assert _high_watermarks(cluster.bootstrap, topic_name, 1) == [0]
        assert not [b for _seg, b, _ok in cluster.batches(topic_name, 0, leader)]
    finally:
        cluster.ensure_running(follower)


def test_min_insync_above_replication_factor(system: System, topic_name: str) -> None:
    """Kafka (3.9: ``Partition.effectiveMinIsr``) caps ``min.insync.replicas`` at the
    replication factor: with RF 1 and ``min.insync.replicas`` 2 an acks=all write succeeds,
    on Millrace as on Kafka."""
    system.create(topic_name, 1, {"min.insync.replicas": "2"}, 1)
    plan, settings = _settings(system.bootstrap, topic_name, acks="all", delivery_timeout_ms="3000")
    msg = write_record_batches(plan, settings, iter([_arrow([("k", "v1"), (None, "v2")])]))
    assert msg.rows == 2
    got = _read_all(system.bootstrap, topic_name, 1)
    assert [(_decode(m.key()), _decode(m.value())) for m in got[0]] == [("k", "v1"), (None, "v2")]


FAILOVER_ROWS = 300_000
FAILOVER_CHUNK = 5_000


@pytest.mark.fault
def test_leader_killed_mid_write_no_loss_no_duplicates(
    cluster: Cluster, topic_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert cluster.broker_ids() == [1, 2, 3]
    cluster.ensure_all_running()
    cluster.create_topic(topic_name, PARTITIONS, {"min.insync.replicas": "2"}, replication_factor=3)
    cluster.wait_isr_complete(topic_name)
    victim = cluster.leader_of(topic_name, 0)
    plan, settings = _settings(cluster.bootstrap, topic_name, batch_size="16384")
    assert settings.idempotent and settings.acks == -1

    rows: list[Row] = [(f"k{i % 997}", f"v{i:07d}") for i in range(FAILOVER_ROWS)]
    started = threading.Event()  # some rows are written: kill the leader now
    killed = threading.Event()  # the leader is dead: write the rest at full speed

    def batches() -> Iterator[pa.RecordBatch]:
        for n, at in enumerate(range(0, FAILOVER_ROWS, FAILOVER_CHUNK)):
            yield _arrow(rows[at : at + FAILOVER_CHUNK])
            if n == 8:
                started.set()
            if n >= 8 and not killed.is_set():
                killed.wait(0.1)  # pace the write so that it spans the kill

    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["msg"] = write_record_batches(plan, settings, batches())
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            result["error"] = exc

    caplog.set_level(logging.INFO, logger="spark_connector.kafka.producer")
    writer = threading.Thread(target=run, name="write-task", daemon=True)
    writer.start()
    try:
        assert started.wait(60), "the write never got going"
        cluster.stop_broker(hard=True, broker_id=victim)
        killed.set()
        writer.join(180)
        assert not writer.is_alive(), "the write did not finish within 180 s of the kill"
        assert cluster.leader_of(topic_name, 0) != victim
    finally:
        killed.set()
        cluster.ensure_running(victim)
    assert "error" not in result, f"the write failed: {result.get('error')!r}"
    assert result["msg"].rows == FAILOVER_ROWS
    # A Produce was in flight to the leader when it died (its answer was lost) ...
    retried = [
        r.getMessage()
        for r in caplog.records
        if r.name == "spark_connector.kafka.producer"
        and any(w in r.getMessage() for w in ("failed", "lost", "retrying", "did not answer"))
    ]
    assert any(f"from broker {victim} lost" in m for m in retried), (
        f"no produce was in flight to broker {victim} when it was killed: {retried[:5]}"
    )
    # ... and still every row is there once, each partition in write order.
    got = _read_all(cluster.bootstrap, topic_name, PARTITIONS)
    values = Counter(_decode(m.value()) for msgs in got.values() for m in msgs)
    duplicated = {v: c for v, c in values.items() if c > 1}
    assert not duplicated, f"{len(duplicated)} rows written twice, e.g. {list(duplicated)[:5]}"
    missing = [v for _, v in rows if v not in values]
    assert not missing, f"{len(missing)} rows lost, e.g. {missing[:5]}"
    _check_placement(rows, got, PARTITIONS)
    cluster.wait_isr_complete(topic_name, timeout_s=90)
