"""Console clients: ``millrace produce`` and ``millrace consume``, modelled on Kafka's
``kafka-console-producer.sh`` and ``kafka-console-consumer.sh``. They speak only the Kafka
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

The load tests (``millrace perf``) are ``broker.cli.perf``. Connection options and the
bootstrap resolution (``--bootstrap-server``, ``--dir``, ``$MILLRACE_BOOTSTRAP``) are those
of ``broker.cli.common``, the client options those of ``broker.cli.clients``. Errors: one
line on stderr, exit code 1. Runs in the command's one thread.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from broker.cli.clients import (
    add_consumer_options,
    add_producer_options,
    close_quietly,
    consumer_config,
    create_consumer,
    create_producer,
    delivery_timeout_ms,
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
    parse_key_values,
    positive_int,
    silence_stdout,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message, Producer

_PROG_PRODUCE = "millrace produce"
_PROG_CONSUME = "millrace consume"


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
    add_producer_options(p)
    p.add_argument("--compression-codec", metavar="CODEC", help="none, gzip, snappy, lz4 or zstd")
    p.add_argument("--request-required-acks", metavar="ACKS", help="acks: -1/all, 0 or 1")
    p.add_argument(
        "--partition", type=non_negative_int, help="produce every record to this partition"
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
    p.add_argument("--max-messages", type=positive_int, metavar="N", help="exit after N records")
    p.add_argument(
        "--partition", type=non_negative_int, metavar="P", help="consume only this partition"
    )
    p.add_argument(
        "--offset", metavar="O", help="start offset with --partition: a number, earliest or latest"
    )
    p.add_argument(
        "--timeout-ms",
        type=positive_int,
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
    add_consumer_options(p)
    p.set_defaults(func=run_consume, _parser=p)


# --- produce -------------------------------------------------------------------------------


def split_key(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes] | None:
    """``(key, value)`` of one input line; ``None`` if a separator is required but missing."""
    if separator is None:
        return None, line
    key, found, value = line.partition(separator)
    if not found:
        return None
    return key, value


@guard(_PROG_PRODUCE)
def run_produce(args: argparse.Namespace) -> int:
    """Produce stdin lines; exit 1 if any record was not acknowledged."""
    return _produce(args, sys.stdin.buffer)


def _produce(args: argparse.Namespace, stream: IO[bytes]) -> int:
    from confluent_kafka import KafkaException

    separator = _key_separator(args, parse_key_values(args.property, "--property"))
    producer = create_producer(args)
    state = {"acked": 0, "failed": 0}
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            state["acked"] += 1
        else:
            state["failed"] += 1
            if len(errors) < 3:
                errors.append(kafka_error_text(err))

    sent = 0
    bad_line: int | None = None
    extra: dict[str, Any] = {}
    if args.partition is not None:
        extra["partition"] = args.partition
    try:
        for lineno, raw in enumerate(stream, 1):
            parts = split_key(_without_line_end(raw), separator)
            if parts is None:
                bad_line = lineno
                break
            key, value = parts
            _send(producer, args.topic, key, value, on_delivery, extra)
            sent += 1
            producer.poll(0)
    except KafkaException as exc:
        producer.flush(10)
        raise CliError(f"cannot produce to topic '{args.topic}': {kafka_error_text(exc)}") from exc
    except KeyboardInterrupt:
        sys.stderr.write("interrupted; flushing\n")
    remaining = producer.flush(float(int(delivery_timeout_ms(args)) / 1000 + 5))
    sys.stderr.write(f"Produced {state['acked']} records to topic {args.topic}\n")
    status = 0
    if bad_line is not None:
        sep_text = separator.decode(errors="replace") if separator else ""
        fail(_PROG_PRODUCE, f"line {bad_line} has no key separator {sep_text!r}; stopped there")
        status = 1
    if state["failed"] or remaining:
        fail(
            _PROG_PRODUCE,
            f"{state['failed'] + remaining} of {sent} records were not delivered to topic "
            f"'{args.topic}': {'; '.join(errors) or 'flush timed out'}",
        )
        status = 1
    return status


def _key_separator(args: argparse.Namespace, props: dict[str, str]) -> bytes | None:
    """The separator of key and value in each line (``--key-separator``, or the
    ``key.separator`` property with ``parse.key=true``), or None: no keys."""
    if args.key_separator is not None:
        if args.key_separator == "":
            raise CliError("--key-separator must not be empty")
        return _unescape(args.key_separator).encode()
    if _bool_property(props, "parse.key"):
        return _unescape(props.get("key.separator", "\t")).encode()
    return None


def _without_line_end(raw: bytes) -> bytes:
    """The line without its ``\\n`` or ``\\r\\n``."""
    line = raw[:-1] if raw.endswith(b"\n") else raw
    return line[:-1] if line.endswith(b"\r") else line


def _send(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    on_delivery: Callable[[KafkaError | None, Message], None],
    extra: dict[str, Any],
) -> None:
    """Produce one record, polling while the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, on_delivery=on_delivery, **extra)
            return
        except BufferError:
            producer.poll(0.1)


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


@guard(_PROG_CONSUME)
def run_consume(args: argparse.Namespace) -> int:
    """Print records until --max-messages, --timeout-ms or Ctrl-C."""
    parser: argparse.ArgumentParser = args._parser
    if args.offset is not None and args.partition is None:
        parser.error("--offset needs --partition")
    if args.group is not None and args.partition is not None:
        parser.error("--group cannot be used with --partition")
    if args.offset is not None and args.from_beginning:
        parser.error("--offset cannot be used with --from-beginning")
    return _consume(args)


def _consume(args: argparse.Namespace) -> int:
    fmt = MessageFormat.from_properties(
        parse_key_values(args.property, "--property"), args.print_key
    )
    conf = consumer_config(args, args.group, args.from_beginning)
    conf["isolation.level"] = args.isolation_level
    consumer = create_consumer(conf)
    count = 0
    status = 0
    out = sys.stdout.buffer
    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            _assign(consumer, args)
        timeout_s = args.timeout_ms / 1000 if args.timeout_ms else None
        last_record = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            want = 500 if args.max_messages is None else min(500, args.max_messages - count)
            wait = 0.5 if timeout_s is None else min(0.5, timeout_s)
            messages = consumer.consume(num_messages=want, timeout=wait)
            now = time.monotonic()
            written = _write_records(messages, fmt, out, args.topic)
            if written:
                count += written
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
        status = fail(_PROG_CONSUME, str(exc))
    finally:
        close_quietly(consumer)
    sys.stderr.write(f"Processed a total of {count} messages\n")
    return status


def _assign(consumer: Consumer, args: argparse.Namespace) -> None:
    """Assign the topic's partitions (or ``--partition``) from ``--offset`` or
    ``--from-beginning`` (else the end)."""
    from confluent_kafka import TopicPartition

    partitions = partitions_of(consumer, args.topic)
    start = _start_offset(args.offset, args.from_beginning)
    if args.partition is not None:
        if args.partition not in partitions:
            raise CliError(
                f"--partition {args.partition}: topic '{args.topic}' has partitions "
                f"0..{max(partitions)}"
            )
        partitions = [args.partition]
    consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])


def _write_records(messages: list[Message], fmt: MessageFormat, out: IO[bytes], topic: str) -> int:
    """Print the records among ``messages`` (skipping retriable errors, raising on a fatal
    one); return how many."""
    written = 0
    for msg in messages:
        err = msg.error()
        if err is not None:
            if is_fatal(err):
                raise CliError(f"topic '{topic}': {kafka_error_text(err)}")
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
        written += 1
    return written
