"""Spark connector benchmark (the Spark connector issue's targets).

Starts a one-broker Millrace cluster, loads N records of 100 bytes into a 2-partition topic
with confluent-kafka, then on ``local[2]`` measures rows/s of
``spark.read.format("millrace")...load().count()``, of a ``noop`` write of the same read,
and of ``df.write.format("millrace")`` of N rows into a second topic. Results go to
``BENCHMARKS.md`` (section "Spark connector") with the machine described. Spark's own Kafka
connector on the same data comes with the benchmark issue.

Usage: ``python bench/spark_read_write.py [--records 10000000] [--out BENCHMARKS.md]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from single_broker import ROOT, machine, millrace, progress, replace_section, start_cluster

RECORD = b"x" * 100


def load(bootstrap: str, topic: str, n: int) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": 1,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i in range(n):
        while True:
            try:
                p.produce(topic, RECORD, partition=i % 2)
                break
            except BufferError:
                p.poll(0.005)
        if i % 100_000 == 0:
            p.poll(0)
            progress(f"  loading {i:,}/{n:,}")
    if p.flush(300) != 0:
        raise SystemExit("loading the topic failed")
    sys.stderr.write("\n")


def timed(label: str, fn: object) -> float:
    progress(f"  {label} ...")
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    seconds = time.perf_counter() - t0
    sys.stderr.write(f"\r  {label}: {seconds:.1f} s\n")
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = ap.parse_args()
    n = args.records
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="millrace-bench-spark-") as tmp:
        cluster_dir = Path(tmp) / "cluster"
        bootstrap = start_cluster(cluster_dir)
        try:
            for topic in ("spark-in", "spark-out"):
                millrace(
                    "topics",
                    "create",
                    "--bootstrap-server",
                    bootstrap,
                    "--topic",
                    topic,
                    "--partitions",
                    "2",
                    "--replication-factor",
                    "1",
                )
            load(bootstrap, "spark-in", n)
            from pyspark.sql import SparkSession

            import spark_connector

            spark = (
                SparkSession.builder.master("local[2]")
                .appName("millrace-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.driver.memory", "4g")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark_connector.register(spark)

            def reader() -> object:
                return (
                    spark.read.format("millrace")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", "spark-in")
                    .load()
                )

            counted: list[int] = []
            timed("warm-up count() (starts the Python workers)", lambda: reader().count())
            count_s = timed("count()", lambda: counted.append(reader().count()))
            if counted[0] != n:
                raise SystemExit(f"count() returned {counted[0]}, expected {n}")
            noop_s = timed(
                "noop write", lambda: reader().write.format("noop").mode("overwrite").save()
            )
            rows = spark.range(n).selectExpr(
                "CAST(id AS STRING) AS key", "repeat('x', 100) AS value"
            )
            write_s = timed(
                "write",
                lambda: (
                    rows.write.format("millrace")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", "spark-out")
                    .mode("append")
                    .save()
                ),
            )
            spark.stop()
        finally:
            millrace("cluster", "down", "--dir", str(cluster_dir))
    write_report(Path(args.out), n, count_s, noop_s, write_s)
    sys.stderr.write(f"wrote {args.out}\n")
    return 0


def write_report(out: Path, n: int, count_s: float, noop_s: float, write_s: float) -> None:
    import pyspark

    rows = "\n".join(
        f"| {name} | {n / s:,.0f} | {s:.1f} |"
        for name, s in (
            ('`spark.read.format("millrace")...load().count()`', count_s),
            ('read + `write.format("noop")`', noop_s),
            ('`df.write.format("millrace")` (key + 100-byte value)', write_s),
        )
    )
    section = f"""## Spark connector

{n:,} records of 100 bytes in a 2-partition topic on one broker, Spark {pyspark.__version__}
`local[2]`, run {datetime.date.today().isoformat()} on: {machine()}. Spark, the broker and the
loader share the machine. One run each.

| workload | rows/s | seconds |
|---|---:|---:|
{rows}

Reproduce: `.venv/bin/python bench/spark_read_write.py --records {n}` (`make bench` runs it).
Spark's own Kafka connector on the same data comes with the benchmark issue.
"""
    replace_section(out, "## Spark connector", section)


if __name__ == "__main__":
    raise SystemExit(main())
