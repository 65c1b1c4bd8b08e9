"""Streaming job: consume a topic, enrich every record, and write each micro-batch to several
topics from one ``foreachBatch`` function, each exactly once, with the consumed offsets
committed to a consumer group after every output is visible.

Reads ``--input`` (``read_committed``) with ``readStream.format("millrace")``, upper-cases the
value and appends ``|enriched``, and writes every batch to each ``--output`` (repeat the
option) with ``spark_connector.write_batch`` (``docs/exactly-once.md``): each output is a sink
of its own (its own log and transactional ids), so a restarted job skips or finishes each
sink's batch on its own; the source offsets go to ``--group`` with the last sink.

Run it (a broker on 127.0.0.1:9092, topics ``orders``, ``orders-enriched``,
``orders-audit``)::

    spark-submit --master 'local[2,4]' jobs/fan_out_exactly_once.py \\
        --bootstrap 127.0.0.1:9092 --input orders --output orders-enriched \\
        --output orders-audit --group orders-fan-out --checkpoint /tmp/fan-out-ckpt \\
        --available-now

``--available-now`` processes the backlog and stops; otherwise the query runs
``--run-seconds`` seconds, or until killed when that is 0. Needs this project installed
(``pip install -e .``) on the driver and the executors.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

log = logging.getLogger("millrace.jobs.fan_out_exactly_once")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True, help="kafka.bootstrap.servers")
    p.add_argument("--input", required=True, help="topic to consume")
    p.add_argument("--output", required=True, action="append", help="a topic to write (repeat)")
    p.add_argument("--group", required=True, help="consumer group for the consumed offsets")
    p.add_argument("--checkpoint", required=True, help="streaming checkpoint directory")
    p.add_argument("--starting-offsets", default="earliest", help="first run only")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--trigger-interval", default="2 seconds", help="processing-time trigger")
    p.add_argument("--available-now", action="store_true", help="process the backlog, stop")
    p.add_argument("--run-seconds", type=float, default=0.0, help="0: run until killed")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra sink option (e.g. transactionalIdPrefix=fan-out), repeatable",
    )
    args = p.parse_args(argv)
    if len(set(args.output)) != len(args.output):
        p.error("--output: each topic once")
    for item in args.option:
        if "=" not in item:
            p.error(f"--option {item!r}: expected KEY=VALUE")
    return args


def build_query(spark: Any, args: argparse.Namespace) -> Any:
    """Start the streaming query (not waiting for it); returns the ``StreamingQuery``."""
    import spark_connector

    spark_connector.register(spark)
    reader = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", args.starting_offsets)
        .option("kafka.isolation.level", "read_committed")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    enriched = reader.load().selectExpr(
        "key", "concat(upper(CAST(value AS STRING)), '|enriched') AS value"
    )
    options = dict(item.split("=", 1) for item in args.option)
    outputs = list(args.output)

    def fan_out(batch: Any, batch_id: int) -> None:
        batch.persist()
        try:
            for i, topic in enumerate(outputs):
                last = i == len(outputs) - 1
                spark_connector.write_batch(
                    batch,
                    batch_id,
                    bootstrap_servers=args.bootstrap,
                    topic=topic,
                    checkpoint_location=args.checkpoint,
                    commit_offsets_to_group=args.group if last else None,
                    options=options,
                )
        finally:
            batch.unpersist()

    writer = enriched.writeStream.foreachBatch(fan_out).option(
        "checkpointLocation", args.checkpoint
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger_interval)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    spark = SparkSession.builder.appName("fan-out-exactly-once").getOrCreate()
    query = build_query(spark, args)
    if args.available_now or args.run_seconds <= 0:
        query.awaitTermination()
    else:
        deadline = time.monotonic() + args.run_seconds
        while query.isActive and time.monotonic() < deadline:
            query.awaitTermination(1)
        query.stop()
    error = query.exception()
    if error is not None:
        log.error("fan_out_exactly_once: the query failed: %s", error)
        return 1
    log.info("fan_out_exactly_once: done (checkpoint %s)", args.checkpoint)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
