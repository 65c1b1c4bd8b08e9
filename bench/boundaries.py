"""What whole micro-batches for readers cost (``docs/exactly-once.md``, "Whole micro-batches
for readers"): the exactly-once sink's boundary records on write, the boundary look-up on
read.

One Millrace broker and one local Spark (``bench.spark_workload.session``). A source topic of
``--records`` records (string key, 100-byte value) in ``--partitions`` partitions is produced
once. Then, ``--runs`` times, alternating which goes first:

1. **Exactly-once streaming write** (records/s): ``readStream.format("millrace")`` of the
   source with ``maxOffsetsPerTrigger`` (``--max-offsets``, and ``--small-batches`` for a run
   of many small micro-batches, where the per-commit cost shows), Trigger.AvailableNow, into
   ``writeStream.format("millrace")`` with ``deliveryGuarantee=exactly-once`` and
   ``batchBoundaries`` true (the default: each commit publishes the batch's boundary) or
   false, a fresh output topic and checkpoint each time; timed from ``start()`` to the end.
2. **Batch read of the sink's output** (records/s): ``spark.read.format("millrace")`` of an
   output topic, ``count()``, at the newest boundary (the default) against
   ``endingBatch=none`` (both read_committed), and the same with ``readAs=table``; the best
   of 3 reads per run (a read at a boundary differs by its planning, milliseconds, which
   Spark's run-to-run noise would hide).
3. **The shuffle one transaction per micro-batch would need** (records/s): an exactly-once
   ``df.write`` of the source as planned, against the same after ``repartition(partitions,
   "key")`` (each output partition written by one task).

Every run checks its counts. Results: the section "Whole micro-batches: what boundaries
cost" of ``BENCHMARKS.md`` (machine named, medians, the cost in percent). Usage: ``python -m
bench.boundaries [--records N] [--max-offsets N] [--small-batches N] [--runs N] [--out F]``;
progress on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.basics import progress
from bench.common import ROOT, commit, machine, replace_section
from bench.systems import MillraceSystem

HEADING = "## Whole micro-batches: what boundaries cost"


def produce(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random",
        }
    )
    value = b"x" * 100
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, str(i).encode())
                break
            except BufferError:
                p.poll(0.1)
    if p.flush(120) != 0:
        raise SystemExit("produce: records left unsent")


def stream_write(
    spark: Any,
    bootstrap: str,
    source: str,
    sink: str,
    max_offsets: int,
    boundaries: bool,
    expected: int,
) -> float:
    """Seconds for the exactly-once streaming copy of ``source`` into ``sink``."""
    with tempfile.TemporaryDirectory(prefix="millrace-bench-boundaries-") as ckpt:
        query = (
            spark.readStream.format("millrace")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_offsets))
            .load()
            .select("key", "value")
            .writeStream.format("millrace")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("deliveryGuarantee", "exactly-once")
            .option("batchBoundaries", str(boundaries).lower())
            .option("checkpointLocation", str(Path(ckpt) / "q"))
            .trigger(availableNow=True)
        )
        t0 = time.perf_counter()
        q = query.start()
        q.awaitTermination()
        seconds = time.perf_counter() - t0
        if q.exception() is not None:
            raise SystemExit(f"the exactly-once query failed: {q.exception()}")
        rows = sum(int(p["numInputRows"]) for p in q.recentProgress)
    if rows != expected:
        raise SystemExit(f"the query read {rows} rows, expected {expected}")
    return seconds


def batch_read(spark: Any, bootstrap: str, topic: str, expected: int, **options: str) -> float:
    reader = (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    t0 = time.perf_counter()
    got = reader.load().count()
    seconds = time.perf_counter() - t0
    if got != expected:
        raise SystemExit(f"read {options}: {got} rows, expected {expected}")
    return seconds


def batch_write(
    spark: Any, bootstrap: str, source: str, sink: str, expected: int, shuffle: int
) -> float:
    """Seconds for an exactly-once ``df.write`` of ``source`` into ``sink``; with ``shuffle``
    > 0 the rows are first repartitioned by key into ``shuffle`` Spark partitions (as many as
    the output has: what one transaction per micro-batch needs, each output partition
    written by one task)."""
    df = (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .load()
        .select("key", "value")
    )
    if shuffle:
        df = df.repartition(shuffle, "key")
    t0 = time.perf_counter()
    (
        df.write.format("millrace")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .mode("append")
        .save()
    )
    seconds = time.perf_counter() - t0
    batch_read(spark, bootstrap, sink, expected)  # checks the count
    return seconds


def run(args: argparse.Namespace) -> dict[str, list[float]]:
    from bench.spark_workload import session

    results: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    n = args.records
    with tempfile.TemporaryDirectory(prefix="millrace-bench-boundaries-") as tmp:
        system = MillraceSystem(Path(tmp) / "cluster", 1)
        spark = None
        try:
            bs = system.bootstrap
            system.create_topic("source", args.partitions)
            progress(f"producing {n:,} records")
            produce(bs, "source", n)
            spark = session()
            # warm-up: Spark's JIT, the Python workers, the progress topic created
            system.create_topic("warmup", args.partitions)
            stream_write(spark, bs, "source", "warmup", n, True, n)
            serial = 0
            for r in range(args.runs):
                order = (True, False) if r % 2 == 0 else (False, True)
                for label, max_offsets in (("large", args.max_offsets), ("small", args.small)):
                    for on in order:
                        serial += 1
                        sink = f"out-{serial}"
                        system.create_topic(sink, args.partitions)
                        progress(f"run {r + 1}: write, {label} batches, boundaries {on}")
                        secs = stream_write(spark, bs, "source", sink, max_offsets, on, n)
                        add(f"write-{label}-{'on' if on else 'off'}", n / secs)
                        if label == "large" and on:
                            last = sink
                reads = [
                    ("read-boundary", {}),
                    ("read-none", {"endingBatch": "none"}),
                    ("table-boundary", {"readAs": "table"}),
                    ("table-none", {"readAs": "table", "endingBatch": "none"}),
                ]
                if r % 2:
                    reads.reverse()
                for name, opts in reads:  # the best of 3 reads: planning is milliseconds
                    progress(f"run {r + 1}: {name}")
                    best = min(batch_read(spark, bs, last, n, **opts) for _ in range(3))
                    add(name, n / best)
                shuffles = (0, args.partitions) if r % 2 == 0 else (args.partitions, 0)
                for shuffle in shuffles:
                    serial += 1
                    sink = f"out-{serial}"
                    system.create_topic(sink, args.partitions)
                    progress(f"run {r + 1}: df.write, shuffle by key {bool(shuffle)}")
                    secs = batch_write(spark, bs, "source", sink, n, shuffle)
                    add(f"dfwrite-{'shuffled' if shuffle else 'plain'}", n / secs)
        finally:
            if spark is not None:
                spark.stop()
            system.stop()
    return results


def report(args: argparse.Namespace, results: dict[str, list[float]]) -> str:
    def med(name: str) -> float:
        return statistics.median(results[name])

    def cost(on: str, off: str) -> str:
        return f"{(1 - med(on) / med(off)) * 100:+.1f}%"

    small_batches = args.records // args.small
    large_batches = -(-args.records // args.max_offsets)
    rows = [
        (
            f"exactly-once streaming write, {large_batches} micro-batches of {args.max_offsets:,}",
            "write-large-on",
            "write-large-off",
        ),
        (
            f"exactly-once streaming write, {small_batches} micro-batches of {args.small:,}",
            "write-small-on",
            "write-small-off",
        ),
        ("batch read of the output (count)", "read-boundary", "read-none"),
        ("readAs=table read of the output (count)", "table-boundary", "table-none"),
    ]
    lines = [
        HEADING,
        "",
        f"`python -m bench.boundaries --records {args.records} --max-offsets {args.max_offsets} "
        f"--small-batches {args.small} --runs {args.runs}` (part of `make bench`), run "
        f"{datetime.date.today().isoformat()} at commit {commit()} on: {machine()}. One "
        "Millrace broker, local Spark (`local[2]`); medians of "
        f"{args.runs} runs (reads: the best of 3 per run), alternating which variant goes "
        "first. Records of 100 bytes in "
        f"{args.partitions} partitions. *With*: the sink publishes each batch's boundary "
        "(the default) and the reader reads at the newest one (the default); *without*: "
        "`batchBoundaries=false` on the sink, `endingBatch=none` on the reader (both "
        "read_committed). Cost = how much lower the rate is with boundaries (target: under 5%).",
        "",
        "| measure | with boundaries (records/s) | without (records/s) | cost |",
        "|---|---:|---:|---:|",
    ]
    for label, on, off in rows:
        lines.append(f"| {label} | {med(on):,.0f} | {med(off):,.0f} | {cost(on, off)} |")
    lines += [
        "",
        "The stronger form, one transaction per micro-batch (not built; its conditions are in "
        "`docs/exactly-once.md`), needs every output partition written by one task: a shuffle "
        "by target partition before the write. Its main cost, that shuffle, measured on an "
        f"exactly-once `df.write` of the {args.records:,} records into {args.partitions} "
        "partitions (the write's parallelism is then the output's partition count):",
        "",
        "| exactly-once `df.write` | records/s |",
        "|---|---:|",
        f"| as planned (one task per source partition) | {med('dfwrite-plain'):,.0f} |",
        f"| repartitioned by key into {args.partitions} partitions first | "
        f"{med('dfwrite-shuffled'):,.0f} ({cost('dfwrite-shuffled', 'dfwrite-plain')}) |",
        "",
        "Each commit with boundaries adds: the newest progress record of the topic read back "
        "(a fetch of `__millrace_batches`), the output's last stable offsets (ListOffsets), "
        "one produce into the driver transaction and its EndTxn; a boundary read adds the "
        "look-up of the newest progress record when the read is planned.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--max-offsets", type=int, default=250_000)
    p.add_argument("--small-batches", dest="small", type=int, default=20_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = p.parse_args(argv)
    results = run(args)
    section = report(args, results)
    replace_section(Path(args.out), HEADING, section)
    sys.stderr.write(section + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
