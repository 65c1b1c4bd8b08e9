"""Batch and streaming readers of the ``millrace`` format.

Theory of operation
-------------------
Planning happens on the driver: :class:`~spark_connector.client.KafkaMetadataClient` lists
the subscribed partitions and resolves the starting / ending positions to concrete offsets,
and the pure :func:`~spark_connector.planner.plan_ranges` cuts them into
:class:`MillraceInputPartition`\\ s (one Spark task each). A topic the exactly-once sink
writes ends at a micro-batch boundary (``endingBatch``; a stream with ``wholeBatches``
advances one upstream batch at a time): :mod:`spark_connector.boundary_reads`.

Reading happens on executors in :func:`read_range`, with one of two fetchers (option
``fetcher``). The default, *direct*: a :class:`~spark_connector.kafka.fetcher.PartitionFetcher`
asks the partition's leader for whole record batches (Fetch, pipelined one request ahead)
and :mod:`~spark_connector.record_batches` decodes them straight into Arrow column buffers
(a C extension built by ``make setup``, with a pure-Python reference of the same output);
read_committed is applied per batch from the response's aborted transactions, as Kafka's
Java consumer does; over TLS and SASL too (``kafka.security.protocol``, ``kafka.ssl.*``,
``kafka.sasl.*``: the task builds its TLS and SASL settings from the options' strings, once
per process, :mod:`spark_connector.kafka.security`). The other, *librdkafka* (for a SASL
mechanism the direct fetcher does not speak, GSSAPI or OAUTHBEARER, or on request): a
confluent-kafka ``Consumer`` created inside ``read()`` (never pickled, used by that task's
thread only, closed before returning), ``assign()``-ed to the exact start offset. Either
way nothing joins a group or commits, the read stops at the range's ``until`` offset, and
``read()`` yields ``pyarrow.RecordBatch``\\ es of about :data:`ARROW_BATCH_ROWS` rows in the
declared schema. Offsets may have gaps (compaction, transaction control records, aborted
records under read_committed): the position moves past them; the read ends at ``until`` or
at the partition's end.

Data loss (Spark's ``failOnDataLoss``): records of the range that no longer exist (the log
start offset moved past ``from`` because of retention or DeleteRecords, the log ends before
``until`` because a topic was re-created, a partition or topic disappeared) fail the read
with :class:`DataLossError` when ``failOnDataLoss=true`` (the default) and are skipped with a
warning otherwise.

Streaming offsets are JSON dicts ``{"topic": {"0": 42}}`` holding the next offset to read per
partition. :meth:`MillraceStreamReader.partitions` depends only on its arguments and the
options, so a replayed micro-batch reads exactly the same records. Partitions that appear
after the query started are read from offset 0 (their beginning).

Pickling: readers are pickled to executors and hold only :class:`ReadOptions`, the schema and
plain values (never a client). The streaming reader additionally keeps small driver-side
state (the Trigger.AvailableNow target and the last trigger time for ``maxTriggerDelay``),
which is only used by the long-lived driver-side Python process that plans micro-batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_connector.boundary_reads import (
    batch_ends,
    boundary_options,
    in_streaming_query,
    stream_ends,
    stream_start,
    stream_target,
    task_end,
)
from spark_connector.client import KafkaMetadataClient
from spark_connector.exactly_once.boundaries import Boundary
from spark_connector.kafka.security import wire_security
from spark_connector.offsets import PartitionOffsets, from_json_dict, to_json_dict
from spark_connector.options import OffsetKind, ReadOptions
from spark_connector.planner import OffsetRange, plan_ranges, rate_limit

log = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 10_000
"""Rows per ``pyarrow.RecordBatch`` yielded by ``read()``."""
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


class MillraceInputPartition(InputPartition):
    """One Spark task's share: records ``[from_offset, until_offset)`` of one partition;
    ``at_boundary``: the range ends at a micro-batch boundary (read read_committed, up to its
    end: :func:`~spark_connector.boundary_reads.boundary_options`)."""

    def __init__(self, offset_range: OffsetRange, at_boundary: bool = False) -> None:
        super().__init__(offset_range)
        self.range = offset_range
        self.at_boundary = at_boundary

    def __repr__(self) -> str:
        r = self.range
        return f"MillraceInputPartition({r.topic}[{r.partition}] {r.from_offset}..{r.until_offset})"


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


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (what its Python data source checks)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


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


def _live(options: ReadOptions) -> tuple[bool, bool]:
    """readAs=table with the default positions reads the partition as it is when the task
    runs (from its current start to its current end), so a stream-static join, which runs
    the static side again every micro-batch, sees the table's latest values."""
    live_start = options.read_as_table and options.starting.kind is OffsetKind.EARLIEST
    live_end = (
        options.read_as_table
        and not options.at_boundary  # a micro-batch boundary: the planned end
        and options.ending is not None
        and options.ending.kind is OffsetKind.LATEST
    )
    return live_start, live_end


def _bounds(options: ReadOptions, r: OffsetRange, low: int, high: int) -> tuple[int, int]:
    """The offsets ``[start, until)`` a task reads of ``r``, given the log's current start
    and end: records gone from either side are data loss (``failOnDataLoss``)."""
    live_start, live_end = _live(options)
    where = f"{r.topic}[{r.partition}]"
    start = r.from_offset
    if live_start:
        start = low
    elif low > start:
        report_data_loss(
            options,
            f"{where}: offsets {start}..{min(low, r.until_offset) - 1} were requested but "
            f"the log now starts at {low}",
        )
        start = low
    if live_end:
        until = high
    else:
        if high < r.until_offset:
            report_data_loss(
                options,
                f"{where}: offsets up to {r.until_offset - 1} were requested but the log "
                f"ends at {high}",
            )
        until = min(r.until_offset, high)
    return start, until


def read_range(options: ReadOptions, r: OffsetRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches in ``schema``. Runs on an executor; the
    client it uses lives only inside this generator (option ``fetcher``)."""
    _, live_end = _live(options)
    if r.size <= 0 and not live_end:
        return
    if options.uses_direct_fetch():
        yield from _read_direct(options, r, schema)
    else:
        yield from _read_with_consumer(options, r, schema)


def _read_direct(
    options: ReadOptions, r: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """``read_range`` with :class:`~spark_connector.kafka.fetcher.PartitionFetcher`: whole record
    batches from the leader, decoded into Arrow columns by
    :mod:`~spark_connector.record_batches` (natively when built). The next Fetch is sent as
    soon as a response's batch headers are scanned, before its records are decoded.

    read_committed, as Kafka's Java consumer does it: a response's aborted transactions
    (producer id, first offset) become active as the batches pass their first offsets; a
    transactional batch of an active aborted producer is skipped, and that producer's ABORT
    marker deactivates it. Control batches are never returned. Offsets skipped (control
    batches, aborted or compacted records) still move the position to the batch's end."""
    from spark_connector.kafka import fetcher as f
    from spark_connector.record_batches import (
        AbortedFilter,
        iter_batches,
        new_columns,
        records_section,
        to_record_batch,
    )

    params = options.client_config()
    read_committed = str(params.get("isolation.level", "")).lower() == "read_committed"
    timeout_s = options.poll_timeout_ms / 1000
    where = f"{r.topic}[{r.partition}]"
    kafka = options.kafka_params
    max_wait = kafka.get("fetch.max.wait.ms", kafka.get("fetch.wait.max.ms", "100"))
    with f.PartitionFetcher(
        options.bootstrap_servers,
        r.topic,
        r.partition,
        read_committed=read_committed,
        client_id=kafka.get("client.id", "millrace-spark-reader"),
        timeout_s=min(timeout_s, 30.0),
        max_wait_ms=int(max_wait),
        partition_max_bytes=int(kafka.get("max.partition.fetch.bytes", DIRECT_FETCH_BYTES)),
        security=wire_security(kafka),
    ) as fetcher:
        low, high = fetcher.watermarks(time.monotonic() + timeout_s)
        if options.at_boundary and high < r.until_offset:
            # an open transaction (a zombie's, aborted right after the batch's commit) may
            # hold the last stable offset below the boundary for a moment
            wait_until = time.monotonic() + timeout_s
            while high < r.until_offset and time.monotonic() < wait_until:
                time.sleep(0.05)
                low, high = fetcher.watermarks(time.monotonic() + timeout_s)
        start, until = _bounds(options, r, low, high)
        cols = new_columns("headers" in schema.names)
        position = start
        last_progress = time.monotonic()
        backoff = 0.05
        while position < until:
            result = fetcher.fetch(position)
            code = result.error_code
            if code == f.OFFSET_OUT_OF_RANGE:
                low, high = fetcher.watermarks(time.monotonic() + timeout_s)
                if position < low:
                    report_data_loss(
                        options, f"{where}: offsets {position}..{min(low, until) - 1} are gone"
                    )
                    position = low
                    continue
                if position >= high:
                    report_data_loss(
                        options, f"{where}: log ended at {high} before the requested end {until}"
                    )
                    break
            elif code != f.NONE and code not in f.RETRIABLE and code != f.CONNECTION_ERROR:
                raise f.FetcherError(f"{where}: Fetch at offset {position}: {f.error_name(code)}")
            records = result.records if code == f.NONE else None
            batches = list(iter_batches(records)) if records is not None else []
            if batches:
                next_position = max(position, batches[-1].next_offset)
                if next_position < until:
                    fetcher.prefetch(next_position)
            elif code == f.NONE:
                log_end = result.last_stable_offset if read_committed else result.high_watermark
                if records is not None and len(records) > 0:
                    raise f.FetcherError(
                        f"{where}: the record batch at offset {position} is larger than "
                        "kafka.max.partition.fetch.bytes; raise that option"
                    )
                if 0 <= log_end <= position:
                    report_data_loss(
                        options, f"{where}: log ended at {log_end} before the requested end {until}"
                    )
                    break
            kept = AbortedFilter(result.aborted if read_committed else None)
            blob = records if records is not None else b""
            for b in batches:
                if b.next_offset <= position:
                    continue
                if b.base_offset >= until:
                    break
                if kept.skip(blob, b):
                    continue
                cols.add(
                    records_section(blob, b),
                    b.record_count,
                    b.base_offset,
                    b.base_timestamp,
                    b.max_timestamp,
                    b.log_append_time,
                    position,
                    until,
                )
                if cols.rows >= ARROW_BATCH_ROWS or cols.data_bytes >= ARROW_BATCH_BYTES:
                    yield to_record_batch(cols.take(), schema, r.topic, r.partition)
            now = time.monotonic()
            if batches and batches[-1].next_offset > position:
                position = batches[-1].next_offset
                last_progress = now
                backoff = 0.05
            else:
                if now - last_progress > timeout_s:
                    raise TimeoutError(
                        f"{where}: no progress reading offsets {position}..{until - 1} for "
                        f"{timeout_s:.0f}s (option 'kafkaConsumer.pollTimeoutMs'; last "
                        f"answer: {f.error_name(code) if code else 'no records'})"
                    )
                if code != f.NONE:
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
        if cols.rows:
            yield to_record_batch(cols.take(), schema, r.topic, r.partition)


def _read_with_consumer(
    options: ReadOptions, r: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """``read_range`` through a confluent-kafka consumer (option ``fetcher=librdkafka``); the
    consumer lives only inside this generator."""
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as CKTopicPartition

    with_headers = "headers" in schema.names
    consumer = Consumer(
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
    where = f"{r.topic}[{r.partition}]"
    try:
        timeout_s = options.poll_timeout_ms / 1000
        low, high = consumer.get_watermark_offsets(
            CKTopicPartition(r.topic, r.partition), timeout=timeout_s, cached=False
        )
        start, until = _bounds(options, r, low, high)
        if start >= until:
            return
        consumer.assign([CKTopicPartition(r.topic, r.partition, start)])
        cols = _Columns(with_headers)
        position = start
        last_progress = time.monotonic()
        while position < until:
            # consume() waits until it has ``num_messages`` or the timeout passed: never ask
            # for more than the range still holds, so the last call returns at once.
            msgs = consumer.consume(min(CONSUME_CHUNK, until - position), timeout=0.5)
            # librdkafka looks up the coordinator of group.id, which is never joined: a user
            # without the group's ACL gets GROUP_AUTHORIZATION_FAILED events (not about the
            # partition; the direct fetcher and Spark's Java consumer never ask)
            msgs = [m for m in msgs if not _group_denied(m)]
            progressed = False
            # the records of the chunk inside the range, up to an error (end of partition)
            error = next((i for i, m in enumerate(msgs) if m.error() is not None), None)
            good = msgs if error is None else msgs[:error]
            past_end = bool(good) and (good[-1].offset() or 0) >= until
            if past_end:
                good = [m for m in good if (m.offset() or 0) < until]
            if good:
                last_offset = good[-1].offset() or 0
                while good:
                    room = ARROW_BATCH_ROWS - len(cols)
                    cols.extend(good[:room])
                    good = good[room:]
                    if len(cols) >= ARROW_BATCH_ROWS:
                        yield cols.to_batch(schema, r.topic, r.partition)
                        cols = _Columns(with_headers)
                position = last_offset + 1
                progressed = True
            if error is not None:
                err = msgs[error].error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    # The consumer reached the high watermark: nothing more to read.
                    eof = msgs[error].offset() or 0
                    if eof < until:
                        report_data_loss(
                            options,
                            f"{where}: log ended at {eof} before the requested end {until}",
                        )
                    position = until
                else:
                    raise KafkaException(err)
            elif past_end:
                position = until
            if position < until:
                # Skipped offsets (control records, compaction) still move the position.
                pos = consumer.position([CKTopicPartition(r.topic, r.partition)])[0].offset
                if pos > position:
                    position = pos
                    progressed = True
            now = time.monotonic()
            if progressed:
                last_progress = now
            elif now - last_progress > timeout_s:
                raise TimeoutError(
                    f"{where}: no progress reading offsets {position}..{until - 1} for "
                    f"{timeout_s:.0f}s (option 'kafkaConsumer.pollTimeoutMs')"
                )
        if len(cols):
            yield cols.to_batch(schema, r.topic, r.partition)
    finally:
        try:
            consumer.close()
        except KafkaException as exc:
            # librdkafka looks up the coordinator of group.id (never joined): a user without
            # the group's ACL gets GROUP_AUTHORIZATION_FAILED here, after a complete read
            log.debug("millrace reader: closing the consumer of %s: %s", where, exc)


def _group_denied(msg: Any) -> bool:
    from confluent_kafka import KafkaError

    err = msg.error()
    return err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def _input_partitions(
    ranges: list[OffsetRange], at_boundary: set[str] | frozenset[str] = frozenset()
) -> list[MillraceInputPartition]:
    return [MillraceInputPartition(r, r.topic in at_boundary) for r in ranges]


def _nothing_subscribed(opts: ReadOptions) -> str:
    """Why a subscription covers no partition, naming the topics or the pattern."""
    if opts.subscribe is not None:
        names = ", ".join(f"'{t}'" for t in opts.subscribe)
        return f"option 'subscribe': no topic {names} exists"
    if opts.subscribe_pattern is not None:
        return f"option 'subscribePattern': no topic matches '{opts.subscribe_pattern}'"
    return "option 'assign' names no partition"


class MillraceBatchReader(DataSourceReader):
    """``spark.read.format("millrace")``: a fixed offset range per partition, resolved once
    (on the first :meth:`partitions` call) on the driver."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.boundary_topics: set[str] = set()
        """Topics read read_committed up to exactly the planned end (every topic of a read
        that looks for micro-batch boundaries, :func:`~spark_connector.boundary_reads.
        batch_ends`)."""

    def plan(self) -> list[OffsetRange]:
        """Resolve starting/ending positions against the cluster (a topic the exactly-once
        sink writes ends at a micro-batch boundary, :mod:`spark_connector.boundary_reads`)
        and plan the ranges."""
        opts = self.options
        assert opts.ending is not None
        with KafkaMetadataClient(opts) as client:
            tps = client.partitions()
            if not tps:
                log.warning(
                    "millrace reader: %s: the DataFrame is empty (as Spark's Kafka source "
                    "reads it)",
                    _nothing_subscribed(opts),
                )
                return []
            start = client.resolve(opts.starting, tps, starting=True)
            end = client.resolve(opts.ending, tps, starting=False)
        end, self.boundary_topics = batch_ends(opts, tps, start, end)
        for tp in tps:
            if end[tp] < start[tp]:
                raise ValueError(
                    f"option '{opts.ending.option}': the end offset {end[tp]} of "
                    f"{tp.topic}[{tp.partition}] is before the start offset {start[tp]} "
                    f"(option '{opts.starting.option}')"
                )
        if opts.read_as_table:  # one task per partition, empty ones too (read live)
            return [OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(tps)]
        return plan_ranges(
            start,
            end,
            min_partitions=opts.min_partitions,
            max_records_per_partition=opts.max_records_per_partition,
        )

    def partitions(self) -> Sequence[InputPartition]:
        ranges = self.plan()
        return _input_partitions(ranges, self.boundary_topics)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MillraceInputPartition):
            return  # Spark's stand-in when planning found no partition: an empty DataFrame
        schema = arrow_schema(self.schema)
        options = boundary_options(self.options) if partition.at_boundary else self.options
        r = partition.range
        if partition.at_boundary and self.options.read_as_table and in_streaming_query():
            # the table side of a stream-static join: Spark plans it once and runs its tasks
            # again every micro-batch, so the boundary is looked up again when the task runs
            end = task_end(self.options, r.topic, r.partition)
            if end is not None:
                r = OffsetRange(r.topic, r.partition, r.from_offset, max(end, r.from_offset))
        batches = read_range(options, r, schema)
        if self.options.read_as_table:
            yield from latest_per_key(batches, schema)
        else:
            yield from batches


def _latest(table: pa.Table) -> pa.Table:
    """The last row of every non-null key of ``table`` (rows in offset order), in order."""
    import pyarrow.compute as pc

    keys = table.column("key")
    index = pa.table({"key": keys, "i": pa.array(range(table.num_rows), pa.int64())})
    index = index.filter(pc.is_valid(keys))
    last = index.group_by("key", use_threads=False).aggregate([("i", "max")])["i_max"]
    return table.take(last.sort())


def latest_per_key(
    batches: Iterator[pa.RecordBatch], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """``readAs=table``: the records of one partition reduced to the latest record of every
    key, tombstoned keys (latest value null) and keyless records dropped. Keys of a compacted
    topic are partitioned by key, so one partition's reduction is the table's rows for those
    keys. The reduction runs batch by batch (Arrow group-by), so the task holds at most the
    live keys plus one batch, and only live rows leave the task."""
    import pyarrow.compute as pc

    state: pa.Table | None = None
    for batch in batches:
        chunk = pa.Table.from_batches([batch], schema)
        state = _latest(chunk if state is None else pa.concat_tables([state, chunk]))
    if state is None:
        return
    live = state.filter(pc.is_valid(state.column("value")))
    for batch in live.combine_chunks().to_batches(ARROW_BATCH_ROWS):
        yield batch


class MillraceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("millrace")`` with admission control and
    Trigger.AvailableNow.

    Read limits: :meth:`getDefaultReadLimit` is ``ReadMaxRows(maxOffsetsPerTrigger)`` when
    that option is set, else ``ReadMinRows(minOffsetsPerTrigger)``, else
    ``ReadAllAvailable``. :meth:`latestOffset` honours the limit Spark passes:
    ``ReadAllAvailable`` reads everything; ``ReadMaxRows`` shares the budget across
    partitions in proportion to their backlog; whenever the limit is not
    ``ReadAllAvailable`` and ``minOffsetsPerTrigger`` is set, a batch waits until that many
    records are available or ``maxTriggerDelay`` passed since the last batch (except under
    Trigger.AvailableNow, which must terminate)."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        # wholeBatches: whole committed upstream batches, so everything is read_committed
        self.options = boundary_options(options) if options.whole_batches else options
        self.schema = schema
        self._available_now_target: PartitionOffsets | None = None
        self._available_now_boundaries: dict[str, Boundary] | None = None
        # maxTriggerDelay counts from the query's start (Spark starts from 0, which lets
        # the first batch through below minOffsetsPerTrigger).
        self._last_trigger_ms = int(time.time() * 1000)

    # --- driver side ---------------------------------------------------------------------

    def initialOffset(self) -> dict[str, dict[str, int]]:
        with KafkaMetadataClient(self.options) as client:
            tps = client.partitions()
            start = client.resolve(self.options.starting, tps, starting=True)
        if self.options.whole_batches:
            start = stream_start(self.options, start)
        return to_json_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with KafkaMetadataClient(self.options) as client:
            self._available_now_target = client.latest(client.partitions())
        if self.options.whole_batches:
            self._available_now_boundaries = stream_target(
                self.options, {tp.topic for tp in self._available_now_target}
            )

    def _latest(self) -> PartitionOffsets:
        if self._available_now_target is not None:
            return dict(self._available_now_target)
        with KafkaMetadataClient(self.options) as client:
            return client.latest(client.partitions())

    def _check_lost(self, start: PartitionOffsets, latest: PartitionOffsets) -> None:
        for tp in sorted(set(start) - set(latest)):
            report_data_loss(
                self.options, f"{tp.topic}[{tp.partition}] is gone (topic or partition deleted)"
            )
        for tp in sorted(set(start) & set(latest)):
            if latest[tp] < start[tp]:
                report_data_loss(
                    self.options,
                    f"{tp.topic}[{tp.partition}]: the log end offset {latest[tp]} is before "
                    f"the next offset to read {start[tp]} (topic re-created or truncated)",
                )

    def _delay_batch(self, start: PartitionOffsets, latest: PartitionOffsets) -> bool:
        """``minOffsetsPerTrigger`` / ``maxTriggerDelay`` (Spark's ``delayBatch``)."""
        minimum = self.options.min_offsets_per_trigger
        if minimum is None or self._available_now_target is not None:
            return False
        now_ms = int(time.time() * 1000)
        if now_ms - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now_ms
            return False
        new_records = sum(max(off - start.get(tp, 0), 0) for tp, off in latest.items())
        if new_records < minimum:
            return True
        self._last_trigger_ms = now_ms
        return False

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        start_offsets = from_json_dict(start, "start offset")
        latest = self._latest()
        self._check_lost(start_offsets, latest)
        if self.options.whole_batches:
            ends = stream_ends(self.options, start_offsets, latest, self._available_now_boundaries)
            return to_json_dict(ends)
        if isinstance(limit, ReadAllAvailable):
            return to_json_dict(latest)
        if self._delay_batch(start_offsets, latest):
            return to_json_dict({tp: off for tp, off in start_offsets.items() if tp in latest})
        if isinstance(limit, ReadMaxRows):
            # Partitions whose log moved behind the start are reset to their end (no backlog).
            effective_start = {tp: min(start_offsets.get(tp, 0), latest[tp]) for tp in latest}
            return to_json_dict(rate_limit(effective_start, latest, limit.max_rows))
        return to_json_dict(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        start_offsets = from_json_dict(start, "start offset")
        end_offsets = from_json_dict(end, "end offset")
        return _input_partitions(
            plan_ranges(
                start_offsets,
                end_offsets,
                min_partitions=self.options.min_partitions,
                max_records_per_partition=self.options.max_records_per_partition,
            )
        )

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, no group offsets are kept."""

    # --- executor side -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MillraceInputPartition):
            return  # Spark's stand-in for a micro-batch without a partition
        yield from read_range(self.options, partition.range, arrow_schema(self.schema))
