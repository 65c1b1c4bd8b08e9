"""Rewriting a v2 record batch with a subset of its records (log compaction's filter).

The log cleaner keeps some records of a batch and drops the others. As in Kafka's
``MemoryRecords.filterTo``, a rewritten batch keeps everything that identifies it: its base
offset *and its last offset* (``lastOffsetDelta`` is preserved even when the last record goes,
so a producer's last sequence number survives), producer id, epoch, base sequence,
partition leader epoch, the transactional and control flags, the timestamp type, and its
compression codec (the retained records are compressed again with it). Records keep their
offset deltas; their bytes are copied as they are, except the timestamp delta when the base
timestamp changes.

Delete horizon (KIP-534). When the cleaner first retains a tombstone, or a transaction marker
it may later remove, it stamps the batch with ``deleteHorizonMs`` = cleaning time +
``delete.retention.ms``: attribute bit 6 (``DELETE_HORIZON_MASK``) is set and the batch's
``firstTimestamp`` holds the horizon, so every record's timestamp delta is rewritten relative
to it (a record's timestamp stays ``firstTimestamp + delta``). A later cleaning past the
horizon may drop the tombstone or marker.

A batch that must stay although none of its records does (the last batch of an active
producer, or the last batch of a cleaning round) becomes an *empty* batch: the header alone,
``recordCount`` 0, no compression, both timestamps set to the original ``maxTimestamp``
(Kafka's ``DefaultRecordBatch.writeEmptyHeader``).

Record layout (v2)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value | headerCount varint | headers

Concurrency: pure functions over byte buffers.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import crc32c

from broker.protocol import compression
from broker.protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    CorruptRecordError,
    batch_payload,
)

__all__ = [
    "DELETE_HORIZON_MASK",
    "RawRecord",
    "delete_horizon_ms",
    "empty_batch",
    "rebuild_batch",
    "records_of",
    "split_records",
]

DELETE_HORIZON_MASK = 0x40
_U32 = struct.Struct(">I")


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The batch's delete horizon (KIP-534), or None when it has none."""
    return header.first_timestamp if header.attributes & DELETE_HORIZON_MASK else None


class RawRecord(NamedTuple):
    """One record of a decompressed batch payload, located but not copied.

    ``start``/``end`` bound the whole record (its length varint included); ``body`` is where
    the key length starts (everything from there on is copied unchanged by a rewrite).
    """

    start: int
    end: int
    body: int
    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    has_value: bool


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: (value, next position)."""
    b = buf[pos]
    if b < 0x80:  # one byte: the common case for lengths and small deltas
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def _put_varint(out: bytearray, value: int) -> None:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def split_records(payload: bytes, count: int) -> list[RawRecord]:
    """Locate the ``count`` records of a decompressed batch payload (keys copied out, values
    only tested for null). Raises CorruptRecordError if the records do not tile ``payload``.

    The hot loop of log compaction: one-byte varints (the usual lengths and deltas) are
    decoded inline, longer ones by :func:`_varint` (a call per record would cost a fifth)."""
    out: list[RawRecord] = []
    append = out.append
    pos = 0
    size = len(payload)
    varint = _varint
    try:
        for _ in range(count):
            b = payload[pos]
            length, body_start = (
                ((b >> 1) ^ -(b & 1), pos + 1) if b < 0x80 else varint(payload, pos)
            )
            end = body_start + length
            if length < 0 or end > size:
                raise CorruptRecordError("record runs past the end of its batch")
            attributes = payload[body_start]
            p = body_start + 1
            b = payload[p]
            ts_delta, p = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else varint(payload, p)
            b = payload[p]
            off_delta, body = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else varint(payload, p)
            b = payload[body]
            key_len, p = ((b >> 1) ^ -(b & 1), body + 1) if b < 0x80 else varint(payload, body)
            if key_len >= 0:
                key: bytes | None = payload[p : p + key_len]
                p += key_len
            else:
                key = None
            # a null value is the varint -1: the single byte 0x01
            append(RawRecord(pos, end, body, attributes, ts_delta, off_delta, key, payload[p] != 1))
            pos = end
    except IndexError as exc:
        raise CorruptRecordError("truncated record") from exc
    if pos != size:
        raise CorruptRecordError("record batch holds bytes past its last record")
    return out


def records_of(
    buf: bytes | bytearray | memoryview, header: BatchHeader, max_bytes: int
) -> tuple[bytes, list[RawRecord]]:
    """The decompressed payload of a batch and its located records."""
    payload = batch_payload(buf, header, max_bytes)
    return payload, split_records(payload, header.record_count)


def rebuild_batch(
    header: BatchHeader,
    payload: bytes,
    kept: Sequence[RawRecord],
    *,
    delete_horizon: int | None,
) -> bytes:
    """A batch holding only ``kept`` (non-empty, in order) of ``header``'s records, whose
    decompressed ``payload`` they index; with ``delete_horizon`` the batch is stamped with it
    (see the module docstring). Base and last offsets and the producer fields are preserved.
    """
    if not kept:
        raise ValueError("rebuild_batch needs at least one record; use empty_batch")
    old_base_ts = header.first_timestamp
    log_append_time = header.is_log_append_time
    if delete_horizon is not None:
        base_ts = delete_horizon
    elif header.attributes & DELETE_HORIZON_MASK:
        base_ts = old_base_ts  # keep an existing horizon
    else:
        base_ts = old_base_ts + kept[0].timestamp_delta
    body = bytearray()
    max_ts = -1
    for r in kept:
        ts = old_base_ts + r.timestamp_delta
        max_ts = max(max_ts, ts)
        delta = ts - base_ts
        if delta == r.timestamp_delta:
            body += payload[r.start : r.end]
            continue
        rec = bytearray((r.attributes,))
        _put_varint(rec, delta)
        _put_varint(rec, r.offset_delta)
        rec += payload[r.body : r.end]
        _put_varint(body, len(rec))
        body += rec
    codec = header.compression
    data = compression.compress(codec, bytes(body)) if codec else bytes(body)
    attributes = header.attributes
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_MASK
    if log_append_time:
        max_ts = header.max_timestamp
    return _assemble(header, attributes, base_ts, max_ts, len(kept), data)


def empty_batch(header: BatchHeader) -> bytes:
    """The header of ``header``'s batch with no records (see the module docstring)."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    ts = header.max_timestamp
    return _assemble(header, attributes & ~COMPRESSION_MASK, ts, ts, 0, b"")


def _assemble(
    header: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, data: bytes
) -> bytes:
    out = bytearray(
        HEADER.pack(
            header.base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(data),
            header.partition_leader_epoch,
            2,
            0,
            attributes,
            header.last_offset_delta,
            base_ts,
            max_ts,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            count,
        )
    )
    out += data
    _U32.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
