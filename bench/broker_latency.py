"""The broker's own share of end-to-end latency, Millrace beside Apache Kafka, without a
client library in the way.

Workload 4 of ``bench.compare`` measures what a confluent-kafka consumer sees of records a
confluent-kafka producer sends: that includes librdkafka's threads in both client processes,
which share this machine's cores with the broker. This probe takes the clients out: two
plain sockets speak the protocol directly. One parks a long-poll Fetch (v11,
``max_wait_ms`` 500, ``min_bytes`` 1) at the log end of a 1-partition topic; the other then
sends a Produce (v7, acks=1) of one 10-record batch of 100-byte values. The figure is the
time from sending the produce to having read the whole fetch response that carries the
batch: the broker's receive, decode, append, wake of the parked fetch, read, encode and send,
plus loopback. The produce's own response is read afterwards. Each pair starts after the
previous one ended, so at most one request per socket is in flight.

Both systems run side by side (``bench.compare.both``: Kafka on Millrace's ZooKeeper, both
warmed up with ``--warm-up`` records), in ``--rounds`` rounds alternating which goes first,
each round ``--pairs`` measured pairs after 500 unmeasured ones. Also reported: the broker's
CPU time per pair (``/proc``; all of its threads). Output: Markdown on stdout and in
``benchmarks/broker-latency.md``; progress on stderr. Reproduce:
``.venv/bin/python -m bench.broker_latency``.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.basics import progress
from bench.common import ROOT, commit, machine
from bench.compare import both, orders
from bench.plain_produce import PRODUCE_VERSION, connect, produce_request, receive, request_frame
from bench.procstat import cpu_seconds
from bench.systems import System
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.records import SimpleRecord, encode_batch

FETCH_VERSION = 11
CLIENT_ID = b"bench-latency"
WARM_PAIRS = 500
PARK_S = 0.0003  # time for the fetch to reach the broker and park before the produce


@dataclass
class Probe:
    system: str
    latencies_us: list[float]
    cpu_us_per_pair: float

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_us)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def _produce_body(topic: str) -> bytes:
    now = int(time.time() * 1000)
    batch = encode_batch([SimpleRecord(b"v" * 100, None, now) for _ in range(10)])
    return produce_request(topic, batch, acks=1)


def _fetch_body(topic: str, offset: int) -> bytes:
    cls = registry.request_class(ApiKey.FETCH, FETCH_VERSION)
    part = registry.build(
        registry.nested(cls, "FetchPartition"),
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return registry.encode(
        registry.build(
            cls,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=500),
            min_bytes=1,
            max_bytes=50 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                registry.build(registry.nested(cls, "FetchTopic"), topic=topic, partitions=(part,)),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
    )


def probe(system: System, pairs: int, round_no: int) -> Probe:
    """``pairs`` measured produce -> woken-fetch round trips against ``system``."""
    topic = f"broker-latency-{round_no}-{time.time_ns()}"
    system.create_topic(topic, 1, 1)
    host, port = system.bootstrap.rsplit(":", 1)
    producer, fetcher = connect(host, int(port)), connect(host, int(port))
    produce = _produce_body(topic)
    pid = system.pids[0]
    latencies: list[float] = []
    offset = 0
    cpu0 = 0.0
    try:
        for i in range(WARM_PAIRS + pairs):
            if i == WARM_PAIRS:
                cpu0 = cpu_seconds(pid)
            fetch = _fetch_body(topic, offset)
            fetcher.sendall(request_frame(ApiKey.FETCH, FETCH_VERSION, i, fetch, CLIENT_ID))
            time.sleep(PARK_S)
            start = time.perf_counter()
            producer.sendall(request_frame(ApiKey.PRODUCE, PRODUCE_VERSION, i, produce, CLIENT_ID))
            response = receive(fetcher, i)
            took = time.perf_counter() - start
            receive(producer, i)
            if len(response) < 600:  # no batch in it: the fetch did not wait for this produce
                raise SystemExit(f"{system.name}: fetch {i} came back without the batch")
            offset += 10
            if i >= WARM_PAIRS:
                latencies.append(took * 1e6)
            if i % 1000 == 0:
                progress(f"    {system.name}: {i:,}/{WARM_PAIRS + pairs:,}")
        cpu = cpu_seconds(pid) - cpu0
    finally:
        producer.close()
        fetcher.close()
    return Probe(system.name, latencies, cpu / pairs * 1e6)


def report(probes: list[Probe], args: argparse.Namespace) -> str:
    lines = [
        "# The broker's share of end-to-end latency (`python -m bench.broker_latency`)",
        "",
        (__doc__ or "").split("\n\n")[1].replace("\n", " ").replace("``", "`"),
        "",
        f"Run {datetime.datetime.now():%Y-%m-%d %H:%M} on {machine()}, commit {commit()}: "
        f"{args.rounds} rounds of {args.pairs:,} pairs per system, alternating which goes "
        "first; medians over the rounds.",
        "",
        "| system | p50 us | p90 us | p99 us | broker CPU us per pair | rounds (p50) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name in ("Kafka", "Millrace"):
        mine = [p for p in probes if p.system == name]
        if not mine:
            continue
        med = {q: statistics.median(p.percentile(q) for p in mine) for q in (50, 90, 99)}
        cpu = statistics.median(p.cpu_us_per_pair for p in mine)
        each = ", ".join(f"{p.percentile(50):.0f}" for p in mine)
        lines.append(
            f"| {name} | {med[50]:.0f} | {med[90]:.0f} | {med[99]:.0f} | {cpu:.0f} | {each} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5000, help="measured pairs per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm-up", type=int, default=1_000_000, help="records each system gets first")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "broker-latency.md")
    args = ap.parse_args()
    for name in ("pairs", "rounds", "warm_up"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    probes: list[Probe] = []
    with (
        tempfile.TemporaryDirectory(prefix="millrace-broker-latency-", dir=ROOT / ".cache") as tmp,
        both(Path(tmp), 1, args.warm_up) as systems,
    ):
        for r, order in orders(systems, args.rounds):
            for system in order:
                progress(f"round {r + 1}/{args.rounds}: {system.name}")
                probes.append(probe(system, args.pairs, r))
    text = report(probes, args)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
