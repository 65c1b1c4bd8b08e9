"""Delta Lake 4.4 on the pinned Spark 4.2, fed from a topic through ``format("millrace")``:
a batch write and a streaming ``foreachBatch`` write (idempotent with ``txnAppId`` /
``txnVersion``) land every record once, read back and compared with chispa."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

COLUMNS = "CAST(key AS STRING) AS key, CAST(value AS STRING) AS value, partition, offset"


def _produce(cluster: Any, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(cluster.conf({"linger.ms": 5}))
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, key=f"{tag}-{p}-{i}", value=f"v{i}", partition=p)
    assert producer.flush(30) == 0


def _topic_df(spark: Any, cluster: Any, topic: str) -> Any:
    return (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr(*COLUMNS.split(", "))
    )


def test_session_has_delta_and_the_pinned_versions(spark: Any) -> None:
    import delta
    import pyspark

    from spark_connector import session

    assert pyspark.__version__ == session.SPARK_VERSION == spark.version
    assert spark.conf.get("spark.sql.extensions") == session.DELTA_EXTENSIONS
    assert spark.conf.get("spark.sql.catalog.spark_catalog") == session.DELTA_CATALOG
    assert any(f"delta-spark_2.13-{session.DELTA_VERSION}.jar" in j for j in session.jars())
    assert delta.__file__  # the delta-spark Python package is installed beside pyspark


def test_missing_jars_name_the_directory_and_the_fix(tmp_path: Path) -> None:
    from spark_connector import session

    with pytest.raises(session.MissingJarsError) as info:
        session.jars(delta=True, cache_dir=tmp_path)
    assert str(tmp_path / "delta") in str(info.value)
    assert "make setup" in str(info.value)


def test_topic_to_delta_batch_write_then_append(spark: Any, cluster: Any, tmp_path: Path) -> None:
    from chispa import assert_df_equality

    topic = cluster.create_topic("delta-batch", 3)
    _produce(cluster, topic, 3, 40, "a")
    table = str(tmp_path / "events")

    _topic_df(spark, cluster, topic).write.format("delta").mode("append").save(table)
    _produce(cluster, topic, 3, 10, "b")
    later = (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 40, "1": 40, "2": 40}}))
        .load()
        .selectExpr(*COLUMNS.split(", "))
    )
    later.write.format("delta").mode("append").save(table)

    stored = spark.read.format("delta").load(table)
    assert stored.count() == 150
    assert_df_equality(
        stored,
        _topic_df(spark, cluster, topic),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_topic_to_delta_streaming_foreach_batch_is_idempotent(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    from chispa import assert_df_equality

    topic = cluster.create_topic("delta-stream", 2)
    _produce(cluster, topic, 2, 60, "s")
    table = str(tmp_path / "events")
    app_id = "millrace-test-delta-stream"

    def write(df: Any, batch_id: int) -> None:
        # Delta skips a (txnAppId, txnVersion) it has already committed: a replayed
        # micro-batch lands once
        for _attempt in range(2):
            (
                df.write.format("delta")
                .mode("append")
                .option("txnAppId", app_id)
                .option("txnVersion", batch_id)
                .save(table)
            )

    def run() -> None:
        query = (
            spark.readStream.format("millrace")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "50")
            .load()
            .selectExpr(*COLUMNS.split(", "))
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180), "AvailableNow query did not finish"
        assert query.exception() is None, query.exception()

    run()
    _produce(cluster, topic, 2, 15, "t")
    run()  # restarts from the checkpoint: only the new records

    stored = spark.read.format("delta").load(table)
    assert stored.count() == 150
    assert_df_equality(
        stored, _topic_df(spark, cluster, topic), ignore_row_order=True, ignore_nullable=True
    )
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    assert len(history) >= 4  # at least 3 + 1 micro-batches, each committed once
