"""Compacted topics read as tables: ``spark.read.format("millrace").option("readAs",
"table")`` and ``millrace table`` give one row per live key with its latest record, before
and after the log cleaner ran, and a stream-static join sees the table's updates in the next
micro-batch."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.spark,
    pytest.mark.cluster_config({"log.cleaner.backoff.ms": "200"}),
]

KEYS = 300
UPDATES = 3000


def _produce(
    cluster: Any, topic: str, updates: int, seed: int
) -> dict[bytes, tuple[bytes | None, int]]:
    """Random updates (10% tombstones) of KEYS keys: key -> (latest value, its offset's
    partition-independent sequence number)."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    producer = Producer(cluster.conf({"linger.ms": 5, "batch.size": 16384}))
    latest: dict[bytes, tuple[bytes | None, int]] = {}
    for i in range(updates):
        key = f"key-{rng.randrange(KEYS):04d}".encode()
        value = None if rng.random() < 0.1 else f"value-{seed}-{i}".encode()
        latest[key] = (value, i)
        producer.produce(topic, key=key, value=value)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return latest


def _live(latest: dict[bytes, tuple[bytes | None, int]]) -> dict[bytes, bytes]:
    return {k: v for k, (v, _i) in latest.items() if v is not None}


def _table(spark: Any, cluster: Any, topic: str) -> Any:
    return (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("readAs", "table")
        .load()
    )


def test_table_read_and_cli_before_and_after_cleaning(
    spark: Any, cluster: Any, topic_name: str
) -> None:
    cluster.create_topic(
        topic_name,
        3,
        {
            "cleanup.policy": "compact",
            "segment.bytes": "20000",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    latest = _produce(cluster, topic_name, UPDATES, seed=1)
    live = _live(latest)

    rows = _table(spark, cluster, topic_name).collect()
    assert {r.key: r.value for r in rows} == live
    assert len(rows) == len(live), "a key appears more than once"
    # the offset and timestamp are those of the latest record of the key
    raw = (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic_name)
        .load()
        .selectExpr("key", "partition", "offset")
        .collect()
    )
    last: dict[bytes, tuple[int, int]] = {}
    for r in raw:
        last[r.key] = (r.partition, r.offset)
    assert {r.key: (r.partition, r.offset) for r in rows} == {k: last[k] for k in live}

    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli.main",
            "table",
            "--bootstrap-server",
            cluster.bootstrap,
            "--topic",
            topic_name,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    shown = [json.loads(line) for line in cli.stdout.splitlines()]
    assert {row["key"].encode(): row["value"].encode() for row in shown} == live
    assert [row["key"] for row in shown] == sorted(row["key"] for row in shown)
    pretty = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli.main",
            "table",
            "--bootstrap-server",
            cluster.bootstrap,
            "--topic",
            topic_name,
            "--max-rows",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert pretty[0].split() == ["KEY", "VALUE", "PARTITION", "OFFSET", "TIMESTAMP"]
    assert len(pretty) == 4

    # after the cleaner removed the history, the table is the same
    data = [cluster.log_dir(topic_name, p) for p in range(3)]

    def cleaned() -> bool:
        return all((d.parent / "cleaner-offset-checkpoint").exists() for d in data) and all(
            topic_name in (d.parent / "cleaner-offset-checkpoint").read_text() for d in data
        )

    cluster.wait_for(cleaned, 90, f"the cleaner to clean {topic_name}")
    assert {r.key: r.value for r in _table(spark, cluster, topic_name).collect()} == live


def test_table_options_are_checked(spark: Any, cluster: Any, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1, {"cleanup.policy": "compact"})
    with pytest.raises(Exception, match="readAs"):
        (
            spark.read.format("millrace")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", topic_name)
            .option("readAs", "tables")
            .load()
        )
    with pytest.raises(Exception, match="minPartitions"):
        (
            spark.read.format("millrace")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", topic_name)
            .option("readAs", "table")
            .option("minPartitions", "4")
            .load()
            .collect()
        )


@pytest.mark.parametrize("writer", ["producer", "exactly-once sink"])
def test_stream_static_join_sees_table_updates(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path, writer: str
) -> None:
    """A stream joined with the table: each micro-batch reads the table again (Spark plans
    the static side once and runs its tasks every micro-batch), so a key's new value is used
    from the next micro-batch on; also when the table is written by the exactly-once sink,
    whose readers stop at its newest micro-batch boundary, looked up again every time."""
    from confluent_kafka import Producer

    table_topic, events = f"{topic_name}-dim", f"{topic_name}-events"
    cluster.create_topic(table_topic, 2, {"cleanup.policy": "compact"})
    cluster.create_topic(events, 1)
    producer = Producer(cluster.conf({"linger.ms": 0}))

    def update(pairs: list[tuple[str, str]]) -> None:
        if writer == "producer":
            for key, value in pairs:
                producer.produce(table_topic, key=key.encode(), value=value.encode())
            assert producer.flush(30) == 0
            return
        (
            spark.createDataFrame(pairs, "key string, value string")
            .write.format("millrace")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("topic", table_topic)
            .option("deliveryGuarantee", "exactly-once")
            .mode("append")
            .save()
        )

    update([("u1", "gold"), ("u2", "silver")])
    dim = _table(spark, cluster, table_topic).selectExpr(
        "key AS user", "CAST(value AS STRING) AS tier"
    )
    stream = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", events)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key AS user", "CAST(value AS STRING) AS event")
    )
    seen: list[tuple[str, str]] = []

    def collect(df: Any, _batch: int) -> None:
        seen.extend((r.event, r.tier) for r in df.collect())

    query = (
        stream.join(dim, "user")
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        producer.produce(events, key=b"u1", value=b"e1")
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 90
        while ("e1", "gold") not in seen and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ("e1", "gold") in seen, seen
        update([("u1", "platinum")])
        time.sleep(1.0)  # a micro-batch boundary passes; the next batch re-reads the table
        producer.produce(events, key=b"u1", value=b"e2")
        assert producer.flush(30) == 0
        while ("e2", "platinum") not in seen and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ("e2", "platinum") in seen, seen
    finally:
        query.stop()
