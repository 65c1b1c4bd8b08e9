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
* ``write``: ``n`` rows (string key, 100-byte value) written with ``df.write.format(F)``;
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


def _reader(spark: Any, fmt: str, bootstrap: str, topic: str) -> Any:
    return (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )


def _timed(label: str, fn: Any) -> float:
    progress(f"    spark {label} ...")
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def count(spark: Any, fmt: str, bootstrap: str, topic: str, n: int) -> float:
    got: list[int] = []
    seconds = _timed(
        f"{fmt} count", lambda: got.append(_reader(spark, fmt, bootstrap, topic).count())
    )
    if got[0] != n:
        raise SystemExit(f'format("{fmt}") count() returned {got[0]}, expected {n}')
    return seconds


def noop(spark: Any, fmt: str, bootstrap: str, topic: str) -> float:
    return _timed(
        f"{fmt} noop",
        lambda: _reader(spark, fmt, bootstrap, topic).write.format("noop").mode("overwrite").save(),
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


def write(spark: Any, fmt: str, bootstrap: str, topic: str, n: int) -> float:
    rows = spark.range(n).selectExpr("CAST(id AS STRING) AS key", "repeat('x', 100) AS value")
    return _timed(
        f"{fmt} write",
        lambda: (
            rows.write.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        ),
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
