"""End-to-end latency with Kafka's own ``EndToEndLatency`` tool, Millrace beside Apache Kafka
(issue 31, target 2).

``org.apache.kafka.tools.EndToEndLatency`` (from the Kafka 3.9.1 jars ``make setup`` fetched)
runs a Java producer and a Java consumer in one process: it sends one record, polls until the
consumer has it, and only then sends the next, ``--messages`` times; it prints the average
round trip in milliseconds (to 4 decimals) and the 50th, 99th and 99.9th percentiles (whole
milliseconds: the tool truncates each latency to a millisecond). One broker each
(``bench.compare.both``: Kafka on Millrace's ZooKeeper, both warmed up), a 1-partition topic,
``acks=1``, ``--size``-byte records; ``--runs`` runs alternating which system goes first,
medians.

Results: the section "End-to-end latency with Kafka's EndToEndLatency" of ``BENCHMARKS.md``
(machine named). Usage: ``python -m bench.e2e_tool [--messages N] [--size N] [--runs N]
[--out F]``; progress on stderr.

Concurrency: the benchmark's main thread only.
"""

from __future__ import annotations

import argparse
import datetime
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.basics import progress
from bench.common import ROOT, commit, machine, replace_section
from bench.compare import both, orders
from bench.systems import KAFKA_VERSION, System, java_tool

HEADING = "## End-to-end latency with Kafka's EndToEndLatency"
TOOL = "org.apache.kafka.tools.EndToEndLatency"


@dataclass
class ToolRun:
    """One run of the tool: the average (ms) and the percentiles (whole ms) it printed."""

    system: str
    avg_ms: float
    p50_ms: float
    p99_ms: float
    p999_ms: float


_AVG = re.compile(r"Avg latency:\s*([0-9.]+)\s*ms")
_PCT = re.compile(
    r"Percentiles:\s*50th\s*=\s*([0-9.]+),\s*99th\s*=\s*([0-9.]+),\s*99\.9th\s*=\s*([0-9.]+)"
)


def parse(system: str, output: str) -> ToolRun:
    """The figures of the tool's output; exits naming the output if it has none."""
    avg = _AVG.search(output)
    pct = _PCT.search(output)
    if avg is None or pct is None:
        raise SystemExit(f"{TOOL} printed no latencies:\n{output[-2000:]}")
    return ToolRun(system, float(avg[1]), float(pct[1]), float(pct[2]), float(pct[3]))


def run_tool(system: System, topic: str, messages: int, size: int) -> ToolRun:
    out = java_tool(TOOL, system.bootstrap, topic, str(messages), "1", str(size))
    r = parse(system.name, out)
    progress(f"{system.name}: avg {r.avg_ms:.4f} ms, p50 {r.p50_ms:g}, p99 {r.p99_ms:g}\n")
    return r


def section(runs: list[ToolRun], args: argparse.Namespace) -> str:
    def med(system: str, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs if r.system == system)

    n = len([r for r in runs if r.system == "Kafka"])
    lines = [
        HEADING,
        "",
        f"Run of {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, "
        f"on {machine()}. `python -m bench.e2e_tool` (in `make bench`): Kafka {KAFKA_VERSION}'s "
        f"`{TOOL}` (one record at a time: send, poll until consumed, next; `acks=1`, "
        f"{args.size}-byte records, {args.messages:,} per run) against one broker of each "
        f"system, a 1-partition topic; {n} runs alternating which system goes first, medians. "
        "The tool truncates each latency to a whole millisecond for its percentiles; its "
        "average is exact.",
        "",
        "| | Kafka | Millrace | Millrace / Kafka |",
        "|---|---:|---:|---:|",
    ]
    for label, attr in (
        ("average, ms", "avg_ms"),
        ("p50, ms (whole ms)", "p50_ms"),
        ("p99, ms (whole ms)", "p99_ms"),
        ("p99.9, ms (whole ms)", "p999_ms"),
    ):
        k, m = med("Kafka", attr), med("Millrace", attr)
        ratio = f"**{m / k:.2f}**" if k > 0 else "-"
        lines.append(f"| {label} | {k:.4g} | {m:.4g} | {ratio} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warm-up", type=int, default=200_000, help="records of the warm-up")
    ap.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args(argv)
    if args.messages < 1 or args.size < 1 or args.runs < 1:
        ap.error("--messages, --size and --runs must be positive")
    runs: list[ToolRun] = []
    with (
        tempfile.TemporaryDirectory(prefix="millrace-bench-e2e-tool-") as tmp,
        both(Path(tmp), 1, args.warm_up) as systems,
    ):
        for system in systems:
            system.create_topic("e2e-tool", 1, 1)
            run_tool(system, "e2e-tool", min(args.messages, 1000), args.size)  # warm-up
        for _r, order in orders(systems, args.runs):
            for system in order:
                runs.append(run_tool(system, "e2e-tool", args.messages, args.size))
    text = section(runs, args)
    replace_section(args.out, HEADING, text)
    print(text, file=sys.stderr)


if __name__ == "__main__":
    main()
