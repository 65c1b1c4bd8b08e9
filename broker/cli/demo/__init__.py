"""``make demo`` (``python -m broker.cli.demo``): an end-to-end tour on an embedded cluster.

Steps: start a one-broker cluster in ``demo-run/cluster`` with ``millrace cluster up`` on
free loopback ports; create the topic ``demo-events`` (3 partitions); produce 100,000 JSON
events with an idempotent confluent-kafka producer (``linger.ms=5``) while showing a live
progress line; consume them all back (``assign()``, no group) with a progress line; print a
summary (records produced and consumed, rates, per-partition end offsets, three sample
records); dump the first five batches of partition 0's first segment with ``dump-log``;
then, with ``spark-submit``: ``jobs/enrich_exactly_once.py`` copies the events, enriched,
exactly once to ``demo-enriched`` with the consumed offsets committed in the same
transactions, while the demo SIGKILLs the executors' Python workers once in the middle of a
write (Spark retries the tasks; the output still holds every event exactly once and the
group's offsets are at the input's end); ``jobs/stream_counts.py`` upserts the counts per
user per minute exactly once into the compacted topic ``demo-counts``, shown as a table
(``millrace table``) whose counts add up to the events; ``jobs/topic_to_delta.py`` lands the
events in a Delta Lake table (Delta's jars from ``make setup``), checking it holds every
event once (``--no-spark`` skips the Spark part).

The cluster is always stopped (``millrace cluster down``), also on failure, Ctrl-C or
SIGTERM; any process still alive afterwards whose pid is in ``cluster.json`` is killed by pid.
The exit code is 0 only if every produced event was consumed back exactly once.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from broker.cli.demo.cluster import DemoError, embedded_cluster
from broker.cli.demo.events import (
    PARTITIONS,
    RECORDS,
    TOPIC,
    consume,
    create_topic,
    dump_first_batches,
    produce,
)
from broker.cli.demo.output import say
from broker.cli.demo.spark_jobs import (
    ENRICHED_TOPIC,
    print_table,
    run_delta_job,
    run_enrich_job,
    run_stream_job,
)


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_spark_story(bootstrap: str, run_dir: Path, records: int) -> bool:
    """The Spark part: exactly-once enrichment surviving a crash, counts upserted exactly
    once into a compacted topic and shown as a table, and the events landed in Delta."""
    say()
    say(f"Spark, exactly once: {TOPIC} -> {ENRICHED_TOPIC}, the consumed offsets committed in")
    say("the output's transactions; a crash is injected mid-write ...")
    enriched = run_enrich_job(bootstrap, run_dir, records)
    say(
        "OK: every event is in the output exactly once, and the group's offsets are at the end."
        if enriched
        else "FAILED: the exactly-once output does not hold every event exactly once."
    )
    say()
    say("Spark, aggregates: events per user per minute upserted exactly once into the")
    say("compacted topic demo-counts ...")
    counted = run_stream_job(bootstrap, run_dir) == 0
    total = print_table(bootstrap) if counted else -1
    counted = counted and total == records
    say(
        f"OK: the counts add up to all {records:,} events."
        if counted
        else f"FAILED: the counts add up to {total:,} of {records:,} events."
    )
    say()
    say(f"Delta Lake: landing {TOPIC} in a Delta table (txnAppId/txnVersion) ...")
    rows = run_delta_job(bootstrap, run_dir)
    landed = rows == records
    say(
        f"OK: the Delta table holds all {records:,} events, as many as the counts add up to."
        if landed
        else f"FAILED: the Delta table holds {rows} rows, expected {records:,}."
    )
    return enriched and counted and landed


def run_demo(run_dir: Path, records: int, spark: bool = True) -> int:
    cluster_dir = (run_dir / "cluster").resolve()
    say(f"Millrace demo: 1-broker cluster in {cluster_dir}")
    with embedded_cluster(cluster_dir) as bootstrap:
        say(f"Cluster up: bootstrap servers {bootstrap}")
        create_topic(bootstrap)
        say(f"Created topic {TOPIC} with {PARTITIONS} partitions")
        say(f"Producing {records:,} JSON events (idempotent, linger.ms=5) ...")
        produced = produce(bootstrap, records)
        say("Consuming them back ...")
        consumed = consume(bootstrap, records)

        lost = records - consumed.unique_ids
        say()
        say("Summary")
        say(
            f"  records produced : {produced.acked:,} acknowledged, {produced.failed:,} failed"
            f" ({produced.acked / max(produced.seconds, 1e-9):,.0f} rec/s, "
            f"{produced.bytes / 2**20 / max(produced.seconds, 1e-9):.2f} MB/s)"
        )
        say(
            f"  records consumed : {consumed.records:,} "
            f"({consumed.records / max(consumed.seconds, 1e-9):,.0f} rec/s), "
            f"{consumed.unique_ids:,} distinct events, {consumed.duplicates:,} duplicates, "
            f"{lost:,} missing"
        )
        offsets = ", ".join(f"{p}: {o:,}" for p, o in sorted(consumed.end_offsets.items()))
        say(f"  end offsets      : {offsets} (total {sum(consumed.end_offsets.values()):,})")
        say("  sample records   :")
        for sample in consumed.samples:
            say(f"    {sample}")
        for err in produced.errors:
            say(f"  delivery error   : {err}")
        say()
        dump_first_batches(cluster_dir)
        say()
        ok = (
            produced.failed == 0
            and produced.acked == records
            and lost == 0
            and consumed.duplicates == 0
            and consumed.bad_json == 0
        )
        say(
            "OK: every event was consumed back exactly once."
            if ok
            else "FAILED: events were lost, duplicated or not acknowledged."
        )
        if ok and spark:
            ok = run_spark_story(bootstrap, run_dir.resolve(), records)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.cli.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-dir", default="demo-run", help="working directory (demo-run)")
    parser.add_argument("--records", type=int, default=RECORDS, help="events to produce")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark streaming job")
    args = parser.parse_args(argv)
    if args.records <= 0:
        parser.error("--records must be at least 1")
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_demo(Path(args.run_dir), args.records, spark=not args.no_spark)
    except KeyboardInterrupt:
        sys.stderr.write("\ndemo: interrupted; the cluster was stopped\n")
        return 130
    except DemoError as exc:
        sys.stderr.write(f"demo: {exc}\n")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
