"""The Spark read path against its ceiling (issue 31, target 7): ``format("millrace")``
``count()`` and ``noop`` reads beside the same two queries over an in-memory Arrow Python
data source that yields rows in the same schema without a broker or any decoding
(``bench.spark_workload``'s ``millrace-bench-arrow``, the same 10,000-row batch again and
again): what Spark itself costs to ingest the rows from a Python data source on this
machine.

What runs: one Millrace broker, a topic of ``--records`` records (100-byte values) in 2
partitions loaded by ``kafka-producer-perf-test`` (acks=1, no compression), one
``SparkSession`` (``local[2]``), each query run once unmeasured, then ``--runs`` rounds of
the four queries (the two ceilings, the two reads). Per query: wall seconds, the machine's
CPU seconds (``/proc/stat``: Spark's JVM, its Python workers and the broker together, on a
machine with nothing else running) and the broker's own user and system CPU seconds
(``/proc/<pid>/stat``). Medians over the rounds.

The target: each read's rate >= 0.8x its ceiling's. The CPU columns say where a shortfall
goes: the read's CPU seconds over the ceiling's are the fetch, the decoding and the broker
(whose system time is the loopback TCP transfer of the log bytes, sent with ``sendfile``).

Results: the section "The Spark read path against its ceiling" of ``BENCHMARKS.md`` (or
``--out``), machine and commit named. Usage: ``python -m bench.read_ceiling [--records N]
[--runs N] [--out F]``; progress on stderr. Concurrency: the benchmark's main thread only.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import perf_tools
from bench.basics import progress
from bench.common import ROOT, commit, machine, replace_section
from bench.systems import MillraceSystem

HEADING = "## The Spark read path against its ceiling"
TOPIC = "read-ceiling"
CASES = (
    "ceiling count",
    "millrace count",
    "millrace count over TCP",
    "ceiling noop",
    "millrace noop",
    "millrace noop over TCP",
)
OVER_TCP = {"localReads": "false"}
"""The read option of the "over TCP" cases: no short-circuit reads of the leader's files."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGET = 0.8


@dataclass(frozen=True)
class Sample:
    """One query: wall seconds, the machine's CPU seconds, the broker's user and system."""

    wall: float
    cpu: float
    broker_user: float
    broker_sys: float


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine so far (``/proc/stat``, idle and iowait out)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK


def process_cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def measured(fn: Callable[[], Any], broker_pid: int) -> Sample:
    cpu0, (u0, s0), t0 = machine_cpu(), process_cpu(broker_pid), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    u1, s1 = process_cpu(broker_pid)
    return Sample(wall, machine_cpu() - cpu0, u1 - u0, s1 - s0)


def queries(spark: Any, bootstrap: str, n: int) -> dict[str, Callable[[], Any]]:
    """The four queries, each checking that it saw all ``n`` rows where it can."""
    from bench import spark_workload as sw

    spark.dataSource.register(sw.InMemoryArrowSource)

    def arrow() -> Any:
        return spark.read.format("millrace-bench-arrow").option("rows", n).load()

    def check(got: int, what: str) -> None:
        if got != n:
            raise SystemExit(f"{what} counted {got:,} rows, expected {n:,}")

    return {
        "ceiling count": lambda: check(arrow().count(), "the in-memory Arrow source"),
        "millrace count": lambda: sw.count(spark, "millrace", bootstrap, TOPIC, n),
        "millrace count over TCP": lambda: sw.count(
            spark, "millrace", bootstrap, TOPIC, n, OVER_TCP
        ),
        "ceiling noop": lambda: arrow().write.format("noop").mode("overwrite").save(),
        "millrace noop": lambda: sw.noop(spark, "millrace", bootstrap, TOPIC),
        "millrace noop over TCP": lambda: sw.noop(spark, "millrace", bootstrap, TOPIC, OVER_TCP),
    }


def run(records: int, runs: int) -> dict[str, list[Sample]]:
    from bench import spark_workload as sw

    results: dict[str, list[Sample]] = {c: [] for c in CASES}
    with tempfile.TemporaryDirectory(prefix="millrace-read-ceiling-", dir=ROOT / ".cache") as tmp:
        millrace = MillraceSystem(Path(tmp) / "millrace", 1, None)
        try:
            millrace.create_topic(TOPIC, 2, 1)
            progress(f"loading {records:,} records")
            perf_tools.producer_perf(millrace.bootstrap, TOPIC, records, props={"acks": "1"})
            spark = sw.session()
            try:
                qs = queries(spark, millrace.bootstrap, records)
                for case in CASES:
                    progress(f"warm-up: {case}")
                    qs[case]()
                for r in range(runs):
                    for case in CASES:
                        progress(f"round {r + 1}/{runs}: {case}")
                        results[case].append(measured(qs[case], millrace.pids[0]))
            finally:
                spark.stop()
        finally:
            millrace.stop()
    progress("")
    return results


def _median(samples: list[Sample], attr: str) -> float:
    return statistics.median(getattr(s, attr) for s in samples)


def section(results: dict[str, list[Sample]], records: int, runs: int) -> str:
    lines = [
        HEADING,
        "",
        f"Run of {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, "
        f"on {machine()}. `python -m bench.read_ceiling --records {records} --runs {runs}` "
        "(in `make bench`): one Millrace broker, a 2-partition topic of 100-byte records, "
        "Spark `local[2]`; the ceiling is an in-memory Arrow Python data source yielding the "
        "same rows in the same schema (no broker, no decoding). Medians of "
        f"{runs} rounds. CPU: the whole machine's busy seconds during the query (Spark's JVM, "
        "its Python workers and the broker; nothing else runs), and the broker's own. "
        '`format("millrace")` reads the leader\'s segment files itself (short-circuit reads, '
        "the default on the leader's machine); *over TCP* is the same read with "
        "`localReads=false`, the records sent over loopback as from a broker on another "
        "machine.",
        "",
        "| query | rows/s | seconds | machine CPU s | broker CPU s (user + system) |",
        "|---|---:|---:|---:|---:|",
    ]
    for case in CASES:
        s = results[case]
        wall = _median(s, "wall")
        user, sys_ = _median(s, "broker_user"), _median(s, "broker_sys")
        lines.append(
            f"| {case} | {records / wall:,.0f} | {wall:.2f} | {_median(s, 'cpu'):.2f} | "
            f"{user + sys_:.2f} ({user:.2f} + {sys_:.2f}) |"
        )
    lines.append("")
    for kind in ("count", "noop"):
        ceiling = _median(results[f"ceiling {kind}"], "wall")
        ratio = ceiling / _median(results[f"millrace {kind}"], "wall")
        tcp = ceiling / _median(results[f"millrace {kind} over TCP"], "wall")
        verdict = "met" if ratio >= TARGET else "not met"
        lines.append(
            f'- {kind}: `format("millrace")` at **{ratio:.2f}x** its ceiling\'s rate '
            f"(target {TARGET}x: {verdict}); over TCP {tcp:.2f}x"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args(argv)
    for name in ("records", "runs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    results = run(args.records, args.runs)
    text = section(results, args.records, args.runs)
    replace_section(args.out, HEADING, text)
    print(text, file=sys.stderr)


if __name__ == "__main__":
    main()
