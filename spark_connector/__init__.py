"""Millrace's Spark connector: read and write Kafka topics as DataFrames.

A PySpark (4.2) Python Data Source named ``millrace``. Options, schema and semantics follow
Spark's built-in Kafka connector (spark-sql-kafka-0-10), so a job moves over by changing the
format name. It speaks only the standard Kafka protocol (its own wire client,
:mod:`spark_connector.kafka`, and confluent-kafka), so it reads and writes Apache Kafka as well
as Millrace. It never imports the broker.

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
write, and :func:`write_batch` inside ``foreachBatch`` (any number of sinks per batch). Aggregates upserted into compacted
topics: :func:`upsert_to` (``foreachBatch`` in update mode) and :func:`as_upserts`
(:mod:`spark_connector.upserts`).

Importing the package first imports ``kio`` without the Hypothesis hooks (:mod:`kio_loader`):
with the test tools installed they cost every new Spark Python worker ~1.5 s and ~230 MB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio_loader import import_kio_without_hypothesis

import_kio_without_hypothesis()

if TYPE_CHECKING:
    from spark_connector.datasource import MillraceDataSource
    from spark_connector.exactly_once.foreach_batch import write_batch
    from spark_connector.upserts import as_upserts, upsert_batch, upsert_to

__all__ = [
    "MillraceDataSource",
    "as_upserts",
    "register",
    "upsert_batch",
    "upsert_to",
    "write_batch",
]

# Imported on first use (PEP 562), so that the Kafka wire client and the exactly-once
# modules can be used without importing PySpark (``millrace table``, Python workers).
_LAZY = {
    "MillraceDataSource": "spark_connector.datasource",
    "write_batch": "spark_connector.exactly_once.foreach_batch",
    "as_upserts": "spark_connector.upserts",
    "upsert_batch": "spark_connector.upserts",
    "upsert_to": "spark_connector.upserts",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_connector' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def register(spark: Any) -> None:
    """Register the ``millrace`` format with ``spark`` (a ``SparkSession``)."""
    from spark_connector.datasource import MillraceDataSource

    spark.dataSource.register(MillraceDataSource)
