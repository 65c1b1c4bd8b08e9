"""Millrace's Spark connector: read and write Kafka topics as DataFrames.

A PySpark (4.2) Python Data Source named ``millrace``. Options, schema and semantics follow
Spark's built-in Kafka connector (spark-sql-kafka-0-10), so a job moves over by changing the
format name. It speaks only the standard Kafka protocol (through confluent-kafka), so it
reads and writes Apache Kafka as well as Millrace. It never imports the broker.

The format is found without registration when this project is installed (Spark discovers the
top-level module ``pyspark_millrace``); :func:`register` registers it explicitly.

Runnable example (a broker on 127.0.0.1:9092 with a topic ``events``)::

    from pyspark.sql import SparkSession
    import spark_connector

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    spark_connector.register(spark)

    # batch: everything currently in the topic
    df = (spark.read.format("millrace")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .option("startingOffsets", "earliest")        # default for batch
          .option("endingOffsets", "latest")            # default for batch
          .load())
    df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "partition", "offset").show()

    # streaming: at most 1000 records per micro-batch, until caught up
    q = (spark.readStream.format("millrace")
         .option("kafka.bootstrap.servers", "127.0.0.1:9092")
         .option("subscribe", "events")
         .option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "1000")
         .load()
         .writeStream.format("memory").queryName("events_copy")
         .trigger(availableNow=True)
         .start())
    q.awaitTermination()

Exactly once (``docs/exactly-once.md``): ``deliveryGuarantee=exactly-once`` on a streaming
write, and :func:`write_batch` inside ``foreachBatch``. Aggregates upserted into compacted
topics: :func:`upsert_to` (``foreachBatch`` in update mode) and :func:`as_upserts`
(:mod:`spark_connector.upserts`).
"""

from __future__ import annotations

from typing import Any

from spark_connector.datasource import MillraceDataSource
from spark_connector.upserts import as_upserts, upsert_batch, upsert_to

__all__ = [
    "MillraceDataSource",
    "as_upserts",
    "register",
    "upsert_batch",
    "upsert_to",
    "write_batch",
]


def register(spark: Any) -> None:
    """Register the ``millrace`` format with ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(MillraceDataSource)


def write_batch(
    df: Any,
    batch_id: int,
    *,
    bootstrap_servers: str,
    checkpoint_location: str,
    topic: str | None = None,
    commit_offsets_to_group: str | None = None,
    options: dict[str, str] | None = None,
) -> None:
    """Write ``df`` to Kafka exactly once from a ``foreachBatch`` function.

    ``batch_id`` is the one Spark passes to the function: a batch written before (a replay
    after a failure) is skipped, as Delta's ``txnAppId``/``txnVersion`` skip one. All of
    ``df`` becomes visible or none of it. ``checkpoint_location`` is the query's checkpoint
    location: the sink keeps its log in ``<checkpoint_location>/millrace-sink`` and, with
    ``commit_offsets_to_group``, commits the batch's source offsets (read from Spark's
    ``<checkpoint_location>/offsets/<batch_id>``) to that consumer group in the output's
    transaction. ``options`` are more sink options (``kafka.*`` producer settings)::

        def upsert(batch_df, batch_id):
            spark_connector.write_batch(
                batch_df.selectExpr("key", "value"), batch_id,
                bootstrap_servers=bs, topic="counts", checkpoint_location=ckpt,
                commit_offsets_to_group="counter")

        stream.writeStream.foreachBatch(upsert).option("checkpointLocation", ckpt).start()
    """
    writer = (
        df.write.format("millrace")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("deliveryGuarantee", "exactly-once")
        .option("batchId", str(batch_id))
        .option("checkpointLocation", checkpoint_location)
    )
    if topic is not None:
        writer = writer.option("topic", topic)
    if commit_offsets_to_group is not None:
        writer = writer.option("commitOffsetsToGroup", commit_offsets_to_group)
    for key, value in (options or {}).items():
        writer = writer.option(key, value)
    writer.mode("append").save()
