"""Streaming job: consume a topic, enrich every record, produce the result exactly once, with
the consumed offsets committed to a consumer group in the same Kafka transactions.

Reads ``--input`` (``read_committed``) with ``readStream.format("millrace")``, upper-cases the
value and appends ``|enriched``, and writes to ``--output`` with
``deliveryGuarantee=exactly-once`` and ``commitOffsetsToGroup=--group``
(``docs/exactly-once.md``): a ``read_committed`` consumer of the output sees every input record
exactly once, whatever fails and however often the job is restarted from its checkpoint, and
``kafka-consumer-groups --describe --group <group>`` shows the job's true lag.

Run it (a broker on 127.0.0.1:9092, topics ``orders`` and ``orders-enriched``)::

    spark-submit --master 'local[2,4]' jobs/enrich_exactly_once.py \\
        --bootstrap 127.0.0.1:9092 --input orders --output orders-enriched \\
        --group orders-enricher --checkpoint /tmp/orders-enricher-ckpt --available-now

``local[2,4]`` lets Spark retry a failed task up to 4 times, as a cluster does.
``--available-now`` processes the backlog and stops; otherwise the query runs
``--run-seconds`` seconds, or until killed when that is 0. Needs this project installed
(``pip install -e .``) on the driver and the executors.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

log = logging.getLogger("millrace.jobs.enrich_exactly_once")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True, help="kafka.bootstrap.servers")
    p.add_argument("--input", required=True, help="topic to consume")
    p.add_argument("--output", required=True, help="topic to produce")
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
        help="extra sink option (e.g. kafka.linger.ms=5), repeatable",
    )
    args = p.parse_args(argv)
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger <= 0:
        p.error("--max-offsets-per-trigger must be at least 1")
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
    writer = (
        enriched.writeStream.format("millrace")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("deliveryGuarantee", "exactly-once")
        .option("commitOffsetsToGroup", args.group)
        .option("checkpointLocation", args.checkpoint)
    )
    for item in args.option:
        key, value = item.split("=", 1)
        writer = writer.option(key, value)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger_interval)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    spark = SparkSession.builder.appName("enrich-exactly-once").getOrCreate()
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
        log.error("enrich_exactly_once: the query failed: %s", error)
        return 1
    log.info("enrich_exactly_once: done (checkpoint %s)", args.checkpoint)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
