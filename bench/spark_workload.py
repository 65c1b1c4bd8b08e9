"""Workload 5: Spark reading and writing a topic with both connectors.

One local Spark (``local[2]``, 4 GB driver) with both connectors loaded: Millrace's Python
data source (``format("millrace")``) and Spark's own Kafka connector (``format("kafka")``,
jars from ``.cache/jvm/spark-kafka``, passed with ``spark.jars``). For a topic of ``n``
records:

* ``count``: ``spark.read.format(F)...load().count()``;
* ``noop``: the same read written to ``format("noop")`` (every column materialised);
* ``stream``: ``spark.readStream.format(F)`` with ``maxOffsetsPerTrigger`` and
  ``trigger(availableNow=True)`` into ``format("noop")``, from the earliest offsets until
  the query stops;
* ``write``: ``n`` rows (string key, 100-byte value) written with ``df.write.format(F)``
  (for ``format("millrace")`` also with ``producer=librdkafka``, its per-row path);
  ``write_exactly_once``: the same rows with ``format("millrace")`` and
  ``deliveryGuarantee=exactly-once`` (every task's rows in a Kafka transaction, committed by
  the driver: ``docs/exactly-once.md``).

Each returns seconds; rows/s is ``n / seconds``. Used from the benchmark's main thread.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from bench.basics import progress
from bench.common import ROOT

SPARK_KAFKA_JARS = ROOT / ".cache" / "jvm" / "spark-kafka"
FORMATS = ("millrace", "kafka")


def session(*, delta: bool = False) -> Any:
    """The benchmark's SparkSession with both connectors; with ``delta``, Delta Lake's jars,
    SQL extension and catalog too (``spark_connector.session.configure``). Spark's Python
    workers import this checkout's packages first (``PYTHONPATH``), as the driver does."""
    jars = sorted(str(p) for p in SPARK_KAFKA_JARS.glob("*.jar"))
    if not any("spark-sql-kafka" in j for j in jars):
        raise SystemExit(f"Spark's Kafka connector is not in {SPARK_KAFKA_JARS}: run make setup")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    path = os.environ.get("PYTHONPATH", "")
    if str(ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    from pyspark.sql import SparkSession

    import spark_connector
    from spark_connector.session import MissingJarsError, configure

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("millrace-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # progress lines are the bench's
        .config("spark.driver.memory", "4g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.shuffle.partitions", "2")
    )
    if delta:
        try:  # spark.jars: Delta's and the same Kafka connector's
            builder = configure(builder, delta=True, spark_kafka=True)
        except MissingJarsError as exc:
            raise SystemExit(str(exc)) from None
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    return spark


def _reader(
    spark: Any, fmt: str, bootstrap: str, topic: str, options: dict[str, str] | None = None
) -> Any:
    return (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .options(**(options or {}))
        .load()
    )


def _timed(label: str, fn: Any) -> float:
    progress(f"    spark {label} ...")
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def count(
    spark: Any, fmt: str, bootstrap: str, topic: str, n: int, options: dict[str, str] | None = None
) -> float:
    got: list[int] = []
    seconds = _timed(
        f"{fmt} count", lambda: got.append(_reader(spark, fmt, bootstrap, topic, options).count())
    )
    if got[0] != n:
        raise SystemExit(f'format("{fmt}") count() returned {got[0]}, expected {n}')
    return seconds


def noop(
    spark: Any, fmt: str, bootstrap: str, topic: str, options: dict[str, str] | None = None
) -> float:
    return _timed(
        f"{fmt} noop",
        lambda: (
            _reader(spark, fmt, bootstrap, topic, options)
            .write.format("noop")
            .mode("overwrite")
            .save()
        ),
    )


def stream(spark: Any, fmt: str, bootstrap: str, topic: str, n: int, max_offsets: int) -> float:
    """Seconds for an availableNow streaming query to read ``n`` records, ``max_offsets``
    per micro-batch."""
    with tempfile.TemporaryDirectory(prefix="millrace-bench-ckpt-") as ckpt:
        query = (
            spark.readStream.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", max_offsets)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(Path(ckpt) / "q"))
            .trigger(availableNow=True)
        )
        t0 = time.perf_counter()
        progress(f"    spark {fmt} stream ...")
        q = query.start()
        q.awaitTermination()
        seconds = time.perf_counter() - t0
        rows = sum(int(p["numInputRows"]) for p in q.recentProgress)
        if q.exception() is not None:
            raise SystemExit(f'format("{fmt}") streaming query failed: {q.exception()}')
    if rows != n:
        raise SystemExit(f'format("{fmt}") streaming read {rows} rows, expected {n}')
    return seconds


def write(
    spark: Any, fmt: str, bootstrap: str, topic: str, n: int, producer: str | None = None
) -> float:
    """``df.write.format(fmt)`` of ``n`` rows; ``producer`` sets ``format("millrace")``'s
    ``producer`` option (None: its default, the batch producer for this write)."""
    rows = spark.range(n).selectExpr("CAST(id AS STRING) AS key", "repeat('x', 100) AS value")
    writer = rows.write.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    if producer is not None:
        writer = writer.option("producer", producer)
    return _timed(
        f"{fmt} write" + (f" (producer={producer})" if producer else ""),
        lambda: writer.option("topic", topic).mode("append").save(),
    )


def write_exactly_once(spark: Any, bootstrap: str, topic: str, n: int) -> float:
    rows = spark.range(n).selectExpr("CAST(id AS STRING) AS key", "repeat('x', 100) AS value")
    return _timed(
        "millrace exactly-once write",
        lambda: (
            rows.write.format("millrace")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("deliveryGuarantee", "exactly-once")
            .mode("append")
            .save()
        ),
    )


class InMemoryArrowReader(DataSourceReader):
    """Yields ``rows`` rows in ``format("millrace")``'s schema, the same 10,000-row Arrow
    batch (100-byte values) again and again, split over two tasks: what Spark ingests from a
    Python data source when fetching and decoding cost nothing."""

    def __init__(self, schema: Any, rows: int) -> None:
        self.schema = schema
        self.rows = rows

    def partitions(self) -> list[Any]:
        return [InputPartition(0), InputPartition(1)]

    def read(self, partition: Any) -> Any:
        import pyarrow as pa

        from spark_connector.read.reader import arrow_schema

        schema = arrow_schema(self.schema)
        size = 10_000
        batch = pa.RecordBatch.from_arrays(
            [
                pa.nulls(size, pa.binary()),
                pa.array([b"x" * 100] * size, pa.binary()),
                pa.repeat(pa.scalar("t"), size),
                pa.repeat(pa.scalar(0, pa.int32()), size),
                pa.array(range(size), pa.int64()),
                pa.array([1_700_000_000_000_000] * size, pa.timestamp("us", tz="UTC")),
                pa.array([0] * size, pa.int32()),
            ],
            schema=schema,
        )
        share = self.rows // 2 + (self.rows % 2 if partition.value == 0 else 0)
        while share >= size:
            yield batch
            share -= size
        if share:
            yield batch.slice(0, share)


class InMemoryArrowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "millrace-bench-arrow"

    def schema(self) -> str:
        from spark_connector.datasource import KAFKA_SCHEMA_DDL

        return KAFKA_SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return InMemoryArrowReader(schema, int(self.options["rows"]))


def ceiling(spark: Any, n: int) -> float:
    """Seconds for ``count()`` of ``n`` rows from an in-memory Arrow Python data source: the
    ceiling of any Python connector's read on this machine (no broker, no decoding)."""
    spark.dataSource.register(InMemoryArrowSource)
    got: list[int] = []
    seconds = _timed(
        "in-memory Arrow source count",
        lambda: got.append(
            spark.read.format("millrace-bench-arrow").option("rows", n).load().count()
        ),
    )
    if got[0] != n:
        raise SystemExit(f"the in-memory Arrow source counted {got[0]}, expected {n}")
    return seconds
