"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10 with the Java
kafka-clients) works unchanged against real Millrace broker processes.

The connector's jars are fetched by ``make setup`` into ``.cache/jvm/spark-kafka`` and put on
the session's ``spark.jars`` by ``tests/spark/conftest.py``; without them every test here
fails (never skips). Covered: batch reads (whole topic, JSON starting/ending offsets),
Trigger.AvailableNow streaming with ``maxOffsetsPerTrigger`` and a restart from the
checkpoint, batch writes (key placement by Kafka's partitioner, an explicit ``partition``
column, headers), and agreement with ``format("millrace")`` on the same topic.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from spark_connector.records.partitioner import partition_for_key

pytestmark = pytest.mark.spark

PARTITIONS = 2
PER_PARTITION = 30
BASE_TS = 1_700_000_000_000  # epoch ms of record 0 in every partition; record i is +i ms


@pytest.fixture(scope="module", autouse=True)
def kafka_connector(spark: Any) -> None:
    """Fail (not skip) unless the running session has Spark's Kafka connector on its jars."""
    jars = spark.sparkContext.getConf().get("spark.jars", "") or ""
    if "spark-sql-kafka-0-10" not in jars:
        pytest.fail(
            "Spark's Kafka connector is not on spark.jars of the test session "
            f"(spark.jars={jars!r}); `make setup` fetches it into .cache/jvm/spark-kafka "
            "and tests/spark/conftest.py adds every jar found there"
        )


def _key(p: int, i: int) -> bytes:
    return f"k{p}-{i}".encode()


def _value(p: int, i: int) -> bytes:
    return f"v{p}-{i}".encode()


def _headers(p: int, i: int) -> list[tuple[str, bytes | None]] | None:
    return [("h", f"{p}:{i}".encode()), ("n", None)] if i % 3 == 0 else None


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)


@pytest.fixture(scope="module")
def topic(cluster: Any) -> str:
    """A 2-partition topic with PER_PARTITION keyed records in each partition (explicit
    partition and CreateTime timestamp, headers on every third record)."""
    from confluent_kafka import Producer

    name = cluster.create_topic("spark-kafka-connector", PARTITIONS)
    producer = Producer(cluster.conf({"linger.ms": 5}))
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            producer.produce(
                name,
                key=_key(p, i),
                value=_value(p, i),
                partition=p,
                timestamp=BASE_TS + i,
                headers=_headers(p, i),
            )
    assert producer.flush(30) == 0
    return name


def _read(spark: Any, cluster: Any, fmt: str, **options: str) -> Any:
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _bytes(v: Any) -> bytes | None:
    return None if v is None else bytes(v)


def _rows(df: Any) -> list[tuple[Any, ...]]:
    """(partition, offset, key, value, topic, timestamp, timestampType[, headers]) per row,
    bytes as ``bytes`` and headers as a tuple, so rows from both connectors compare."""
    out = []
    for r in df.collect():
        row: tuple[Any, ...] = (
            r.partition,
            r.offset,
            _bytes(r.key),
            _bytes(r.value),
            r.topic,
            r.timestamp,
            r.timestampType,
        )
        if "headers" in r.asDict():
            row += (
                None if r.headers is None else tuple((h.key, _bytes(h.value)) for h in r.headers),
            )
        out.append(row)
    return out


def _expected(topic: str, slices: dict[int, range]) -> list[tuple[Any, ...]]:
    return [
        (p, i, _key(p, i), _value(p, i), topic, _ts(BASE_TS + i), 0)
        for p, offsets in slices.items()
        for i in offsets
    ]


# --- batch read ------------------------------------------------------------------------------


def test_batch_read_whole_topic(spark: Any, cluster: Any, topic: str) -> None:
    df = _read(spark, cluster, "kafka", subscribe=topic)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    rows = _rows(df)
    assert len(rows) == df.count() == PARTITIONS * PER_PARTITION
    assert sorted(rows) == sorted(_expected(topic, dict.fromkeys(range(PARTITIONS), range(30))))
    # (key, value) pairs as a user sees them, and offsets 0..n-1 in each partition.
    assert {(k, v) for _p, _o, k, v, *_ in rows} == {
        (_key(p, i), _value(p, i)) for p in range(PARTITIONS) for i in range(PER_PARTITION)
    }
    for p in range(PARTITIONS):
        assert sorted(o for q, o, *_ in rows if q == p) == list(range(PER_PARTITION))


def test_batch_read_include_headers(spark: Any, cluster: Any, topic: str) -> None:
    df = _read(spark, cluster, "kafka", subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString().endswith(
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    got = {(r[0], r[1]): r[7] for r in _rows(df)}
    assert len(got) == PARTITIONS * PER_PARTITION
    for (p, i), headers in got.items():
        want = _headers(p, i)
        assert headers == (None if want is None else tuple(want)), (p, i)


def test_batch_read_json_starting_and_ending_offsets(spark: Any, cluster: Any, topic: str) -> None:
    df = _read(
        spark,
        cluster,
        "kafka",
        assign=json.dumps({topic: [0, 1]}),
        startingOffsets=json.dumps({topic: {"0": 5, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 12, "1": -1}}),
    )
    assert sorted(_rows(df)) == sorted(_expected(topic, {0: range(5, 12), 1: range(30)}))

    df = _read(
        spark,
        cluster,
        "kafka",
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 28, "1": 10}}),
        endingOffsets=json.dumps({topic: {"0": -1, "1": 11}}),
    )
    assert sorted(_rows(df)) == sorted(_expected(topic, {0: range(28, 30), 1: range(10, 11)}))


# --- streaming read --------------------------------------------------------------------------


def _produce(cluster: Any, topic: str, per_partition: int, partitions: int, tag: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(cluster.conf({"linger.ms": 5}))
    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, key=f"{tag}-{p}-{i}".encode(), value=b"v", partition=p)
    assert producer.flush(30) == 0


def _stream_available_now(
    spark: Any, cluster: Any, topic: str, checkpoint: Path, max_offsets: int
) -> tuple[list[list[tuple[int, int, str]]], list[int]]:
    """One ``format("kafka")`` Trigger.AvailableNow query into foreachBatch. Returns each
    micro-batch's (partition, offset, key) rows (empty ones dropped) and the numInputRows
    of every progress report."""
    batches: list[list[tuple[int, int, str]]] = []
    lock = threading.Lock()

    def collect(df: Any, _batch_id: int) -> None:
        rows = [
            (r.partition, r.offset, r.key)
            for r in df.selectExpr("partition", "offset", "CAST(key AS STRING) AS key").collect()
        ]
        if rows:
            with lock:
                batches.append(rows)

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets))
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(90), "AvailableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    inputs = [int(p["numInputRows"]) for p in query.recentProgress]
    return batches, inputs


def test_streaming_available_now_max_offsets_and_restart(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    topic = cluster.create_topic("spark-kafka-connector-stream", PARTITIONS)
    limit = 16
    _produce(cluster, topic, 30, PARTITIONS, "a")
    checkpoint = tmp_path / "ckpt"

    batches, inputs = _stream_available_now(spark, cluster, topic, checkpoint, limit)
    sizes = [len(b) for b in batches]
    assert all(0 < n <= limit for n in sizes), sizes
    assert len(sizes) >= 60 // limit + 1, sizes  # 60 records do not fit in 3 batches of 16
    assert sum(sizes) == 60, sizes
    assert all(n <= limit for n in inputs) and sum(inputs) == 60, inputs
    seen = [(p, o) for b in batches for p, o, _k in b]
    assert sorted(seen) == [(p, o) for p in range(PARTITIONS) for o in range(30)]
    for p in range(PARTITIONS):  # each partition is read in offset order across batches
        offs = [o for b in batches for q, o, _k in b if q == p]
        assert offs == sorted(offs)

    # Restart from the checkpoint after more data: exactly the new records, none twice.
    _produce(cluster, topic, 7, PARTITIONS, "b")
    batches, inputs = _stream_available_now(spark, cluster, topic, checkpoint, limit)
    rows = sorted(r for b in batches for r in b)
    assert rows == sorted((p, 30 + i, f"b-{p}-{i}") for p in range(PARTITIONS) for i in range(7))
    assert all(len(b) <= limit for b in batches)
    assert sum(inputs) == 14, inputs

    # Nothing new: the restarted query reads nothing.
    batches, inputs = _stream_available_now(spark, cluster, topic, checkpoint, limit)
    assert batches == [] and sum(inputs) == 0, (batches, inputs)


# --- batch write -----------------------------------------------------------------------------


def test_batch_write_keyed_rows_land_where_kafka_puts_them(
    spark: Any, cluster: Any, topic_name: str
) -> None:
    n = 3
    target = cluster.create_topic(topic_name, n)
    rows = [(f"key-{i}", f"value-{i}") for i in range(60)]
    df = spark.createDataFrame(rows, "key string, value string")
    (
        df.write.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", target)
        .mode("append")
        .save()
    )
    got = cluster.consume(target, list(range(n)))
    found: dict[bytes, tuple[int, bytes]] = {}
    for p, msgs in got.items():
        assert [m.offset() for m in msgs] == list(range(len(msgs))), p
        for m in msgs:
            assert m.key() not in found, m.key()
            found[m.key()] = (p, m.value())
    assert found == {k.encode(): (partition_for_key(k.encode(), n), v.encode()) for k, v in rows}


def test_batch_write_partition_column_and_headers(
    spark: Any, cluster: Any, topic_name: str
) -> None:
    target = cluster.create_topic(topic_name, 2)
    rows = [
        (
            f"k{i}".encode(),
            f"v{i}".encode(),
            i % 2,
            [("h", f"x{i}".encode()), ("n", None)] if i % 4 == 0 else None,
        )
        for i in range(40)
    ]
    df = spark.createDataFrame(
        rows,
        "key binary, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    (
        df.write.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", target)
        .save()
    )
    got = cluster.consume(target, [0, 1])
    found = {}
    for p, msgs in got.items():
        for m in msgs:
            found[m.key()] = (p, m.value(), m.headers())
    assert found == {k: (p, v, h) for k, v, p, h in rows}
    # The same records read back through format("millrace").
    back = _read(spark, cluster, "millrace", subscribe=target, includeHeaders="true")
    assert {(r[2], r[0], r[3], r[7]) for r in _rows(back)} == {
        (k, p, v, None if h is None else tuple(h)) for k, v, p, h in rows
    }


# --- the two connectors agree ----------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"includeHeaders": "true"},
        {
            "startingOffsets": '{"TOPIC":{"0":3,"1":17}}',
            "endingOffsets": '{"TOPIC":{"0":9,"1":-1}}',
        },
    ],
    ids=["whole-topic", "headers", "json-offsets"],
)
def test_millrace_and_kafka_formats_agree(
    spark: Any, cluster: Any, topic: str, options: dict[str, str]
) -> None:
    opts = {k: v.replace("TOPIC", topic) for k, v in options.items()}
    kafka = _read(spark, cluster, "kafka", subscribe=topic, **opts)
    millrace = _read(spark, cluster, "millrace", subscribe=topic, **opts)
    assert kafka.schema.simpleString() == millrace.schema.simpleString()
    kafka_rows = sorted(_rows(kafka), key=lambda r: (r[0], r[1]))
    millrace_rows = sorted(_rows(millrace), key=lambda r: (r[0], r[1]))
    assert kafka_rows, "nothing read"
    assert millrace_rows == kafka_rows
