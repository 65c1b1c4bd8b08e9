"""How soon a streaming query's first micro-batch is done: ``format("millrace")`` against
Spark's own JVM source, ``format("kafka")`` (issue 31, target 5).

One Millrace broker and a topic of ``--records`` records (string key, 100-byte value) in
``--partitions`` partitions, produced once. Then, ``--runs`` times, alternating which format
goes first, each in a **fresh** ``SparkSession`` (``bench.spark_workload.session``; the
previous one stopped, so Spark's Python worker daemon and the Python data source's runner
start anew, as for a new ``spark-submit``):

1. **first query**: ``spark.readStream.format(F)`` of the topic from the earliest offsets
   into ``format("noop")`` (default trigger: a micro-batch as soon as the previous one is
   done); measured from just before ``start()`` to the end of micro-batch 0, which is the
   first progress's ``timestamp`` plus its ``durationMs.triggerExecution`` (Spark's own
   clock, no polling delay). The first progress's ``durationMs`` breakdown is kept
   (``latestOffset``, ``queryPlanning``, ``addBatch``, ``walCommit``, ...), and the time
   from ``start()`` to the trigger's start (the source's initialisation);
2. **second query**: the same again in the same session, with a new checkpoint: what a
   query costs once the workers are warm.

Each query is stopped by the benchmark as soon as its first batch has been reported, and
checked to have read the whole topic. Results: the section "First micro-batch of a streaming
query" of ``BENCHMARKS.md`` (machine named, medians). Usage: ``python -m bench.first_batch
[--records N] [--partitions N] [--runs N] [--out F]``; progress on stderr.

Concurrency: the benchmark's main thread only.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.basics import progress
from bench.boundaries import produce
from bench.common import ROOT, commit, machine, replace_section
from bench.systems import MillraceSystem

HEADING = "## First micro-batch of a streaming query"
FORMATS = ("millrace", "kafka")
PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


@dataclass
class FirstBatch:
    """One query's first micro-batch: seconds from ``start()`` to the trigger's start and
    to the batch's end, and the batch's ``durationMs`` breakdown (ms)."""

    to_trigger: float
    to_end: float
    durations: dict[str, float] = field(default_factory=dict)


def _spark_time(stamp: str) -> float:
    """Epoch seconds of a progress ``timestamp`` (``2026-11-28T11:02:03.123Z``)."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def first_batch(spark: Any, fmt: str, bootstrap: str, topic: str, expected: int) -> FirstBatch:
    """Start a query of ``topic`` with ``fmt`` and return its first micro-batch's timing."""
    with tempfile.TemporaryDirectory(prefix="millrace-bench-first-") as ckpt:
        query = (
            spark.readStream.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(Path(ckpt) / "q"))
        )
        t0 = time.time()
        q = query.start()
        try:
            deadline = time.monotonic() + 120
            while not q.recentProgress:
                if q.exception() is not None:
                    raise SystemExit(f"the {fmt} query failed: {q.exception()}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"the {fmt} query reported no micro-batch in 120 s")
                time.sleep(0.01)
            first = q.recentProgress[0]
        finally:
            q.stop()
    rows = int(first["numInputRows"])
    if rows != expected:
        raise SystemExit(f"the {fmt} query's first micro-batch read {rows} rows, not {expected}")
    durations = {k: float(v) for k, v in first["durationMs"].items()}
    start = _spark_time(first["timestamp"])
    return FirstBatch(
        to_trigger=start - t0,
        to_end=start + durations["triggerExecution"] / 1000 - t0,
        durations=durations,
    )


def run(records: int, partitions: int, runs: int) -> dict[str, dict[str, list[FirstBatch]]]:
    """``{format: {"first"|"second": [FirstBatch per run]}}``."""
    from bench.spark_workload import session

    results: dict[str, dict[str, list[FirstBatch]]] = {
        f: {"first": [], "second": []} for f in FORMATS
    }
    with tempfile.TemporaryDirectory(prefix="millrace-bench-first-") as tmp:
        system = MillraceSystem(Path(tmp) / "millrace", brokers=1)
        try:
            topic = "first-batch"
            system.create_topic(topic, partitions, 1)
            progress(f"producing {records:,} records into {partitions} partitions")
            produce(system.bootstrap, topic, records)
            for i in range(runs):
                order = FORMATS if i % 2 == 0 else FORMATS[::-1]
                for fmt in order:
                    spark = session()
                    try:
                        for which in ("first", "second"):
                            fb = first_batch(spark, fmt, system.bootstrap, topic, records)
                            results[fmt][which].append(fb)
                            progress(
                                f"run {i + 1}/{runs} {fmt} {which} query: first batch done "
                                f"{fb.to_end:.2f} s after start() (trigger began at "
                                f"{fb.to_trigger:.2f} s)"
                            )
                    finally:
                        spark.stop()
        finally:
            system.stop()
    return results


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def section(results: dict[str, dict[str, list[FirstBatch]]], records: int, partitions: int) -> str:
    runs = len(results["millrace"]["first"])
    lines = [
        HEADING,
        "",
        f"Run of {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, "
        f"on {machine()}. `python -m bench.first_batch` (in `make bench`): one Millrace broker, "
        f"{records:,} records in {partitions} partitions; `readStream.format(F)` from the "
        'earliest offsets into `format("noop")`, each format in a fresh `SparkSession` '
        f"(`local[2]`), {runs} runs alternating which goes first; medians. Seconds from just "
        "before `start()` to the end of micro-batch 0 (its progress's timestamp plus "
        "`triggerExecution`); the *second* query runs in the same session after the first "
        "(warm Python workers).",
        "",
        '| | format("millrace") | format("kafka") | difference |',
        "|---|---:|---:|---:|",
    ]
    for which in ("first", "second"):
        m = _median([fb.to_end for fb in results["millrace"][which]])
        k = _median([fb.to_end for fb in results["kafka"][which]])
        lines.append(
            f"| {which} query: first batch done after | {m:.2f} s | {k:.2f} s | {m - k:+.2f} s |"
        )
    m = _median([fb.to_trigger for fb in results["millrace"]["first"]])
    k = _median([fb.to_trigger for fb in results["kafka"]["first"]])
    lines.append(f"| first query: trigger began after | {m:.2f} s | {k:.2f} s | {m - k:+.2f} s |")
    for phase in PHASES:
        m = _median([fb.durations.get(phase, 0.0) for fb in results["millrace"]["first"]])
        k = _median([fb.durations.get(phase, 0.0) for fb in results["kafka"]["first"]])
        lines.append(
            f"| first query, batch 0 `{phase}` | {m:.0f} ms | {k:.0f} ms | {m - k:+.0f} ms |"
        )
    target = _median([fb.to_end for fb in results["kafka"]["first"]]) + 0.3
    got = _median([fb.to_end for fb in results["millrace"]["first"]])
    lines += [
        "",
        f'Target (issue 31, 5): `format("millrace")` first batch <= the JVM source\'s + 0.3 s '
        f"= {target:.2f} s; measured {got:.2f} s: **{'met' if got <= target else 'not met'}**.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args(argv)
    for name in ("records", "partitions", "runs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    results = run(args.records, args.partitions, args.runs)
    text = section(results, args.records, args.partitions)
    replace_section(args.out, HEADING, text)
    print(text, file=sys.stderr)


if __name__ == "__main__":
    main()
