"""``millrace perf produce`` and ``millrace perf consume``: load tests modelled on Kafka's
``kafka-producer-perf-test.sh`` and ``kafka-consumer-perf-test.sh``, over the Kafka protocol
(confluent-kafka), so they work against any Kafka-compatible cluster.

``perf produce`` sends ``--num-records`` records of ``--record-size`` random upper-case
letters (optionally capped at ``--throughput`` records/s), prints a progress line about
every 5 s and a final line in the format of kafka-producer-perf-test (records/s, MB/s,
average/max and percentile latencies, where latency is from ``produce()`` to the
acknowledgement); it exits 1 if any record failed. ``perf consume`` reads ``--messages``
records (from the beginning unless ``--from-latest``; as member of ``--group`` if given),
prints progress lines, kafka-consumer-perf-test's CSV summary, and end-to-end latency
percentiles (consume time minus record CreateTime); it exits 1 if fewer arrived before
``--timeout`` ms without a record.

Connection and client options are those of ``broker.cli.common`` and
``broker.cli.clients``. Errors: one line on stderr, exit code 1; Ctrl-C exits 130 after the
summary. Runs in the command's one thread; latencies are kept in memory (8 bytes a record).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.cli.clients import (
    add_consumer_options,
    add_producer_options,
    close_quietly,
    consumer_config,
    create_consumer,
    create_producer,
    is_fatal,
    partitions_of,
)
from broker.cli.common import (
    CliError,
    add_connection_options,
    fail,
    guard,
    kafka_error_text,
    non_negative_int,
    positive_int,
)

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message

_PROG_PRODUCE = "millrace perf produce"
_PROG_CONSUME = "millrace perf consume"
_MB = 1024 * 1024
_REPORT_INTERVAL_S = 5.0


# --- parsers -------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    perf = subparsers.add_parser("perf", help="producer and consumer load tests")
    actions = perf.add_subparsers(dest="perf_command", metavar="ACTION", required=True)
    _add_perf_produce(actions)
    _add_perf_consume(actions)


def _add_perf_produce(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "produce",
        help="producer load test (like kafka-producer-perf-test.sh)",
        description="Produce N records of S bytes as fast as allowed and report "
        "throughput and latency.",
    )
    add_connection_options(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=positive_int, required=True, metavar="N")
    p.add_argument("--record-size", type=non_negative_int, required=True, metavar="S")
    p.add_argument(
        "--throughput", type=float, default=-1.0, metavar="R", help="records/s cap (-1: unlimited)"
    )
    add_producer_options(p, props_list=True)
    p.set_defaults(func=run_perf_produce, _parser=p)


def _add_perf_consume(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "consume",
        help="consumer load test (like kafka-consumer-perf-test.sh)",
        description="Consume N records from the beginning and report throughput and "
        "end-to-end latency.",
    )
    add_connection_options(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--messages", type=positive_int, required=True, metavar="N")
    p.add_argument("--group", metavar="G", help="consume as member of group G")
    p.add_argument(
        "--timeout",
        type=positive_int,
        default=10000,
        metavar="MS",
        help="give up when no record arrives for MS ms (default 10000)",
    )
    p.add_argument("--from-latest", action="store_true", help="start at the end of the log")
    p.add_argument("--hide-header", action="store_true", help="omit the CSV header")
    add_consumer_options(p)
    p.set_defaults(func=run_perf_consume, _parser=p)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` (0..1) of an ascending sequence (0 if empty), nearest-rank."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(fraction * len(sorted_values))))
    return float(sorted_values[index])


# --- perf produce ---------------------------------------------------------------------------


@dataclass(slots=True)
class LatencyStats:
    """Send statistics of a perf run: totals, a reporting window, every latency (ms)."""

    start: float
    latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    records: int = 0
    bytes: int = 0
    errors: int = 0
    window_start: float = 0.0
    window_records: int = 0
    window_bytes: int = 0
    window_latency_sum: float = 0.0
    window_latency_max: float = 0.0

    def __post_init__(self) -> None:
        self.window_start = self.start

    def record(self, latency_ms: float, size: int) -> None:
        self.records += 1
        self.bytes += size
        self.latencies_ms.append(latency_ms)
        self.window_records += 1
        self.window_bytes += size
        self.window_latency_sum += latency_ms
        self.window_latency_max = max(self.window_latency_max, latency_ms)

    def window_line(self, now: float) -> str:
        """kafka-producer-perf-test's progress line for the window ending ``now``; resets it."""
        elapsed = max(now - self.window_start, 1e-9)
        n = self.window_records
        line = (
            f"{n} records sent, {n / elapsed:.1f} records/sec "
            f"({self.window_bytes / _MB / elapsed:.2f} MB/sec), "
            f"{(self.window_latency_sum / n) if n else 0.0:.1f} ms avg latency, "
            f"{self.window_latency_max:.1f} ms max latency."
        )
        self.window_start = now
        self.window_records = self.window_bytes = 0
        self.window_latency_sum = self.window_latency_max = 0.0
        return line

    def final_line(self, now: float) -> str:
        """kafka-producer-perf-test's summary line."""
        elapsed = max(now - self.start, 1e-9)
        lat = sorted(self.latencies_ms)
        avg = sum(lat) / len(lat) if lat else 0.0
        return (
            f"{self.records} records sent, {self.records / elapsed:f} records/sec "
            f"({self.bytes / _MB / elapsed:.2f} MB/sec), {avg:.2f} ms avg latency, "
            f"{lat[-1] if lat else 0.0:.2f} ms max latency, "
            f"{int(percentile(lat, 0.5))} ms 50th, {int(percentile(lat, 0.95))} ms 95th, "
            f"{int(percentile(lat, 0.99))} ms 99th, {int(percentile(lat, 0.999))} ms 99.9th."
        )


def make_payload(size: int, seed: int = 0) -> bytes:
    """A payload of ``size`` random upper-case letters (as kafka-producer-perf-test)."""
    rng = random.Random(seed)
    return bytes(rng.randrange(65, 91) for _ in range(size))


@guard(_PROG_PRODUCE)
def run_perf_produce(args: argparse.Namespace) -> int:
    """Producer load test; exit 1 if any record failed."""
    return _perf_produce(args, sys.stdout.write)


def _perf_produce(args: argparse.Namespace, emit: Callable[[str], Any]) -> int:
    from confluent_kafka import KafkaException

    producer = create_producer(args)
    payload = make_payload(args.record_size)
    stats = LatencyStats(start=time.monotonic())
    first_errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            stats.errors += 1
            if len(first_errors) < 3:
                first_errors.append(kafka_error_text(err))
            return
        latency = msg.latency()
        stats.record((latency or 0.0) * 1000.0, args.record_size)

    next_report = stats.start + _REPORT_INTERVAL_S
    interrupted = False
    try:
        for i in range(args.num_records):
            if args.throughput > 0:
                due = stats.start + i / args.throughput
                while (now := time.monotonic()) < due:
                    producer.poll(min(due - now, 0.05))
            while True:
                try:
                    producer.produce(args.topic, payload, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 1000 == 0:
                producer.poll(0)
                now = time.monotonic()
                if now >= next_report:
                    emit(stats.window_line(now) + "\n")
                    next_report = now + _REPORT_INTERVAL_S
    except KeyboardInterrupt:
        interrupted = True
    except KafkaException as exc:
        raise CliError(f"cannot produce to topic '{args.topic}': {kafka_error_text(exc)}") from exc
    while producer.flush(1.0):
        now = time.monotonic()
        if now >= next_report:
            emit(stats.window_line(now) + "\n")
            next_report = now + _REPORT_INTERVAL_S
    emit(stats.final_line(time.monotonic()) + "\n")
    if stats.errors:
        return fail(_PROG_PRODUCE, f"{stats.errors} records failed: {'; '.join(first_errors)}")
    return 130 if interrupted else 0


# --- perf consume ---------------------------------------------------------------------------


def _kafka_time(epoch_s: float) -> str:
    """``yyyy-MM-dd HH:mm:ss:SSS`` as kafka-consumer-perf-test prints times."""
    base = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_s))
    return f"{base}:{int((epoch_s % 1) * 1000):03d}"


@guard(_PROG_CONSUME)
def run_perf_consume(args: argparse.Namespace) -> int:
    """Consumer load test; exit 1 if fewer than --messages records arrived."""
    return _perf_consume(args, sys.stdout.write)


def _perf_consume(args: argparse.Namespace, emit: Callable[[str], Any]) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    conf = consumer_config(args, args.group, not args.from_latest)
    conf.setdefault("fetch.min.bytes", 1)
    consumer = create_consumer(conf)
    start_wall = time.time()
    stats = _ConsumeStats(time.monotonic())
    status = 0
    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            offset = OFFSET_END if args.from_latest else OFFSET_BEGINNING
            consumer.assign(
                [TopicPartition(args.topic, p, offset) for p in partitions_of(consumer, args.topic)]
            )
        last_record = time.monotonic()
        while stats.count < args.messages:
            messages = consumer.consume(
                num_messages=min(1000, args.messages - stats.count), timeout=0.5
            )
            now = time.monotonic()
            if stats.add(messages, now, args.topic):
                last_record = now
            stats.report(now, emit)
            if not messages and (now - last_record) * 1000 >= args.timeout:
                sys.stderr.write(
                    f"WARNING: Exiting before consuming the expected number of messages: "
                    f"timeout ({args.timeout} ms) exceeded ({stats.count} of {args.messages} "
                    "consumed). You can use the --timeout option to increase the timeout.\n"
                )
                status = 1
                break
    except KeyboardInterrupt:
        status = 130
    finally:
        close_quietly(consumer)
    stats.summary(args, start_wall, time.monotonic(), emit)
    return status


@dataclass
class _ConsumeStats:
    """What ``perf consume`` counts, in total and in the current report window."""

    start: float
    count: int = 0
    size: int = 0
    e2e: array[float] = field(default_factory=lambda: array("d"))
    first_fetch: float | None = None
    window_start: float = 0.0
    window_count: int = 0
    window_bytes: int = 0
    next_report: float = 0.0

    def __post_init__(self) -> None:
        self.window_start = self.start
        self.next_report = self.start + _REPORT_INTERVAL_S

    def add(self, messages: list[Message], now: float, topic: str) -> int:
        """Count the records among ``messages`` (skipping retriable errors, raising on a
        fatal one) with their end-to-end latency; return how many."""
        now_ms = time.time() * 1000.0
        added = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                if is_fatal(err):
                    raise CliError(f"topic '{topic}': {kafka_error_text(err)}")
                continue
            if self.first_fetch is None:
                self.first_fetch = now
            value = msg.value()
            key = msg.key()
            n = (len(value) if value else 0) + (len(key) if key else 0)
            added += 1
            self.count += 1
            self.size += n
            self.window_count += 1
            self.window_bytes += n
            ts_type, ts = msg.timestamp()
            if ts_type != 0 and ts >= 0:
                self.e2e.append(max(0.0, now_ms - ts))
        return added

    def report(self, now: float, emit: Callable[[str], Any]) -> None:
        """Print the window's line, and start the next window, once the window is over."""
        if now < self.next_report:
            return
        elapsed = max(now - self.window_start, 1e-9)
        emit(
            f"{self.window_count} records received, "
            f"{self.window_count / elapsed:.1f} records/sec "
            f"({self.window_bytes / _MB / elapsed:.2f} MB/sec), {self.count} in total.\n"
        )
        self.window_start, self.window_count, self.window_bytes = now, 0, 0
        self.next_report = now + _REPORT_INTERVAL_S

    def summary(
        self, args: argparse.Namespace, start_wall: float, end: float, emit: Callable[[str], Any]
    ) -> None:
        """Print kafka-consumer-perf-test's summary (header unless ``--hide-header``), then
        the end-to-end latency line."""
        start, count = self.start, self.count
        end_wall = start_wall + (end - start)
        elapsed = max(end - start, 1e-9)
        fetch_elapsed = max(end - (self.first_fetch or start), 1e-9)
        mb = self.size / _MB
        if not args.hide_header:
            emit(
                "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
            )
        rebalance_ms = int(((self.first_fetch or start) - start) * 1000) if args.group else 0
        emit(
            f"{_kafka_time(start_wall)}, {_kafka_time(end_wall)}, {mb:.4f}, {mb / elapsed:.4f}, "
            f"{count}, {count / elapsed:.4f}, {rebalance_ms}, {int(fetch_elapsed * 1000)}, "
            f"{mb / fetch_elapsed:.4f}, {count / fetch_elapsed:.4f}\n"
        )
        lat = sorted(self.e2e)
        emit(
            f"{count} records received, {count / elapsed:f} records/sec ({mb / elapsed:.2f} "
            f"MB/sec), end-to-end latency {int(percentile(lat, 0.5))} ms 50th, "
            f"{int(percentile(lat, 0.99))} ms 99th, {lat[-1] if lat else 0.0:.2f} ms max.\n"
        )
