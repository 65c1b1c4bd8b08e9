"""Single-broker throughput benchmark (the foundation issue's target).

Starts a one-broker Millrace cluster, produces N records of 100 bytes with confluent-kafka
(``linger.ms=5``, acks=1) into one partition, then consumes them back, and measures
records/s, MB/s and the broker's CPU share (CPU seconds of the broker process from
``/proc/<pid>/stat`` divided by wall time) for each phase. Each run uses a fresh topic;
the figures reported are the medians of ``--runs`` runs. Results are written to
``BENCHMARKS.md`` (section "Single broker") with the machine described.

Usage: ``python bench/single_broker.py [--records 1000000] [--runs 3] [--out BENCHMARKS.md]``
(``make bench`` runs it with the defaults).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
RECORD = b"x" * 100
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    records: int
    seconds: float
    broker_cpu_s: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def mb_s(self) -> float:
        return self.records * len(RECORD) / self.seconds / 1e6

    @property
    def cpu_share(self) -> float:
        return self.broker_cpu_s / self.seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def millrace(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "broker.cli.main", *args],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_cluster(
    cluster_dir: Path, brokers: int = 1, settings: dict[str, str] | None = None
) -> str:
    """``millrace cluster up`` with ``brokers`` brokers on consecutive free ports and the
    broker ``settings``; returns the bootstrap servers."""
    base = free_port()
    while not all(_port_free(base + i) for i in range(1, brokers)):
        base = free_port()
    sets = [arg for k, v in (settings or {}).items() for arg in ("--set", f"{k}={v}")]
    out = millrace(
        "cluster",
        "up",
        "--dir",
        str(cluster_dir),
        "--brokers",
        str(brokers),
        "--base-port",
        str(base),
        "--zk-port",
        str(free_port()),
        *sets,
    )
    return out.strip().splitlines()[-1]


def progress(text: str) -> None:
    sys.stderr.write(f"\r{text:<78}")
    sys.stderr.flush()


def produce(
    bootstrap: str,
    topic: str,
    n: int,
    pids: list[int],
    extra: dict[str, object] | None = None,
) -> Phase:
    """``n`` records of RECORD into partition 0 (linger.ms=5, acks=1 unless ``extra`` says
    otherwise); broker CPU summed over ``pids``."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": 1,
            "queue.buffering.max.messages": 1_000_000,
            **(extra or {}),
        }
    )
    failures: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    def cpu() -> float:
        return sum(cpu_seconds(pid) for pid in pids)

    cpu0, t0 = cpu(), time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, RECORD, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.005)
        if i % 50_000 == 0:
            p.poll(0)
            progress(f"  {topic}: produced {i:,}/{n:,}")
    if p.flush(600) != 0 or failures:
        raise SystemExit(f"{topic}: produce failed: {len(failures)} errors, e.g. {failures[:1]}")
    seconds = time.perf_counter() - t0
    return Phase(n, seconds, cpu() - cpu0)


def consume(bootstrap: str, topic: str, n: int, pid: int) -> Phase:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    deadline = t0 + 600
    while got < n and time.perf_counter() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
        progress(f"  consume {got:,}/{n:,}")
    seconds = time.perf_counter() - t0
    c.close()
    if got != n:
        raise SystemExit(f"consumed {got} of {n} records")
    return Phase(n, seconds, cpu_seconds(pid) - cpu0)


def machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return (
        f"{model}, {os.cpu_count()} cores, {mem_kb / 2**20:.0f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="millrace-bench-") as tmp:
        cluster_dir = Path(tmp) / "cluster"
        sys.stderr.write(f"starting a 1-broker cluster in {cluster_dir}\n")
        bootstrap = start_cluster(cluster_dir)
        try:
            import json

            pid = int(json.loads((cluster_dir / "cluster.json").read_text())["brokers"][0]["pid"])
            produced: list[Phase] = []
            consumed: list[Phase] = []
            for run in range(args.runs):
                topic = f"bench-{run}"
                millrace(
                    "topics",
                    "create",
                    "--bootstrap-server",
                    bootstrap,
                    "--topic",
                    topic,
                    "--partitions",
                    "1",
                    "--replication-factor",
                    "1",
                )
                produced.append(produce(bootstrap, topic, args.records, [pid]))
                consumed.append(consume(bootstrap, topic, args.records, pid))
                progress(
                    f"  run {run + 1}/{args.runs}: produce {produced[-1].rate:,.0f} rec/s, "
                    f"consume {consumed[-1].rate:,.0f} rec/s"
                )
                sys.stderr.write("\n")
        finally:
            millrace("cluster", "down", "--dir", str(cluster_dir))
    write_report(Path(args.out), args, produced, consumed)
    sys.stderr.write(f"wrote {args.out}\n")
    return 0


def _median(phases: list[Phase], attr: str) -> float:
    return statistics.median(getattr(p, attr) for p in phases)


def write_report(
    out: Path, args: argparse.Namespace, produced: list[Phase], consumed: list[Phase]
) -> None:
    rows = []
    for name, phases in (
        ("produce (acks=1, linger.ms=5)", produced),
        ("consume (catch-up read)", consumed),
    ):
        rows.append(
            f"| {name} | {_median(phases, 'rate'):,.0f} | {_median(phases, 'mb_s'):.1f} | "
            f"{_median(phases, 'cpu_share') * 100:.0f}% | "
            + ", ".join(f"{p.rate:,.0f}" for p in phases)
            + " |"
        )
    section = f"""## Single broker

{args.records:,} records of 100 bytes, one partition, one broker, confluent-kafka
{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]}) as the client, run
{datetime.date.today().isoformat()} on: {machine()}. Client and broker share the machine.
Medians of {args.runs} runs; "broker CPU" is the broker process's CPU time divided by wall
time (100% = one core).

| workload | records/s | MB/s | broker CPU | each run (records/s) |
|---|---:|---:|---:|---|
{chr(10).join(rows)}

Reproduce: `make bench` (or `.venv/bin/python bench/single_broker.py --records {args.records} --runs {args.runs}`).
The comparison with Apache Kafka on the same machine comes with the benchmark issue.
"""
    replace_section(out, "## Single broker", section)


def replace_section(out: Path, heading: str, section: str) -> None:
    """Write ``section`` (starting with ``heading``) into the report ``out``, replacing the
    section of that heading if present, keeping every other section."""
    existing = out.read_text() if out.exists() else "# Benchmarks\n"
    if heading in existing:
        before, _, rest = existing.partition(heading)
        after = rest.split("\n## ", 1)
        existing = before + section + (("\n## " + after[1]) if len(after) > 1 else "")
    else:
        existing = existing.rstrip("\n") + "\n\n" + section
    out.write_text(existing)


if __name__ == "__main__":
    raise SystemExit(main())
