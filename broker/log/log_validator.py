"""Record validation before an append (Kafka's ``LogValidator``, with the batch checks of
``UnifiedLog.analyzeAndValidateRecords``).

Theory of operation. A leader appending a client's produce payload runs
:func:`validate_for_append` first (the replica manager calls it): framing and magic 2 (the
protocol's ``iter_batches``), the batch size against ``max.message.bytes``, a known codec,
the CRC-32C, the declared record count, no control batch, a sequence number with every
producer id, every record walked (:func:`check_batch_records`, in C when
``broker/protocol/_record_check.c`` is built, after a bounded decompression), timestamps
within ``message.timestamp.{before,after}.max.ms`` of now (CreateTime topics), and a key on
every record of a compacted topic. The log then assigns the offsets
(:func:`assign_offsets`: ``baseOffset``, ``partitionLeaderEpoch`` and LogAppendTime patched
in the caller's buffer, one header at a time, never a record). A follower's append checks the
leader's batches instead (:func:`check_replicated_batches`: increasing offsets from the log
end, every CRC).

Every check works per batch on the headers; only :func:`check_batch_records` and the keys of
a compacted topic look at records. The errors are :class:`~broker.protocol.errors.KafkaError`
subclasses whose ``code`` the produce response carries.

Concurrency: pure functions over buffers; callers own the buffers they patch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from broker.log.errors import UnexpectedAppendOffsetError
from broker.protocol import compression
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
    crc_ok,
    decode_records,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from broker.types import TopicPartition

__all__ = [
    "MAX_DECOMPRESSED_BYTES",
    "AppendInfo",
    "InvalidTimestampError",
    "RecordTooLargeError",
    "ValidatedBatches",
    "assign_offsets",
    "check_batch_records",
    "check_control_batches",
    "check_replicated_batches",
    "validate_for_append",
]


class RecordTooLargeError(KafkaError):
    code = ErrorCode.message_too_large


class InvalidTimestampError(KafkaError):
    code = ErrorCode.invalid_timestamp


# The most a compressed batch may expand to when the broker decompresses it to validate its
# records (Kafka sets no such bound; a decompression bomb would otherwise cost unbounded
# memory, and a 1 MiB gzip or zstd batch can claim gigabytes). Legitimate batches are far
# smaller: clients bound the uncompressed size of a batch (librdkafka batch.size 1 MB, the
# Java client's 16 KiB), and 32 MiB is 32 times the default max.message.bytes. A codec may
# hold its output twice while finishing, so a bomb costs the broker up to ~64 MiB, briefly.
MAX_DECOMPRESSED_BYTES = 32 * 2**20


# --- a client's payload ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValidatedBatches:
    """What the log needs to know about a validated produce payload."""

    headers: list[BatchHeader]
    record_count: int
    max_timestamp: int
    shallow_offset_of_max_timestamp_index: int  # index of the batch holding max_timestamp


def validate_for_append(
    buf: bytes | bytearray | memoryview,
    *,
    max_batch_bytes: int,
    now_ms: int,
    timestamp_before_max_ms: int,
    timestamp_after_max_ms: int,
    log_append_time: bool,
    compacted: bool,
) -> ValidatedBatches:
    """Validate a produce payload: framing, magic 2, CRC, size, timestamps, record counts.

    Raises a KafkaError subclass whose ``code`` the produce handler returns.
    """
    headers: list[BatchHeader] = []
    total = 0
    max_ts = NO_TIMESTAMP
    max_index = 0
    for header in iter_batches(buf):  # the checks inline: this loop is the produce hot path
        if header.size > max_batch_bytes:
            raise RecordTooLargeError(
                f"record batch of {header.size} bytes exceeds max.message.bytes {max_batch_bytes}"
            )
        if header.compression not in compression.NAMES:
            raise UnsupportedCompressionTypeError(
                f"record batch at byte {header.position} uses unknown codec {header.compression}"
            )
        if not crc_ok(buf, header):
            raise CorruptRecordError(f"record batch at byte {header.position} fails its CRC")
        if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
            raise InvalidRecordError(
                f"record batch declares {header.record_count} records with lastOffsetDelta "
                f"{header.last_offset_delta}"
            )
        if header.is_control:
            raise InvalidRecordError("clients may not produce control batches")
        if header.has_producer_id and header.base_sequence < 0:
            raise InvalidRecordError(
                f"invalid sequence number {header.base_sequence} in a record batch with "
                f"producer id {header.producer_id}"
            )
        check_batch_records(buf, header)
        if not log_append_time:
            _check_timestamp(header, now_ms, timestamp_before_max_ms, timestamp_after_max_ms)
        if compacted:
            _check_keys_present(buf, header)
        if header.max_timestamp > max_ts:
            max_ts = header.max_timestamp
            max_index = len(headers)
        headers.append(header)
        total += header.record_count
    if not headers:
        raise CorruptRecordError("produce request carried no record batch")
    return ValidatedBatches(headers, total, max_ts, max_index)


def check_batch_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Check that the batch's records (decompressed, at most ``MAX_DECOMPRESSED_BYTES``) are
    exactly ``recordCount`` well-formed records, as Kafka's LogValidator does by iterating
    them: InvalidRecordError (INVALID_RECORD) for a malformed record, DecompressionError
    (CORRUPT_MESSAGE) for a payload that does not decompress or expands past the bound."""
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    if header.compression == compression.NONE:
        payload: bytes | memoryview = memoryview(buf)[start:end]
    else:
        payload = compression.decompress(
            header.compression, bytes(memoryview(buf)[start:end]), MAX_DECOMPRESSED_BYTES
        )
    try:
        _check_records(payload, header.record_count)
    except ValueError as exc:
        raise InvalidRecordError(
            f"record batch at byte {header.position} (declaring {header.record_count} records) "
            f"is malformed: {exc}"
        ) from exc


def _check_records_py(data: bytes | memoryview, count: int) -> None:
    """The pure-Python twin of ``_record_check.check`` (see broker/protocol/_record_check.c):
    ``data`` holds exactly ``count`` well-formed records (ValueError otherwise)."""
    end = len(data)
    pos = 0
    for index in range(count):
        pos = _check_record_py(data, pos, end, index)
    if pos != end:
        raise ValueError("bytes remain after the last record")


def _check_record_py(data: bytes | memoryview, pos: int, end: int, index: int) -> int:
    """Check the record at ``pos`` (the ``index``-th); returns the position after it."""
    size, pos = _varint_py(data, pos, end, 5)
    if size < 0 or size > end - pos:
        raise ValueError("record length runs past the end of the batch")
    rec_end = pos + size
    if pos >= rec_end:
        raise ValueError("record too short for its attributes")
    pos += 1
    _timestamp_delta, pos = _varint_py(data, pos, rec_end, 10)
    offset_delta, pos = _varint_py(data, pos, rec_end, 5)
    if offset_delta != index:
        raise ValueError("record offset deltas are not 0, 1, 2, ... in order")
    for _kv in range(2):
        pos = _skip_field_py(
            data, pos, rec_end, -1, "key or value length runs past the end of its record"
        )
    headers, pos = _varint_py(data, pos, rec_end, 5)
    if headers < 0:
        raise ValueError("negative header count")
    for _h in range(headers):
        pos = _skip_field_py(
            data, pos, rec_end, 0, "header key length is negative or runs past its record"
        )
        pos = _skip_field_py(
            data, pos, rec_end, -1, "header value length runs past the end of its record"
        )
    if pos != rec_end:
        raise ValueError("record fields do not fill its length")
    return pos


def _skip_field_py(
    data: bytes | memoryview, pos: int, limit: int, minimum: int, message: str
) -> int:
    """Skip a length-prefixed field (length ``>= minimum``, -1 meaning null, within
    ``limit``; ValueError ``message`` otherwise); returns the position after it."""
    n, pos = _varint_py(data, pos, limit, 5)
    if n < minimum or n > limit - pos:
        raise ValueError(message)
    return pos + max(n, 0)


def _varint_py(data: bytes | memoryview, pos: int, limit: int, max_bytes: int) -> tuple[int, int]:
    """The zigzag varint (``max_bytes`` 5) or varlong (10) at ``pos``, read before ``limit``,
    and the position after it."""
    raw = shift = n = 0
    while True:
        if pos >= limit:
            raise ValueError("truncated varint")
        if n == max_bytes:
            raise ValueError("varint is too long" if max_bytes == 5 else "varlong is too long")
        b = data[pos]
        pos += 1
        n += 1
        if n == max_bytes and b > (0x0F if max_bytes == 5 else 0x01):
            raise ValueError(
                "varint overflows 32 bits" if max_bytes == 5 else "varlong overflows 64 bits"
            )
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    bits = 32 if max_bytes == 5 else 64
    raw &= (1 << bits) - 1
    return (raw >> 1) ^ -(raw & 1), pos


try:
    from broker.protocol._record_check import check as _check_records
except ImportError:  # built without a C compiler: the same rules in Python
    _check_records = _check_records_py


def _check_timestamp(header: BatchHeader, now_ms: int, before_ms: int, after_ms: int) -> None:
    ts = header.max_timestamp
    if ts == NO_TIMESTAMP:
        return
    if now_ms - ts > before_ms or ts - now_ms > after_ms:
        raise InvalidTimestampError(
            f"timestamp {ts} of a batch is out of the allowed range around {now_ms}"
        )


def _check_keys_present(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    for record in decode_records(buf, header):
        if record.key is None:
            raise InvalidRecordError("compacted topics reject records without a key")


def check_control_batches(batches: list[BatchHeader], *, from_coordinator: bool) -> None:
    """Only a coordinator appends control batches (transaction markers) as leader (Kafka's
    ``LogValidator.validateBatch`` for ``AppendOrigin.CLIENT``)."""
    if not from_coordinator:
        for header in batches:  # a loop, not any(): one batch per produce, on the hot path
            if header.is_control:
                raise InvalidRecordError("clients may not produce control batches")


# --- offsets: assigned by the leader, checked from the leader ------------------------------


class AppendInfo(NamedTuple):
    """The batches of one append as the log writes them (Kafka's ``LogAppendInfo``): the
    offsets, the largest timestamp and the last offset of the first batch carrying it, the
    bytes ``[start, end)`` of the buffer, and ``(last offset, timestamp, size)`` per batch
    for the indexes."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    start: int
    end: int
    batch_infos: list[tuple[int, int, int]]


def assign_offsets(
    buf: bytearray | memoryview,
    batches: list[BatchHeader],
    *,
    first_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None,
) -> AppendInfo:
    """Give the batches (contiguous in ``buf``) the offsets from ``first_offset`` on, stamp
    ``partitionLeaderEpoch``, and with ``log_append_time_ms`` (LogAppendTime topics) make it
    every batch's ``maxTimestamp``, all patched in ``buf``."""
    next_offset = first_offset
    start = batches[0].position
    position = start
    infos: list[tuple[int, int, int]] = []
    max_ts = NO_TIMESTAMP
    offset_of_max = first_offset
    for header in batches:
        if header.position != position:
            raise ValueError("batches must be contiguous in the buffer")
        last = next_offset + header.last_offset_delta
        set_base_offset(buf, header, next_offset)
        set_partition_leader_epoch(buf, header, leader_epoch)
        if log_append_time_ms is not None:
            set_log_append_time(buf, header, log_append_time_ms)
            ts = log_append_time_ms
        else:
            ts = header.max_timestamp
        if ts > max_ts:
            max_ts, offset_of_max = ts, last
        infos.append((last, ts, header.size))
        position += header.size
        next_offset = last + 1
    return AppendInfo(first_offset, next_offset - 1, max_ts, offset_of_max, start, position, infos)


def check_replicated_batches(
    view: memoryview,
    batches: list[BatchHeader],
    *,
    log_end_offset: int,
    topic_partition: TopicPartition,
) -> AppendInfo:
    """Check batches fetched from the leader, offsets already assigned: contiguous in
    ``view``, the first at or after ``log_end_offset`` and offsets increasing
    (UnexpectedAppendOffsetError), every CRC right (CorruptRecordError)."""
    if batches[0].base_offset < log_end_offset:
        raise UnexpectedAppendOffsetError(
            f"{topic_partition}: follower append at {batches[0].base_offset} below "
            f"log end offset {log_end_offset}"
        )
    start = batches[0].position
    position = start
    expected = log_end_offset
    infos: list[tuple[int, int, int]] = []
    max_ts = NO_TIMESTAMP
    offset_of_max = batches[0].base_offset
    for header in batches:
        if header.position != position:
            raise ValueError("batches must be contiguous in the buffer")
        if header.base_offset < expected or header.last_offset_delta < 0:
            raise UnexpectedAppendOffsetError(
                f"{topic_partition}: follower batch offsets go backwards at "
                f"{header.base_offset} (expected >= {expected})"
            )
        crc = crc32c.crc32c(
            view[header.position + ATTRIBUTES_OFFSET : header.position + header.size]
        )
        if crc != header.crc:
            raise CorruptRecordError(
                f"{topic_partition}: follower batch at {header.base_offset} fails its CRC"
            )
        last = header.base_offset + header.last_offset_delta
        if header.max_timestamp > max_ts:
            max_ts, offset_of_max = header.max_timestamp, last
        infos.append((last, header.max_timestamp, header.size))
        position += header.size
        expected = last + 1
    first = batches[0].base_offset
    return AppendInfo(first, expected - 1, max_ts, offset_of_max, start, position, infos)
