"""Batch and streaming writes with ``format("millrace")`` to a real broker, verified by
reading the topics back with confluent-kafka (a client nobody here wrote)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException

from spark_connector.records.partitioner import partition_for_key

pytestmark = pytest.mark.spark

HEADERS_TYPE = "array<struct<key:string,value:binary>>"


@pytest.fixture(scope="module")
def fmt(spark: Any) -> str:
    """The format name to write with (registered explicitly, as a job would)."""
    import spark_connector

    spark_connector.register(spark)
    return "millrace"


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _all(cluster: Any, topic: str, partitions: int) -> dict[int, list[Any]]:
    return cluster.consume(topic, list(range(partitions)))


# --- batch -----------------------------------------------------------------------------------


def test_batch_write_key_value_headers_with_topic_option(
    spark: Any, fmt: str, cluster: Any, topic_name: str
) -> None:
    """Keyed rows land where Kafka's murmur2 partitioner puts them; values, keys and headers
    arrive byte for byte; kafka.* options reach the producer."""
    topic = cluster.create_topic(topic_name, 5)
    rows = [
        (f"key-{i}", f"value-{i}".encode(), [("h1", f"x{i}".encode()), ("h2", None)])
        for i in range(200)
    ]
    df = spark.createDataFrame(rows, f"key string, value binary, headers {HEADERS_TYPE}")
    (
        df.write.format(fmt)
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", topic)
        .option("kafka.compression.type", "lz4")
        .option("kafka.linger.ms", "20")
        .mode("append")
        .save()
    )
    got = _all(cluster, topic, 5)
    assert sum(len(v) for v in got.values()) == 200
    seen = {}
    for p, msgs in got.items():
        for m in msgs:
            key = m.key()
            assert p == partition_for_key(key, 5), f"{key!r} on partition {p}"
            seen[key.decode()] = (m.value(), m.headers())
    for i in range(200):
        value, headers = seen[f"key-{i}"]
        assert value == f"value-{i}".encode()
        assert headers == [("h1", f"x{i}".encode()), ("h2", None)]


def test_batch_write_topic_and_partition_columns(
    spark: Any, fmt: str, cluster: Any, topic_name: str
) -> None:
    """The topic column picks the topic per row; the partition column wins over the key;
    keyless rows without a partition are all delivered (client-chosen partition); string
    values and null values (tombstones) are written."""
    a = cluster.create_topic(f"{topic_name}-a", 3)
    b = cluster.create_topic(f"{topic_name}-b", 2)
    rows: list[tuple[Any, ...]] = []
    for i in range(60):
        topic = a if i % 2 == 0 else b
        partition = None if i % 3 == 0 else (i % (3 if topic == a else 2))
        key = None if i % 5 == 0 else f"k{i}"
        value = None if i == 59 else f"v{i}"
        rows.append((topic, partition, key, value))
    df = spark.createDataFrame(rows, "topic string, partition int, key string, value string")
    df.write.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap).mode("append").save()
    got = {a: _all(cluster, a, 3), b: _all(cluster, b, 2)}
    found = {}
    for topic, parts in got.items():
        for p, msgs in parts.items():
            for m in msgs:
                found[m.value()] = (topic, p, m.key())
    assert len(found) == 60
    for i, (topic, partition, key, value) in enumerate(rows):
        enc = value.encode() if value is not None else None
        got_topic, got_p, got_key = found[enc]
        assert got_topic == topic, i
        assert got_key == (key.encode() if key is not None else None), i
        if partition is not None:
            assert got_p == partition, i
        elif key is not None:
            assert got_p == partition_for_key(key.encode(), 3 if topic == a else 2), i


def test_topic_option_wins_over_topic_column(
    spark: Any, fmt: str, cluster: Any, topic_name: str
) -> None:
    topic = cluster.create_topic(topic_name, 1)
    df = spark.createDataFrame([("elsewhere", "v1"), (None, "v2")], "topic string, value string")
    df.write.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap).option(
        "topic", topic
    ).mode("append").save()
    got = _all(cluster, topic, 1)
    assert sorted(m.value() for m in got[0]) == [b"v1", b"v2"]


def test_murmur2_matches_librdkafka_and_spark_placement(
    spark: Any, fmt: str, cluster: Any, topic_name: str
) -> None:
    """Cross-check: librdkafka's murmur2_random (Java-compatible) partitioner, the pure
    partitioner module and the Spark writer agree on every key's partition."""
    from confluent_kafka import Producer

    n = 7
    direct = cluster.create_topic(f"{topic_name}-direct", n)
    via_spark = cluster.create_topic(f"{topic_name}-spark", n)
    keys = [f"user-{i}-\u00e9" for i in range(150)] + ["", "a", "ab", "abc", "abcd"]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "partitioner": "murmur2_random"})
    for k in keys:
        producer.produce(direct, b"x", k.encode())
    assert producer.flush(30) == 0
    df = spark.createDataFrame([(k, "x") for k in keys], "key string, value string")
    df.write.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap).option(
        "topic", via_spark
    ).mode("append").save()
    for topic in (direct, via_spark):
        placed = {m.key(): p for p, msgs in _all(cluster, topic, n).items() for m in msgs}
        assert len(placed) == len(keys)
        for k in keys:
            kb = k.encode()
            assert placed[kb] == partition_for_key(kb, n), (topic, k)


@pytest.mark.parametrize(
    ("producer", "queue_option", "queue_size"),
    [
        ("batch", "kafka.queue.buffering.max.kbytes", "64"),
        ("librdkafka", "kafka.queue.buffering.max.messages", "15000"),
    ],
)
def test_rows_of_a_key_keep_their_order(
    spark: Any,
    fmt: str,
    cluster: Any,
    topic_name: str,
    producer: str,
    queue_option: str,
    queue_size: str,
) -> None:
    """A key's rows arrive in the task's order, in the partitioner's partition, across
    several Arrow batches and a local queue smaller than the write (each producer's own
    bound: the batch producer's bytes unacknowledged, librdkafka's queued messages)."""
    topic = cluster.create_topic(topic_name, 3)
    rows = [(f"k{i % 40}", f"{i}") for i in range(30_000)]
    df = spark.createDataFrame(rows, "key string, value string").coalesce(1)
    (
        df.write.format(fmt)
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", topic)
        .option("producer", producer)
        .option("kafka.batch.size", "16384")
        .option(queue_option, queue_size)
        .mode("append")
        .save()
    )
    per_key: dict[bytes, list[int]] = {}
    for p, msgs in _all(cluster, topic, 3).items():
        for m in msgs:
            assert p == partition_for_key(m.key(), 3)
            per_key.setdefault(m.key(), []).append(int(m.value()))
    assert sum(len(v) for v in per_key.values()) == len(rows)
    for key, values in per_key.items():
        assert values == sorted(values), key
        assert values == list(range(int(key[1:]), len(rows), 40))


@pytest.mark.parametrize("codec", ["none", "zstd"])  # every codec: test_batch_producer
def test_batch_and_librdkafka_producers_write_the_same_records(
    spark: Any, fmt: str, cluster: Any, topic_name: str, codec: str
) -> None:
    """The batch producer (the default for such a write) and librdkafka's per-row producer
    (``producer=librdkafka``) put the same rows in the same partitions, byte for byte: keyed
    rows by murmur2, null keys anywhere, null values as tombstones, empty strings kept."""
    n = 4
    rows = [
        (None if i % 9 == 0 else f"key-{i}-\u00e9", None if i % 13 == 0 else "v" * (i % 7))
        for i in range(3_000)
    ]
    df = spark.createDataFrame(rows, "key string, value string").repartition(2)
    placed: dict[str, Any] = {}
    for producer in ("batch", "librdkafka"):
        topic = cluster.create_topic(f"{topic_name}-{producer}", n)
        (
            df.write.format(fmt)
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("topic", topic)
            .option("producer", producer)
            .option("kafka.compression.type", codec)
            .mode("append")
            .save()
        )
        got = _all(cluster, topic, n)
        keyed = sorted(
            (p, m.key(), m.value()) for p, msgs in got.items() for m in msgs if m.key() is not None
        )
        keyless = sorted(
            (m.value() or b"", m.value() is None)
            for msgs in got.values()
            for m in msgs
            if m.key() is None
        )
        placed[producer] = (keyed, keyless)
        for p, key, _value in keyed:
            assert p == partition_for_key(key, n), (producer, key, p)
    assert placed["batch"] == placed["librdkafka"]
    keyed, keyless = placed["batch"]
    want = sorted((k.encode(), None if v is None else v.encode()) for k, v in rows if k is not None)
    assert sorted((k, v) for _p, k, v in keyed) == want
    assert len(keyless) == sum(1 for k, _v in rows if k is None)


def test_producer_batch_refuses_writes_it_cannot_do(
    spark: Any, fmt: str, cluster: Any, topic_name: str
) -> None:
    """``producer=batch`` asks for the batch producer: a write it cannot do (acks=0) fails on
    the driver naming the option and the reason, instead of silently going row by row."""
    topic = cluster.create_topic(topic_name, 1)
    df = spark.createDataFrame(
        [("k", "v", [("h", b"x")])], f"key string, value string, headers {HEADERS_TYPE}"
    )
    with pytest.raises(PySparkException) as info:
        df.select("key", "value").write.format(fmt).option(
            "kafka.bootstrap.servers", cluster.bootstrap
        ).option("topic", topic).option("producer", "batch").option("kafka.acks", "0").mode(
            "append"
        ).save()
    assert "kafka.acks" in _error_text(info.value)
    assert cluster.consume(topic, [0])[0] == []


# --- streaming -------------------------------------------------------------------------------


def test_streaming_write_delivers_every_row(
    spark: Any, fmt: str, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    topic = cluster.create_topic(topic_name, 3)
    src = tmp_path / "in"
    src.mkdir()
    expected = []
    for f in range(3):
        lines = []
        for i in range(100):
            event = {"id": f * 100 + i, "user": f"u{i % 7}"}
            expected.append(event)
            lines.append(json.dumps(event))
        (src / f"part-{f}.json").write_text("\n".join(lines) + "\n")
    stream = (
        spark.readStream.schema("id long, user string")
        .option("maxFilesPerTrigger", 1)
        .json(str(src))
        .selectExpr("user AS key", "to_json(struct(id, user)) AS value")
    )
    query = (
        stream.writeStream.format(fmt)
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(90), "streaming write did not finish within 90 s"
        assert query.exception() is None, query.exception()
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        assert len(batches) == 3, query.recentProgress
    finally:
        query.stop()
    got = _all(cluster, topic, 3)
    values = sorted(json.loads(m.value())["id"] for msgs in got.values() for m in msgs)
    assert values == list(range(300))
    for p, msgs in got.items():
        for m in msgs:
            assert p == partition_for_key(m.key(), 3)


def test_streaming_topic_to_topic_copy(
    spark: Any, fmt: str, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    """readStream.format("millrace") -> writeStream.format("millrace"): every record copied
    with its key, value and headers, across several micro-batches."""
    from confluent_kafka import Producer

    source = cluster.create_topic(f"{topic_name}-src", 2)
    sink = cluster.create_topic(f"{topic_name}-dst", 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(90):
        producer.produce(source, f"v{i}".encode(), f"k{i}".encode(), headers=[("n", str(i))])
    assert producer.flush(30) == 0
    query = (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .option("includeHeaders", "true")
        .load()
        .select("key", "value", "headers")
        .writeStream.format(fmt)
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(90), "streaming copy did not finish within 90 s"
        assert query.exception() is None, query.exception()
        assert len([p for p in query.recentProgress if p["numInputRows"] > 0]) >= 3
    finally:
        query.stop()
    got = _all(cluster, sink, 3)
    copied = {}
    for p, msgs in got.items():
        for m in msgs:
            assert p == partition_for_key(m.key(), 3)
            copied[m.key()] = (m.value(), m.headers())
    assert copied == {
        f"k{i}".encode(): (f"v{i}".encode(), [("n", str(i).encode())]) for i in range(90)
    }


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ddl", "row", "column"),
    [
        ("value int", (1,), "'value' has type int"),
        ("key string, value long", ("k", 1), "'value' has type bigint"),
        ("key int, value string", (1, "v"), "'key' has type int"),
        ("topic int, value string", (1, "v"), "'topic' has type int"),
        ("partition long, value string", (1, "v"), "'partition' has type bigint"),
        ("headers array<string>, value string", (["h"], "v"), "'headers' has type"),
        ("data string", ("v",), "required column 'value' not found"),
    ],
)
def test_bad_column_fails_naming_the_column(
    spark: Any, fmt: str, cluster: Any, ddl: str, row: tuple[Any, ...], column: str
) -> None:
    df = spark.createDataFrame([row], ddl)
    with pytest.raises(PySparkException) as info:
        df.write.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap).option(
            "topic", "never-created"
        ).mode("append").save()
    assert column in _error_text(info.value)


def test_null_typed_value_column_fails(spark: Any, fmt: str, cluster: Any) -> None:
    df = spark.range(1).selectExpr("NULL AS value")
    with pytest.raises(PySparkException) as info:
        df.write.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap).option(
            "topic", "never-created"
        ).mode("append").save()
    assert "'value' has type void" in _error_text(info.value)


def test_missing_topic_and_bootstrap_fail_naming_the_option(
    spark: Any, fmt: str, cluster: Any
) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException) as info:
        df.write.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap).mode(
            "append"
        ).save()
    assert "set option 'topic' or provide a string column 'topic'" in _error_text(info.value)
    with pytest.raises(PySparkException) as info:
        df.write.format(fmt).option("topic", "t").mode("append").save()
    assert "'kafka.bootstrap.servers' is required" in _error_text(info.value)


def test_null_topic_in_a_row_fails_the_task(
    spark: Any, fmt: str, cluster: Any, topic_name: str
) -> None:
    topic = cluster.create_topic(topic_name, 1)
    df = spark.createDataFrame([(topic, "ok"), (None, "lost")], "topic string, value string")
    with pytest.raises(PySparkException) as info:
        df.coalesce(1).write.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap).mode(
            "append"
        ).save()
    text = _error_text(info.value)
    assert "null or empty 'topic' column" in text
    assert "no 'topic' option" in text


def test_failed_delivery_fails_the_task(
    spark: Any, fmt: str, cluster: Any, topic_name: str
) -> None:
    """A row for a partition the topic does not have is never acknowledged: the task fails."""
    topic = cluster.create_topic(topic_name, 1)
    df = spark.createDataFrame([(0, "fine"), (5, "nowhere")], "partition int, value string")
    with pytest.raises(PySparkException) as info:
        df.coalesce(1).write.format(fmt).option(
            "kafka.bootstrap.servers", cluster.bootstrap
        ).option("topic", topic).option("kafka.message.timeout.ms", "5000").mode("append").save()
    text = _error_text(info.value)
    assert "DeliveryError" in text or "not acknowledged" in text or "cannot produce" in text
    assert topic in text


def test_rows_the_cluster_never_acknowledges_fail_the_task(
    spark: Any, fmt: str, cluster_factory: Any, topic_name: str
) -> None:
    """Rows refused by the broker until they time out (acks=all while the partition's ISR,
    its leader alone, is smaller than min.insync.replicas 2) fail the task, with either
    producer: both count the rows never acknowledged."""
    c = cluster_factory(brokers=2)
    leader, follower = 1, 2
    topic = c.create_topic(
        topic_name, config={"min.insync.replicas": "2"}, replica_assignment=[[leader, follower]]
    )
    c.wait_isr_complete(topic)
    c.stop_broker(hard=False, broker_id=follower)  # controlled: leaves the ISR at once
    c.wait_for(
        lambda: c.describe(topic, via=leader)[0] == (leader, (leader, follower), (leader,)),
        30,
        f"{topic}[0]: led by {leader} with ISR [{leader}]",
    )
    df = spark.createDataFrame([(f"v{i}",) for i in range(50)], "value string").coalesce(1)
    for producer in ("batch", "librdkafka"):
        with pytest.raises(PySparkException) as info:
            df.write.format(fmt).option("kafka.bootstrap.servers", c.bootstrap).option(
                "topic", topic
            ).option("producer", producer).option("kafka.message.timeout.ms", "3000").mode(
                "append"
            ).save()
        text = _error_text(info.value)
        assert "50 of 50 rows were not acknowledged" in text, (producer, text)
        assert "timed out" in text, (producer, text)  # NOT_ENOUGH_REPLICAS retried until then


def test_unknown_producer_option_fails_with_a_clear_message(
    spark: Any, fmt: str, cluster: Any
) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException) as info:
        df.write.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap).option(
            "topic", "t"
        ).option("kafka.no.such.property", "1").mode("append").save()
    text = _error_text(info.value)
    assert "kafka.*" in text
    assert "no.such.property" in text


# --- pure planning (no Spark job, no broker) -------------------------------------------------


def test_producer_config_defaults_and_overrides() -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_connector.write.writer import plan_write, producer_config

    schema = StructType([StructField("VALUE", StringType()), StructField("Key", StringType())])
    plan = plan_write({"kafka.bootstrap.servers": "h:1", "topic": "t"}, schema)
    assert (plan.value_index, plan.key_index, plan.topic) == (0, 1, "t")
    conf = producer_config(plan)
    assert conf["acks"] == "all"
    assert conf["enable.idempotence"] is True
    assert conf["partitioner"] == "murmur2_random"
    assert conf["bootstrap.servers"] == "h:1"

    weak = plan_write(
        {"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.acks": "1", "kafka.linger.ms": "7"},
        schema,
    )
    conf = producer_config(weak)
    assert (conf["acks"], conf["enable.idempotence"], conf["linger.ms"]) == ("1", False, "7")

    with pytest.raises(ValueError, match=r"'kafka\.value\.serializer' is not supported"):
        plan_write(
            {"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.value.serializer": "x"},
            schema,
        )
    with pytest.raises(ValueError, match="option 'topic' must not be empty"):
        plan_write({"kafka.bootstrap.servers": "h:1", "topic": " "}, schema)
