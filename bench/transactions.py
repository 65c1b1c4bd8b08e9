"""Transactions beside Apache Kafka: transactional produce and a read_committed catch-up read.

For 1 broker and for 3 brokers (topics RF=3, ``min.insync.replicas=2``), Millrace and Apache
Kafka 3.9.1 run side by side on this machine (Kafka on Millrace's ZooKeeper, as in
``bench.compare``), alternating which goes first. Workloads:

* **transactional produce**: one confluent-kafka producer with a ``transactional.id``
  commits transactions of ``--per-txn`` records of 100 bytes (``linger.ms=5``), one after
  the other, to a 1-partition topic; records/s over the whole run, and commits/s;
* **read_committed catch-up**: a ``read_committed`` confluent-kafka consumer reads that
  topic from offset 0 to its end (data batches interleaved with commit markers).

Each system's broker CPU seconds are measured around each workload. Writes the section
"Transactions beside Apache Kafka" of ``BENCHMARKS.md``.

Usage: ``python -m bench.transactions [--records N] [--per-txn N] [--runs N] [--out F]``.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.basics import RECORD
from bench.common import ROOT, machine, replace_section
from bench.compare import both, log, metered, orders
from bench.systems import KAFKA_VERSION, System

HEADING = "## Transactions beside Apache Kafka"


@dataclass(slots=True)
class Sample:
    system: str
    brokers: int
    produce_rate: float  # records/s
    commits_rate: float  # transactions/s
    produce_cpu: float  # broker CPU seconds
    read_rate: float  # records/s
    read_cpu: float


def transactional_produce(bootstrap: str, topic: str, records: int, per_txn: int) -> float:
    """Seconds to commit ``records`` records in transactions of ``per_txn``."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{topic}",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    p.init_transactions(60)
    start = time.perf_counter()
    sent = 0
    while sent < records:
        p.begin_transaction()
        n = min(per_txn, records - sent)
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, RECORD, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
        p.commit_transaction(60)
        sent += n
        if sent % (per_txn * 50) == 0:
            sys.stderr.write(f"\r    transactional produce {sent:,}/{records:,}")
    seconds = time.perf_counter() - start
    sys.stderr.write("\n")
    return seconds


def read_committed(bootstrap: str, topic: str, records: int) -> float:
    """Seconds for a read_committed consumer to read ``records`` records from offset 0."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-read-committed",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = start + 600
    try:
        while got < records and time.perf_counter() < deadline:
            got += sum(1 for m in c.consume(10_000, 1.0) if m.error() is None)
        seconds = time.perf_counter() - start
    finally:
        c.close()
    if got != records:
        raise SystemExit(f"read_committed read {got} of {records} records")
    return seconds


def measure(system: System, topic: str, args: argparse.Namespace, brokers: int) -> Sample:
    rf = min(3, brokers)
    system.create_topic(topic, 1, rf, {"min.insync.replicas": "2"} if rf == 3 else {})
    seconds, produce_use = metered(
        system, transactional_produce, system.bootstrap, topic, args.records, args.per_txn
    )
    read_s, read_use = metered(system, read_committed, system.bootstrap, topic, args.records)
    sample = Sample(
        system.name,
        brokers,
        args.records / seconds,
        args.records / args.per_txn / seconds,
        produce_use.cpu_s,
        args.records / read_s,
        read_use.cpu_s,
    )
    log(
        f"  {system.name:<8} {brokers} broker(s): {sample.produce_rate:,.0f} rec/s "
        f"({sample.commits_rate:,.1f} txn/s), read_committed {sample.read_rate:,.0f} rec/s"
    )
    return sample


def write_report(out: Path, args: argparse.Namespace, samples: list[Sample]) -> None:
    rows = []
    for brokers in sorted({s.brokers for s in samples}):

        def med(system: str, field: str, brokers: int = brokers) -> float:
            values = [
                getattr(s, field) for s in samples if s.system == system and s.brokers == brokers
            ]
            return statistics.median(values)

        for label, field, unit in (
            ("transactional produce", "produce_rate", "records/s"),
            ("commits", "commits_rate", "transactions/s"),
            ("read_committed catch-up", "read_rate", "records/s"),
        ):
            k, m = med("Kafka", field), med("Millrace", field)
            rows.append(f"| {brokers} | {label} ({unit}) | {k:,.0f} | {m:,.0f} | **{m / k:.2f}** |")
        k_cpu, m_cpu = med("Kafka", "produce_cpu"), med("Millrace", "produce_cpu")
        rows.append(
            f"| {brokers} | broker CPU s while producing | {k_cpu:.1f} | {m_cpu:.1f} | "
            f"{m_cpu / max(k_cpu, 1e-9):.2f} |"
        )
    table = "\n".join(rows)
    section = f"""{HEADING}

Millrace and Apache Kafka {KAFKA_VERSION} side by side on one machine (Kafka on Millrace's
ZooKeeper; 3-broker runs with RF=3 and `min.insync.replicas=2`), confluent-kafka
{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]}) as the client,
{args.runs} runs each, medians; run {datetime.date.today().isoformat()} on: {machine()}.

A transactional producer commits {args.records:,} records of 100 bytes in transactions of
{args.per_txn:,} (begin, produce, commit, one after the other: each commit waits for the
coordinator's PrepareCommit write, and the markers are written before the next transaction
may start), then a `read_committed` consumer reads them back from offset 0.

| brokers | measure | Kafka | Millrace | Millrace / Kafka |
|---:|---|---:|---:|---:|
{table}

Reproduce: `.venv/bin/python -m bench.transactions --records {args.records} --per-txn
{args.per_txn} --runs {args.runs}` (`make bench` runs it).
"""
    replace_section(out, HEADING, section)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.transactions", description=__doc__)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--per-txn", type=int, default=1000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--brokers", type=int, nargs="+", default=[1, 3])
    p.add_argument("--warm-up", type=int, default=200_000)
    p.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = p.parse_args(argv)
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="millrace-bench-txn-") as tmp:
        for brokers in args.brokers:
            with both(Path(tmp) / f"b{brokers}", brokers, args.warm_up) as systems:
                seq = 0
                for r, order in orders(systems, args.runs):
                    for s in order:
                        seq += 1
                        log(f"[transactions] {brokers} broker(s) run {r + 1}/{args.runs} {s.name}")
                        samples.append(measure(s, f"txn-{s.name.lower()}-{seq}", args, brokers))
    write_report(Path(args.out), args, samples)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
