"""Batch job: copy an offset range of a topic into Parquet.

Reads ``--topic`` from ``--starting-offsets`` to ``--ending-offsets`` (``earliest`` /
``latest`` or Spark's JSON form ``{"events": {"0": 10, "1": -2}}``, -2 = earliest,
-1 = latest) with ``format("millrace")`` and writes Kafka's columns (``key``, ``value``,
``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType``, plus ``headers``
with ``--headers``) to Parquet, partitioned by Kafka partition. ``--decode`` stores key and
value as UTF-8 strings instead of binary.

Run it (a broker on 127.0.0.1:9092 with a topic ``events``)::

    spark-submit --master 'local[2]' jobs/topic_to_parquet.py \\
        --bootstrap 127.0.0.1:9092 --topic events --output /tmp/events.parquet \\
        --starting-offsets earliest --ending-offsets latest --decode

Needs this project installed (``pip install -e .``) on the driver and the executors.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

log = logging.getLogger("millrace.jobs.topic_to_parquet")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True, help="kafka.bootstrap.servers")
    p.add_argument("--topic", required=True, help="topic to copy")
    p.add_argument("--output", required=True, help="Parquet output directory")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--ending-offsets", default="latest")
    p.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help="read only committed transactions (the default)",
    )
    p.add_argument("--decode", action="store_true", help="key and value as UTF-8 strings")
    p.add_argument("--headers", action="store_true", help="include the headers column")
    p.add_argument(
        "--mode", default="errorifexists", choices=["errorifexists", "overwrite", "append"]
    )
    return p.parse_args(argv)


def run(spark: Any, args: argparse.Namespace) -> int:
    """Copy the range; returns the number of records written."""
    from pyspark.sql import functions as F

    import spark_connector

    spark_connector.register(spark)
    df = (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("kafka.isolation.level", args.isolation_level)
        .option("endingOffsets", args.ending_offsets)
        .option("includeHeaders", "true" if args.headers else "false")
        .load()
    )
    if args.decode:
        df = df.withColumn("key", F.col("key").cast("string")).withColumn(
            "value", F.col("value").cast("string")
        )
    df = df.cache()
    try:
        count = int(df.count())
        df.write.mode(args.mode).partitionBy("partition").parquet(args.output)
    finally:
        df.unpersist()
    log.info("topic_to_parquet: %d records of %s -> %s", count, args.topic, args.output)
    return count


def main(argv: list[str] | None = None) -> int:
    """Entry point for spark-submit (and tests, which pass ``argv``)."""
    from pyspark.sql import SparkSession

    args = parse_args(argv)
    spark = SparkSession.builder.appName("millrace-topic-to-parquet").getOrCreate()
    return run(spark, args)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
