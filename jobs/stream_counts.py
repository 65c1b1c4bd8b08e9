"""Streaming job: count JSON events per key per event-time window and upsert the running counts
into a compacted topic, exactly once.

The running counts are written in update mode: each micro-batch emits only the (key,
window) counts it changed, as upserts (``spark_connector.upsert_to``: Spark's Python data
sources take append or complete streaming writes only, so the update-mode rows go out through
``foreachBatch``), each micro-batch in Kafka transactions with the consumed offsets committed
to ``--group`` (``docs/exactly-once.md``). On a compacted output topic the log cleaner keeps
the latest count of every (key, window); ``millrace table --topic <output>`` or
``spark.read.format("millrace").option("readAs", "table")`` show the table.

Input: a topic of JSON events ``{"key": "user-1", "ts": "2026-01-01T00:00:05Z", ...}``; ``ts``
(ISO-8601) is the event time, and when it is missing the record's Kafka timestamp is used.
Output: one record per changed (key, window) each micro-batch, record key the JSON
``{"key": "user-1", "window": {"start": "...Z", "end": "...Z"}}``, value the JSON of the row
``{"key": ..., "window": {...}, "count": N}`` (timestamps ISO-8601 UTC with milliseconds).
With ``--expire-after``, a window that ended that long before the newest window seen is
deleted from the topic (a tombstone).

Run it (a broker on 127.0.0.1:9092, topics ``events`` and ``event-counts``, the latter with
``cleanup.policy=compact``)::

    spark-submit --master 'local[2]' jobs/stream_counts.py \\
        --bootstrap 127.0.0.1:9092 --input events --output event-counts \\
        --checkpoint /tmp/stream-counts-ckpt --window '1 minute' --run-seconds 60

``--available-now`` processes what is in the topic and stops (``Trigger.AvailableNow``);
otherwise the query runs ``--run-seconds`` seconds, or until killed when that is 0.
Needs this project installed (``pip install -e .``) on the driver and the executors.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

log = logging.getLogger("millrace.jobs.stream_counts")

EVENT_SCHEMA = "key string, ts timestamp"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True, help="kafka.bootstrap.servers")
    p.add_argument("--input", required=True, help="topic of JSON events")
    p.add_argument("--output", required=True, help="topic for the running counts")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory")
    p.add_argument("--group", default=None, help="consumer group for the consumed offsets")
    p.add_argument(
        "--expire-after", default=None, help="delete windows this much older than the newest"
    )
    p.add_argument("--window", default="1 minute", help="window length (default 1 minute)")
    p.add_argument("--watermark", default="10 minutes", help="allowed event lateness")
    p.add_argument("--starting-offsets", default="earliest", help="first run only")
    p.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help="read only committed transactions (the default: an exactly-once producer's "
        "open or aborted output is never read)",
    )
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--trigger-interval", default="5 seconds", help="processing-time trigger")
    p.add_argument("--available-now", action="store_true", help="process the backlog, stop")
    p.add_argument("--run-seconds", type=float, default=0.0, help="0: run until killed")
    return p.parse_args(argv)


def build_query(spark: Any, args: argparse.Namespace) -> Any:
    """Start the streaming query (not waiting for it); returns the ``StreamingQuery``."""
    from pyspark.sql import functions as F

    import spark_connector

    spark_connector.register(spark)
    reader = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", args.starting_offsets)
        .option("kafka.isolation.level", args.isolation_level)
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    events = reader.load().select(
        F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"),
        F.col("timestamp").alias("record_ts"),
    )
    counts = (
        events.select(
            F.col("e.key").alias("key"),
            F.coalesce(F.col("e.ts"), F.col("record_ts")).alias("event_time"),
        )
        .where(F.col("key").isNotNull())
        .withWatermark("event_time", args.watermark)
        .groupBy(F.window("event_time", args.window).alias("w"), F.col("key"))
        .count()
    )
    counts = counts.select(F.col("key"), F.col("w").alias("window"), F.col("count"))
    upsert = spark_connector.upsert_to(
        args.output,
        bootstrap_servers=args.bootstrap,
        key_columns=["key", "window"],
        checkpoint_location=args.checkpoint,
        commit_offsets_to_group=args.group,
        expire_windows="window" if args.expire_after else None,
        expire_after=args.expire_after,
    )
    writer = (
        counts.writeStream.outputMode("update")
        .foreachBatch(upsert)
        .option("checkpointLocation", args.checkpoint)
        .queryName(f"stream_counts_{args.input}")
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger_interval)
    return writer.start()


def main(argv: list[str] | None = None) -> None:
    """Entry point for spark-submit (and tests, which pass ``argv``)."""
    from pyspark.sql import SparkSession

    args = parse_args(argv)
    spark = SparkSession.builder.appName("millrace-stream-counts").getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    query = build_query(spark, args)
    try:
        if args.available_now:
            query.awaitTermination()
        elif args.run_seconds > 0:
            query.awaitTermination(args.run_seconds)
        else:
            query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"stream_counts query failed: {error}")
    log.info("stream_counts: %s", query.lastProgress)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
