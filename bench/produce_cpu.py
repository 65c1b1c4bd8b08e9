"""Broker CPU per GB produced in 1 MB batches, Millrace beside Apache Kafka (issue 31,
target 3), without a client library in the way.

A plain socket speaks the protocol directly (``bench.plain_produce``, as
``bench.broker_latency`` does): one record batch of ``--batch-kb`` KB (100-byte values, no
keys, uncompressed, not idempotent, so the same bytes can be sent again: the broker assigns
the offsets), built once, is sent in Produce v7 requests to the partition's leader,
``--in-flight`` requests pipelined on one connection, until ``--gb`` GB (2^30 bytes of
batches) have been acknowledged. Two set-ups, each on its own pair of clusters
(``bench.compare.both``: Kafka on Millrace's ZooKeeper, both warmed up):

* **acks=1**: 1 broker, a 1-partition topic;
* **acks=all**: 3 brokers, a 1-partition topic with replication factor 3
  (``min.insync.replicas`` 2), so the followers fetch and append every batch too.

Measured, for each system in ``--runs`` runs alternating which goes first: the CPU seconds of
every broker process (``/proc``, all threads, and for Millrace its log-cleaner worker
processes) over the sending, per GB acknowledged; and MB/s. Every response is checked for
its error code, and the partition's log end offset afterwards for the records sent. With
``--profile``, py-spy samples the Millrace leader during one more acks=1 round, and the
profile's tables go into the report.

Results: the section "Broker CPU per GB produced" of ``BENCHMARKS.md`` (machine named,
medians). Usage: ``python -m bench.produce_cpu [--gb N] [--batch-kb N] [--in-flight N]
[--runs N] [--profile] [--out F]``; progress on stderr.

Concurrency: the benchmark's main thread only.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import hotspots
from bench.basics import progress
from bench.common import ROOT, commit, machine, replace_section
from bench.compare import both, orders
from bench.plain_produce import PRODUCE_VERSION, connect, produce_request, receive, request_frame
from bench.procstat import tree_cpu_seconds
from bench.systems import System
from broker.protocol.api_keys import ApiKey
from broker.protocol.records import SimpleRecord, encode_batch

HEADING = "## Broker CPU per GB produced"
CLIENT_ID = b"bench-produce-cpu"
VALUE_BYTES = 100
GB = 1 << 30


@dataclass
class Round:
    """One system's sending of ``bytes_sent`` bytes of batches: wall and broker CPU seconds."""

    system: str
    bytes_sent: int
    seconds: float
    cpu_seconds: float

    @property
    def cpu_per_gb(self) -> float:
        return self.cpu_seconds / (self.bytes_sent / GB)

    @property
    def mb_s(self) -> float:
        return self.bytes_sent / (1 << 20) / self.seconds


def make_batch(kb: int) -> tuple[bytes, int]:
    """A v2 record batch of about ``kb`` KB of 100-byte values and its record count."""
    record = SimpleRecord(b"v" * VALUE_BYTES, None, int(time.time() * 1000))
    count = max(1, (kb * 1024) // (VALUE_BYTES + 8))
    batch = encode_batch([record] * count)
    while len(batch) > kb * 1024 and count > 1:
        count -= count // 50 + 1
        batch = encode_batch([record] * count)
    return batch, count


def frame(body: bytes, correlation_id: int) -> bytes:
    """The whole Produce request of ``body``."""
    return request_frame(ApiKey.PRODUCE, PRODUCE_VERSION, correlation_id, body, CLIENT_ID)


def response_error(response: bytes) -> int:
    """The partition's error code in a Produce v7 response of one topic and one partition
    (correlation id, topics count, name, partitions count, partition index, error code)."""
    name_len = struct.unpack_from(">h", response, 8)[0]
    return int(struct.unpack_from(">h", response, 8 + 2 + name_len + 4 + 4)[0])


def leader_address(system: System, topic: str) -> tuple[str, int]:
    md = system.admin().list_topics(topic, timeout=30)
    leader = md.topics[topic].partitions[0].leader
    broker = md.brokers[leader]
    return str(broker.host), int(broker.port)


def send(
    system: System, topic: str, batch: bytes, acks: int, requests: int, in_flight: int
) -> float:
    """Send ``requests`` Produce requests of ``batch``, ``in_flight`` at a time; seconds."""
    body = produce_request(topic, batch, acks)
    sock = connect(*leader_address(system, topic))
    try:
        started = time.perf_counter()
        sent = done = 0
        while done < requests:
            while sent < requests and sent - done < in_flight:
                sock.sendall(frame(body, sent))
                sent += 1
            response = receive(sock, done)
            error = response_error(response)
            if error:
                raise SystemExit(f"{system.name}: Produce answered error code {error}")
            done += 1
            if done % 64 == 0:
                progress(f"{system.name} acks={acks}: {done}/{requests} batches")
        return time.perf_counter() - started
    finally:
        sock.close()


def end_offset(system: System, topic: str) -> int:
    """The partition's log end offset. A topic just created may not be in the metadata of
    the broker librdkafka asks yet (UNKNOWN_PARTITION), nor hosted yet by its leader
    (UNKNOWN_TOPIC_OR_PART): asked again for up to 30 s. Both happen with Kafka's brokers
    too, in about one of ten creations of an RF=3 topic on this machine."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": system.bootstrap, "group.id": "bench-produce-cpu"})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
            except KafkaException as exc:
                unknown = exc.args[0].code() in (
                    KafkaError._UNKNOWN_PARTITION,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                )
                if not unknown or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def one_round(
    system: System, topic: str, batch: tuple[bytes, int], acks: int, args: argparse.Namespace
) -> Round:
    data, records = batch
    requests = max(1, int(args.gb * GB) // len(data))
    before_offset = end_offset(system, topic)
    cpu0 = sum(tree_cpu_seconds(p) for p in system.pids)
    seconds = send(system, topic, data, acks, requests, args.in_flight)
    cpu = sum(tree_cpu_seconds(p) for p in system.pids) - cpu0
    grown = end_offset(system, topic) - before_offset
    if grown != requests * records:
        raise SystemExit(f"{system.name}: the log grew by {grown}, not {requests * records}")
    r = Round(system.name, requests * len(data), seconds, cpu)
    progress(
        f"{system.name} acks={acks}: {r.bytes_sent / GB:.2f} GB in {seconds:.1f} s "
        f"({r.mb_s:,.0f} MB/s), broker CPU {cpu:.2f} s = {r.cpu_per_gb:.2f} s/GB\n"
    )
    return r


def setup_rounds(
    brokers: int, acks: int, batch: tuple[bytes, int], args: argparse.Namespace, tmp: Path
) -> tuple[list[Round], str]:
    """``--runs`` rounds per system of one set-up; and the profile's Markdown if asked.

    Each round writes a fresh topic, deleted after it (a round stores ``--gb`` GB on every
    replica: without deleting, 3 brokers of each system would hold tens of GB)."""
    rounds: list[Round] = []
    profile_md = ""
    settings = {"min.insync.replicas": "2"} if brokers == 3 else None
    counter = iter(range(1_000_000))

    def measured(system: System) -> Round:
        topic = f"produce-cpu-{next(counter)}"
        system.create_topic(topic, 1, brokers)
        try:
            return one_round(system, topic, batch, acks, args)
        finally:
            system.delete_topic(topic)

    with both(tmp, brokers, args.warm_up, settings) as systems:
        for system in systems:
            measured(system)  # the first round is not counted
        for _r, order in orders(systems, args.runs):
            for system in order:
                rounds.append(measured(system))
        if args.profile and brokers == 1:
            millrace = next(s for s in systems if s.name == "Millrace")
            raw = tmp / "produce-cpu-profile.txt"
            proc = hotspots.start(millrace.pids[0], raw, rate=500)
            try:
                time.sleep(1.0)
                measured(millrace)
            finally:
                hotspots.stop(proc)
            profile_md = hotspots.render(hotspots.summarize(raw, top=15))
    return rounds, profile_md


def _median(rounds: list[Round], system: str, attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in rounds if r.system == system)


def section(
    results: dict[str, list[Round]],
    batch: tuple[bytes, int],
    args: argparse.Namespace,
    profile: str,
) -> str:
    lines = [
        HEADING,
        "",
        f"Run of {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, "
        f"on {machine()}. `python -m bench.produce_cpu` (in `make bench`): a plain socket "
        f"sends one {len(batch[0]):,}-byte record batch ({batch[1]:,} records of "
        f"{VALUE_BYTES}-byte values, uncompressed) per Produce v7 request, {args.in_flight} "
        f"requests in flight, {args.gb:g} GB per round; broker CPU (every broker process, all "
        f"threads) per GB acknowledged; {args.runs} runs alternating which system goes first, "
        "medians; each response and the log end offset checked.",
        "",
        "| set-up | Kafka CPU s/GB | Millrace CPU s/GB | Millrace / Kafka | Kafka MB/s | Millrace MB/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, rounds in results.items():
        k = _median(rounds, "Kafka", "cpu_per_gb")
        m = _median(rounds, "Millrace", "cpu_per_gb")
        lines.append(
            f"| {name} | {k:.2f} | {m:.2f} | **{m / k:.2f}** | "
            f"{_median(rounds, 'Kafka', 'mb_s'):,.0f} | {_median(rounds, 'Millrace', 'mb_s'):,.0f} |"
        )
    lines += [
        "",
        "Target (issue 31, 3): Millrace's broker CPU per GB <= Kafka's (Millrace / Kafka <= 1).",
        "",
    ]
    if profile:
        lines += [
            "Where the Millrace broker's CPU goes (py-spy, 500 Hz, on-CPU samples, one acks=1 "
            "round after the measured ones):",
            "",
            profile,
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--gb", type=float, default=1.0, help="GB of batches per round (1)")
    ap.add_argument("--batch-kb", type=int, default=1000, help="KB per batch (1000)")
    ap.add_argument("--in-flight", type=int, default=5, help="requests pipelined (5)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warm-up", type=int, default=200_000, help="records of the warm-up")
    ap.add_argument("--profile", action="store_true", help="py-spy the Millrace leader")
    ap.add_argument("--only", choices=("acks1", "acksall"), help="one set-up only")
    ap.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args(argv)
    if args.gb <= 0 or args.batch_kb < 1 or args.in_flight < 1 or args.runs < 1:
        ap.error("--gb, --batch-kb, --in-flight and --runs must be positive")
    if args.batch_kb > 1000:
        ap.error("--batch-kb must be at most 1000 (both brokers' message.max.bytes is 1 MB)")
    batch = make_batch(args.batch_kb)
    results: dict[str, list[Round]] = {}
    profile = ""
    if args.only in (None, "acks1"):
        with tempfile.TemporaryDirectory(prefix="millrace-bench-produce-cpu-") as tmp:
            results["acks=1, 1 broker"], profile = setup_rounds(1, 1, batch, args, Path(tmp))
    if args.only in (None, "acksall"):
        with tempfile.TemporaryDirectory(prefix="millrace-bench-produce-cpu-") as tmp:
            results["acks=all, 3 brokers, RF=3"], _ = setup_rounds(3, -1, batch, args, Path(tmp))
    text = section(results, batch, args, profile)
    replace_section(args.out, HEADING, text)
    print(text, file=sys.stderr)


if __name__ == "__main__":
    main()
