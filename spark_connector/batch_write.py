"""The batch producer's write path of ``format("millrace")``: a task's Arrow batches placed
on partitions, encoded into whole v2 record batches a partition at a time (in C, through
:mod:`spark_connector.record_encoder`) and sent by its own
:class:`~spark_connector.kafka.producer.BatchProducer`, at-least-once.

``writer`` calls :func:`write_record_batches` when
:func:`~spark_connector.write_plan.batch_settings` allows (see the ``writer`` module
docstring for when it does). Runs on an executor, on the task's thread; the producer is
created, flushed and closed inside the call and never pickled.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from spark_connector.kafka.producer import BatchProducer, ProduceError
from spark_connector.record_encoder import build_batch, column_spec, encode_records, partition_keys
from spark_connector.write_outcome import DeliveryError, MillraceWriteCommitMessage
from spark_connector.write_plan import BatchSettings, WriteOptionError, WritePlan

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["write_record_batches"]


def _placement(
    plan: WritePlan, batch: pa.RecordBatch, row_base: int, partitions: int, sticky: int
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
                    f"cannot produce row {row_base + row} (topic '{plan.topic}'): partition "
                    f"{p} does not exist (the topic has {partitions})"
                )
            placed = np.where(valid, chosen, placed).astype(np.int32)
    return placed


def write_record_batches(
    plan: WritePlan, settings: BatchSettings, batches: Iterator[pa.RecordBatch]
) -> MillraceWriteCommitMessage:
    """Produce every row of ``batches`` as whole record batches (at-least-once) and wait
    until each is acknowledged: the body of ``write`` when :func:`batch_settings` allows.

    Each Arrow batch's rows are placed (:func:`_placement`), grouped by partition in their
    order, encoded a partition at a time into v2 record batches of up to ``batch.size`` bytes
    (``record_encoder``, in C) and appended to the task's :class:`BatchProducer`, which keeps
    each partition's batches in order and in flight one at a time. Raises
    :class:`WriteOptionError` for a bad row and :class:`DeliveryError` when a batch is refused
    or not acknowledged in time (Spark retries the task: at-least-once).
    """
    import numpy as np

    assert plan.topic is not None
    topic = plan.topic
    producer: BatchProducer | None = None
    partitions = sticky = 0
    taken = 0  # rows taken from the batches so far
    try:
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            row_base = taken
            taken += n
            if producer is None:
                producer = BatchProducer(
                    plan.bootstrap_servers,
                    acks=settings.acks,
                    idempotent=settings.idempotent,
                    request_timeout_ms=settings.request_timeout_ms,
                    delivery_timeout_ms=settings.delivery_timeout_ms,
                    retry_backoff_ms=settings.retry_backoff_ms,
                    buffer_bytes=settings.buffer_bytes,
                    client_id=settings.client_id,
                )
                partitions = producer.num_partitions(topic)
                sticky = random.randrange(partitions)
            placed = _placement(plan, batch, row_base, partitions, sticky)
            sticky = (sticky + 1) % partitions  # keyless rows: the next batch, the next one
            values = column_spec(batch.column(plan.value_index))
            keys = column_spec(batch.column(plan.key_index)) if plan.key_index is not None else None
            first = int(placed[0])
            if bool((placed == first).all()):
                groups = [(first, 0, n)]
                rows = None
            else:
                order = np.argsort(placed, kind="stable")
                counts = np.bincount(placed, minlength=partitions)
                ends = np.cumsum(counts)
                groups = [
                    (p, int(ends[p] - counts[p]), int(ends[p]))
                    for p in range(partitions)
                    if counts[p]
                ]
                rows = order.astype("<i8").tobytes()
            for p, begin, stop in groups:
                at = begin
                while at < stop:
                    records, count = encode_records(
                        keys, values, rows, at, stop, settings.batch_bytes
                    )
                    data = build_batch(
                        records,
                        count,
                        producer_id=producer.producer_id,
                        producer_epoch=producer.producer_epoch,
                        base_sequence=producer.next_sequence(topic, p),
                        codec=settings.codec,
                    )
                    producer.append(topic, p, data, count)
                    at += count
        if producer is None:
            return MillraceWriteCommitMessage(rows=0)
        acked = producer.flush()
        if acked != taken:
            raise DeliveryError(f"only {acked} of {taken} rows were acknowledged")
        return MillraceWriteCommitMessage(rows=taken)
    except ProduceError as exc:
        acked = producer.acked_records if producer is not None else 0
        raise DeliveryError(
            f"{taken - acked} of {taken} rows were not acknowledged by the cluster at "
            f"{plan.bootstrap_servers}: {exc}"
        ) from exc
    finally:
        if producer is not None:
            producer.close()
