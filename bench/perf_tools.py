"""Kafka's own perf tools (``kafka-producer-perf-test``, ``kafka-consumer-perf-test``), run
unchanged from Kafka 3.9.1's jars against either system, and the parsers of their output.

``ProducerPerformance`` prints, as its last line::

    1000000 records sent, 341000.5 records/sec (32.52 MB/sec), 50.10 ms avg latency,
    300.00 ms max latency, 45 ms 50th, 120 ms 95th, 150 ms 99th, 160 ms 99.9th.

``ConsumerPerformance`` prints a header and one CSV line::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec

``nMsg.sec`` includes the group's join time; ``fetch.nMsg.sec`` excludes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.systems import java_tool

PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"

_PRODUCER_LINE = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)


@dataclass(frozen=True, slots=True)
class ProducerPerf:
    records: int
    records_s: float
    mb_s: float  # MiB/s as the tool prints it (1024 * 1024 bytes)
    avg_ms: float
    max_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float


@dataclass(frozen=True, slots=True)
class ConsumerPerf:
    mb: float
    mb_s: float
    records: int
    records_s: float
    rebalance_ms: float
    fetch_ms: float
    fetch_mb_s: float
    fetch_records_s: float


def parse_producer_perf(output: str) -> ProducerPerf:
    """The summary (last matching line) of ``ProducerPerformance``'s output."""
    matches = list(_PRODUCER_LINE.finditer(output))
    if not matches:
        raise ValueError(f"no ProducerPerformance summary in: {output[-500:]!r}")
    m = matches[-1]
    return ProducerPerf(
        records=int(m["records"]),
        records_s=float(m["rate"]),
        mb_s=float(m["mb"]),
        avg_ms=float(m["avg"]),
        max_ms=float(m["max"]),
        p50_ms=float(m["p50"]),
        p95_ms=float(m["p95"]),
        p99_ms=float(m["p99"]),
        p999_ms=float(m["p999"]),
    )


def parse_consumer_perf(output: str) -> ConsumerPerf:
    """The CSV line after ``ConsumerPerformance``'s header."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("start.time") and i + 1 < len(lines):
            header = [h.strip() for h in line.split(",")]
            values = [v.strip() for v in lines[i + 1].split(",")]
            row = dict(zip(header, values, strict=False))
            return ConsumerPerf(
                mb=float(row["data.consumed.in.MB"]),
                mb_s=float(row["MB.sec"]),
                records=int(row["data.consumed.in.nMsg"]),
                records_s=float(row["nMsg.sec"]),
                rebalance_ms=float(row["rebalance.time.ms"]),
                fetch_ms=float(row["fetch.time.ms"]),
                fetch_mb_s=float(row["fetch.MB.sec"]),
                fetch_records_s=float(row["fetch.nMsg.sec"]),
            )
    raise ValueError(f"no ConsumerPerformance result in: {output[-500:]!r}")


def producer_perf_args(
    bootstrap: str,
    topic: str,
    records: int,
    record_size: int = 100,
    props: dict[str, str] | None = None,
    throughput: int = -1,
) -> list[str]:
    producer_props = {"bootstrap.servers": bootstrap, **(props or {})}
    return [
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(record_size),
        "--throughput",
        str(throughput),
        "--producer-props",
        *(f"{k}={v}" for k, v in producer_props.items()),
    ]


def producer_perf(
    bootstrap: str,
    topic: str,
    records: int,
    record_size: int = 100,
    props: dict[str, str] | None = None,
    throughput: int = -1,
) -> ProducerPerf:
    """``kafka-producer-perf-test`` with these arguments; the tool's own summary."""
    out = java_tool(
        PRODUCER_PERF,
        *producer_perf_args(bootstrap, topic, records, record_size, props, throughput),
    )
    result = parse_producer_perf(out)
    if result.records != records:
        raise SystemExit(f"ProducerPerformance sent {result.records} of {records} records")
    return result


def consumer_perf(bootstrap: str, topic: str, records: int, group: str) -> ConsumerPerf:
    """``kafka-consumer-perf-test`` reading ``records`` from the start of ``topic``."""
    out = java_tool(
        CONSUMER_PERF,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--group",
        group,
        "--timeout",
        "60000",
    )
    result = parse_consumer_perf(out)
    if result.records < records:
        raise SystemExit(f"ConsumerPerformance read {result.records} of {records} records")
    return result
