"""Kafka record batches (magic v2), as bytes: header view, framing, patching, encoding and
decoding.

Theory of operation. The broker's hot path never decodes individual records. A produce
request carries a ``records`` blob that is a concatenation of record batches; the broker
reads each batch's 61-byte header with one ``struct.unpack_from`` (``iter_batches`` checks
the framing and the magic), and the CRC-32C covers ``attributes`` to the end of the batch, so
``baseOffset``, ``batchLength``, ``partitionLeaderEpoch`` and ``magic`` can be patched in
place without recomputing it. Only ``LogAppendTime`` requires rewriting a CRC-covered field
(``maxTimestamp`` and the timestamp-type attribute bit), after which the CRC is recomputed,
as Kafka does. Validating a payload before an append (Kafka's ``LogValidator``) is the log's:
:mod:`broker.log.log_validator`; this module keeps the Produce request's own rule per version
(``check_produce_payload``, Kafka's ``ProduceRequest.validateRecords``).

Record-level decoding (``decode_records``) exists for the places whose semantics need it:
control records, compaction, ``dump-log`` and tests. Decompression there is bounded.

Batch layout (offsets in bytes)::

    0 baseOffset int64        8 batchLength int32      12 partitionLeaderEpoch int32
   16 magic int8             17 crc uint32            21 attributes int16
   23 lastOffsetDelta int32  27 firstTimestamp int64  35 maxTimestamp int64
   43 producerId int64       51 producerEpoch int16   53 baseSequence int32
   57 recordCount int32      61 records...

Concurrency: pure functions over buffers; callers own the buffers they patch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from broker.protocol import compression
from broker.protocol.errors import ErrorCode, KafkaError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The fixed header of one v2 record batch, plus its position in the buffer it came from.

    A named tuple, not a dataclass: every produced batch and every header a fetch scans
    makes one, and a frozen dataclass's generated ``__init__`` cost three times the tuple's
    construction (a field at a time through ``object.__setattr__``). Immutable; compare
    headers with headers only (a tuple compares equal to a plain tuple of its fields)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int = 0

    @property
    def size(self) -> int:
        """Total bytes of the batch including the 12-byte log overhead."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


class CorruptRecordError(KafkaError):
    """A batch whose framing, magic or CRC is wrong."""

    code = ErrorCode.corrupt_message


class UnsupportedMagicError(KafkaError):
    """A batch in the pre-0.11 message formats (magic 0 or 1)."""

    code = ErrorCode.unsupported_for_message_format


class InvalidRecordError(KafkaError):
    code = ErrorCode.invalid_record


class UnsupportedCompressionTypeError(KafkaError):
    """A codec the broker cannot use here: unknown attribute bits (5-7), or zstd in a Produce
    request older than v7 (Kafka's ProduceRequest.validateRecords)."""

    code = ErrorCode.unsupported_compression_type


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Unpack the batch header at ``position`` (the caller has checked 61 bytes exist)."""
    return BatchHeader(*HEADER.unpack_from(buf, position), position=position)  # type: ignore[misc]


def iter_batches(
    buf: bytes | bytearray | memoryview, *, allow_partial_tail: bool = False
) -> Iterator[BatchHeader]:
    """Walk the batches of a ``records`` blob without checking CRCs.

    A truncated batch raises CorruptRecordError, unless ``allow_partial_tail`` (a fetch
    response may end with a partial batch), in which case iteration just stops.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        if end - pos < HEADER_SIZE:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"truncated record batch header at byte {pos}")
        header = read_header(buf, pos)
        if header.magic != 2:
            raise UnsupportedMagicError(
                f"record batch magic {header.magic} is not supported (only magic 2)"
            )
        if header.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record batch length {header.batch_length} too small")
        if pos + header.size > end:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"record batch at byte {pos} runs past the end")
        yield header
        pos += header.size


def compute_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> int:
    start = header.position + ATTRIBUTES_OFFSET
    return crc32c.crc32c(memoryview(buf)[start : header.position + header.size])


def crc_ok(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    return compute_crc(buf, header) == header.crc


def check_produce_payload(version: int, data: bytes | None) -> None:
    """Kafka's ``ProduceRequest.validateRecords`` for Produce v3+: exactly one batch, magic 2,
    no zstd before v7. Raises the KafkaError the partition is answered with."""
    if not data:
        raise InvalidRecordError(
            f"Produce v{version} requests must have at least one record batch per partition"
        )
    if len(data) > MAGIC_OFFSET and data[MAGIC_OFFSET] != 2:
        raise InvalidRecordError(
            f"Produce v{version} requests may only contain record batches with magic 2"
        )
    first = True
    for header in iter_batches(data):
        if not first:
            raise InvalidRecordError(
                f"Produce v{version} requests may contain exactly one record batch per partition"
            )
        first = False
        if header.compression == compression.ZSTD and version < 7:
            raise UnsupportedCompressionTypeError(
                f"Produce v{version} requests may not use zstd compression"
            )


def set_base_offset(buf: bytearray | memoryview, header: BatchHeader, base_offset: int) -> None:
    _I64.pack_into(buf, header.position, base_offset)


def set_partition_leader_epoch(
    buf: bytearray | memoryview, header: BatchHeader, epoch: int
) -> None:
    _I32.pack_into(buf, header.position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, header: BatchHeader, now_ms: int) -> None:
    """Mark the batch LogAppendTime with ``maxTimestamp = now`` and recompute its CRC."""
    attrs = header.attributes | TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, header.position + ATTRIBUTES_OFFSET, attrs)
    _I64.pack_into(buf, header.position + MAX_TIMESTAMP_OFFSET, now_ms)
    crc = crc32c.crc32c(
        memoryview(buf)[header.position + ATTRIBUTES_OFFSET : header.position + header.size]
    )
    _U32.pack_into(buf, header.position + CRC_OFFSET, crc)


# --- record-level encoding and decoding ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)
    v &= (1 << 64) - 1
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptRecordError("record field runs past the end of its batch")
    return bytes(buf[pos : pos + n]), pos + n


def batch_payload(
    buf: bytes | bytearray | memoryview, header: BatchHeader, max_bytes: int = 64 * 2**20
) -> bytes:
    """The (decompressed) record bytes of a batch, bounded by ``max_bytes``."""
    raw = bytes(memoryview(buf)[header.position + HEADER_SIZE : header.position + header.size])
    if header.compression == 0:
        return raw
    return compression.decompress(header.compression, raw, max_bytes)


def decode_records(
    buf: bytes | bytearray | memoryview, header: BatchHeader, max_bytes: int = 64 * 2**20
) -> list[Record]:
    """Decode every record of a batch (decompressing at most ``max_bytes``)."""
    data = batch_payload(buf, header, max_bytes)
    out: list[Record] = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = _read_varint(data, pos)
        end = pos + length
        if length < 0 or end > len(data):
            raise CorruptRecordError("record runs past the end of its batch")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(data, pos)
        off_delta, pos = _read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        n_headers, pos = _read_varint(data, pos)
        hdrs: list[tuple[str, bytes | None]] = []
        for _h in range(max(n_headers, 0)):
            hk, pos = _read_bytes(data, pos)
            hv, pos = _read_bytes(data, pos)
            hdrs.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != end:
            raise CorruptRecordError("record length does not match its fields")
        ts = (
            header.max_timestamp if header.is_log_append_time else header.first_timestamp + ts_delta
        )
        out.append(Record(header.base_offset + off_delta, ts, key, value, tuple(hdrs)))
    if pos != len(data):
        raise CorruptRecordError("record batch holds bytes past its last record")
    return out


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to encode: key, value, timestamp (ms) and headers."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int = 0
    headers: tuple[tuple[str, bytes | None], ...] = ()


def encode_batch(
    records: Sequence[SimpleRecord],
    *,
    base_offset: int = 0,
    compression_type: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """Build one v2 batch (used by internal writers, tools and tests)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    first_ts = records[0].timestamp
    max_ts = max(r.timestamp for r in records)
    body = bytearray()
    for i, r in enumerate(records):
        rec = bytearray(b"\x00")
        _write_varint(rec, r.timestamp - first_ts)
        _write_varint(rec, i)
        for field in (r.key, r.value):
            if field is None:
                _write_varint(rec, -1)
            else:
                _write_varint(rec, len(field))
                rec += field
        _write_varint(rec, len(r.headers))
        for hk, hv in r.headers:
            hkb = hk.encode()
            _write_varint(rec, len(hkb))
            rec += hkb
            if hv is None:
                _write_varint(rec, -1)
            else:
                _write_varint(rec, len(hv))
                rec += hv
        _write_varint(body, len(rec))
        body += rec
    payload = (
        compression.compress(compression_type, bytes(body)) if compression_type else bytes(body)
    )
    attrs = compression_type
    if log_append_time:
        attrs |= TIMESTAMP_TYPE_MASK
    if transactional:
        attrs |= TRANSACTIONAL_MASK
    if control:
        attrs |= CONTROL_MASK
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    out = bytearray(
        HEADER.pack(
            base_offset,
            batch_length,
            partition_leader_epoch,
            2,
            0,
            attrs,
            len(records) - 1,
            first_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    out += payload
    crc = crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:])
    _U32.pack_into(out, CRC_OFFSET, crc)
    return bytes(out)
