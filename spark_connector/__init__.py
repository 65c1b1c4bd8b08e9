"""Millrace's Spark connector: read and write Kafka topics as DataFrames.

A PySpark (4.2) Python Data Source named ``millrace``. Options, schema and semantics follow
Spark's built-in Kafka connector (spark-sql-kafka-0-10), so a job moves over by changing the
format name. It speaks only the standard Kafka protocol, so it reads and writes Apache Kafka
as well as Millrace: its own wire client (:mod:`spark_connector.kafka`) fetches and produces
whole record batches, decoded from and encoded to Arrow in C (:mod:`spark_connector.records`);
librdkafka (confluent-kafka) does the driver's offset look-ups and the fallback paths (a SASL
mechanism the wire client does not speak, ``fetcher=librdkafka``, ``producer=librdkafka``).
It never imports the broker.

Public API: the names in ``__all__``, all of them here, and the module
:mod:`spark_connector.session` (SparkSessions with Delta's and Spark's Kafka jars:
``delta_session``, ``configure``, ``submit_args``; ``python -m spark_connector.session``).

* :func:`register`: register the format with a ``SparkSession`` (rarely needed: Spark finds
  it through the top-level module ``pyspark_millrace`` when this project is installed);
* :class:`MillraceDataSource`: the data source itself (``spark.dataSource.register``);
* :func:`write_batch`: exactly-once writes from ``foreachBatch``, any number of sinks per
  batch (``docs/exactly-once.md``);
* :func:`upsert_to`, :func:`upsert_batch`, :func:`as_upserts`: aggregates upserted into
  compacted topics, exactly once.

Everything else is internal and may move; the packages inside:
:mod:`~spark_connector.kafka` (the wire client), :mod:`~spark_connector.records` (record
batches <-> Arrow, with the native modules), :mod:`~spark_connector.read` (options,
planning, the consumer, the readers), :mod:`~spark_connector.write` (plan, producers'
write paths, the writers), :mod:`~spark_connector.exactly_once` (the exactly-once sink),
:mod:`~spark_connector.tables` (upserts, ``readAs=table``); on top
:mod:`~spark_connector.datasource` and :mod:`~spark_connector.option_names`.

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
    from spark_connector.tables.upserts import as_upserts, upsert_batch, upsert_to

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
    "as_upserts": "spark_connector.tables.upserts",
    "upsert_batch": "spark_connector.tables.upserts",
    "upsert_to": "spark_connector.tables.upserts",
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
