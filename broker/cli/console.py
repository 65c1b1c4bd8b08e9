"""Console and performance clients: ``millrace produce``, ``millrace consume``,
``millrace perf produce`` and ``millrace perf consume``, modelled on Kafka's
``kafka-console-producer.sh``, ``kafka-console-consumer.sh``,
``kafka-producer-perf-test.sh`` and ``kafka-consumer-perf-test.sh``. They speak only the Kafka
protocol (confluent-kafka), so they work against any Kafka-compatible cluster.

``produce`` reads stdin line by line (bytes, the trailing newline removed) and produces each
line as one record; with ``--key-separator S`` (or ``--property parse.key=true``) the text
before the first ``S`` is the key. It flushes, reports the count on stderr, and exits 1 if
any record was not acknowledged.

``consume`` prints values (``--print-key``: ``key<TAB>value``; ``--property print.timestamp=
true`` etc. as Kafka's DefaultMessageFormatter) to stdout. Without ``--group`` it uses no
consumer group at all: it assigns the topic's partitions itself (``assign()``), commits
nothing, and the ``group.id`` librdkafka insists on is a throwaway. It stops after
``--max-messages``, after ``--timeout-ms`` without a record, or on Ctrl-C, and reports
``Processed a total of N messages`` on stderr.

``perf produce`` prints a progress line about every 5 s and a final line in the format of
kafka-producer-perf-test (records/s, MB/s, average/max and percentile latencies, where
latency is from ``produce()`` to the acknowledgement). ``perf consume`` prints progress lines,
kafka-consumer-perf-test's CSV summary, and end-to-end latency percentiles (consume time minus
record CreateTime).

Connection options and the bootstrap resolution (``--bootstrap-server``, ``--dir``,
``$MILLRACE_BOOTSTRAP``) are those of ``broker.cli.topics``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from broker.cli.dump_log import silence_stdout
from broker.cli.topics import (
    CliError,
    add_connection_options,
    client_config,
    kafka_error_text,
    parse_key_values,
    read_properties_file,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message

_MB = 1024 * 1024
_REPORT_INTERVAL_S = 5.0
_DEFAULT_DELIVERY_TIMEOUT_MS = "60000"


def _fail(prog: str, message: str) -> int:
    sys.stderr.write(f"millrace {prog}: {message}\n")
    return 1


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _bool_property(props: dict[str, str], name: str, default: bool = False) -> bool:
    value = props.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("true", "1", "yes")


def _unescape(text: str) -> str:
    """Interpret ``\\t``, ``\\n`` and friends in separators given on the command line."""
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


# --- parsers -------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    _add_produce(subparsers)
    _add_consume(subparsers)
    perf = subparsers.add_parser("perf", help="producer and consumer load tests")
    actions = perf.add_subparsers(dest="perf_command", metavar="ACTION", required=True)
    _add_perf_produce(actions)
    _add_perf_consume(actions)


def _add_produce(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "produce",
        help="produce stdin lines to a topic (like kafka-console-producer.sh)",
        description="Read lines from stdin and produce one record per line.",
    )
    add_connection_options(p)
    p.add_argument("--topic", required=True, help="topic to produce to")
    p.add_argument(
        "--key-separator", metavar="SEP", help="split each line into key and value at the first SEP"
    )
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="reader property: parse.key=true, key.separator=SEP (repeatable)",
    )
    p.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="producer (librdkafka) setting (repeatable)",
    )
    p.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="FILE",
        help="properties file of producer settings",
    )
    p.add_argument("--compression-codec", metavar="CODEC", help="none, gzip, snappy, lz4 or zstd")
    p.add_argument("--request-required-acks", metavar="ACKS", help="acks: -1/all, 0 or 1")
    p.add_argument(
        "--partition", type=_non_negative_int, help="produce every record to this partition"
    )
    p.set_defaults(func=run_produce, _parser=p)


def _add_consume(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "consume",
        help="print records of a topic (like kafka-console-consumer.sh)",
        description="Consume records and print them to stdout.",
    )
    add_connection_options(p)
    p.add_argument("--topic", required=True, help="topic to consume")
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (default: the end)",
    )
    p.add_argument("--max-messages", type=_positive_int, metavar="N", help="exit after N records")
    p.add_argument(
        "--partition", type=_non_negative_int, metavar="P", help="consume only this partition"
    )
    p.add_argument(
        "--offset", metavar="O", help="start offset with --partition: a number, earliest or latest"
    )
    p.add_argument(
        "--timeout-ms",
        type=_positive_int,
        metavar="MS",
        help="exit if no record arrives for MS milliseconds",
    )
    p.add_argument("--print-key", action="store_true", help="print keys (key<TAB>value)")
    p.add_argument("--group", metavar="G", help="consume as member of group G (commits)")
    p.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="default read_uncommitted",
    )
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="formatter property: print.key, print.value, print.timestamp, "
        "print.partition, print.offset, print.headers, key.separator, "
        "line.separator (repeatable)",
    )
    p.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="consumer (librdkafka) setting (repeatable)",
    )
    p.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="FILE",
        help="properties file of consumer settings",
    )
    p.set_defaults(func=run_consume, _parser=p)


def _add_perf_produce(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "produce",
        help="producer load test (like kafka-producer-perf-test.sh)",
        description="Produce N records of S bytes as fast as allowed and report "
        "throughput and latency.",
    )
    add_connection_options(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=_positive_int, required=True, metavar="N")
    p.add_argument("--record-size", type=_non_negative_int, required=True, metavar="S")
    p.add_argument(
        "--throughput", type=float, default=-1.0, metavar="R", help="records/s cap (-1: unlimited)"
    )
    p.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="producer (librdkafka) setting (repeatable)",
    )
    p.add_argument(
        "--producer-props",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="producer settings, Kafka-style list",
    )
    p.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="FILE",
        help="properties file of producer settings",
    )
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
    p.add_argument("--messages", type=_positive_int, required=True, metavar="N")
    p.add_argument("--group", metavar="G", help="consume as member of group G")
    p.add_argument(
        "--timeout",
        type=_positive_int,
        default=10000,
        metavar="MS",
        help="give up when no record arrives for MS ms (default 10000)",
    )
    p.add_argument("--from-latest", action="store_true", help="start at the end of the log")
    p.add_argument("--hide-header", action="store_true", help="omit the CSV header")
    p.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="consumer (librdkafka) setting (repeatable)",
    )
    p.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="FILE",
        help="properties file of consumer settings",
    )
    p.set_defaults(func=run_perf_consume, _parser=p)


# --- shared --------------------------------------------------------------------------------


def _producer_conf(args: argparse.Namespace) -> dict[str, Any]:
    extra: dict[str, str] = {"message.timeout.ms": _DEFAULT_DELIVERY_TIMEOUT_MS}
    if getattr(args, "producer_config", None):
        extra.update(read_properties_file(args.producer_config, "--producer.config"))
    if getattr(args, "compression_codec", None):
        extra["compression.type"] = args.compression_codec
    if getattr(args, "request_required_acks", None):
        extra["acks"] = args.request_required_acks
    extra.update(parse_key_values(getattr(args, "producer_props", []), "--producer-props"))
    extra.update(parse_key_values(args.producer_property, "--producer-property"))
    return client_config(args, extra)


def _consumer_conf(args: argparse.Namespace, group: str | None, earliest: bool) -> dict[str, Any]:
    import os

    extra: dict[str, Any] = {
        "group.id": group or f"millrace-console-{os.getpid()}",
        "enable.auto.commit": bool(group),
        "enable.auto.offset.store": bool(group),
        "auto.offset.reset": "earliest" if earliest else "latest",
        "enable.partition.eof": False,
    }
    if getattr(args, "consumer_config", None):
        extra.update(read_properties_file(args.consumer_config, "--consumer.config"))
    extra.update(parse_key_values(args.consumer_property, "--consumer-property"))
    return client_config(args, extra)


def _partitions_of(consumer: Consumer, topic: str, timeout: float = 15.0) -> list[int]:
    """The partition ids of ``topic``; CliError if it does not exist."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    last_error = "no metadata"
    while True:
        try:
            metadata = consumer.list_topics(topic, timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            raise CliError(
                f"cannot fetch metadata of topic '{topic}': {kafka_error_text(exc)}"
            ) from exc
        info = metadata.topics.get(topic)
        if info is not None and info.error is None and info.partitions:
            return sorted(info.partitions)
        if info is not None and info.error is not None:
            last_error = f"{info.error.str()} ({info.error.name()})"
            if info.error.name() == "UNKNOWN_TOPIC_OR_PART":
                raise CliError(f"topic '{topic}' does not exist")
        if time.monotonic() >= deadline:
            raise CliError(f"no partitions for topic '{topic}': {last_error}")
        time.sleep(0.2)


def _is_fatal(err: KafkaError) -> bool:
    """Errors after which a console client should stop (others are retried by librdkafka)."""
    if err.fatal():
        return True
    return err.name() in (
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_TOPIC",
        "_UNKNOWN_PARTITION",
        "TOPIC_AUTHORIZATION_FAILED",
        "OFFSET_OUT_OF_RANGE",
        "_AUTO_OFFSET_RESET",
    )


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` (0..1) of an ascending sequence (0 if empty), nearest-rank."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(fraction * len(sorted_values))))
    return float(sorted_values[index])


# --- produce -------------------------------------------------------------------------------


def split_key(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes] | None:
    """``(key, value)`` of one input line; ``None`` if a separator is required but missing."""
    if separator is None:
        return None, line
    key, found, value = line.partition(separator)
    if not found:
        return None
    return key, value


def run_produce(args: argparse.Namespace) -> int:
    """Produce stdin lines; exit 1 if any record was not acknowledged."""
    try:
        return _produce(args, sys.stdin.buffer)
    except CliError as exc:
        return _fail("produce", str(exc))


def _produce(args: argparse.Namespace, stream: IO[bytes]) -> int:
    from confluent_kafka import KafkaException, Producer

    props = parse_key_values(args.property, "--property")
    separator: bytes | None = None
    if args.key_separator is not None:
        if args.key_separator == "":
            raise CliError("--key-separator must not be empty")
        separator = _unescape(args.key_separator).encode()
    elif _bool_property(props, "parse.key"):
        separator = _unescape(props.get("key.separator", "\t")).encode()

    try:
        producer = Producer(_producer_conf(args))
    except KafkaException as exc:
        raise CliError(f"invalid producer setting: {kafka_error_text(exc)}") from exc
    state = {"acked": 0, "failed": 0}
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            state["acked"] += 1
        else:
            state["failed"] += 1
            if len(errors) < 3:
                errors.append(f"{err.str()} ({err.name()})")

    sent = 0
    bad_line: int | None = None
    extra: dict[str, Any] = {}
    if args.partition is not None:
        extra["partition"] = args.partition
    try:
        for lineno, raw in enumerate(stream, 1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            parts = split_key(line, separator)
            if parts is None:
                bad_line = lineno
                break
            key, value = parts
            while True:
                try:
                    producer.produce(args.topic, value, key, on_delivery=on_delivery, **extra)
                    break
                except BufferError:
                    producer.poll(0.1)
            sent += 1
            producer.poll(0)
    except KafkaException as exc:
        producer.flush(10)
        raise CliError(f"cannot produce to topic '{args.topic}': {kafka_error_text(exc)}") from exc
    except KeyboardInterrupt:
        sys.stderr.write("interrupted; flushing\n")
    remaining = producer.flush(float(int(_producer_conf_timeout(args)) / 1000 + 5))
    sys.stderr.write(f"Produced {state['acked']} records to topic {args.topic}\n")
    status = 0
    if bad_line is not None:
        sep_text = separator.decode(errors="replace") if separator else ""
        _fail("produce", f"line {bad_line} has no key separator {sep_text!r}; stopped there")
        status = 1
    if state["failed"] or remaining:
        _fail(
            "produce",
            f"{state['failed'] + remaining} of {sent} records were not delivered to topic "
            f"'{args.topic}': {'; '.join(errors) or 'flush timed out'}",
        )
        status = 1
    return status


def _producer_conf_timeout(args: argparse.Namespace) -> str:
    props = parse_key_values(args.producer_property, "--producer-property")
    for name in ("message.timeout.ms", "delivery.timeout.ms"):
        if name in props and props[name].isdigit():
            return props[name]
    return _DEFAULT_DELIVERY_TIMEOUT_MS


# --- consume -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageFormat:
    """What Kafka's DefaultMessageFormatter prints for each record, and how."""

    print_key: bool = False
    print_value: bool = True
    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"

    @classmethod
    def from_properties(cls, props: dict[str, str], print_key: bool) -> MessageFormat:
        return cls(
            print_key=print_key or _bool_property(props, "print.key"),
            print_value=_bool_property(props, "print.value", True),
            print_timestamp=_bool_property(props, "print.timestamp"),
            print_partition=_bool_property(props, "print.partition"),
            print_offset=_bool_property(props, "print.offset"),
            print_headers=_bool_property(props, "print.headers"),
            key_separator=_unescape(props.get("key.separator", "\t")).encode(),
            line_separator=_unescape(props.get("line.separator", "\n")).encode(),
        )

    def render(
        self,
        key: bytes | None,
        value: bytes | None,
        *,
        timestamp: tuple[int, int] = (0, -1),
        partition: int = 0,
        offset: int = 0,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> bytes:
        """One record as DefaultMessageFormatter would print it (nulls as ``null``)."""
        fields: list[bytes] = []
        if self.print_timestamp:
            ts_type, ts = timestamp
            name = {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type)
            fields.append(f"{name}:{ts}".encode() if name else b"NO_TIMESTAMP")
        if self.print_partition:
            fields.append(f"Partition:{partition}".encode())
        if self.print_offset:
            fields.append(f"Offset:{offset}".encode())
        if self.print_headers:
            if headers:
                fields.append(
                    b",".join(k.encode() + b":" + (b"null" if v is None else v) for k, v in headers)
                )
            else:
                fields.append(b"NO_HEADERS")
        if self.print_key:
            fields.append(b"null" if key is None else key)
        if self.print_value:
            fields.append(b"null" if value is None else value)
        return self.key_separator.join(fields) + self.line_separator


def _headers(raw: object) -> list[tuple[str, bytes | None]]:
    """Normalize confluent-kafka's headers (list of pairs, dict or None) to pairs of
    ``(str, bytes | None)``."""
    if not raw:
        return []
    pairs = raw.items() if isinstance(raw, dict) else raw
    out: list[tuple[str, bytes | None]] = []
    for k, v in pairs:  # type: ignore[attr-defined]
        out.append((str(k), v.encode() if isinstance(v, str) else v))
    return out


def _start_offset(text: str | None, from_beginning: bool) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    if text is None:
        return OFFSET_BEGINNING if from_beginning else OFFSET_END
    lowered = text.strip().lower()
    if lowered == "earliest":
        return OFFSET_BEGINNING
    if lowered == "latest":
        return OFFSET_END
    try:
        value = int(lowered)
    except ValueError:
        raise CliError(f"--offset {text!r}: expected a number, earliest or latest") from None
    if value < 0:
        raise CliError(f"--offset {text!r}: must not be negative")
    return value


def run_consume(args: argparse.Namespace) -> int:
    """Print records until --max-messages, --timeout-ms or Ctrl-C."""
    parser: argparse.ArgumentParser = args._parser
    if args.offset is not None and args.partition is None:
        parser.error("--offset needs --partition")
    if args.group is not None and args.partition is not None:
        parser.error("--group cannot be used with --partition")
    if args.offset is not None and args.from_beginning:
        parser.error("--offset cannot be used with --from-beginning")
    try:
        return _consume(args)
    except CliError as exc:
        return _fail("consume", str(exc))


def _consume(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    fmt = MessageFormat.from_properties(
        parse_key_values(args.property, "--property"), args.print_key
    )
    conf = _consumer_conf(args, args.group, args.from_beginning)
    conf["isolation.level"] = args.isolation_level
    try:
        consumer = Consumer(conf)
    except KafkaException as exc:
        raise CliError(f"invalid consumer setting: {kafka_error_text(exc)}") from exc
    count = 0
    status = 0
    out = sys.stdout.buffer
    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            partitions = _partitions_of(consumer, args.topic)
            start = _start_offset(args.offset, args.from_beginning)
            if args.partition is not None:
                if args.partition not in partitions:
                    raise CliError(
                        f"--partition {args.partition}: topic '{args.topic}' has partitions "
                        f"0..{max(partitions)}"
                    )
                partitions = [args.partition]
            consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])
        timeout_s = args.timeout_ms / 1000 if args.timeout_ms else None
        last_record = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            want = 500 if args.max_messages is None else min(500, args.max_messages - count)
            wait = 0.5 if timeout_s is None else min(0.5, timeout_s)
            messages = consumer.consume(num_messages=want, timeout=wait)
            now = time.monotonic()
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if _is_fatal(err):
                        raise CliError(f"topic '{args.topic}': {err.str()} ({err.name()})")
                    continue
                out.write(
                    fmt.render(
                        msg.key(),
                        msg.value(),
                        timestamp=msg.timestamp(),
                        partition=msg.partition() or 0,
                        offset=msg.offset() or 0,
                        headers=_headers(msg.headers()),
                    )
                )
                count += 1
                last_record = now
            if messages:
                out.flush()
            elif timeout_s is not None and now - last_record >= timeout_s:
                sys.stderr.write(f"No record for {args.timeout_ms} ms (--timeout-ms); stopping\n")
                break
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        silence_stdout()
    except CliError as exc:
        status = _fail("consume", str(exc))
    finally:
        try:
            consumer.close()
        except (KafkaException, RuntimeError):
            pass
    sys.stderr.write(f"Processed a total of {count} messages\n")
    return status


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


def run_perf_produce(args: argparse.Namespace) -> int:
    """Producer load test; exit 1 if any record failed."""
    try:
        return _perf_produce(args, sys.stdout.write)
    except CliError as exc:
        return _fail("perf produce", str(exc))


def _perf_produce(args: argparse.Namespace, emit: Callable[[str], Any]) -> int:
    from confluent_kafka import KafkaException, Producer

    try:
        producer = Producer(_producer_conf(args))
    except KafkaException as exc:
        raise CliError(f"invalid producer setting: {kafka_error_text(exc)}") from exc
    payload = make_payload(args.record_size)
    stats = LatencyStats(start=time.monotonic())
    first_errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            stats.errors += 1
            if len(first_errors) < 3:
                first_errors.append(f"{err.str()} ({err.name()})")
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
        _fail(
            "perf produce",
            f"{stats.errors} records failed: {'; '.join(first_errors)}",
        )
        return 1
    return 130 if interrupted else 0


# --- perf consume ---------------------------------------------------------------------------


def _kafka_time(epoch_s: float) -> str:
    """``yyyy-MM-dd HH:mm:ss:SSS`` as kafka-consumer-perf-test prints times."""
    base = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_s))
    return f"{base}:{int((epoch_s % 1) * 1000):03d}"


def run_perf_consume(args: argparse.Namespace) -> int:
    """Consumer load test; exit 1 if fewer than --messages records arrived."""
    try:
        return _perf_consume(args, sys.stdout.write)
    except CliError as exc:
        return _fail("perf consume", str(exc))


def _perf_consume(args: argparse.Namespace, emit: Callable[[str], Any]) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = _consumer_conf(args, args.group, not args.from_latest)
    conf.setdefault("fetch.min.bytes", 1)
    try:
        consumer = Consumer(conf)
    except KafkaException as exc:
        raise CliError(f"invalid consumer setting: {kafka_error_text(exc)}") from exc
    start_wall = time.time()
    start = time.monotonic()
    count = 0
    size = 0
    e2e: array[float] = array("d")
    first_fetch: float | None = None
    window_start, window_count, window_bytes = start, 0, 0
    next_report = start + _REPORT_INTERVAL_S
    status = 0
    try:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

        if args.group:
            consumer.subscribe([args.topic])
        else:
            offset = OFFSET_END if args.from_latest else OFFSET_BEGINNING
            consumer.assign(
                [
                    TopicPartition(args.topic, p, offset)
                    for p in _partitions_of(consumer, args.topic)
                ]
            )
        last_record = time.monotonic()
        while count < args.messages:
            messages = consumer.consume(num_messages=min(1000, args.messages - count), timeout=0.5)
            now = time.monotonic()
            now_ms = time.time() * 1000.0
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if _is_fatal(err):
                        raise CliError(f"topic '{args.topic}': {err.str()} ({err.name()})")
                    continue
                if first_fetch is None:
                    first_fetch = now
                value = msg.value()
                key = msg.key()
                n = (len(value) if value else 0) + (len(key) if key else 0)
                count += 1
                size += n
                window_count += 1
                window_bytes += n
                ts_type, ts = msg.timestamp()
                if ts_type != 0 and ts >= 0:
                    e2e.append(max(0.0, now_ms - ts))
                last_record = now
            if now >= next_report:
                elapsed = max(now - window_start, 1e-9)
                emit(
                    f"{window_count} records received, {window_count / elapsed:.1f} records/sec "
                    f"({window_bytes / _MB / elapsed:.2f} MB/sec), {count} in total.\n"
                )
                window_start, window_count, window_bytes = now, 0, 0
                next_report = now + _REPORT_INTERVAL_S
            if not messages and (now - last_record) * 1000 >= args.timeout:
                sys.stderr.write(
                    f"WARNING: Exiting before consuming the expected number of messages: "
                    f"timeout ({args.timeout} ms) exceeded ({count} of {args.messages} "
                    "consumed). You can use the --timeout option to increase the timeout.\n"
                )
                status = 1
                break
    except KeyboardInterrupt:
        status = 130
    finally:
        try:
            consumer.close()
        except (KafkaException, RuntimeError):
            pass
    end = time.monotonic()
    end_wall = start_wall + (end - start)
    elapsed = max(end - start, 1e-9)
    fetch_elapsed = max(end - (first_fetch or start), 1e-9)
    mb = size / _MB
    if not args.hide_header:
        emit(
            "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
            "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        )
    rebalance_ms = int(((first_fetch or start) - start) * 1000) if args.group else 0
    emit(
        f"{_kafka_time(start_wall)}, {_kafka_time(end_wall)}, {mb:.4f}, {mb / elapsed:.4f}, "
        f"{count}, {count / elapsed:.4f}, {rebalance_ms}, {int(fetch_elapsed * 1000)}, "
        f"{mb / fetch_elapsed:.4f}, {count / fetch_elapsed:.4f}\n"
    )
    lat = sorted(e2e)
    emit(
        f"{count} records received, {count / elapsed:f} records/sec ({mb / elapsed:.2f} "
        f"MB/sec), end-to-end latency {int(percentile(lat, 0.5))} ms 50th, "
        f"{int(percentile(lat, 0.99))} ms 99th, {lat[-1] if lat else 0.0:.2f} ms max.\n"
    )
    return status
