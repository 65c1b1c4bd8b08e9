"""The batch producer's write path of ``format("millrace")``: a task's Arrow batches placed
on partitions, encoded into whole v2 record batches a partition at a time (in C, through
:mod:`spark_connector.records.encoder`) and sent by the task's own
:class:`~spark_connector.kafka.producer.BatchProducer`: at-least-once, or inside the task's
open transaction for exactly-once (``spark_connector.exactly_once.task``).

Consecutive small Arrow batches are first concatenated, in order, up to
:data:`COALESCE_ROWS` rows. Records go to the producer a partition at a time, continuing the
partition's batch not sent yet while it has room (:meth:`~spark_connector.kafka.producer.BatchProducer.open_batch`), so
consecutive small Arrow batches make batches of up to ``batch.size``, not one small batch
each; the producer builds, sequences and sends them.

Rows name their topic with the ``topic`` option or a ``topic`` column (each Arrow batch is
split by topic, keeping the rows' order), their partition with a ``partition`` column or the
key (Kafka's default partitioner) or, keyless, a sticky partition chosen per Arrow batch;
a ``headers`` column is encoded per row into the records.

``writer`` calls :func:`write_record_batches` when
:func:`~spark_connector.write.plan.batch_settings` allows (see the ``writer`` module
docstring for when it does). Runs on an executor, on the task's thread; the producer is
created, flushed and closed inside the call and never pickled.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_connector.kafka.producer import BatchProducer, ProduceError
from spark_connector.kafka.security import wire_security
from spark_connector.records.encoder import (
    column_spec,
    encode_headers,
    encode_records,
    partition_keys,
)
from spark_connector.write.outcome import DeliveryError, MillraceWriteCommitMessage
from spark_connector.write.plan import TOPIC_OPTION, BatchSettings, WriteOptionError, WritePlan

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Transactional", "WriteResult", "write_record_batches", "write_rows"]


@dataclass(frozen=True, slots=True)
class Transactional:
    """Write inside a transaction of ``transactional_id`` (left open for the driver)."""

    transactional_id: str
    timeout_ms: int


@dataclass(slots=True)
class WriteResult:
    """What a task wrote: rows, and with a producer the pair it wrote with, per partition
    the offsets its records got, and the partition count it saw per topic."""

    rows: int
    producer_id: int = -1
    producer_epoch: int = -1
    outputs: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def _placement(
    plan: WritePlan, batch: pa.RecordBatch, row_base: int, partitions: int, sticky: int, topic: str
) -> Any:
    """Each row's partition (a numpy int32 array): the ``partition`` column where set, else
    Kafka's default partitioner on the key, else ``sticky`` (keyless rows)."""
    import numpy as np

    n = batch.num_rows
    keys = batch.column(plan.key_index) if plan.key_index is not None else None
    if keys is not None and keys.null_count < n:
        placed = np.frombuffer(partition_keys(keys, partitions), dtype="<i4").copy()
        placed[placed < 0] = sticky
    else:
        placed = np.full(n, sticky, dtype=np.int32)
    if plan.partition_index is not None:
        column = batch.column(plan.partition_index)
        if column.null_count < n:
            given = column.to_numpy(zero_copy_only=False)
            valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            chosen = np.where(valid, np.nan_to_num(given, nan=0), 0).astype(np.int64)
            bad = np.flatnonzero(valid & ((chosen < 0) | (chosen >= partitions)))
            if bad.size:
                row, p = int(bad[0]), int(chosen[bad[0]])
                if p < 0:
                    raise WriteOptionError(
                        f"column 'partition': row {row_base + row} has partition {p}; "
                        "partitions are >= 0 (or null for the partitioner)"
                    )
                raise DeliveryError(
                    f"cannot produce row {row_base + row} (topic '{topic}'): partition "
                    f"{p} does not exist (the topic has {partitions})"
                )
            placed = np.where(valid, chosen, placed).astype(np.int32)
    return placed


def _by_topic(
    plan: WritePlan, batch: pa.RecordBatch, row_base: int
) -> list[tuple[str, pa.RecordBatch, int]]:
    """``batch`` split by topic: (topic, its rows in order, the first row's number)."""
    if plan.topic is not None:
        return [(plan.topic, batch, row_base)]
    import pyarrow.compute as pc

    assert plan.topic_index is not None
    topics = batch.column(plan.topic_index)
    empty = pc.fill_null(pc.equal(topics, ""), True)  # null or empty
    if pc.any(empty).as_py():
        row = int(pc.index(empty, True).as_py())
        raise WriteOptionError(
            f"row {row_base + row} has a null or empty 'topic' column and no "
            f"'{TOPIC_OPTION}' option is set"
        )
    names = topics.unique().to_pylist()
    if len(names) == 1:
        return [(str(names[0]), batch, row_base)]
    return [(str(t), batch.filter(pc.equal(topics, t)), row_base) for t in sorted(names)]


class _Encoder:
    """Places, encodes and appends one task's rows to its producer (one thread)."""

    def __init__(self, plan: WritePlan, settings: BatchSettings, producer: BatchProducer) -> None:
        self.plan = plan
        self.settings = settings
        self.producer = producer
        self.counts: dict[str, int] = {}
        self.sticky: dict[str, int] = {}

    def partitions_of(self, topic: str) -> int:
        count = self.counts.get(topic)
        if count is None:
            count = self.producer.num_partitions(topic)
            self.counts[topic] = count
            self.sticky[topic] = random.randrange(count)
        return count

    def add(self, topic: str, batch: pa.RecordBatch, row_base: int) -> None:
        import numpy as np

        plan, producer = self.plan, self.producer
        n = batch.num_rows
        partitions = self.partitions_of(topic)
        sticky = self.sticky[topic]
        placed = _placement(plan, batch, row_base, partitions, sticky, topic)
        self.sticky[topic] = (sticky + 1) % partitions  # keyless: the next batch, the next one
        values = column_spec(batch.column(plan.value_index))
        keys = column_spec(batch.column(plan.key_index)) if plan.key_index is not None else None
        headers = None
        if plan.headers_index is not None:
            try:
                encoded = encode_headers(batch.column(plan.headers_index), row_base)
            except ValueError as exc:
                raise WriteOptionError(str(exc)) from exc
            headers = column_spec(encoded)
        first = int(placed[0])
        if bool((placed == first).all()):
            groups = [(first, 0, n)]
            rows = None
        else:
            order = np.argsort(placed, kind="stable")
            counts = np.bincount(placed, minlength=partitions)
            ends = np.cumsum(counts)
            groups = [
                (p, int(ends[p] - counts[p]), int(ends[p])) for p in range(partitions) if counts[p]
            ]
            rows = order.astype("<i8").tobytes()
        now_ms = int(time.time() * 1000)  # the rows' CreateTime
        for p, begin, stop in groups:
            at = begin
            while at < stop:
                # continue the partition's batch not sent yet, if it has room (merging)
                delta, ts_delta, room = producer.open_batch(topic, p, now_ms)
                records, count = encode_records(
                    keys, values, rows, at, stop, room, headers, delta, ts_delta
                )
                if delta and len(records) > room:  # one record larger than the room left
                    producer.close_batch(topic, p)
                    continue
                producer.append_records(topic, p, records, count, now_ms)
                at += count


COALESCE_ROWS = 4096
"""Arrow batches smaller than this are concatenated (in order) up to this many rows before
they are placed and encoded: the per-batch work (placement, sorting by partition, the
encoder's calls) is paid once per 4096 rows, not once per tiny batch."""


def _coalesced(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` without the empty ones, consecutive small ones concatenated (rows in
    order) into batches of at least :data:`COALESCE_ROWS` rows (the last may be smaller)."""
    import pyarrow as pa

    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if not pending and batch.num_rows >= COALESCE_ROWS:
            yield batch
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= COALESCE_ROWS:
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, rows = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def write_rows(
    plan: WritePlan,
    settings: BatchSettings,
    batches: Iterator[pa.RecordBatch],
    transactional: Transactional | None = None,
) -> WriteResult:
    """Produce every row of ``batches`` as whole record batches and wait until each is
    acknowledged; with ``transactional``, inside a transaction left open (the producer is
    created at the first row, so a task without rows opens no transaction).

    Raises :class:`WriteOptionError` for a bad row and :class:`DeliveryError` when a batch is
    refused or not acknowledged in time (Spark retries the task)."""
    producer: BatchProducer | None = None
    encoder: _Encoder | None = None
    taken = 0  # rows taken from the batches so far
    try:
        for batch in _coalesced(batches):
            n = batch.num_rows
            row_base = taken
            taken += n
            if encoder is None:
                producer = BatchProducer(
                    plan.bootstrap_servers,
                    acks=settings.acks,
                    idempotent=settings.idempotent,
                    transactional_id=(
                        transactional.transactional_id if transactional is not None else None
                    ),
                    transaction_timeout_ms=(
                        transactional.timeout_ms if transactional is not None else 60_000
                    ),
                    request_timeout_ms=settings.request_timeout_ms,
                    delivery_timeout_ms=settings.delivery_timeout_ms,
                    retry_backoff_ms=settings.retry_backoff_ms,
                    buffer_bytes=settings.buffer_bytes,
                    client_id=settings.client_id,
                    security=wire_security(plan.producer_options),
                    batch_bytes=settings.batch_bytes,
                    codec=settings.codec,
                    max_in_flight=settings.max_in_flight,
                )
                encoder = _Encoder(plan, settings, producer)
            for topic, rows, base in _by_topic(plan, batch, row_base):
                encoder.add(topic, rows, base)
        if producer is None or encoder is None:
            return WriteResult(rows=0)
        acked = producer.flush()
        if acked != taken:
            raise DeliveryError(f"only {acked} of {taken} rows were acknowledged")
        return WriteResult(
            taken,
            producer.producer_id,
            producer.producer_epoch,
            producer.written(),
            dict(encoder.counts),
        )
    except ProduceError as exc:
        acked = producer.acked_records if producer is not None else 0
        raise DeliveryError(
            f"{taken - acked} of {taken} rows were not acknowledged by the cluster at "
            f"{plan.bootstrap_servers}: {exc}"
        ) from exc
    finally:
        if producer is not None:
            producer.close()


def write_record_batches(
    plan: WritePlan, settings: BatchSettings, batches: Iterator[pa.RecordBatch]
) -> MillraceWriteCommitMessage:
    """At-least-once: :func:`write_rows` without a transaction, as the task's commit
    message."""
    return MillraceWriteCommitMessage(rows=write_rows(plan, settings, batches).rows)
