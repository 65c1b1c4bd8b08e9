"""Streaming job: land a topic in a Delta Lake table, each micro-batch exactly once.

Reads ``--topic`` with ``readStream.format("millrace")`` and appends Kafka's columns (``key``,
``value``, ``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType``; key and
value as UTF-8 strings with ``--decode``) to the Delta table at ``--table``. Each micro-batch
is written from ``foreachBatch`` with Delta's idempotent-write options ``txnAppId`` (the
``--app-id``, default derived from the table path) and ``txnVersion`` (the batch id): when a
restarted query replays a micro-batch whose write had already committed, Delta skips it, so
the table holds every record once.

With ``--group``, each micro-batch's source offsets are then committed to that consumer
group (``spark_connector.exactly_once.commit_batch_offsets``), so ``kafka-consumer-groups``
shows the job's lag. Order: the Delta commit first, the offsets second. Delta and Kafka
cannot share a transaction; in this order the group's offsets never run ahead of the table:
if the driver dies between the two steps, the restarted query replays the batch, Delta skips
the write it already holds (``txnVersion``), and the offsets are committed then.

``--mode merge`` keeps a table of the topic's latest record per key instead (for compacted
topics, e.g. the counts ``jobs/stream_counts.py`` upserts): each micro-batch is reduced to the
newest record of each key and MERGEd into the table on ``key`` (a newer offset updates the
row, a tombstone deletes it, a new key is inserted), with ``txnAppId``/``txnVersion`` set as
Delta's session settings so a replayed MERGE is skipped too.

Run it (a broker on 127.0.0.1:9092 with a topic ``events``; ``make setup`` fetched Delta's
jars into ``.cache/jvm/delta``)::

    spark-submit --master 'local[2]' $(python -m spark_connector.session) \\
        jobs/topic_to_delta.py --bootstrap 127.0.0.1:9092 --topic events \\
        --table /tmp/events-delta --checkpoint /tmp/events-delta-ckpt --available-now

(``python -m spark_connector.session`` prints the ``--jars`` and the two Delta ``--conf``
settings for the jars in the checkout's JVM cache; the job says so if they are missing.)
``--available-now`` processes the backlog and stops; otherwise the query runs
``--run-seconds`` seconds, or until killed when that is 0. Needs this project installed
(``pip install -e .``) on the driver and the executors.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
from typing import Any

log = logging.getLogger("millrace.jobs.topic_to_delta")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True, help="kafka.bootstrap.servers")
    p.add_argument("--topic", required=True, help="topic to land")
    p.add_argument("--table", required=True, help="Delta table path")
    p.add_argument("--checkpoint", required=True, help="streaming checkpoint directory")
    p.add_argument("--app-id", default=None, help="Delta txnAppId (default: from --table)")
    p.add_argument("--starting-offsets", default="earliest", help="first run only")
    p.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help="read only committed transactions (the default: an exactly-once producer's "
        "open or aborted output is never read)",
    )
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--decode", action="store_true", help="key and value as UTF-8 strings")
    p.add_argument("--group", default=None, help="commit the consumed offsets to this group")
    p.add_argument(
        "--mode",
        choices=("append", "merge"),
        default="append",
        help="append every record (default) or merge the latest record per key",
    )
    p.add_argument("--trigger-interval", default="5 seconds", help="processing-time trigger")
    p.add_argument("--available-now", action="store_true", help="process the backlog, stop")
    p.add_argument("--run-seconds", type=float, default=0.0, help="0: run until killed")
    args = p.parse_args(argv)
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger <= 0:
        p.error("--max-offsets-per-trigger must be at least 1")
    return args


def app_id_for(table: str, checkpoint: str = "") -> str:
    """A stable Delta ``txnAppId`` for this query: the resolved table and checkpoint paths (the
    same on every restart; another spelling of the same paths gives the same id; a new
    checkpoint, whose batch ids start again at 0, gives a new id, so Delta does not skip its
    batches as written)."""
    key = f"{os.path.realpath(table)}\n{os.path.realpath(checkpoint)}"
    return "millrace-topic-to-delta-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def merge_latest(batch: Any, batch_id: int, table: str, app_id: str) -> None:
    """MERGE the newest record of each key of ``batch`` into the Delta table at ``table``
    (created on first use): newer offsets update, tombstones delete, new keys insert."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = batch.sparkSession
    newest = (
        batch.where(F.col("key").isNotNull())
        .withColumn(
            "_rank", F.row_number().over(Window.partitionBy("key").orderBy(F.desc("offset")))
        )
        .where("_rank = 1")
        .drop("_rank")
    )
    spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
    try:
        if not DeltaTable.isDeltaTable(spark, table):
            newest.where(F.col("value").isNotNull()).write.format("delta").mode("append").save(
                table
            )
            return
        (
            DeltaTable.forPath(spark, table)
            .alias("t")
            .merge(newest.alias("b"), "t.key = b.key")
            .whenMatchedDelete(condition="b.value IS NULL")
            .whenMatchedUpdateAll(condition="b.offset > t.offset OR b.partition != t.partition")
            .whenNotMatchedInsertAll(condition="b.value IS NOT NULL")
            .execute()
        )
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


def build_query(spark: Any, args: argparse.Namespace) -> Any:
    """Start the streaming query (not waiting for it); returns the ``StreamingQuery``."""
    from pyspark.sql import functions as F

    import spark_connector

    spark_connector.register(spark)
    reader = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("kafka.isolation.level", args.isolation_level)
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    rows = reader.load()
    if args.decode:
        rows = rows.withColumn("key", F.col("key").cast("string")).withColumn(
            "value", F.col("value").cast("string")
        )
    table = args.table
    app_id = args.app_id or app_id_for(table, args.checkpoint)

    def write_batch(batch: Any, batch_id: int) -> None:
        # Delta records (txnAppId, txnVersion) in the same commit as the data and skips a
        # write whose version it has already committed: a replayed batch lands once.
        if args.mode == "merge":
            merge_latest(batch, batch_id, table, app_id)
        else:
            (
                batch.write.format("delta")
                .mode("append")
                .option("txnAppId", app_id)
                .option("txnVersion", batch_id)
                .save(table)
            )
        if args.group:
            from spark_connector.exactly_once import commit_batch_offsets

            commit_batch_offsets(args.bootstrap, args.checkpoint, batch_id, args.group)

    writer = (
        rows.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", args.checkpoint)
        .queryName(f"topic_to_delta_{args.topic}")
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger_interval)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    """Entry point for spark-submit (and tests, which pass ``argv``); returns the number of
    rows in the table afterwards."""
    from spark_connector.session import delta_session

    args = parse_args(argv)
    spark = delta_session("millrace-topic-to-delta")
    query = build_query(spark, args)
    try:
        if args.run_seconds > 0 and not args.available_now:
            query.awaitTermination(args.run_seconds)
        else:
            query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"topic_to_delta query failed: {error}")
    from delta.tables import DeltaTable

    rows = (
        int(spark.read.format("delta").load(args.table).count())
        if DeltaTable.isDeltaTable(spark, args.table)
        else 0  # nothing to land yet: no table
    )
    log.info("topic_to_delta: %d rows in %s (%s)", rows, args.table, query.lastProgress)
    return rows


if __name__ == "__main__":
    import sys

    logging.basicConfig(level=logging.INFO)
    total = main()
    sys.stdout.write(f"topic_to_delta: the Delta table holds {total} rows\n")
