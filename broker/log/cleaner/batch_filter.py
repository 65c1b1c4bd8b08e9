"""What the cleaner keeps of one batch (Kafka's ``LogCleaner`` record filter over
``MemoryRecords.filterTo``).

For every batch, in offset order, the filter decides its *retention*:

* ``RETAIN_EMPTY``: the batch stays even if none of its records does. That is the case for
  the last batch of each active producer (its sequence number and epoch must survive, or the
  producer would see OUT_OF_ORDER_SEQUENCE or be unfenced: for a producer whose last entry is
  a marker, the marker of its current epoch) and for the batch that ends the cleaning round
  (so the log's last offset is not lost);
* ``DELETE``: the whole batch goes: data of an aborted transaction, or a discardable
  transaction marker past its delete horizon;
* ``DELETE_EMPTY``: the batch goes only if none of its records stays.

and which records stay. A data record stays if it is past the end of the mapped section, or if
it is the latest record of its key and it either has a value or is a tombstone whose batch
has no delete horizon yet or one not reached. Records without a key are dropped (compacted
topics refuse them). A control batch keeps its marker unless it is deleted.

A batch whose records all stay is written unchanged, unless it holds a tombstone or a
discardable marker and has no delete horizon yet: it is then rewritten with one (cleaning
time + ``delete.retention.ms``, KIP-534), which starts the tombstone's last
``delete.retention.ms`` in the log. See :mod:`broker.protocol.batch_rewrite` for the rewrite.

Two record loops implement these rules: the Python one here (the reference) and, when the
round's offset map is the native one, :meth:`NativeOffsetMap.filter_records
<broker.log.cleaner.native>` for data batches (control batches always go through Python:
they are few and hold one record). Both make the same bytes.

Concurrency: owned by one cleaning round.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.log.cleaner.native import (
    is_native,
    rebuilt_batch,
    records_section,
)
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.transactions import CleanedTransactions
from broker.protocol.batch_rewrite import (
    RawRecord,
    delete_horizon_ms,
    empty_batch,
    rebuild_batch,
    records_of,
)
from broker.protocol.control_records import ControlType
from broker.protocol.records import BatchHeader

if TYPE_CHECKING:
    from broker.log.cleaner._native_cleaner import OffsetMap as NativeOffsetMap

__all__ = ["BatchFilter", "FilterStats", "ProducerTail", "Retention", "marker_type"]

_CONTROL_KEY = struct.Struct(">hh")


class Retention(enum.Enum):
    RETAIN_EMPTY = "retain-empty"
    DELETE = "delete"
    DELETE_EMPTY = "delete-empty"


@dataclass(frozen=True, slots=True)
class ProducerTail:
    """What must survive of an active producer (Kafka's ``LastRecord``): the last offset of
    its last data batch (None when its last entry is a marker) and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(slots=True)
class FilterStats:
    records_read: int = 0
    records_kept: int = 0
    batches_read: int = 0
    batches_kept: int = 0


def marker_type(records: list[RawRecord], payload: bytes) -> ControlType | None:
    """The control type of a control batch's first record (None when it has none or an
    unknown one: such a batch is treated as discardable, as Kafka treats an empty one)."""
    if not records:
        return None
    key = records[0].key
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    _version, type_id = _CONTROL_KEY.unpack_from(key)
    try:
        return ControlType(type_id)
    except ValueError:
        return None


class BatchFilter:
    """Decides, batch by batch in offset order, what a cleaning round keeps."""

    def __init__(
        self,
        offset_map: OffsetMap | NativeOffsetMap,
        transactions: CleanedTransactions,
        producers: Mapping[int, ProducerTail],
        *,
        now_ms: int,
        delete_retention_ms: int,
        round_end_offset: int,
        max_batch_bytes: int,
    ) -> None:
        self._map = offset_map
        self._native = offset_map if is_native(offset_map) else None
        self._txns = transactions
        self._producers = producers
        self._now = now_ms
        self._delete_retention_ms = delete_retention_ms
        self._round_end = round_end_offset
        self._max_batch_bytes = max_batch_bytes
        self.stats = FilterStats()

    def _is_producer_tail(self, header: BatchHeader) -> bool:
        tail = self._producers.get(header.producer_id)
        if tail is None:
            return False
        if tail.last_data_offset is not None:
            return header.last_offset == tail.last_data_offset
        return header.is_control and header.producer_epoch == tail.producer_epoch

    def _retention(self, header: BatchHeader, discard_records: bool) -> Retention:
        if (
            header.has_producer_id and self._is_producer_tail(header)
        ) or header.next_offset == self._round_end:
            return Retention.RETAIN_EMPTY
        if discard_records:
            return Retention.DELETE
        return Retention.DELETE_EMPTY

    def filter(self, buf: bytes | memoryview, header: BatchHeader) -> bytes | memoryview | None:
        """The bytes to write for the batch ``header`` of ``buf`` (the original bytes, a
        rewritten batch, an empty batch) or None to drop it."""
        if self._native is not None and not header.is_control:
            return self._filter_data_native(self._native, buf, header)
        stats = self.stats
        stats.batches_read += 1
        stats.records_read += header.record_count
        payload, records = records_of(buf, header, self._max_batch_bytes)
        horizon = delete_horizon_ms(header)
        now = self._now
        if header.is_control:
            control = marker_type(records, payload)
            can_discard = self._txns.on_control_batch(
                header.producer_id, header.last_offset, control
            )
            discard_records = can_discard and horizon is not None and horizon <= now
        else:
            can_discard = self._txns.on_data_batch(
                header.producer_id, header.is_transactional, header.last_offset
            )
            discard_records = can_discard
        retention = self._retention(header, discard_records)
        if retention is Retention.DELETE:
            return None

        if discard_records:
            kept: list[RawRecord] = []
        elif header.is_control:
            kept = records
        else:
            kept = self._kept_records(header, records, horizon)
        needs_horizon = horizon is None and (
            (can_discard and header.is_control) or any(not r.has_value for r in kept)
        )
        if kept:
            stats.batches_kept += 1
            stats.records_kept += len(kept)
            if len(kept) == len(records) and not needs_horizon:
                return memoryview(buf)[header.position : header.position + header.size]
            new_horizon = now + self._delete_retention_ms if needs_horizon else None
            return rebuild_batch(header, payload, kept, delete_horizon=new_horizon)
        if retention is Retention.RETAIN_EMPTY:
            stats.batches_kept += 1
            return empty_batch(header)
        return None

    def _filter_data_native(
        self, native: NativeOffsetMap, buf: bytes | memoryview, header: BatchHeader
    ) -> bytes | memoryview | None:
        """:meth:`filter` for a data batch, its records filtered by the native map."""
        stats = self.stats
        stats.batches_read += 1
        stats.records_read += header.record_count
        discard = self._txns.on_data_batch(
            header.producer_id, header.is_transactional, header.last_offset
        )
        retention = self._retention(header, discard)
        if retention is Retention.DELETE:
            return None
        if not discard:
            horizon = delete_horizon_ms(header)
            kept, records, first_ts, max_ts, stamped = native.filter_records(
                records_section(buf, header, self._max_batch_bytes),
                header.record_count,
                header.base_offset,
                horizon is None or self._now < horizon,
                header.first_timestamp,
                horizon is not None,
                self._now + self._delete_retention_ms,
            )
            if kept:
                stats.batches_kept += 1
                stats.records_kept += kept
                if records is None:  # every record stays, no horizon to stamp
                    return memoryview(buf)[header.position : header.position + header.size]
                return rebuilt_batch(header, records, kept, first_ts, max_ts, stamped=stamped)
        if retention is Retention.RETAIN_EMPTY:
            stats.batches_kept += 1
            return empty_batch(header)
        return None

    def _kept_records(
        self, header: BatchHeader, records: list[RawRecord], horizon: int | None
    ) -> list[RawRecord]:
        offset_map = self._map
        latest = offset_map.latest_offset
        base = header.base_offset
        retain_deletes = horizon is None or self._now < horizon
        kept: list[RawRecord] = []
        for r in records:
            offset = base + r.offset_delta
            if offset > latest:
                kept.append(r)
                continue
            key = r.key
            if key is None:
                continue
            if offset >= offset_map.get(key) and (r.has_value or retain_deletes):
                kept.append(r)
        return kept
