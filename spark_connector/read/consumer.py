"""One Spark task's offset range of one partition, consumed: fetched, read_committed applied,
lost records reported, decoded into Arrow. Spark's ``KafkaDataConsumer`` for the ``millrace``
format; :func:`read_range` is what a reading task runs.

Theory of operation
-------------------
A task reads records ``[from_offset, until_offset)`` of one partition
(:class:`~spark_connector.read.planner.OffsetRange`) with one of two fetchers (option
``fetcher``). The default, *direct*: a :class:`~spark_connector.kafka.fetcher.PartitionFetcher`
asks the partition's leader for whole record batches (Fetch, pipelined one request ahead)
and :mod:`~spark_connector.records.decoder` decodes them straight into Arrow column buffers
(a C extension built by ``make setup``, with a pure-Python reference of the same output):
a response without aborted transactions in one ``add_batches`` call of the column builder
(no Python per batch; a compressed batch it hands back is decompressed here), one that lists
aborted transactions (read_committed) batch by batch, as Kafka's Java consumer does
(:class:`~spark_connector.records.decoder.AbortedFilter`); over TLS and
SASL too (the task builds its TLS and SASL settings from the options' strings, once per
process, :mod:`spark_connector.kafka.security`). The other, *librdkafka* (for a SASL
mechanism the direct fetcher does not speak, GSSAPI or OAUTHBEARER, or on request): a
confluent-kafka ``Consumer`` created inside the read (never pickled, used by that task's
thread only, closed before returning), ``assign()``-ed to the exact start offset, with
``isolation.level`` doing read_committed. Either way nothing joins a group or commits, the
read stops at the range's ``until`` offset, and yields ``pyarrow.RecordBatch``\\ es of about
:data:`ARROW_BATCH_ROWS` rows in the declared schema. Offsets may have gaps (compaction,
transaction control records, aborted records under read_committed): the position moves
past them; the read ends at ``until`` or at the partition's end.

Both fetchers share one :class:`RangeConsumer`: the range's bounds against the log, the
data-loss policy and the no-progress timeout.

Data loss (Spark's ``failOnDataLoss``): records of the range that no longer exist (the log
start offset moved past ``from`` because of retention or DeleteRecords, the log ends before
``until`` because a topic was re-created, a partition or topic disappeared) fail the read
with :class:`DataLossError` when ``failOnDataLoss=true`` (the default) and are skipped with a
warning otherwise (:func:`report_data_loss`; the driver's checks use it too).

Concurrency: everything here lives inside one task's generator, on that task's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from spark_connector.kafka.security import wire_security
from spark_connector.read.options import OffsetKind, ReadOptions
from spark_connector.read.planner import OffsetRange

__all__ = [
    "ARROW_BATCH_BYTES",
    "ARROW_BATCH_ROWS",
    "DataLossError",
    "RangeConsumer",
    "read_range",
    "record_schema",
    "report_data_loss",
]

log = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 10_000
"""Rows per ``pyarrow.RecordBatch`` yielded by a read."""
CONSUME_CHUNK = 2_000
"""Messages asked of librdkafka per ``consume()`` call."""

ARROW_BATCH_BYTES = 32 << 20
"""A batch is also yielded once its keys and values hold this many bytes (direct fetch)."""
DIRECT_FETCH_BYTES = 8 << 20
"""``max.partition.fetch.bytes`` of a direct fetch (a ``kafka.*`` option overrides it)."""

PREFETCH_MESSAGES = 1_000_000
"""At most this many records prefetched by a task's consumer (``queued.min.messages``)."""
PREFETCH_KBYTES = 131_072
"""At most this many KiB prefetched by a task's consumer (``queued.max.messages.kbytes``)."""


class DataLossError(RuntimeError):
    """Records the query should read no longer exist (``failOnDataLoss=true``)."""


def report_data_loss(options: ReadOptions, message: str) -> None:
    """Fail with :class:`DataLossError` or log a warning, as ``failOnDataLoss`` says."""
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{message}. Some data may have been lost because it is no longer available in "
            "Kafka (retention, deleted topic or re-created topic). If you want your query to "
            "continue in this case, set the source option 'failOnDataLoss' to 'false'."
        )
    log.warning("%s. Skipping it because failOnDataLoss=false.", message)


def record_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema of a ``format("millrace")`` read (what :func:`read_range` yields),
    without Spark: for tools and tests that call the reader directly."""
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


class RangeConsumer:
    """The rules of reading one offset range, whichever client fetches it: where the read
    starts and ends given the log's current bounds, what is data loss (``failOnDataLoss``),
    and when a read that makes no progress gives up (``kafkaConsumer.pollTimeoutMs``).

    readAs=table with the default positions reads the partition as it is when the task runs
    (from its current start to its current end), so a stream-static join, which runs the
    static side again every micro-batch, sees the table's latest values."""

    def __init__(self, options: ReadOptions, offset_range: OffsetRange) -> None:
        self.options = options
        self.range = offset_range
        self.where = f"{offset_range.topic}[{offset_range.partition}]"
        self.timeout_s = options.poll_timeout_ms / 1000
        self.live_start = options.read_as_table and options.starting.kind is OffsetKind.EARLIEST
        self.live_end = (
            options.read_as_table
            and not options.at_boundary  # a micro-batch boundary: the planned end
            and options.ending is not None
            and options.ending.kind is OffsetKind.LATEST
        )
        self._last_progress = time.monotonic()

    def is_empty(self) -> bool:
        """Nothing to read: an empty range, unless it is read up to the log's live end."""
        return self.range.size <= 0 and not self.live_end

    def bounds(self, low: int, high: int) -> tuple[int, int]:
        """The offsets ``[start, until)`` to read, given the log's current start and end:
        records gone from either side are data loss."""
        r = self.range
        start = r.from_offset
        if self.live_start:
            start = low
        elif low > start:
            self.lost(
                f"offsets {start}..{min(low, r.until_offset) - 1} were requested but the log "
                f"now starts at {low}"
            )
            start = low
        if self.live_end:
            return start, high
        if high < r.until_offset:
            self.lost(
                f"offsets up to {r.until_offset - 1} were requested but the log ends at {high}"
            )
        return start, min(r.until_offset, high)

    def lost(self, what: str) -> None:
        """Records of this range are gone: :func:`report_data_loss`, naming the partition."""
        report_data_loss(self.options, f"{self.where}: {what}")

    def log_ended(self, end: int, until: int) -> None:
        """The log ends at ``end``, before the read's end ``until``."""
        self.lost(f"log ended at {end} before the requested end {until}")

    def progressed(self) -> None:
        self._last_progress = time.monotonic()

    def check_stalled(self, position: int, until: int, last_answer: str | None = None) -> None:
        """Raise ``TimeoutError`` when nothing was read for ``kafkaConsumer.pollTimeoutMs``."""
        if time.monotonic() - self._last_progress > self.timeout_s:
            answer = "" if last_answer is None else f"; last answer: {last_answer}"
            raise TimeoutError(
                f"{self.where}: no progress reading offsets {position}..{until - 1} for "
                f"{self.timeout_s:.0f}s (option 'kafkaConsumer.pollTimeoutMs'{answer})"
            )


def read_range(options: ReadOptions, r: OffsetRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches in ``schema``. Runs on an executor; the
    client it uses lives only inside this generator (option ``fetcher``)."""
    consumer = RangeConsumer(options, r)
    if consumer.is_empty():
        return
    if options.uses_direct_fetch():
        yield from _read_direct(consumer, schema)
    else:
        yield from _read_with_consumer(consumer, schema)


# --- direct: the connector's own fetcher ----------------------------------------------------


def _read_direct(c: RangeConsumer, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """:func:`read_range` with :class:`~spark_connector.kafka.fetcher.PartitionFetcher`: whole
    record batches from the leader, decoded into Arrow columns by
    :mod:`~spark_connector.records.decoder` (natively when built). The next Fetch is sent as
    soon as a response's batch headers are scanned, before its records are decoded.

    read_committed, as Kafka's Java consumer does it: a response's aborted transactions
    (producer id, first offset) become active as the batches pass their first offsets; a
    transactional batch of an active aborted producer is skipped, and that producer's ABORT
    marker deactivates it. Control batches are never returned. Offsets skipped (control
    batches, aborted or compacted records) still move the position to the batch's end."""
    options, r = c.options, c.range
    read_committed = str(options.client_config().get("isolation.level", "")).lower() == (
        "read_committed"
    )
    with _open_fetcher(options, r, read_committed, c.timeout_s) as fetcher:
        start, until = c.bounds(*_direct_watermarks(c, fetcher))
        read = _DirectRead(c, fetcher, schema, read_committed, start, until)
        yield from read.batches()


class _DirectRead:
    """One range read with the direct fetcher, a Fetch at a time: the position, the Arrow
    columns being filled and the backoff after a failed Fetch."""

    def __init__(
        self,
        c: RangeConsumer,
        fetcher: Any,
        schema: pa.Schema,
        read_committed: bool,
        start: int,
        until: int,
    ) -> None:
        from spark_connector.records.decoder import new_columns

        self.c = c
        self.fetcher = fetcher
        self.schema = schema
        self.read_committed = read_committed
        self.position = start
        self.until = until
        self.cols = new_columns("headers" in schema.names)
        self.backoff = 0.05
        self.ended = False
        """The log ended before ``until`` (reported as data loss)."""

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Fetch until the range's end (or the log's); yield the records as Arrow batches."""
        self.c.progressed()
        while not self.ended and self.position < self.until:
            yield from self._fetch_once()
        if self.cols.rows:
            yield self._take()

    def _take(self) -> pa.RecordBatch:
        from spark_connector.records.decoder import to_record_batch

        r = self.c.range
        return to_record_batch(self.cols.take(), self.schema, r.topic, r.partition)

    def _fetch_once(self) -> Iterator[pa.RecordBatch]:
        """One Fetch at the position: its batches in the range decoded (full Arrow batches
        yielded), the next Fetch sent ahead, the position moved past what it returned."""
        from spark_connector.kafka import fetcher as f
        from spark_connector.records.decoder import iter_batches, scan_batches

        result = self.fetcher.fetch(self.position)
        code = result.error_code
        if code == f.OFFSET_OUT_OF_RANGE:
            if self._out_of_range():
                return
        elif code != f.NONE and code not in f.RETRIABLE and code != f.CONNECTION_ERROR:
            raise f.FetcherError(
                f"{self.c.where}: Fetch at offset {self.position}: {f.error_name(code)}"
            )
        records = result.records if code == f.NONE else None
        if records is not None and not (self.read_committed and result.aborted):
            count, next_offset = scan_batches(records)
            if count >= 0:  # regular v2 headers: the builder's own loop over the batches
                if not self._prefetch_after(next_offset if count else None) and (
                    self._log_ends_here(result, records)
                ):
                    return
                yield from self._decode_run(records)
                self._advance(next_offset if count else None, code)
                return
        batches = list(iter_batches(records)) if records is not None else []
        last = batches[-1].next_offset if batches else None
        if (
            not self._prefetch_after(last)
            and code == f.NONE
            and self._log_ends_here(result, records)
        ):
            return
        yield from self._decode(result, records if records is not None else b"", batches)
        self._advance(last, code)

    def _prefetch_after(self, next_offset: int | None) -> bool:
        """Send the next Fetch ahead when this one returned batches (``next_offset``, the
        offset after its last) and the range goes on; False when it returned none."""
        if next_offset is None:
            return False
        next_position = max(self.position, next_offset)
        if next_position < self.until:
            self.fetcher.prefetch(next_position)
        return True

    def _out_of_range(self) -> bool:
        """OFFSET_OUT_OF_RANGE: records gone below the log's start are data loss (the read
        moves past them), a log ending at or below the position ends the read. True when
        either happened (the Fetch has nothing more to give)."""
        low, high = self.fetcher.watermarks(time.monotonic() + self.c.timeout_s)
        if self.position < low:
            self.c.lost(f"offsets {self.position}..{min(low, self.until) - 1} are gone")
            self.position = low
            return True
        if self.position >= high:
            self.c.log_ended(high, self.until)
            self.ended = True
            return True
        return False

    def _log_ends_here(self, result: Any, records: Any) -> bool:
        """A Fetch without a whole batch: a batch too big to fetch fails the read; a log
        (last stable offset under read_committed) ending at the position ends it."""
        from spark_connector.kafka import fetcher as f

        log_end = result.last_stable_offset if self.read_committed else result.high_watermark
        if records is not None and len(records) > 0:
            raise f.FetcherError(
                f"{self.c.where}: the record batch at offset {self.position} is larger than "
                "kafka.max.partition.fetch.bytes; raise that option"
            )
        if 0 <= log_end <= self.position:
            self.c.log_ended(log_end, self.until)
            self.ended = True
            return True
        return False

    def _decode(self, result: Any, blob: Any, batches: list[Any]) -> Iterator[pa.RecordBatch]:
        """Decode the batches' records in the range into the columns (aborted transactions
        skipped under read_committed), yielding each full Arrow batch."""
        from spark_connector.records.decoder import AbortedFilter

        kept = AbortedFilter(result.aborted if self.read_committed else None)
        for b in batches:
            if b.next_offset <= self.position:
                continue
            if b.base_offset >= self.until:
                break
            if self._add(blob, b, kept):
                yield self._take()

    def _decode_run(self, blob: Any) -> Iterator[pa.RecordBatch]:
        """Decode a response without aborted transactions: the builder's ``add_batches``
        decodes the uncompressed batches in one call (natively: no Python per batch); a
        compressed batch it hands back is decompressed and added here."""
        from spark_connector.records.decoder import (
            RUN_FULL,
            RUN_PYTHON,
            AbortedFilter,
            iter_batches,
        )

        plain = AbortedFilter(None)
        pos = 0
        while True:
            pos, status = self.cols.add_batches(
                blob, pos, self.position, self.until, ARROW_BATCH_ROWS, ARROW_BATCH_BYTES
            )
            if status == RUN_FULL:
                yield self._take()
                continue
            if status != RUN_PYTHON:
                return
            b = next(iter_batches(blob, pos), None)  # raises for a header that is not v2
            if b is None:
                return
            if b.next_offset > self.position:
                if b.base_offset >= self.until:
                    return
                if self._add(blob, b, plain):
                    yield self._take()
            pos = b.end

    def _add(self, blob: Any, b: Any, kept: Any) -> bool:
        """Decode batch ``b`` of ``blob`` into the columns unless ``kept`` skips it; True
        when the columns are full (take them)."""
        from spark_connector.records.decoder import records_section

        if kept.skip(blob, b):
            return False
        cols = self.cols
        cols.add(
            records_section(blob, b),
            b.record_count,
            b.base_offset,
            b.base_timestamp,
            b.max_timestamp,
            b.log_append_time,
            self.position,
            self.until,
        )
        return bool(cols.rows >= ARROW_BATCH_ROWS or cols.data_bytes >= ARROW_BATCH_BYTES)

    def _advance(self, next_offset: int | None, code: int) -> None:
        """Move past the fetched batches (``next_offset``: the offset after the last, None
        without one); with none, check for a stall and back off after an error."""
        from spark_connector.kafka import fetcher as f

        if next_offset is not None and next_offset > self.position:
            self.position = next_offset
            self.c.progressed()
            self.backoff = 0.05
            return
        self.c.check_stalled(
            self.position, self.until, f.error_name(code) if code else "no records"
        )
        if code != f.NONE:
            time.sleep(self.backoff)
            self.backoff = min(self.backoff * 2, 1.0)


def _open_fetcher(
    options: ReadOptions, r: OffsetRange, read_committed: bool, timeout_s: float
) -> Any:
    """The task's :class:`~spark_connector.kafka.fetcher.PartitionFetcher` to the range's
    partition (a context manager), set from the ``kafka.*`` options."""
    from spark_connector.kafka import fetcher as f

    kafka = options.kafka_params
    max_wait = kafka.get("fetch.max.wait.ms", kafka.get("fetch.wait.max.ms", "100"))
    return f.PartitionFetcher(
        options.bootstrap_servers,
        r.topic,
        r.partition,
        read_committed=read_committed,
        client_id=kafka.get("client.id", "millrace-spark-reader"),
        timeout_s=min(timeout_s, 30.0),
        max_wait_ms=int(max_wait),
        partition_max_bytes=int(kafka.get("max.partition.fetch.bytes", DIRECT_FETCH_BYTES)),
        security=wire_security(kafka),
        local_reads=options.local_reads,
    )


def _direct_watermarks(c: RangeConsumer, fetcher: Any) -> tuple[int, int]:
    """The partition's log start and (last stable or high watermark) end offsets. At a
    micro-batch boundary, an open transaction (a zombie's, aborted right after the batch's
    commit) may hold the last stable offset below the boundary for a moment: wait for it."""
    low, high = fetcher.watermarks(time.monotonic() + c.timeout_s)
    if c.options.at_boundary and high < c.range.until_offset:
        wait_until = time.monotonic() + c.timeout_s
        while high < c.range.until_offset and time.monotonic() < wait_until:
            time.sleep(0.05)
            low, high = fetcher.watermarks(time.monotonic() + c.timeout_s)
    return low, high


# --- librdkafka: a confluent-kafka consumer -------------------------------------------------


def _prefetch_settings(range_size: int) -> dict[str, object]:
    """librdkafka settings of a reading task (a ``kafka.*`` option overrides each).

    A task reads one offset range as fast as it can, so its consumer prefetches deeply, up to
    the range's size, and never pauses fetching: with librdkafka's default
    ``fetch.queue.backoff.ms`` (1000) a consumer whose local queue is full waits a second
    before fetching again, which made ranges read at a quarter of the speed they read at
    without it (measured in BENCHMARKS.md)."""
    return {
        "fetch.queue.backoff.ms": 0,
        "queued.min.messages": max(1, min(PREFETCH_MESSAGES, range_size)),
        "queued.max.messages.kbytes": PREFETCH_KBYTES,
    }


class _Columns:
    """Column buffers for one Arrow batch, filled a consume() chunk at a time (list
    comprehensions over the chunk's messages; the per-record work is the client's getters)."""

    def __init__(self, with_headers: bool) -> None:
        self.with_headers = with_headers
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.offset: list[int] = []
        self.ts_ms: list[int] = []
        self.ts_type: list[int] = []
        self.headers: list[list[dict[str, Any]] | None] = []

    def __len__(self) -> int:
        return len(self.offset)

    def extend(self, msgs: list[Any]) -> None:
        self.key += [m.key() for m in msgs]
        self.value += [m.value() for m in msgs]
        self.offset += [m.offset() for m in msgs]
        stamps = [m.timestamp() for m in msgs]
        self.ts_type += [t[0] for t in stamps]
        self.ts_ms += [t[1] for t in stamps]
        if self.with_headers:
            for m in msgs:
                hdrs = m.headers()
                self.headers.append([{"key": k, "value": v} for k, v in hdrs] if hdrs else None)

    def to_batch(self, schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
        import pyarrow.compute as pc

        n = len(self)
        arrays = [
            pa.array(self.key, schema.field("key").type),
            pa.array(self.value, schema.field("value").type),
            pa.repeat(pa.scalar(topic, schema.field("topic").type), n),
            pa.repeat(pa.scalar(partition, schema.field("partition").type), n),
            pa.array(self.offset, schema.field("offset").type),
            pc.multiply(pa.array(self.ts_ms, pa.int64()), 1000).cast(
                schema.field("timestamp").type
            ),
            # confluent-kafka's types 0 (none), 1 (create), 2 (log append) are Kafka's -1, 0, 1
            pc.subtract(pa.array(self.ts_type, pa.int32()), 1).cast(
                schema.field("timestampType").type
            ),
        ]
        if self.with_headers:
            arrays.append(pa.array(self.headers, schema.field("headers").type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _read_with_consumer(c: RangeConsumer, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """:func:`read_range` through a confluent-kafka consumer (option ``fetcher=librdkafka``);
    the consumer lives only inside this generator."""
    from confluent_kafka import KafkaException
    from confluent_kafka import TopicPartition as CKTopicPartition

    r = c.range
    consumer = _new_consumer(c.options, r)
    try:
        low, high = consumer.get_watermark_offsets(
            CKTopicPartition(r.topic, r.partition), timeout=c.timeout_s, cached=False
        )
        start, until = c.bounds(low, high)
        if start >= until:
            return
        consumer.assign([CKTopicPartition(r.topic, r.partition, start)])
        yield from _ConsumerRead(c, consumer, schema, start, until).batches()
    finally:
        try:
            consumer.close()
        except KafkaException as exc:
            # librdkafka looks up the coordinator of group.id (never joined): a user without
            # the group's ACL gets GROUP_AUTHORIZATION_FAILED here, after a complete read
            log.debug("millrace reader: closing the consumer of %s: %s", c.where, exc)


def _new_consumer(options: ReadOptions, r: OffsetRange) -> Any:
    """A reading task's confluent-kafka ``Consumer``: partition EOF events on, and a lost
    start offset an error unless ``failOnDataLoss=false``."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            **_prefetch_settings(r.size),
            **options.client_config(
                **{
                    "enable.partition.eof": True,
                    "auto.offset.reset": "error" if options.fail_on_data_loss else "earliest",
                    "fetch.wait.max.ms": 100,
                }
            ),
        }
    )


class _ConsumerRead:
    """One range read with an assigned confluent-kafka consumer, a ``consume()`` chunk at a
    time: the position and the Arrow columns being filled."""

    def __init__(
        self, c: RangeConsumer, consumer: Any, schema: pa.Schema, start: int, until: int
    ) -> None:
        self.c = c
        self.consumer = consumer
        self.schema = schema
        self.with_headers = "headers" in schema.names
        self.cols = _Columns(self.with_headers)
        self.position = start
        self.until = until

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Consume until the range's end (or the partition's); yield the records as Arrow
        batches."""
        c, until = self.c, self.until
        c.progressed()
        while self.position < until:
            # consume() waits until it has ``num_messages`` or the timeout passed: never ask
            # for more than the range still holds, so the last call returns at once.
            msgs = self.consumer.consume(min(CONSUME_CHUNK, until - self.position), timeout=0.5)
            # librdkafka looks up the coordinator of group.id, which is never joined: a user
            # without the group's ACL gets GROUP_AUTHORIZATION_FAILED events (not about the
            # partition; the direct fetcher and Spark's Java consumer never ask)
            msgs = [m for m in msgs if not _group_denied(m)]
            # the records of the chunk inside the range, up to an error (end of partition)
            error = next((i for i, m in enumerate(msgs) if m.error() is not None), None)
            good, past_end = self._in_range(msgs if error is None else msgs[:error])
            progressed = bool(good)
            if good:
                yield from self._add(good)
            if error is not None:
                self._stop_at(msgs[error])
            elif past_end:
                self.position = until
            if self.position < until and self._skipped_ahead():
                progressed = True
            if progressed:
                c.progressed()
            else:
                c.check_stalled(self.position, until)
        if len(self.cols):
            yield self._to_batch()

    def _to_batch(self) -> pa.RecordBatch:
        r = self.c.range
        return self.cols.to_batch(self.schema, r.topic, r.partition)

    def _in_range(self, good: list[Any]) -> tuple[list[Any], bool]:
        """``good`` without the records at or past ``until``, and whether it had any."""
        past_end = bool(good) and (good[-1].offset() or 0) >= self.until
        if past_end:
            good = [m for m in good if (m.offset() or 0) < self.until]
        return good, past_end

    def _add(self, good: list[Any]) -> Iterator[pa.RecordBatch]:
        """Add the records to the columns, yielding each full Arrow batch; the position
        moves past the last."""
        last_offset = good[-1].offset() or 0
        while good:
            room = ARROW_BATCH_ROWS - len(self.cols)
            self.cols.extend(good[:room])
            good = good[room:]
            if len(self.cols) >= ARROW_BATCH_ROWS:
                yield self._to_batch()
                self.cols = _Columns(self.with_headers)
        self.position = last_offset + 1

    def _stop_at(self, msg: Any) -> None:
        """An error event: the end of the partition ends the read (data loss if before
        ``until``); any other error fails it."""
        from confluent_kafka import KafkaError, KafkaException

        err = msg.error()
        if err is None or err.code() != KafkaError._PARTITION_EOF:
            raise KafkaException(err)
        # The consumer reached the high watermark: nothing more to read.
        eof = msg.offset() or 0
        if eof < self.until:
            self.c.log_ended(eof, self.until)
        self.position = self.until

    def _skipped_ahead(self) -> bool:
        """Skipped offsets (control records, compaction) still move the position: whether
        the consumer's position is past it."""
        from confluent_kafka import TopicPartition as CKTopicPartition

        r = self.c.range
        pos = self.consumer.position([CKTopicPartition(r.topic, r.partition)])[0].offset
        if pos > self.position:
            self.position = pos
            return True
        return False


def _group_denied(msg: Any) -> bool:
    from confluent_kafka import KafkaError

    err = msg.error()
    return err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
