"""Streaming reads with ``spark.readStream.format("millrace")`` against a real broker:
Trigger.AvailableNow, ``maxOffsetsPerTrigger`` admission control, restart from a checkpoint,
partitions added while the query was down."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _produce(cluster: Any, topic: str, counts: dict[int, int], tag: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(cluster.conf({"linger.ms": 5}))
    for p, n in counts.items():
        for i in range(n):
            producer.produce(topic, key=f"{tag}-{p}-{i}".encode(), value=b"v", partition=p)
    assert producer.flush(30) == 0


def _run_available_now(
    spark: Any, cluster: Any, topic: str, checkpoint: Path, **options: str
) -> list[list[tuple[int, int, str]]]:
    """Run one Trigger.AvailableNow query; return each non-empty micro-batch's
    (partition, offset, key) rows."""
    batches: list[list[tuple[int, int, str]]] = []
    lock = threading.Lock()

    def collect(df: Any, batch_id: int) -> None:
        rows = [
            (r.partition, r.offset, r.key)
            for r in df.selectExpr("partition", "offset", "CAST(key AS STRING) AS key").collect()
        ]
        if rows:
            with lock:
                batches.append(rows)

    reader = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "AvailableNow query did not finish"
    assert query.exception() is None, query.exception()
    return batches


def test_available_now_with_max_offsets_then_restart(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = cluster.create_topic("spark-read-stream", 3)
    _produce(cluster, topic, {0: 50, 1: 30, 2: 70}, "a")
    checkpoint = tmp_path / "ckpt"

    batches = _run_available_now(
        spark,
        cluster,
        topic,
        checkpoint,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="40",
    )
    sizes = [len(b) for b in batches]
    assert sizes == [40, 40, 40, 30], sizes
    seen = [(p, o) for b in batches for p, o, _k in b]
    assert len(seen) == len(set(seen)) == 150
    assert sorted(seen) == sorted(
        [(0, o) for o in range(50)] + [(1, o) for o in range(30)] + [(2, o) for o in range(70)]
    )
    # Each partition is read in offset order across micro-batches.
    for p in range(3):
        offs = [o for b in batches for q, o, _k in b if q == p]
        assert offs == sorted(offs)

    # Restart from the checkpoint after more data and a new partition: only the new records.
    _produce(cluster, topic, {0: 5, 1: 5, 2: 5}, "b")
    admin = AdminClient(cluster.conf())
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
    cluster.admin().wait_for_leaders(topic, 4)
    _produce(cluster, topic, {3: 7}, "c")

    batches = _run_available_now(
        spark, cluster, topic, checkpoint, startingOffsets="earliest", maxOffsetsPerTrigger="40"
    )
    rows = sorted((p, o) for b in batches for p, o, _k in b)
    assert rows == sorted(
        [(0, o) for o in range(50, 55)]
        + [(1, o) for o in range(30, 35)]
        + [(2, o) for o in range(70, 75)]
        + [(3, o) for o in range(7)]
    )


def test_streaming_defaults_to_latest_and_reads_all_available(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    topic = cluster.create_topic("spark-read-stream-latest", 2)
    _produce(cluster, topic, {0: 10, 1: 10}, "old")
    checkpoint = tmp_path / "ckpt"
    # First run: starts at latest, nothing to read.
    assert _run_available_now(spark, cluster, topic, checkpoint) == []
    _produce(cluster, topic, {0: 3, 1: 4}, "new")
    batches = _run_available_now(spark, cluster, topic, checkpoint)
    assert len(batches) == 1  # no maxOffsetsPerTrigger: one batch with everything
    assert sorted(k for _p, _o, k in batches[0]) == sorted(
        [f"new-0-{i}" for i in range(3)] + [f"new-1-{i}" for i in range(4)]
    )


def test_ending_offsets_rejected_in_streaming(spark: Any, cluster: Any, tmp_path: Path) -> None:
    df = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", "whatever")
        .option("endingOffsets", "latest")
        .load()
    )
    with pytest.raises(Exception, match="endingOffsets"):
        query = (
            df.writeStream.format("memory")
            .queryName("never")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(60)
            exc = query.exception()
            if exc is not None:
                raise RuntimeError(str(exc))
        finally:
            query.stop()


def test_deleted_records_fail_or_are_skipped_on_restart(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    from confluent_kafka import TopicPartition as CKTopicPartition
    from confluent_kafka.admin import AdminClient

    topic = cluster.create_topic("spark-read-stream-loss", 1)
    _produce(cluster, topic, {0: 20}, "a")
    checkpoint = tmp_path / "ckpt"
    first = _run_available_now(spark, cluster, topic, checkpoint, startingOffsets="earliest")
    assert sum(len(b) for b in first) == 20

    _produce(cluster, topic, {0: 20}, "b")
    admin = AdminClient(cluster.conf())
    for f in admin.delete_records([CKTopicPartition(topic, 0, 30)]).values():
        f.result(timeout=30)

    with pytest.raises(Exception, match="failOnDataLoss"):
        _run_available_now(spark, cluster, topic, checkpoint)
    rows = _run_available_now(spark, cluster, topic, checkpoint, failOnDataLoss="false")
    assert sorted(o for b in rows for _p, o, _k in b) == list(range(30, 40))


def test_min_offsets_per_trigger_waits_for_max_trigger_delay(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    import time

    topic = cluster.create_topic("spark-read-stream-min", 1)
    started = time.monotonic()
    query = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "1000")
        .option("maxTriggerDelay", "3s")
        .load()
        .writeStream.format("memory")
        .queryName("min_offsets")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        _produce(cluster, topic, {0: 5}, "m")
        n = 0
        while time.monotonic() - started < 60:
            assert query.exception() is None, query.exception()
            n = spark.sql("SELECT count(*) AS n FROM min_offsets").collect()[0].n
            if n == 5:
                break
            time.sleep(0.2)
        waited = time.monotonic() - started
        assert n == 5
        # Fewer records than minOffsetsPerTrigger: held back until maxTriggerDelay passed.
        assert waited >= 2.5, waited
    finally:
        query.stop()


def test_deleted_topic_fails_or_is_skipped(spark: Any, cluster: Any, tmp_path: Path) -> None:
    import time

    from confluent_kafka.admin import AdminClient

    topic = cluster.create_topic("spark-read-stream-deleted", 1)
    _produce(cluster, topic, {0: 5}, "a")
    checkpoint = tmp_path / "ckpt"
    first = _run_available_now(spark, cluster, topic, checkpoint, startingOffsets="earliest")
    assert sum(len(b) for b in first) == 5

    admin = AdminClient(cluster.conf())
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while topic in cluster.admin().topic_names():
        assert time.monotonic() < deadline, "topic deletion never showed in metadata"
        time.sleep(0.2)

    with pytest.raises(Exception, match="failOnDataLoss"):
        _run_available_now(spark, cluster, topic, checkpoint)
    assert _run_available_now(spark, cluster, topic, checkpoint, failOnDataLoss="false") == []


def test_a_query_keeps_one_metadata_client_and_replaces_a_failed_one(
    cluster_factory: Any,
) -> None:
    """The driver-side calls Spark's streaming source runner makes, made directly: one
    metadata client serves every micro-batch; a look-up while the broker is down fails naming
    the servers and drops it; once the broker is back the next look-up connects afresh;
    pickling leaves the client out and ``stop()`` closes it."""
    import pickle
    import time

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_connector.datasource import MillraceDataSource

    cluster = cluster_factory()
    topic = cluster.create_topic("spark-read-stream-kept-client", 2)
    source = MillraceDataSource(
        {
            "kafka.bootstrap.servers": cluster.bootstrap,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "kafka.default.api.timeout.ms": "3000",
        }
    )
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    client = reader._metadata
    assert client is not None
    _produce(cluster, topic, {0: 3, 1: 2}, "k")
    assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 3, "1": 2}}
    assert reader._metadata is client  # the same client, not one per micro-batch
    assert pickle.loads(pickle.dumps(reader))._metadata is None

    cluster.stop_broker()
    with pytest.raises(RuntimeError, match="no broker of kafka.bootstrap.servers"):
        reader.latestOffset(start, ReadAllAvailable())
    assert reader._metadata is None
    cluster.start_broker()
    deadline = time.monotonic() + 60
    while True:
        try:
            latest = reader.latestOffset(start, ReadAllAvailable())
            break
        except RuntimeError:
            assert time.monotonic() < deadline, "no look-up succeeded after the restart"
            time.sleep(0.5)
    assert latest == {topic: {"0": 3, "1": 2}}
    assert reader._metadata is not None and reader._metadata is not client
    reader.stop()
    assert reader._metadata is None
