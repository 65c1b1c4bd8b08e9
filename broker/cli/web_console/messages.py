"""Browsing one partition: the query of the Messages page (:class:`BrowseQuery`, parsed from
the form with a message naming the bad field), the read (:func:`browse`: a confluent-kafka
Consumer with ``assign()``, never a group join nor a commit; ``offsets_for_times`` for a
timestamp) and how a key or value is shown (:func:`render_bytes`: text, pretty JSON or hex;
bytes that are not UTF-8 as hex with a note).

A read stops at ``count`` messages, at the end of the partition (the high watermark, or the
last stable offset for ``read_committed``) or after ``timeout_s``, whichever comes first, so a
page never hangs. Concurrency: every call makes and closes its own Consumer.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from broker.cli.web_console.cluster_source import ClusterSource, ConsoleError, error_text
from broker.types import TopicPartition

MAX_COUNT = 500
RENDERINGS = ("text", "json", "hex")
ISOLATIONS = ("read_committed", "read_uncommitted")
MAX_INT64 = 2**63 - 1
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


@dataclass(frozen=True, slots=True)
class BrowseQuery:
    topic: str
    partition: int
    offset: int | None  # None: from the timestamp
    timestamp_ms: int | None
    count: int
    isolation: str
    render: str


@dataclass(frozen=True, slots=True)
class Message:
    offset: int
    timestamp_ms: int
    timestamp_type: str
    key: str | None
    value: str | None
    headers: tuple[tuple[str, str | None], ...]

    @property
    def timestamp_text(self) -> str:
        return iso_ms(self.timestamp_ms)


@dataclass(frozen=True, slots=True)
class BrowseResult:
    messages: tuple[Message, ...]
    start: int
    low: int
    high: int
    note: str | None


def iso_ms(ms: int) -> str:
    """Epoch ms as an ISO date-time in UTC (ms precision)."""
    dt = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_timestamp(text: str) -> int:
    """An ISO date-time (``2026-01-31T12:00:00Z``; without a zone: UTC) or epoch ms."""
    raw = text.strip()
    if raw.isascii() and raw.isdigit():
        ms = int(raw)
        if ms > MAX_TIMESTAMP_MS:
            raise ConsoleError(
                f"timestamp {text!r}: milliseconds since the epoch, at most {MAX_TIMESTAMP_MS} "
                "(year 9999)"
            )
        return ms
    candidate = raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw
    try:
        dt = datetime.datetime.fromisoformat(candidate)
    except ValueError:
        raise ConsoleError(
            f"timestamp {text!r}: expected an ISO date-time (2026-01-31T12:00:00Z) "
            "or milliseconds since the epoch"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    ms = int(dt.timestamp() * 1000)
    if ms < 0:
        raise ConsoleError(f"timestamp {text!r}: before 1970-01-01T00:00:00Z")
    return ms


def parse_integer(text: str, field: str, minimum: int = 0, maximum: int = MAX_INT64) -> int:
    """A whole number of a form field, ``minimum`` to ``maximum``; else ConsoleError naming
    the field."""
    try:
        value = int(text.strip())
    except ValueError:
        raise ConsoleError(f"{field} {text!r}: expected a whole number") from None
    if value < minimum:
        raise ConsoleError(f"{field} {text!r}: must be at least {minimum}")
    if value > maximum:
        raise ConsoleError(f"{field} {text!r}: must be at most {maximum}")
    return value


def parse_query(topic: str, params: Mapping[str, str]) -> BrowseQuery:
    """The query of the Messages form; a bad field raises ConsoleError naming it."""
    partition = parse_integer(params.get("partition", "0") or "0", "partition")
    mode = params.get("from", "offset")
    offset: int | None = None
    timestamp: int | None = None
    if mode == "timestamp":
        timestamp = parse_timestamp(params.get("timestamp", ""))
    else:
        offset = parse_integer(params.get("offset", "0") or "0", "offset")
    count = parse_integer(params.get("count", "20") or "20", "count", 1)
    if count > MAX_COUNT:
        raise ConsoleError(f"count {count}: at most {MAX_COUNT} messages per page")
    isolation = params.get("isolation", "read_committed")
    if isolation not in ISOLATIONS:
        raise ConsoleError(f"isolation {isolation!r}: one of {', '.join(ISOLATIONS)}")
    render = params.get("render", "text")
    if render not in RENDERINGS:
        raise ConsoleError(f"render {render!r}: one of {', '.join(RENDERINGS)}")
    return BrowseQuery(topic, partition, offset, timestamp, count, isolation, render)


NOT_UTF8 = "(not UTF-8: shown as hex) "


def render_bytes(data: bytes | None, how: str) -> str | None:
    """A key, value or header value as text (UTF-8), pretty JSON (text when it is not JSON)
    or hex; bytes that are not UTF-8 are shown as hex after :data:`NOT_UTF8`, never as
    replacement characters."""
    if data is None:
        return None
    if how == "hex":
        return data.hex(" ")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8 + data.hex(" ")
    if how == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def browse(source: ClusterSource, query: BrowseQuery) -> BrowseResult:
    """Read up to ``query.count`` messages of the partition (see the module docstring)."""
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka import TopicPartition as CkTopicPartition

    topic = source.cluster().topic(query.topic)
    if not 0 <= query.partition < len(topic.partitions):
        raise ConsoleError(
            f"partition {query.partition}: topic '{query.topic}' has "
            f"{len(topic.partitions)} partition(s) (0 to {len(topic.partitions) - 1})"
        )
    consumer = Consumer(source.consumer_config({"isolation.level": query.isolation}))
    try:
        ck = CkTopicPartition(query.topic, query.partition)
        low, high = _log_range(source, query)
        note: str | None = None
        if query.offset is not None:
            start = query.offset
            if start > high:
                raise ConsoleError(
                    f"offset {start} is beyond the end of {query.topic}-{query.partition} "
                    f"(offsets {low} to {high - 1}, next offset {high})"
                )
            if start < low:
                note = f"offset {start} is below the log start offset {low}: reading from {low}"
                start = low
        else:
            assert query.timestamp_ms is not None
            ck.offset = query.timestamp_ms
            try:
                (found,) = consumer.offsets_for_times([ck], timeout=source.timeout_s)
            except KafkaException as exc:
                raise ConsoleError(f"cannot look up the timestamp: {error_text(exc)}") from exc
            if found.error is not None:
                raise ConsoleError(f"cannot look up the timestamp: {error_text(found.error)}")
            if found.offset < 0:
                return BrowseResult(
                    (), high, low, high, f"no message at or after {iso_ms(query.timestamp_ms)}"
                )
            start = int(found.offset)
        messages = _read(consumer, query, start, high, source.timeout_s)
        return BrowseResult(tuple(messages), start, low, high, note)
    finally:
        consumer.close()


def _as_bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


def _log_range(source: ClusterSource, query: BrowseQuery) -> tuple[int, int]:
    """(log start offset, end): the high watermark, or for read_committed the last stable
    offset (a read_committed read never gets past it)."""
    tp = TopicPartition(query.topic, query.partition)
    starts, errors = source.offsets([tp], "earliest")
    ends, end_errors = source.offsets(
        [tp], "latest", committed_only=query.isolation == "read_committed"
    )
    errors.update(end_errors)
    if tp in errors:
        raise ConsoleError(f"cannot read the offsets of {tp}: {errors[tp]}")
    return starts[tp], ends[tp]


def _read(
    consumer: object, query: BrowseQuery, start: int, high: int, timeout_s: float
) -> list[Message]:
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as CkTopicPartition

    assert isinstance(consumer, Consumer)
    if start >= high:
        return []
    consumer.assign([CkTopicPartition(query.topic, query.partition, start)])
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    types = {1: "CreateTime", 2: "LogAppendTime"}
    while len(out) < query.count and time.monotonic() < deadline:
        for msg in consumer.consume(query.count - len(out), 0.2):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise ConsoleError(f"cannot read the partition: {error_text(err)}")
            ts_type, ts = msg.timestamp()
            out.append(
                Message(
                    int(msg.offset() or 0),
                    int(ts),
                    types.get(ts_type, "-"),
                    render_bytes(msg.key(), query.render),
                    render_bytes(msg.value(), query.render),
                    tuple(
                        (str(h[0]), render_bytes(_as_bytes(h[1]), query.render))
                        for h in (msg.headers() or [])
                    ),
                )
            )
        position = consumer.position([CkTopicPartition(query.topic, query.partition)])
        if position and position[0].offset >= high:
            break
    return out[: query.count]
