"""Spark aggregates, compacted topics read as tables, and topics landed in Delta Lake:
``format("millrace")`` beside Spark's own ``format("kafka")``.

One local Spark (``local[2]``, as ``bench.spark_workload.session`` with Delta Lake's jars and
settings too) with both connectors, a Millrace cluster of one broker and, unless
``--no-kafka``, Apache Kafka 3.9.1 (one broker, on Millrace's ZooKeeper, as in
``bench.compare``). Both brokers get the log cleaner settings of ``bench.compaction``
(``log.cleaner.threads=1``, ``log.cleaner.backoff.ms=200``, dedupe buffer 128 MiB). Every
measure is taken on each broker with each format, ``--runs`` times, alternating which format
goes first; the report gives medians and the ratio millrace / kafka.

1. **Aggregation job** (records/s in): ``--records`` JSON events ``{"key": "k-000042",
   "amount": 17}`` over ``--keys`` keys (key and amount of each event drawn from a generator
   seeded with ``--seed``) in a ``--partitions``-partition topic; a streaming
   ``groupBy("key").agg(count, sum(amount))`` in update mode, read from the earliest offsets
   with ``maxOffsetsPerTrigger`` ``--max-offsets`` and ``Trigger.AvailableNow``, each
   micro-batch upserted exactly once into a fresh compacted topic with
   ``spark_connector.upsert_to`` (the source offsets committed to a consumer group in the
   output's transactions). The same query and sink with ``readStream.format("millrace")``
   and with ``readStream.format("kafka")``; the time runs from ``start()`` to the query's
   end. Checked afterwards (untimed): the output read as a table (``read_committed``) holds
   one row per key whose counts add up to the events and whose sums to their amounts, and
   the group's committed offsets are at the input's end.
2. **Table read** (seconds): a compacted topic (``segment.bytes`` ``--segment-mb`` MB) of
   ``--table-updates`` updates (100-byte values) of ``--table-keys`` keys, produced with
   confluent-kafka while the cleaner is held back (``min.compaction.lag.ms`` one day), read
   whole: ``spark.read.format("millrace").option("readAs", "table").load().count()``
   against the reference a Spark user writes without it, ``spark.read.format("kafka")``
   reduced to the latest record per key (``groupBy("key").agg(max_by("value",
   "offset"))``, tombstones dropped) and counted. Then the cleaner is released
   (IncrementalAlterConfigs ``min.compaction.lag.ms=0``, as ``bench.compaction``), and once
   its stats lines say every partition's full segments are cleaned, the same reads again
   ("after cleaning": the active segments stay dirty). Also timed: the same groupBy over
   ``format("millrace")``'s records (row 2b), which separates the connector's read from the
   table reduction. Each phase starts with one untimed read of each kind; every read must
   count the live keys.
3. **Topic to Delta** (records/s in): ``jobs/topic_to_delta.py``'s query (its
   ``build_query``: foreachBatch appends with ``txnAppId``/``txnVersion``) over the events of
   measure 1, ``maxOffsetsPerTrigger`` ``--max-offsets``, availableNow, into a fresh table,
   against the same query with ``readStream.format("kafka")`` (:func:`kafka_delta_query`,
   the same foreachBatch write). Checked afterwards: the table holds every record.

Before anything is timed, the aggregation and Delta jobs run once with each format on a
small topic (Spark's JIT and Python workers).

Results: the section "Spark aggregates, tables and Delta beside format("kafka")" of
``BENCHMARKS.md`` (``--quick``: a file under /tmp). Usage: ``python -m bench.aggregates
[--quick] [--records N] [--keys N] [--max-offsets N] [--table-updates N] [--table-keys N]
[--runs N] [--parts agg table delta] [--no-kafka] [--out F]``; progress on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.basics import progress
from bench.cleaner_stats import CLEANER_LOG4J, CleanerLog
from bench.common import ROOT, machine, replace_section
from bench.compaction import (
    HELD_BACK_LAG_MS,
    MB,
    active_base_offset,
    broker_settings,
    log_bytes,
    set_topic_config,
)
from bench.compare import both, log, warm_up
from bench.systems import KAFKA_VERSION, MillraceSystem, System

HEADING = '## Spark aggregates, tables and Delta beside format("kafka")'
QUICK_OUT = Path(tempfile.gettempdir()) / "millrace-bench-aggregates-quick.md"
FORMATS = ("millrace", "kafka")
PARTS = ("agg", "table", "delta")
EVENT_SCHEMA = "key string, amount long"
OUTPUT_SCHEMA = "key string, count long, sum long"
VALUE_BYTES = 100


# --------------------------------------------------------------------- the data


def event_key(index: int) -> str:
    return f"k-{index:06d}"


@dataclass(frozen=True)
class Events:
    """The aggregation's input: event ``i`` has key ``event_key(keys[i])`` and amount
    ``amounts[i]``."""

    keys: list[int]
    amounts: list[int]

    @classmethod
    def make(cls, n: int, keys: int, seed: int) -> Events:
        rng = random.Random(seed)
        return cls(
            [rng.randrange(keys) for _ in range(n)], [rng.randrange(1, 100) for _ in range(n)]
        )

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def distinct_keys(self) -> int:
        return len(set(self.keys))

    @property
    def total(self) -> int:
        return sum(self.amounts)

    def records(self) -> Iterator[tuple[bytes, bytes]]:
        """(record key, JSON value) of every event, in order."""
        for k, amount in zip(self.keys, self.amounts, strict=True):
            key = event_key(k)
            yield key.encode(), f'{{"key":"{key}","amount":{amount}}}'.encode()


@dataclass(frozen=True)
class Updates:
    """The compacted topic's updates: update ``i`` sets key ``order[i]`` to a 100-byte value
    that starts with ``i`` (so the latest one is recognisable)."""

    order: list[int]

    @classmethod
    def make(cls, n: int, keys: int, seed: int) -> Updates:
        rng = random.Random(seed)
        return cls([rng.randrange(keys) for _ in range(n)])

    def __len__(self) -> int:
        return len(self.order)

    @property
    def live_keys(self) -> int:
        return len(set(self.order))

    def records(self) -> Iterator[tuple[bytes, bytes]]:
        for i, k in enumerate(self.order):
            yield f"key-{k:08d}".encode(), f"{i:012d}".encode().ljust(VALUE_BYTES, b".")


def format_order(run: int) -> tuple[str, ...]:
    """Run ``run`` times format("millrace") first when even, format("kafka") first when odd."""
    return FORMATS if run % 2 == 0 else tuple(reversed(FORMATS))


def input_rows(progresses: Iterable[dict[str, Any]]) -> int:
    """The rows a streaming query read, from its progress reports (``recentProgress``)."""
    return sum(int(p.get("numInputRows", 0)) for p in progresses)


def phase_seconds(progresses: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Seconds per phase of a streaming query's micro-batches (``durationMs`` of its progress
    reports summed; ``addBatch`` is the foreachBatch function), largest first."""
    total: dict[str, float] = {}
    for p in progresses:
        for phase, ms in (p.get("durationMs") or {}).items():
            total[phase] = total.get(phase, 0.0) + float(ms) / 1000
    return dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))


def startup_seconds(started: float, progresses: Sequence[dict[str, Any]]) -> float:
    """Seconds from ``started`` (epoch seconds, just before ``start()``) to the first
    micro-batch's trigger (its progress report's ``timestamp``); NaN without one."""
    if not progresses or not progresses[0].get("timestamp"):
        return math.nan
    first = datetime.datetime.fromisoformat(str(progresses[0]["timestamp"]))
    return first.timestamp() - started


def describe_phases(phases: dict[str, float], top: int = 4) -> str:
    """``addBatch 2.10s, latestOffset 0.20s`` (without the whole ``triggerExecution``)."""
    shown = [(k, v) for k, v in phases.items() if k != "triggerExecution"][:top]
    return ", ".join(f"{k} {v:.2f}s" for k, v in shown)


# --------------------------------------------------------------------- the results


@dataclass(frozen=True, slots=True)
class Measure:
    """A line of the report: what ``millrace`` and ``kafka`` mean for it, in ``unit``."""

    key: str
    label: str
    unit: str
    fmt: str
    millrace: str = 'format("millrace")'
    kafka: str = 'format("kafka")'


MEASURES = (
    Measure("agg", "1. aggregation job, upserted exactly once", "records/s in", "{:,.0f}"),
    Measure(
        "table-before",
        "2. table read, before cleaning",
        "seconds",
        "{:,.2f}",
        'format("millrace") readAs=table',
        'format("kafka") + groupBy',
    ),
    Measure(
        "table-after",
        "2. table read, after cleaning",
        "seconds",
        "{:,.2f}",
        'format("millrace") readAs=table',
        'format("kafka") + groupBy',
    ),
    Measure(
        "groupby-before",
        "2b. groupBy latest per key, before cleaning",
        "seconds",
        "{:,.2f}",
        'format("millrace") + groupBy',
        'format("kafka") + groupBy',
    ),
    Measure(
        "groupby-after",
        "2b. groupBy latest per key, after cleaning",
        "seconds",
        "{:,.2f}",
        'format("millrace") + groupBy',
        'format("kafka") + groupBy',
    ),
    Measure("delta", "3. topic to Delta (jobs/topic_to_delta.py)", "records/s in", "{:,.0f}"),
)


@dataclass
class Results:
    """Every run's figure of (measure, system, format), in the order taken."""

    values: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    def add(self, measure: str, system: str, fmt: str, value: float) -> None:
        self.values.setdefault((measure, system, fmt), []).append(value)

    def runs(self, measure: str, system: str, fmt: str) -> list[float]:
        return list(self.values.get((measure, system, fmt), []))

    def median(self, measure: str, system: str, fmt: str) -> float:
        values = [v for v in self.runs(measure, system, fmt) if not math.isnan(v)]
        return statistics.median(values) if values else math.nan

    def systems(self) -> list[str]:
        """The systems measured, Millrace first."""
        names = {s for _m, s, _f in self.values}
        return sorted(names, key=lambda s: (s != "Millrace", s))


def ratio(millrace: float, kafka: float) -> float:
    """millrace / kafka, NaN when either is missing or kafka is 0."""
    if math.isnan(millrace) or math.isnan(kafka) or kafka == 0:
        return math.nan
    return millrace / kafka


def cell(fmt: str, value: float) -> str:
    return "n/a" if math.isnan(value) else fmt.format(value)


def broker_label(system: str) -> str:
    return f"Apache Kafka {KAFKA_VERSION}" if system == "Kafka" else system


def table(results: Results) -> str:
    """The report's table: a line per measure and broker with medians and the ratio."""
    lines = [
        "| measure | broker | millrace side | kafka side | millrace | kafka | "
        "millrace / kafka | runs (millrace; kafka) |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for measure in MEASURES:
        for system in results.systems():
            m = results.median(measure.key, system, "millrace")
            k = results.median(measure.key, system, "kafka")
            if math.isnan(m) and math.isnan(k):
                continue
            r = ratio(m, k)
            runs = "; ".join(
                ", ".join(cell(measure.fmt, v) for v in results.runs(measure.key, system, f))
                for f in FORMATS
            )
            lines.append(
                f"| {measure.label} ({measure.unit}) | {broker_label(system)} | "
                f"{measure.millrace} | {measure.kafka} | {cell(measure.fmt, m)} | "
                f"{cell(measure.fmt, k)} | {'' if math.isnan(r) else f'**{r:.2f}**'} | {runs} |"
            )
    return "\n".join(lines)


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run."""
    if args.quick:
        parts = ["python -m bench.aggregates --quick"]
    else:
        parts = [
            "python -m bench.aggregates",
            f"--records {args.records}",
            f"--keys {args.keys}",
            f"--max-offsets {args.max_offsets}",
            f"--table-updates {args.table_updates}",
            f"--table-keys {args.table_keys}",
            f"--runs {args.runs}",
        ]
    if tuple(args.parts) != PARTS:
        parts.append("--parts " + " ".join(args.parts))
    if not args.kafka:
        parts.append("--no-kafka")
    return " ".join(parts)


# --------------------------------------------------------------------- Spark


def load_job(name: str) -> ModuleType:
    """``jobs/<name>.py`` as a module (``jobs/`` is not a package)."""
    path = ROOT / "jobs" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"millrace_job_{name}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def aggregation_query(
    spark: Any,
    fmt: str,
    bootstrap: str,
    source: str,
    sink: str,
    checkpoint: str,
    max_offsets: int,
    group: str,
) -> Any:
    """Start the aggregation job (not waiting for it): count and sum of ``amount`` per key
    of ``source``'s JSON events read with ``readStream.format(fmt)``, each micro-batch's
    changed rows upserted into ``sink`` exactly once, the source offsets committed to
    ``group``."""
    from pyspark.sql import functions as F

    import spark_connector

    events = (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets))
        .load()
        .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
    )
    totals = events.groupBy("key").agg(
        F.count(F.lit(1)).alias("count"), F.sum("amount").alias("sum")
    )
    upsert = spark_connector.upsert_to(
        sink,
        bootstrap_servers=bootstrap,
        key_columns=["key"],
        checkpoint_location=checkpoint,
        commit_offsets_to_group=group,
    )
    return (
        totals.writeStream.outputMode("update")
        .foreachBatch(upsert)
        .option("checkpointLocation", checkpoint)
        .queryName(f"bench_aggregates_{fmt}")
        .trigger(availableNow=True)
        .start()
    )


def kafka_delta_query(spark: Any, job: ModuleType, args: argparse.Namespace) -> Any:
    """``jobs/topic_to_delta.py``'s append query (``args`` from its ``parse_args``) with
    ``readStream.format("kafka")`` as the source: the same foreachBatch Delta write."""
    from pyspark.sql import functions as F

    if args.mode != "append" or args.group:
        raise ValueError("the format('kafka') variant is of the append job without --group")
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    rows = reader.load()
    if args.decode:
        rows = rows.withColumn("key", F.col("key").cast("string")).withColumn(
            "value", F.col("value").cast("string")
        )
    table_path = args.table
    app_id = args.app_id or job.app_id_for(table_path)

    def write_batch(batch: Any, batch_id: int) -> None:
        (
            batch.write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
            .save(table_path)
        )

    return (
        rows.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", args.checkpoint)
        .queryName(f"topic_to_delta_kafka_{args.topic}")
        .trigger(availableNow=True)
        .start()
    )


def finished(query: Any, label: str, expected_rows: int) -> None:
    """Wait for an availableNow query; it must have read ``expected_rows`` rows."""
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        raise SystemExit(f"{label}: the query failed: {error}")
    rows = input_rows(query.recentProgress)
    if rows != expected_rows:
        raise SystemExit(f"{label}: the query read {rows:,} rows, expected {expected_rows:,}")


def batch_reader(spark: Any, fmt: str, bootstrap: str, topic: str) -> Any:
    return (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )


def table_count(spark: Any, bootstrap: str, topic: str) -> int:
    """``readAs=table``: the live keys of a compacted topic."""
    return int(
        batch_reader(spark, "millrace", bootstrap, topic).option("readAs", "table").load().count()
    )


def groupby_count(spark: Any, fmt: str, bootstrap: str, topic: str) -> int:
    """What a Spark user writes without ``readAs=table``: every record, reduced to the latest
    value per key (keys live in one partition, so the highest offset is the latest),
    tombstones dropped."""
    from pyspark.sql import functions as F

    latest = (
        batch_reader(spark, fmt, bootstrap, topic)
        .load()
        .where(F.col("key").isNotNull())
        .groupBy("key")
        .agg(F.max_by("value", "offset").alias("value"))
        .where(F.col("value").isNotNull())
    )
    return int(latest.count())


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


# --------------------------------------------------------------------- the brokers


def produce(system: System, topic: str, records: Iterable[tuple[bytes, bytes]], n: int) -> float:
    """Produce the (key, value) ``records`` (``n`` of them) with confluent-kafka, partitioned
    by key; seconds taken."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": system.bootstrap,
            "acks": 1,
            "linger.ms": 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failures: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for i, (key, value) in enumerate(records):
        while True:
            try:
                p.produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.005)
        if i % 50_000 == 0:
            p.poll(0)
            progress(f"    producing {topic}: {i:,}/{n:,}")
    if p.flush(600) != 0 or failures:
        raise SystemExit(f"{system.name}: producing {topic} failed: {failures[:1]}")
    return time.perf_counter() - start


def committed_total(system: System, group: str, topic: str, partitions: int) -> int:
    """The sum of ``group``'s committed offsets of ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": system.bootstrap, "group.id": group})
    try:
        offsets = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=60)
    finally:
        c.close()
    return sum(max(o.offset, 0) for o in offsets)


def topic_bytes(system: System, topic: str, partitions: int) -> int:
    return sum(log_bytes(system.data_dirs[0] / f"{topic}-{p}") for p in range(partitions))


def clean(system: System, topic: str, partitions: int, timeout_s: float) -> float:
    """Release the cleaner on ``topic`` (``min.compaction.lag.ms=0``) and wait until its
    stats lines cover every partition's full segments; seconds taken."""
    cleaner = CleanerLog(system)
    ends = {p: active_base_offset(system.data_dirs[0] / f"{topic}-{p}") for p in range(partitions)}
    if not any(ends.values()):
        log(f"  {system.name}: {topic} has no full segment, nothing to clean")
    since = cleaner.mark()
    t0 = time.monotonic()
    set_topic_config(system, topic, "min.compaction.lag.ms", "0")
    while True:
        pending = []
        for p, end in ends.items():
            rounds = cleaner.rounds(since, f"{topic}-{p}")
            if end > 0 and not (rounds and rounds[-1].end >= end):
                pending.append(p)
        elapsed = time.monotonic() - t0
        if not pending:
            return elapsed
        if elapsed > timeout_s:
            raise SystemExit(
                f"{system.name}: {topic} partitions {pending} not cleaned within "
                f"{timeout_s:g}s of the trigger; see {cleaner.path}"
            )
        progress(f"    cleaning {topic}: {elapsed:.1f}s, partitions {pending} pending")
        time.sleep(0.1)


@contextmanager
def brokers(tmp: Path, with_kafka: bool, warm_up_records: int) -> Iterator[list[System]]:
    """Millrace (and Apache Kafka) with one broker each and the cleaner settings of
    ``bench.compaction``, warmed up; Millrace first."""
    if with_kafka:
        with both(tmp, 1, warm_up_records, broker_settings(), CLEANER_LOG4J) as systems:
            yield sorted(systems, key=lambda s: s.name != "Millrace")
        return
    log("starting Millrace (1 broker) and its ZooKeeper")
    millrace = MillraceSystem(tmp / "millrace-1", 1, broker_settings())
    try:
        warm_up(millrace, warm_up_records)
        yield [millrace]
    finally:
        log("stopping Millrace")
        millrace.stop()


# --------------------------------------------------------------------- the benchmark


class Bench:
    def __init__(self, args: argparse.Namespace, spark: Any, tmp: Path) -> None:
        self.a = args
        self.spark = spark
        self.tmp = tmp
        self.results = Results()
        self.notes: list[str] = []
        self.seq = 0
        self.delta_job = load_job("topic_to_delta")
        self.events = Events.make(args.records, args.keys, args.seed)
        self.updates = Updates.make(args.table_updates, args.table_keys, args.seed + 1)

    def name(self, system: System, what: str) -> str:
        self.seq += 1
        return f"{what}-{system.name.lower()}-{self.seq}"

    def path(self, what: str) -> str:
        self.seq += 1
        return str(self.tmp / f"{what}-{self.seq}")

    def events_topic(self, system: System, events: Events) -> str:
        topic = self.name(system, "agg-in")
        system.create_topic(topic, self.a.partitions, 1)
        seconds = produce(system, topic, events.records(), len(events))
        log(f"  {system.name:<8} produced {len(events):,} events into {topic} in {seconds:.1f}s")
        return topic

    # ----------------------------------------------------------------- 1. aggregation
    def aggregation(
        self, system: System, fmt: str, source: str, events: Events, max_offsets: int
    ) -> float:
        """One run of the aggregation job with ``format(fmt)``; records/s in."""
        sink = self.name(system, "agg-out")
        system.create_topic(sink, self.a.partitions, 1, {"cleanup.policy": "compact"})
        group = f"bench-{sink}"
        label = f'{system.name} aggregation, format("{fmt}")'
        progress(f"    {label} ...")
        checkpoint = self.path("agg-ckpt")
        wall0, t0 = time.time(), time.perf_counter()
        query = aggregation_query(
            self.spark, fmt, system.bootstrap, source, sink, checkpoint, max_offsets, group
        )
        finished(query, label, len(events))
        seconds = time.perf_counter() - t0
        self.check_upserts(system, sink, events, label)
        committed = committed_total(system, group, source, self.a.partitions)
        if committed != len(events):
            raise SystemExit(f"{label}: group {group} committed {committed:,} of {len(events):,}")
        system.delete_topic(sink)
        progresses = query.recentProgress
        log(
            f"  {system.name:<8} aggregation format('{fmt}'): {len(events) / seconds:,.0f} "
            f"records/s ({seconds:.1f}s; first trigger after "
            f"{startup_seconds(wall0, progresses):.2f}s; {len(progresses)} micro-batches: "
            f"{describe_phases(phase_seconds(progresses))})"
        )
        return len(events) / seconds

    def check_upserts(self, system: System, sink: str, events: Events, label: str) -> None:
        from pyspark.sql import functions as F

        row = (
            batch_reader(self.spark, "millrace", system.bootstrap, sink)
            .option("readAs", "table")
            .option("kafka.isolation.level", "read_committed")
            .load()
            .select(F.from_json(F.col("value").cast("string"), OUTPUT_SCHEMA).alias("v"))
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.sum("v.count").alias("count"),
                F.sum("v.sum").alias("sum"),
            )
            .first()
        )
        got = (int(row["rows"]), int(row["count"] or 0), int(row["sum"] or 0))
        want = (events.distinct_keys, len(events), events.total)
        if got != want:
            raise SystemExit(
                f"{label}: the output table holds (rows, sum of counts, sum of sums) {got}, "
                f"expected {want}"
            )

    # ----------------------------------------------------------------- 3. Delta
    def delta(self, system: System, fmt: str, source: str, n: int, max_offsets: int) -> float:
        """One run of topic -> Delta with ``format(fmt)``; records/s in."""
        job = self.delta_job
        table_path = self.path("delta-table")
        args = job.parse_args(
            [
                "--bootstrap",
                system.bootstrap,
                "--topic",
                source,
                "--table",
                table_path,
                "--checkpoint",
                self.path("delta-ckpt"),
                "--max-offsets-per-trigger",
                str(max_offsets),
                "--available-now",
            ]
        )
        label = f'{system.name} topic to Delta, format("{fmt}")'
        progress(f"    {label} ...")

        wall0, t0 = time.time(), time.perf_counter()
        if fmt == "millrace":
            query = job.build_query(self.spark, args)
        else:
            query = kafka_delta_query(self.spark, job, args)
        finished(query, label, n)
        seconds = time.perf_counter() - t0
        rows = int(self.spark.read.format("delta").load(table_path).count())
        shutil.rmtree(table_path, ignore_errors=True)
        if rows != n:
            raise SystemExit(f"{label}: the Delta table holds {rows:,} rows, expected {n:,}")
        log(
            f"  {system.name:<8} topic to Delta format('{fmt}'): {n / seconds:,.0f} records/s "
            f"({seconds:.1f}s; first trigger after "
            f"{startup_seconds(wall0, query.recentProgress):.2f}s; "
            f"{describe_phases(phase_seconds(query.recentProgress))})"
        )
        return n / seconds

    # ----------------------------------------------------------------- 2. table read
    def table_reads(self, system: System, topic: str, phase: str) -> None:
        bs, live = system.bootstrap, self.updates.live_keys
        kinds: dict[str, Callable[[], int]] = {
            "readAs=table": lambda: table_count(self.spark, bs, topic),
            "millrace groupBy": lambda: groupby_count(self.spark, "millrace", bs, topic),
            "kafka groupBy": lambda: groupby_count(self.spark, "kafka", bs, topic),
        }
        order = list(kinds)
        for kind in order:  # untimed: Python workers, page cache
            progress(f"    {system.name} {phase} cleaning, warm-up read: {kind} ...")
            kinds[kind]()
        for r in range(self.a.runs):
            for kind in order if r % 2 == 0 else reversed(order):
                progress(f"    {system.name} {phase} cleaning, run {r + 1}: {kind} ...")
                seconds, count = timed(kinds[kind])
                if count != live:
                    raise SystemExit(
                        f"{system.name} {phase} cleaning: {kind} counted {count:,} rows, "
                        f"expected {live:,} live keys"
                    )
                if kind == "readAs=table":
                    self.results.add(f"table-{phase}", system.name, "millrace", seconds)
                elif kind == "millrace groupBy":
                    self.results.add(f"groupby-{phase}", system.name, "millrace", seconds)
                else:
                    self.results.add(f"table-{phase}", system.name, "kafka", seconds)
                    self.results.add(f"groupby-{phase}", system.name, "kafka", seconds)
                log(f"  {system.name:<8} {phase} cleaning, {kind}: {seconds:.2f}s")

    def table(self, system: System) -> None:
        topic = self.name(system, "table")
        system.create_topic(
            topic,
            self.a.partitions,
            1,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.a.segment_mb * MB),
                "min.compaction.lag.ms": str(HELD_BACK_LAG_MS),
            },
        )
        since = CleanerLog(system).mark()
        seconds = produce(system, topic, self.updates.records(), len(self.updates))
        before = topic_bytes(system, topic, self.a.partitions)
        log(
            f"  {system.name:<8} produced {len(self.updates):,} updates of "
            f"{self.updates.live_keys:,} keys into {topic} in {seconds:.1f}s "
            f"({before / MB:,.1f} MB of log)"
        )
        self.table_reads(system, topic, "before")
        early = [
            p for p in range(self.a.partitions) if CleanerLog(system).rounds(since, f"{topic}-{p}")
        ]
        if early:
            raise SystemExit(f"{system.name}: {topic} partitions {early} cleaned while held back")
        clean_s = clean(system, topic, self.a.partitions, max(300.0, len(self.updates) / 2000))
        after = topic_bytes(system, topic, self.a.partitions)
        log(
            f"  {system.name:<8} cleaned {topic} in {clean_s:.1f}s after the trigger: "
            f"{before / MB:,.1f} -> {after / MB:,.1f} MB of log"
        )
        self.notes.append(
            f"{broker_label(system.name)}: the table topic's log {before / MB:,.1f} MB before "
            f"cleaning, {after / MB:,.1f} MB after (cleaned {clean_s:.1f}s after the trigger)"
        )
        self.table_reads(system, topic, "after")
        system.delete_topic(topic)

    # ----------------------------------------------------------------- a system
    def warm_up(self, system: System) -> None:
        """The aggregation and Delta jobs once with each format on a small topic."""
        n = self.a.spark_warm_up
        log(f"warming up Spark: both jobs, both formats, {n:,} events on {system.name}")
        events = Events.make(n, min(self.a.keys, n), self.a.seed + 2)
        source = self.events_topic(system, events)
        for fmt in FORMATS:
            self.aggregation(system, fmt, source, events, max(n // 2, 1))
            self.delta(system, fmt, source, n, max(n // 2, 1))
        system.delete_topic(source)

    def run(self, system: System) -> None:
        a = self.a
        source = None
        if "agg" in a.parts or "delta" in a.parts:
            source = self.events_topic(system, self.events)
        for part in a.parts:
            if part == "table":
                log(f"[aggregates] {system.name} table read")
                self.table(system)
                continue
            assert source is not None
            for r in range(a.runs):
                for fmt in format_order(r):
                    log(f"[aggregates] {system.name} {part} run {r + 1}/{a.runs} format('{fmt}')")
                    if part == "agg":
                        rate = self.aggregation(system, fmt, source, self.events, a.max_offsets)
                    else:
                        rate = self.delta(system, fmt, source, len(self.events), a.max_offsets)
                    self.results.add(part, system.name, fmt, rate)
        if source is not None:
            system.delete_topic(source)


# --------------------------------------------------------------------- the report


def versions() -> str:
    import confluent_kafka
    import pyspark

    from bench.spark_workload import SPARK_KAFKA_JARS
    from spark_connector.session import DELTA_VERSION

    kafka_jar = next(
        (p.name for p in sorted(SPARK_KAFKA_JARS.glob("spark-sql-kafka*.jar"))), "not found"
    )
    return (
        f"pyspark {pyspark.__version__}, Spark's Kafka connector `{kafka_jar}`, Delta Lake "
        f"{DELTA_VERSION}, confluent-kafka {confluent_kafka.__version__} (librdkafka "
        f"{confluent_kafka.libversion()[0]})"
    )


def write_report(
    out: Path, args: argparse.Namespace, results: Results, notes: list[str], elapsed_s: float
) -> None:
    quick = (
        "\n**Quick run (`--quick`): reduced sizes, for checking the benchmark works; not "
        "results.**\n"
        if args.quick
        else ""
    )
    brokers = (
        f"Millrace and Apache Kafka {KAFKA_VERSION}, one broker each (Kafka on Millrace's "
        "ZooKeeper),"
        if args.kafka
        else "a Millrace broker"
    )
    note_lines = "".join(f"- {n}\n" for n in notes)
    section = f"""{HEADING}
{quick}
Spark (`local[2]`, 4 GB driver, 2 shuffle partitions) with `format("millrace")`, Spark's own
`format("kafka")` and Delta Lake, against {brokers} with the cleaner
settings of the log compaction benchmark (`log.cleaner.threads=1`,
`log.cleaner.backoff.ms=200`, dedupe buffer 128 MiB); {versions()}; {args.runs} run(s) of
each, alternating which format goes first, medians; run {datetime.date.today().isoformat()}
({elapsed_s / 60:.0f} min) on: {machine()}. Everything shares this machine.

1. **Aggregation job**: {args.records:,} JSON events of {args.keys:,} keys in a
   {args.partitions}-partition topic; `groupBy("key").agg(count, sum(amount))` in update mode,
   `maxOffsetsPerTrigger={args.max_offsets:,}`, `Trigger.AvailableNow`, every micro-batch
   upserted into a fresh compacted topic with `spark_connector.upsert_to` (exactly once, the
   source offsets committed to a group in the same transactions), the same query and sink
   with each source. Records in per second from `start()` to the query's end. Checked: the
   output read as a table adds up to the input; the group is at the input's end.
2. **Table read**: {args.table_updates:,} updates (100-byte values) of {args.table_keys:,}
   keys in a {args.partitions}-partition compacted topic (`segment.bytes`
   {args.segment_mb} MB), read whole and counted: `format("millrace")` with
   `readAs=table` against `format("kafka")` reduced to the latest record per key
   (`groupBy("key").agg(max_by("value", "offset"))`, tombstones dropped). Before cleaning
   (the cleaner held back with `min.compaction.lag.ms` one day) and after (released with
   IncrementalAlterConfigs; measured once the cleaner's stats lines cover every partition's
   full segments; the active segments stay dirty). 2b: the same groupBy over
   `format("millrace")`'s records (its kafka column is the same runs as 2's): the read
   alone, without the reduction inside the tasks. One untimed read of each kind first.
3. **Topic to Delta**: `jobs/topic_to_delta.py`'s query (`build_query`, foreachBatch Delta
   appends with `txnAppId`/`txnVersion`) over the events of measure 1, `maxOffsetsPerTrigger=
   {args.max_offsets:,}`, availableNow, into a fresh table, against the same query and write
   with `readStream.format("kafka")`. Checked: the table holds every record.

"millrace / kafka" above 1 means more of the figure: faster for records/s, slower for
seconds.

{table(results)}

{note_lines}
Reproduce: `.venv/bin/{command(args)}` (`make bench` runs `{command(parse_args([]))}`).
"""
    replace_section(out, HEADING, section)


# --------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.aggregates", description=__doc__)
    p.add_argument("--quick", action="store_true", help="reduced sizes, report into /tmp")
    p.add_argument("--records", type=int, help="events for jobs 1 and 3 (2,000,000; quick 100,000)")
    p.add_argument("--keys", type=int, help="keys of the events (10,000)")
    p.add_argument("--max-offsets", type=int, help="maxOffsetsPerTrigger (500,000; quick 25,000)")
    p.add_argument(
        "--table-updates", type=int, help="updates in the table topic (1,000,000; quick 100,000)"
    )
    p.add_argument("--table-keys", type=int, help="keys of the table topic (10,000; quick 2,000)")
    p.add_argument("--segment-mb", type=int, help="the table topic's segment.bytes, MB (16; 2)")
    p.add_argument("--partitions", type=int, default=2, help="partitions of every topic (2)")
    p.add_argument("--runs", type=int, help="runs per format (3; quick 1)")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to run")
    p.add_argument("--no-kafka", dest="kafka", action="store_false", help="Millrace only")
    p.add_argument(
        "--warm-up",
        type=int,
        help="broker warm-up records, a multiple of 100,000 (200,000; quick 100,000)",
    )
    p.add_argument("--spark-warm-up", type=int, help="events of the Spark warm-up (50,000; 5,000)")
    p.add_argument("--seed", type=int, default=20261125)
    p.add_argument("--out", help="report (BENCHMARKS.md; --quick: " + str(QUICK_OUT) + ")")
    args = p.parse_args(argv)
    full = {
        "records": 2_000_000,
        "keys": 10_000,
        "max_offsets": 500_000,
        "table_updates": 1_000_000,
        "table_keys": 10_000,
        "segment_mb": 16,
        "runs": 3,
        "warm_up": 200_000,
        "spark_warm_up": 50_000,
    }
    quick = {
        "records": 100_000,
        "keys": 10_000,
        "max_offsets": 25_000,
        "table_updates": 100_000,
        "table_keys": 2_000,
        "segment_mb": 2,
        "runs": 1,
        "warm_up": 100_000,
        "spark_warm_up": 5_000,
    }
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for name in (*full, "partitions"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.warm_up % 100_000:
        # bench.compare.warm_up reads a tenth back with 10,000-record polls, which overshoot
        # a count that is not a multiple of 10,000
        p.error("--warm-up must be a multiple of 100,000")
    if args.segment_mb < 2:
        p.error("--segment-mb must be at least 2 (librdkafka's batches reach 1 MB)")
    args.parts = [part for part in PARTS if part in args.parts]  # the documented order
    if args.out is None:
        args.out = str(QUICK_OUT if args.quick else ROOT / "BENCHMARKS.md")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    from bench import spark_workload

    with (
        tempfile.TemporaryDirectory(prefix="millrace-bench-aggregates-") as t,
        brokers(Path(t), args.kafka, args.warm_up) as systems,
    ):
        log("starting Spark (local[2]) with format('millrace'), format('kafka') and Delta Lake")
        spark = spark_workload.session(delta=True)
        # every micro-batch's progress report is kept: their rows are checked
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        try:
            bench = Bench(args, spark, Path(t))
            if "agg" in args.parts or "delta" in args.parts:
                bench.warm_up(systems[0])
            for system in systems:
                bench.run(system)
        finally:
            spark.stop()
    elapsed = time.perf_counter() - started
    write_report(Path(args.out), args, bench.results, bench.notes, elapsed)
    log(f"done in {elapsed / 60:.1f} min: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
