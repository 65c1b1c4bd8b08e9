"""Produce and consume over TLS, Millrace beside Apache Kafka (issue 28).

One broker of each, on one machine (Kafka on Millrace's ZooKeeper, as ``bench.compare``),
each with two listeners: PLAINTEXT and SSL (a PEM key store made with ``cryptography``,
TLS 1.3, no client certificate). confluent-kafka produces ``--records`` records of 100 bytes
(``acks=1``, ``linger.ms=5``) to a 1-partition topic, then a consumer reads them back from
offset 0; over each listener, alternating which system goes first, ``--runs`` runs, medians.
Under TLS Kafka loses zero-copy ``sendfile`` and so does Millrace (its log bytes are copied
through the SSL object); plaintext keeps it.

Writes the section "TLS beside Apache Kafka" of ``BENCHMARKS.md``.

Usage: ``python -m bench.tls [--records N] [--runs N] [--out F]``. Progress to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka

from bench import loadgen
from bench.common import ROOT, machine, replace_section
from bench.compare import log, metered, orders, warm_up
from bench.systems import KAFKA_VERSION, KafkaSystem, MillraceSystem, System

HEADING = "## TLS beside Apache Kafka"


@dataclass(slots=True)
class Sample:
    system: str
    listener: str
    produce_rate: float
    produce_cpu: float
    consume_rate: float
    consume_cpu: float


def tls_settings(directory: Path) -> tuple[dict[str, str], str]:
    """(the brokers' SSL settings, the CA file clients trust)."""
    from broker.security.certificates import issue, make_ca

    ca = make_ca(directory)
    cert = issue(directory, "broker", "broker", server=True)
    return (
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(cert.keystore),
            "ssl.enabled.protocols": "TLSv1.3,TLSv1.2",
        },
        str(ca),
    )


def measure(system: System, listener: str, ca: str, records: int, seq: int) -> Sample:
    tls = listener == "SSL"
    bootstrap = system.ssl_bootstrap if tls else system.bootstrap  # type: ignore[attr-defined]
    client = {"security.protocol": "SSL", "ssl.ca.location": ca} if tls else {}
    topic = f"tls-{system.name.lower()}-{listener.lower()}-{seq}"
    system.create_topic(topic, 1, 1)
    produced, p_use = metered(
        system, loadgen.produce, bootstrap, topic, records, {"acks": 1, **client}
    )
    consumed, c_use = metered(system, _consume, bootstrap, topic, records, client)
    sample = Sample(
        system.name,
        listener,
        records / produced.seconds,
        p_use.cpu_s,
        records / consumed,
        c_use.cpu_s,
    )
    log(
        f"  {system.name:<8} {listener:<9} produce {sample.produce_rate:,.0f} rec/s, "
        f"consume {sample.consume_rate:,.0f} rec/s"
    )
    return sample


def _consume(bootstrap: str, topic: str, n: int, client: dict[str, str]) -> float:
    import time

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-tls",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            **client,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    t0 = time.perf_counter()
    try:
        while got < n and time.perf_counter() < t0 + 600:
            got += sum(1 for m in c.consume(10_000, 1.0) if m.error() is None)
        seconds = time.perf_counter() - t0
    finally:
        c.close()
    if got != n:
        raise SystemExit(f"{topic}: consumed {got} of {n}")
    return seconds


def write_report(out: Path, args: argparse.Namespace, samples: list[Sample]) -> None:
    def med(system: str, listener: str, field: str) -> float:
        return statistics.median(
            getattr(s, field) for s in samples if s.system == system and s.listener == listener
        )

    rows = []
    for label, field in (
        ("produce (records/s)", "produce_rate"),
        ("consume (records/s)", "consume_rate"),
    ):
        k_tls, m_tls = med("Kafka", "SSL", field), med("Millrace", "SSL", field)
        k_pt, m_pt = med("Kafka", "PLAINTEXT", field), med("Millrace", "PLAINTEXT", field)
        rows.append(
            f"| {label} | {k_pt:,.0f} | {k_tls:,.0f} | {m_pt:,.0f} | {m_tls:,.0f} | "
            f"**{m_tls / k_tls:.2f}** | {k_tls / k_pt:.2f} | {m_tls / m_pt:.2f} |"
        )
    for label, field in (
        ("broker CPU s, produce", "produce_cpu"),
        ("broker CPU s, consume", "consume_cpu"),
    ):
        k_tls, m_tls = med("Kafka", "SSL", field), med("Millrace", "SSL", field)
        k_pt, m_pt = med("Kafka", "PLAINTEXT", field), med("Millrace", "PLAINTEXT", field)
        rows.append(
            f"| {label} | {k_pt:.2f} | {k_tls:.2f} | {m_pt:.2f} | {m_tls:.2f} | "
            f"{m_tls / max(k_tls, 1e-9):.2f} | {k_tls / max(k_pt, 1e-9):.2f} | "
            f"{m_tls / max(m_pt, 1e-9):.2f} |"
        )
    table = "\n".join(rows)
    section = f"""{HEADING}

Millrace and Apache Kafka {KAFKA_VERSION}, one broker each, side by side on one machine, each
with a PLAINTEXT and an SSL listener (PEM key store, TLS 1.3, server authentication only);
confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})
produces {args.records:,} records of 100 bytes (`acks=1`, `linger.ms=5`) to one partition, then
reads them back from offset 0; {args.runs} runs over each listener, medians; run
{datetime.date.today().isoformat()} on: {machine()}. Under TLS neither broker can send log bytes
with `sendfile` (Millrace copies them through Python's SSL object; plaintext keeps zero-copy).

| measure | Kafka plaintext | Kafka TLS | Millrace plaintext | Millrace TLS | Millrace / Kafka, TLS | Kafka TLS / plaintext | Millrace TLS / plaintext |
|---|---:|---:|---:|---:|---:|---:|---:|
{table}

Reproduce: `.venv/bin/python -m bench.tls --records {args.records} --runs {args.runs}`
(`make bench` runs it).
"""
    replace_section(out, HEADING, section)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tls", description=__doc__)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warm-up", type=int, default=200_000)
    p.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = p.parse_args(argv)
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="millrace-bench-tls-") as tmp:
        settings, ca = tls_settings(Path(tmp) / "pki")
        log("starting Millrace (1 broker, PLAINTEXT + SSL listeners)")
        millrace = MillraceSystem(Path(tmp) / "millrace", 1, ssl=settings)
        try:
            log(f"starting Apache Kafka {KAFKA_VERSION} (1 broker, PLAINTEXT + SSL listeners)")
            kafka = KafkaSystem(Path(tmp) / "kafka", 1, millrace.zk_connect, ssl=settings)
            try:
                systems: list[System] = [kafka, millrace]
                for system in systems:
                    warm_up(system, args.warm_up)
                seq = 0
                for r, order in orders(systems, args.runs):
                    for listener in ("PLAINTEXT", "SSL"):
                        for s in order:
                            seq += 1
                            log(f"[tls] run {r + 1}/{args.runs} {s.name} {listener}")
                            samples.append(measure(s, listener, ca, args.records, seq))
            finally:
                kafka.stop()
        finally:
            millrace.stop()
    write_report(Path(args.out), args, samples)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
