"""Kafka v2 record batches, decoded straight into Arrow column buffers (the fetch reader's hot
loop), with a pure-Python reference beside the C decoder in ``_native_records.c``.

Theory of operation. A Fetch response's ``records`` blob is a concatenation of record batches
(message format v2, KIP-98), the last of which Kafka may truncate. ``iter_batches`` walks the
61-byte batch headers; ``records_section`` hands back a batch's records bytes, decompressed
(codecs 1 gzip, 2 snappy, 3 lz4, 4 zstd; bounded by ``max_bytes``); a column builder's
``add`` decodes those records, keeping the ones whose offset is in the task's range, into
growable buffers already in Arrow's layout; ``take`` hands them out (the native builder its
buffers themselves, as read-only memoryviews; the Python one ``bytes``) and
``to_record_batch`` wraps them, without copying, as a ``pa.RecordBatch`` in Spark's Kafka
schema. CRCs are not checked (as librdkafka's default ``check.crcs=false``).

A whole response at once: a builder's ``add_batches`` walks the batches itself from a byte
position, passing over batches below the range and control batches, decoding the
uncompressed ones, and stopping when the builder is full, at a batch past the range, or at a
batch it leaves to its caller (compressed, or a header only :func:`iter_batches` reports
well); :func:`add_batches_reference` is that loop in Python, the native one runs it without
the GIL and without Python per batch. :func:`scan_batches` counts a response's complete
batches and the offset after them (for the pipelined next Fetch) the same way. Neither
filters aborted transactions: a read_committed response that lists some goes batch by batch
through :class:`AbortedFilter`.

Batch layout (big-endian, offsets in bytes)::

    0 baseOffset int64        8 batchLength int32      12 partitionLeaderEpoch int32
   16 magic int8             17 crc uint32            21 attributes int16
   23 lastOffsetDelta int32  27 baseTimestamp int64   35 maxTimestamp int64
   43 producerId int64       51 producerEpoch int16   53 baseSequence int32
   57 recordCount int32      61 records...

Record layout (varints are zigzag; ``varint`` is 32-bit, at most 5 bytes; ``varlong`` 64-bit,
at most 10 bytes)::

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint (-1 null), key, valueLength varint (-1 null), value,
    headerCount varint, then per header: keyLength varint (never null), UTF-8 key,
    valueLength varint (-1 null), value

Strictness (the native and the Python decoder agree byte for byte, errors included): a
record whose fields do not end exactly at its length, a length below -1, a negative header
count or header key length, a header key that is not UTF-8 (checked only when headers are
kept), an offset or a microsecond timestamp outside int64, or bytes left after
``recordCount`` records raise ``CorruptRecords``; every record of the batch is checked, kept
or not. A failed ``add`` leaves the builder as it was. More than 2**31-1 bytes in one binary
column (or headers in the header column) raises ``OverflowError``: take() before that (the
caller watches ``data_bytes``).

Concurrency: the functions are pure. A column builder belongs to one thread at a time (the
native one releases the GIL while decoding and refuses a second concurrent call with
``RuntimeError``).
"""

from __future__ import annotations

import logging
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from spark_connector.records._native_records import Columns

log = logging.getLogger(__name__)

HEADER_SIZE = 61
LOG_OVERHEAD = 12
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH = struct.Struct(">qi")
_I32 = struct.Struct(">i")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic + int32 version + int32 compatible version
_ZSTD_INPUT_CHUNK = 4096  # bounds how far one decompress() call can overshoot max_bytes

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1

Taken = tuple[
    int,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes | None,
    bytes | None,
    bytes | None,
    bytes | None,
    bytes | None,
    bytes | None,
    bytes | None,
]
"""What a column builder's ``take()`` returns: ``(rows, offsets, timestamps_us,
timestamp_types, key_validity, key_offsets, key_data, value_validity, value_offsets,
value_data, header_validity, header_list_offsets, header_key_offsets, header_key_data,
header_value_validity, header_value_offsets, header_value_data)``, each buffer in Arrow's
little-endian layout (the seven header buffers ``None`` without headers)."""


class UnsupportedMessageFormat(ValueError):
    """A batch in the pre-0.11 message formats (magic 0 or 1)."""


class CorruptRecords(ValueError):
    """Record batch framing or records that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One v2 batch header; ``start`` and ``end`` are its absolute bounds in the buffer."""

    base_offset: int
    last_offset_delta: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    record_count: int
    start: int
    end: int

    @property
    def compression(self) -> int:
        return self.attributes & 7

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & 8)

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & 16)

    @property
    def control(self) -> bool:
        return bool(self.attributes & 32)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


def iter_batches(buf: bytes | bytearray | memoryview, start: int = 0) -> Iterator[Batch]:
    """The complete batches of a Fetch response's ``records`` blob from byte ``start`` on,
    in order.

    Stops silently at a trailing partial batch (Kafka truncates a fetch's last batch).
    Raises ``UnsupportedMessageFormat`` for magic 0/1 and ``CorruptRecords`` for a batch
    length below 49.
    """
    n = len(buf)
    pos = start
    while n - pos >= LOG_OVERHEAD:
        _, batch_length = _LENGTH.unpack_from(buf, pos)
        if n - pos < 17:
            return
        magic = buf[pos + 16]
        if magic != 2:
            raise UnsupportedMessageFormat(
                f"record batch at byte {pos} has message format v{magic}: the fetch reader "
                "needs message format v2 (Kafka 0.11+); option fetcher=librdkafka reads "
                "older formats"
            )
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecords(f"record batch at byte {pos} has length {batch_length} < 49")
        end = pos + LOG_OVERHEAD + batch_length
        if end > n:
            return
        (
            base_offset,
            _,
            _,
            _,
            _,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            _,
            record_count,
        ) = _HEADER.unpack_from(buf, pos)
        yield Batch(
            base_offset,
            last_offset_delta,
            attributes,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            record_count,
            pos,
            end,
        )
        pos = end


def records_section(
    buf: bytes | bytearray | memoryview, batch: Batch, max_bytes: int = 1 << 30
) -> bytes | memoryview:
    """The batch's records bytes, decompressed (a zero-copy slice when uncompressed).

    Raises ``CorruptRecords`` for an unknown codec, undecodable or truncated compressed
    data, or more than ``max_bytes`` of decompressed output.
    """
    raw = memoryview(buf)[batch.start + HEADER_SIZE : batch.end]
    codec = batch.compression
    if codec == 0:
        return raw
    try:
        if codec == 1:
            return _gunzip(raw, max_bytes)
        if codec == 2:
            return _unsnappy(raw, max_bytes)
        if codec == 3:
            return _unlz4(raw, max_bytes)
        if codec == 4:
            return _unzstd(raw, max_bytes)
    except CorruptRecords:
        raise
    except Exception as exc:
        raise CorruptRecords(
            f"cannot decompress the batch at byte {batch.start} (codec {codec}): {exc}"
        ) from exc
    raise CorruptRecords(f"record batch at byte {batch.start} has unknown codec {codec}")


def _too_big(max_bytes: int) -> CorruptRecords:
    return CorruptRecords(f"decompressed record batch exceeds {max_bytes} bytes")


def _gunzip(data: memoryview, max_bytes: int) -> bytes:
    out = bytearray()
    rest: bytes | memoryview = data
    while True:  # concatenated gzip members, as Java's GZIPInputStream reads them
        d = zlib.decompressobj(wbits=47)
        out += d.decompress(rest, max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _too_big(max_bytes)
        if not d.eof:
            raise CorruptRecords("truncated gzip data")
        rest = d.unused_data
        if not rest:
            return bytes(out)


def _snappy_length(block: bytes | memoryview) -> int:
    result = shift = 0
    for b in bytes(block[:5]):
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise CorruptRecords("bad snappy length preamble")


def _unsnappy_block(block: bytes | memoryview, max_bytes: int) -> bytes:
    import cramjam

    if _snappy_length(block) > max_bytes:
        raise _too_big(max_bytes)
    return bytes(cramjam.snappy.decompress_raw(bytes(block)))


def _unsnappy(data: memoryview, max_bytes: int) -> bytes:
    if data[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return _unsnappy_block(data, max_bytes)
    pos = _XERIAL_HEADER
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecords("truncated xerial snappy block length")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecords("bad xerial snappy block length")
        part = _unsnappy_block(data[pos : pos + n], max_bytes - total)
        total += len(part)
        parts.append(part)
        pos += n
    return b"".join(parts)


def _unlz4(data: memoryview, max_bytes: int) -> bytes:
    import lz4.frame

    out = bytearray()
    rest: bytes | memoryview = data
    while True:  # concatenated frames
        d = lz4.frame.LZ4FrameDecompressor()
        out += d.decompress(rest, max_length=max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _too_big(max_bytes)
        if not d.eof:
            raise CorruptRecords("truncated lz4 frame")
        rest = d.unused_data
        if not rest:
            return bytes(out)


def _unzstd(data: memoryview, max_bytes: int) -> bytes:
    import zstandard

    out = bytearray()
    rest: bytes | memoryview = data
    while True:  # concatenated frames; a frame need not declare its content size
        d = zstandard.ZstdDecompressor().decompressobj()
        pos = 0
        while not d.eof and pos < len(rest):
            out += d.decompress(rest[pos : pos + _ZSTD_INPUT_CHUNK])
            pos += _ZSTD_INPUT_CHUNK
            if len(out) > max_bytes:
                raise _too_big(max_bytes)
        if not d.eof:
            raise CorruptRecords("truncated zstd frame")
        rest = d.unused_data + bytes(rest[pos:])
        if not rest:
            return bytes(out)


def _zigzag(data: bytes, pos: int, end: int, max_bytes: int, what: str) -> tuple[int, int]:
    """A zigzag ``what`` of at most ``max_bytes`` bytes (raw value below 2**(7*max_bytes)
    rounded down to 32 or 64 bits) at ``pos``."""
    raw = 0
    shift = 0
    while True:
        if pos >= end:
            raise CorruptRecords(f"truncated {what}")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift == 7 * max_bytes:
            raise CorruptRecords(f"{what} longer than {max_bytes} bytes")
    if raw >> (32 if max_bytes == 5 else 64):
        raise CorruptRecords(f"{what} out of range")
    return (raw >> 1) ^ -(raw & 1), pos


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint (32-bit: at most 5 bytes, raw value below 2**32) at ``pos``."""
    return _zigzag(data, pos, end, 5, "varint")


def _varlong(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varlong (at most 10 bytes, raw value below 2**64) at ``pos``."""
    return _zigzag(data, pos, end, 10, "varlong")


def is_abort_marker(records: bytes | memoryview) -> bool:
    """Whether a control batch's records (its first record's key: int16 version, int16
    type) mark an ABORT (type 0) rather than a COMMIT (type 1)."""
    data = bytes(records)
    end = len(data)
    length, pos = _varint(data, 0, end)
    if length < 0 or pos + length > end:
        raise CorruptRecords("control record runs past the end of its batch")
    end = pos + length
    if pos >= end:
        raise CorruptRecords("truncated control record")
    pos += 1  # attributes
    _, pos = _varlong(data, pos, end)
    _, pos = _varint(data, pos, end)
    key_length, pos = _varint(data, pos, end)
    if key_length < 4 or pos + key_length > end:
        raise CorruptRecords(f"control record key of {key_length} bytes (needs 4)")
    (control_type,) = struct.unpack_from(">h", data, pos + 2)
    return bool(control_type == 0)


def iter_records(
    records: bytes | memoryview, batch: Batch
) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """``(offset, key, value)`` of each record of ``batch`` (its records section, decompressed
    by :func:`records_section`): the slow, simple decoder for small reads (the progress records
    of ``__millrace_batches``), not the Arrow path. Raises ``CorruptRecords``."""
    data = bytes(records)
    end = len(data)
    pos = 0
    for _ in range(batch.record_count):
        length, pos = _varint(data, pos, end)
        if length < 0 or pos + length > end:
            raise CorruptRecords("record runs past the end of its batch")
        stop = pos + length
        pos += 1  # attributes
        _, pos = _varlong(data, pos, stop)
        delta, pos = _varint(data, pos, stop)
        key, pos = _field(data, pos, stop)
        value, pos = _field(data, pos, stop)
        yield batch.base_offset + delta, key, value
        pos = stop


RUN_DONE, RUN_FULL, RUN_PYTHON, RUN_UNTIL = 0, 1, 2, 3
"""How :func:`add_batches_reference` (and the native ``Columns.add_batches``) stopped: no
complete batch left; the builder reached ``max_rows`` or ``max_bytes`` (take, then go on from
``pos``); the batch at ``pos`` is the caller's (compressed, or a header only the reference path
reports well: not v2, a bad length); a batch at or past ``until_offset``."""

_INT64_MAX = (1 << 63) - 1


def add_batches_reference(
    cols: PyColumns | Columns,
    blob: bytes | bytearray | memoryview,
    start: int,
    from_offset: int,
    until_offset: int,
    max_rows: int,
    max_bytes: int,
) -> tuple[int, int]:
    """Decode a read_uncommitted (or no-aborted-transaction) Fetch response's uncompressed
    batches from byte ``start`` into ``cols``, each batch with :meth:`PyColumns.add`
    (records in ``[from_offset, until_offset)``): batches ending at or below ``from_offset``
    and control batches are passed over. Returns ``(pos, status)``, a ``RUN_*`` status with
    the byte where it stopped. The pure-Python reference of the native
    ``Columns.add_batches``, which does the same loop in one call without the GIL."""
    if start < 0 or start > len(blob) or max_rows < 1:
        raise ValueError("add_batches: start outside the blob or max_rows < 1")
    n = len(blob)
    pos = start
    while n - pos >= LOG_OVERHEAD + 5:
        _, length = _LENGTH.unpack_from(blob, pos)
        if blob[pos + 16] != 2 or length < MIN_BATCH_LENGTH:
            return pos, RUN_PYTHON
        end = pos + LOG_OVERHEAD + length
        if end > n:
            break
        (base, _, _, _, _, attrs, last_delta, base_ts, max_ts, _, _, _, count) = (
            _HEADER.unpack_from(blob, pos)
        )
        next_offset = base + last_delta + 1
        if next_offset > _INT64_MAX:
            return pos, RUN_PYTHON
        if next_offset <= from_offset:
            pos = end
            continue
        if base >= until_offset:
            return pos, RUN_UNTIL
        if attrs & 32:
            pos = end
            continue
        if attrs & 7:
            return pos, RUN_PYTHON
        section = memoryview(blob)[pos + HEADER_SIZE : end]
        cols.add(section, count, base, base_ts, max_ts, bool(attrs & 8), from_offset, until_offset)
        pos = end
        if cols.rows >= max_rows or cols.data_bytes >= max_bytes:
            return pos, RUN_FULL
    return pos, RUN_DONE


def scan_batches_reference(blob: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(count, next_offset)``: how many complete batches ``blob`` holds and the offset after
    the last one (-1 when none); ``count`` is -1 when a header before the end is not a
    regular v2 one (:func:`iter_batches` then says what is wrong). The reference of the
    native ``scan_batches``."""
    n = len(blob)
    pos = count = 0
    next_offset = -1
    while n - pos >= LOG_OVERHEAD + 5:
        _, length = _LENGTH.unpack_from(blob, pos)
        if blob[pos + 16] != 2 or length < MIN_BATCH_LENGTH:
            return -1, -1
        end = pos + LOG_OVERHEAD + length
        if end > n:
            break
        (base,) = struct.unpack_from(">q", blob, pos)
        (last_delta,) = struct.unpack_from(">i", blob, pos + 23)
        next_offset = base + last_delta + 1
        if next_offset > _INT64_MAX:
            return -1, -1
        count += 1
        pos = end
    return count, next_offset if count else -1


class AbortedFilter:
    """read_committed filtering of one Fetch response's batches, in offset order, as Kafka's
    Java consumer does it: the response's aborted transactions (``(producer id, first
    offset)``) become active as the batches pass their first offsets; a transactional batch
    of an active aborted producer is skipped, and that producer's ABORT marker deactivates
    it. Control batches are never returned. With no aborted transactions (or
    read_uncommitted) only control batches are skipped. One response, one thread."""

    __slots__ = ("_active", "_next", "_pending")

    def __init__(self, aborted: Iterable[tuple[int, int]] | None) -> None:
        self._pending = sorted(aborted or (), key=lambda a: a[1])
        self._next = 0
        self._active: set[int] = set()

    def skip(self, blob: bytes | memoryview, b: Batch) -> bool:
        """Whether batch ``b`` of ``blob`` is not returned to the reader."""
        if b.producer_id >= 0:
            pending = self._pending
            while self._next < len(pending) and pending[self._next][1] <= b.last_offset:
                self._active.add(pending[self._next][0])
                self._next += 1
            if b.control:
                if is_abort_marker(records_section(blob, b)):
                    self._active.discard(b.producer_id)
                return True
            if b.transactional and b.producer_id in self._active:
                return True
        return b.control


def committed_records(
    blob: bytes | memoryview, aborted: list[tuple[int, int]] | None
) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """``(offset, key, value)`` of the committed records of a read_committed Fetch response's
    ``records`` blob and aborted transactions (``(producer id, first offset)``), filtered by
    :class:`AbortedFilter`."""
    kept = AbortedFilter(aborted)
    for b in iter_batches(blob):
        if not kept.skip(blob, b):
            yield from iter_records(records_section(blob, b), b)


def _bitmap(bits: list[bool]) -> bytes:
    """An Arrow validity bitmap (LSB first, unused bits zero)."""
    n = len(bits)
    out = bytearray((n + 7) // 8)
    if all(bits):
        out[: n // 8] = b"\xff" * (n // 8)
        if n % 8:
            out[n // 8] = (1 << (n % 8)) - 1
        return bytes(out)
    for i, bit in enumerate(bits):
        if bit:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _le(a: array[int]) -> bytes:
    if sys.byteorder == "big":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _binary(items: list[bytes | None]) -> tuple[bytes, bytes, bytes]:
    """(validity, int32 offsets, data) of a binary column."""
    offsets = array("i", [0])
    pos = 0
    for item in items:
        if item is not None:
            pos += len(item)
        offsets.append(pos)
    data = b"".join([item for item in items if item is not None])
    return _bitmap([item is not None for item in items]), _le(offsets), data


class PyColumns:
    """The pure-Python column builder: the reference for (and fallback to) the native
    ``Columns``, whose ``take()`` it matches byte for byte.

    Holds decoded rows (keys, values, offsets, timestamps in microseconds, timestamp types
    and, ``with_headers``, header lists) until ``take()``. Concurrency: one thread at a time.
    """

    def __init__(self, with_headers: bool) -> None:
        self.with_headers = with_headers
        self._reset()

    def _reset(self) -> None:
        self.data_bytes = 0
        self._offsets = array("q")
        self._timestamps = array("q")
        self._types = array("i")
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._headers: list[list[tuple[bytes, bytes | None]]] = []
        self._key_bytes = 0
        self._value_bytes = 0
        self._header_count = 0
        self._header_key_bytes = 0
        self._header_value_bytes = 0

    @property
    def rows(self) -> int:
        return len(self._offsets)

    def add(
        self,
        records: bytes | bytearray | memoryview,
        count: int,
        base_offset: int,
        base_timestamp: int,
        max_timestamp: int,
        log_append_time: bool,
        from_offset: int,
        until_offset: int,
    ) -> int:
        """Decode ``count`` records from the (uncompressed) records bytes, keeping those
        whose offset is in ``[from_offset, until_offset)``; returns how many it kept."""
        data = records if isinstance(records, bytes) else bytes(records)
        end = len(data)
        if count < 0:
            raise CorruptRecords(f"negative record count {count}")
        with_headers = self.with_headers
        times = _BatchTimes(base_timestamp, max_timestamp, log_append_time)
        kept = _KeptRows(
            self._key_bytes,
            self._value_bytes,
            self._header_count,
            self._header_key_bytes,
            self._header_value_bytes,
            self.data_bytes,
        )
        pos = 0
        for _ in range(count):
            record, pos = _record(data, pos, end, base_offset, times, with_headers)
            if from_offset <= record.offset < until_offset:
                kept.keep(record, with_headers)
        if pos != end:
            raise CorruptRecords(f"{end - pos} bytes after the batch's last record")
        self._apply(kept, 1 if log_append_time else 0)
        return len(kept.offsets)

    def add_batches(
        self,
        blob: bytes | bytearray | memoryview,
        start: int,
        from_offset: int,
        until_offset: int,
        max_rows: int,
        max_bytes: int,
    ) -> tuple[int, int]:
        """:func:`add_batches_reference` into this builder."""
        return add_batches_reference(
            self, blob, start, from_offset, until_offset, max_rows, max_bytes
        )

    def _apply(self, kept: _KeptRows, ts_type: int) -> None:
        """Append the rows an ``add`` kept and take over its byte counts."""
        self._offsets.extend(kept.offsets)
        self._timestamps.extend(kept.timestamps)
        self._types.extend([ts_type] * len(kept.offsets))
        self._keys += kept.keys
        self._values += kept.values
        self._headers += kept.headers
        self._key_bytes = kept.key_bytes
        self._value_bytes = kept.value_bytes
        self._header_count = kept.header_count
        self._header_key_bytes = kept.header_key_bytes
        self._header_value_bytes = kept.header_value_bytes
        self.data_bytes = kept.data_bytes

    def take(self) -> Taken:
        """The held rows as Arrow buffers (see ``Taken``); empties the builder."""
        rows = self.rows
        key_validity, key_offsets, key_data = _binary(self._keys)
        value_validity, value_offsets, value_data = _binary(self._values)
        header_parts: tuple[bytes | None, ...] = (None,) * 7
        if self.with_headers:
            list_offsets = array("i", [0])
            n = 0
            flat_keys: list[bytes | None] = []
            flat_values: list[bytes | None] = []
            for row in self._headers:
                n += len(row)
                list_offsets.append(n)
                for hkey, hvalue in row:
                    flat_keys.append(hkey)
                    flat_values.append(hvalue)
            _, hk_offsets, hk_data = _binary(flat_keys)
            hv_validity, hv_offsets, hv_data = _binary(flat_values)
            header_parts = (
                _bitmap([bool(row) for row in self._headers]),
                _le(list_offsets),
                hk_offsets,
                hk_data,
                hv_validity,
                hv_offsets,
                hv_data,
            )
        out = (
            rows,
            _le(self._offsets),
            _le(self._timestamps),
            _le(self._types),
            key_validity,
            key_offsets,
            key_data,
            value_validity,
            value_offsets,
            value_data,
            *header_parts,
        )
        self._reset()
        return out  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class _BatchTimes:
    """A batch header's timestamps: a record's is the base plus its delta, or the batch's
    max timestamp under LogAppendTime."""

    base_timestamp: int
    max_timestamp: int
    log_append_time: bool


@dataclass(frozen=True, slots=True)
class _Record:
    """One decoded record (``headers`` empty unless the builder keeps headers)."""

    offset: int
    ts_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[bytes, bytes | None]]


@dataclass(slots=True)
class _KeptRows:
    """The rows one ``PyColumns.add`` keeps and the builder's byte counts with them: applied
    to the builder only once the whole batch decoded (a failed ``add`` changes nothing)."""

    key_bytes: int
    value_bytes: int
    header_count: int
    header_key_bytes: int
    header_value_bytes: int
    data_bytes: int
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[bytes, bytes | None]]] = field(default_factory=list)

    def keep(self, record: _Record, with_headers: bool) -> None:
        """Add ``record``; ``OverflowError`` when a column passes 2**31-1 bytes."""
        key, value = record.key, record.value
        n_key = 0 if key is None else len(key)
        n_value = 0 if value is None else len(value)
        self.key_bytes += n_key
        self.value_bytes += n_value
        self.data_bytes += n_key + n_value
        if with_headers:
            self.header_count += len(record.headers)
            for hkey, hvalue in record.headers:
                n_hvalue = 0 if hvalue is None else len(hvalue)
                self.header_key_bytes += len(hkey)
                self.header_value_bytes += n_hvalue
                self.data_bytes += len(hkey) + n_hvalue
            self.headers.append(record.headers)
        if max(
            self.key_bytes,
            self.value_bytes,
            self.header_count,
            self.header_key_bytes,
            self.header_value_bytes,
        ) > (_INT32_MAX):
            raise OverflowError("a column passed 2**31-1 bytes: take() sooner")
        self.offsets.append(record.offset)
        self.timestamps.append(record.ts_ms * 1000)
        self.keys.append(key)
        self.values.append(value)


def _record(
    data: bytes, pos: int, end: int, base_offset: int, times: _BatchTimes, with_headers: bool
) -> tuple[_Record, int]:
    """The record at ``pos`` (every field checked, see the module docstring) and the
    position after it."""
    length, pos = _varint(data, pos, end)
    if length < 0 or length > end - pos:
        raise CorruptRecords("record runs past the end of its batch")
    rend = pos + length
    if pos >= rend:
        raise CorruptRecords("truncated record")
    pos += 1  # attributes
    ts_delta, pos = _varlong(data, pos, rend)
    offset_delta, pos = _varint(data, pos, rend)
    offset = base_offset + offset_delta
    ts_ms = times.max_timestamp if times.log_append_time else times.base_timestamp + ts_delta
    if not _INT64_MIN <= offset <= _INT64_MAX:
        raise CorruptRecords("record offset out of range")
    if not _INT64_MIN <= ts_ms * 1000 <= _INT64_MAX:
        raise CorruptRecords("record timestamp out of range")
    key, pos = _field(data, pos, rend)
    value, pos = _field(data, pos, rend)
    headers, pos = _record_headers(data, pos, rend, with_headers)
    if pos != rend:
        raise CorruptRecords("record length does not match its fields")
    return _Record(offset, ts_ms, key, value, headers), pos


def _record_headers(
    data: bytes, pos: int, rend: int, with_headers: bool
) -> tuple[list[tuple[bytes, bytes | None]], int]:
    """A record's headers (checked; skipped, not copied, without ``with_headers``) and the
    position after them."""
    n_headers, pos = _varint(data, pos, rend)
    if n_headers < 0:
        raise CorruptRecords(f"negative header count {n_headers}")
    headers: list[tuple[bytes, bytes | None]] = []
    for _h in range(n_headers):
        hk_len, pos = _varint(data, pos, rend)
        if hk_len < 0 or hk_len > rend - pos:
            raise CorruptRecords(f"bad header key length {hk_len}")
        if not with_headers:  # skipped, not copied
            pos += hk_len
            hv_len, pos = _varint(data, pos, rend)
            if hv_len < -1 or hv_len > rend - pos:
                raise CorruptRecords(f"bad record field length {hv_len}")
            pos += max(hv_len, 0)
            continue
        hkey = data[pos : pos + hk_len]
        pos += hk_len
        hvalue, pos = _field(data, pos, rend)
        try:
            hkey.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecords("header key is not UTF-8") from None
        headers.append((hkey, hvalue))
    return headers, pos


def _field(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _varint(data, pos, end)
    if n == -1:
        return None, pos
    if n < -1 or n > end - pos:
        raise CorruptRecords(f"bad record field length {n}")
    return data[pos : pos + n], pos + n


def to_record_batch(taken: Taken, schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
    """Wrap a builder's ``take()`` (zero copy) as a RecordBatch in ``schema``: Spark's Kafka
    columns key, value, topic, partition, offset, timestamp, timestampType and, when the
    builder kept them, headers (``list<struct<key: string, value: binary>>``)."""
    (
        rows,
        offsets,
        timestamps,
        types,
        key_validity,
        key_offsets,
        key_data,
        value_validity,
        value_offsets,
        value_data,
        *header_parts,
    ) = taken
    buf = pa.py_buffer

    def field_type(name: str) -> pa.DataType:
        return schema.field(name).type

    arrays: list[pa.Array] = [
        pa.Array.from_buffers(
            field_type("key"), rows, [buf(key_validity), buf(key_offsets), buf(key_data)]
        ),
        pa.Array.from_buffers(
            field_type("value"), rows, [buf(value_validity), buf(value_offsets), buf(value_data)]
        ),
        pa.repeat(pa.scalar(topic, field_type("topic")), rows),
        pa.repeat(pa.scalar(partition, field_type("partition")), rows),
        pa.Array.from_buffers(field_type("offset"), rows, [None, buf(offsets)]),
        pa.Array.from_buffers(field_type("timestamp"), rows, [None, buf(timestamps)]),
        pa.Array.from_buffers(field_type("timestampType"), rows, [None, buf(types)]),
    ]
    if "headers" in schema.names:
        parts: list[Any] = header_parts
        if parts[0] is None:
            raise ValueError("the schema has headers but the builder was made without them")
        validity, list_offsets, hk_offsets, hk_data, hv_validity, hv_offsets, hv_data = parts
        list_type = field_type("headers")
        struct_type = list_type.value_type
        n_headers = (len(hk_offsets) // 4) - 1
        hkeys = pa.Array.from_buffers(
            struct_type[0].type, n_headers, [None, buf(hk_offsets), buf(hk_data)]
        )
        hvalues = pa.Array.from_buffers(
            struct_type[1].type, n_headers, [buf(hv_validity), buf(hv_offsets), buf(hv_data)]
        )
        entries = pa.Array.from_buffers(struct_type, n_headers, [None], children=[hkeys, hvalues])
        arrays.append(
            pa.Array.from_buffers(
                list_type, rows, [buf(validity), buf(list_offsets)], children=[entries]
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


try:
    from spark_connector.records import _native_records
except ImportError:
    NATIVE = False
else:
    NATIVE = True
    _native_records._set_error_class(CorruptRecords)

scan_batches = _native_records.scan_batches if NATIVE else scan_batches_reference
"""The native ``scan_batches`` when built, else :func:`scan_batches_reference`."""

_warned = False


def new_columns(with_headers: bool) -> PyColumns | Columns:
    """A column builder: the native ``Columns`` when the extension is built, else
    ``PyColumns`` (logging once that reads will be slower)."""
    global _warned
    if NATIVE:
        return _native_records.Columns(with_headers)
    if not _warned:
        _warned = True
        log.warning(
            "the native record decoder (spark_connector.records._native_records) is not built: "
            "fetch reads decode records in Python, several times slower "
            "(pip install -e . with a C compiler builds it)"
        )
    return PyColumns(with_headers)
