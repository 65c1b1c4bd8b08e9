"""Streaming job: count JSON events per key per event-time window, write the running counts to
another topic (update mode).

The running counts are written in update mode: each micro-batch emits only the (key,
window) counts it changed. Spark's Python data sources take append or complete streaming
writes only, so the job hands each micro-batch to ``df.write.format("millrace")`` from
``foreachBatch`` (same columns, same at-least-once delivery).

Input: a topic of JSON events ``{"key": "user-1", "ts": "2026-01-01T00:00:05Z", ...}``; ``ts``
(ISO-8601) is the event time, and when it is missing the record's Kafka timestamp is used.
Output: one record per changed (key, window) each micro-batch, keyed ``<key>@<window start>``
(so a compacted output topic keeps the latest count per window), value JSON
``{"key": ..., "window_start": ..., "window_end": ..., "count": N}``. Delivery is
at-least-once; a consumer keeps the last value per record key.

Run it (a broker on 127.0.0.1:9092, topics ``events`` and ``event-counts``)::

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
    p.add_argument("--window", default="1 minute", help="window length (default 1 minute)")
    p.add_argument("--watermark", default="10 minutes", help="allowed event lateness")
    p.add_argument("--starting-offsets", default="earliest", help="first run only")
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
    ts_format = "yyyy-MM-dd'T'HH:mm:ss'Z'"
    out = counts.select(
        F.concat_ws("@", F.col("key"), F.date_format("w.start", ts_format)).alias("key"),
        F.to_json(
            F.struct(
                F.col("key"),
                F.date_format("w.start", ts_format).alias("window_start"),
                F.date_format("w.end", ts_format).alias("window_end"),
                F.col("count"),
            )
        ).alias("value"),
    )
    bootstrap, topic = args.bootstrap, args.output

    def write_updates(batch: Any, batch_id: int) -> None:
        # Spark's Python data sources accept only append/complete streaming writes, so the
        # update-mode rows of each micro-batch go out through the batch writer.
        batch.write.format("millrace").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", topic
        ).mode("append").save()

    writer = (
        out.writeStream.outputMode("update")
        .foreachBatch(write_updates)
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
