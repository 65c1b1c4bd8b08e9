"""Arrow columns encoded as Kafka v2 record batches, a whole batch at a time, for the Spark
writer's :class:`~spark_connector.kafka.producer.BatchProducer`.

Formats
-------
A record batch (``RecordBatch`` magic 2, as Kafka's ``DefaultRecordBatch``) is the 61-byte
header ``baseOffset int64 (0: the broker assigns offsets) | batchLength int32 |
partitionLeaderEpoch int32 (-1) | magic int8 (2) | crc uint32 | attributes int16 |
lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 | producerId int64 |
producerEpoch int16 | baseSequence int32 | recordCount int32`` followed by the records
section, compressed as a whole when ``attributes & 7`` names a codec (1 gzip, 2 snappy,
3 lz4 frame, 4 zstd). The CRC-32C covers everything from ``attributes`` to the end.

Each record here is ``length varint | attributes int8 (0) | timestampDelta varlong |
offsetDelta varint | keyLength varint (-1: null) | key | valueLength varint (-1: null, a
tombstone) | value | headerCount varint | headers``, varints zig-zag encoded, each header
``keyLength varint | key (UTF-8) | valueLength varint (-1: null) | value``. A row's headers
section is encoded once per row in Python (:func:`encode_headers`, from Spark's
``array<struct<key string, value binary>>`` column) and copied into its record by the encoder;
rows without headers get a count of 0. The records encoded by one call carry one timestamp
(CreateTime, ``timestampDelta`` after the batch's base timestamp), as the Java producer's
records produced in the same millisecond do; the producer may append the records of later
calls to a batch not sent yet (offset deltas continuing from ``delta_base``, timestamp deltas
from the time of each call: :class:`~spark_connector.kafka.producer.BatchProducer`).

A key's partition is Kafka's default partitioner, ``toPositive(murmur2(key)) %
numPartitions`` (:mod:`spark_connector.records.partitioner` is the pure reference of the hash).

The work is done by the C extension ``_native_batches`` when it is built; the pure-Python
functions here (``*_py``) are the reference a property test holds it to, and the fallback
without a C compiler.

Concurrency: pure functions of their arguments; safe from any thread. The native functions
release the GIL while they encode.
"""

from __future__ import annotations

import logging
import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

import crc32c
import pyarrow as pa

from spark_connector.records.partitioner import partition_for_key

__all__ = [
    "CODECS",
    "NATIVE",
    "build_batch",
    "column_spec",
    "compressor",
    "encode_headers",
    "encode_records",
    "partition_keys",
]

log = logging.getLogger(__name__)

HEADER_SIZE = 61
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_FROM = 21  # the CRC covers the batch from its attributes on
_TRANSACTIONAL = 0x10  # attributes bit 4

# librdkafka's compression.type names -> the codec id in a batch's attributes
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# A column: (offsets, data, validity or None, wide offsets?, first row, length)
ColumnSpec = tuple[Any, Any, Any, bool, int, int]

_warned = False

try:
    from spark_connector.records import _native_batches
except ImportError:
    NATIVE = False
else:
    NATIVE = True


def column_spec(array: pa.Array) -> ColumnSpec:
    """The buffers of a string or binary Arrow array, as the encoder reads them. Other types
    (a view type, for example) are cast to ``large_binary`` first."""
    t = array.type
    if pa.types.is_string(t) or pa.types.is_binary(t):
        wide = False
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        wide = True
    else:
        array = array.cast(pa.large_binary())
        wide = True
    validity, offsets, data = array.buffers()[:3]
    if array.null_count == 0:
        validity = None
    empty = b""
    return (
        offsets if offsets is not None else bytes(8 if wide else 4),
        data if data is not None else empty,
        validity,
        wide,
        array.offset,
        len(array),
    )


# --- the pure-Python reference -----------------------------------------------------------------


def _get(spec: ColumnSpec, row: int) -> bytes | None:
    offsets, data, validity, wide, first, length = spec
    if not 0 <= row < length:
        raise ValueError("encode_records: a row number or offset is outside its column")
    i = first + row
    if validity is not None and not memoryview(validity)[i >> 3] & (1 << (i & 7)):
        return None
    width = 8 if wide else 4
    lo, hi = struct.unpack_from("<qq" if wide else "<ii", memoryview(offsets), width * i)
    return bytes(memoryview(data)[lo:hi])


def _zigzag_varint(n: int) -> bytes:
    zz = (n << 1) ^ (n >> 63)
    out = bytearray()
    while zz >= 0x80:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)
    return bytes(out)


def partition_keys_py(keys: ColumnSpec, num_partitions: int) -> bytes:
    """Reference of :func:`partition_keys`: int32 little-endian per row, -1 for null."""
    out = []
    for row in range(keys[5]):
        key = _get(keys, row)
        out.append(-1 if key is None else partition_for_key(key, num_partitions))
    return struct.pack(f"<{len(out)}i", *out)


def encode_records_py(
    keys: ColumnSpec | None,
    values: ColumnSpec,
    rows: Any,
    start: int,
    stop: int,
    max_bytes: int,
    headers: ColumnSpec | None = None,
    delta_base: int = 0,
    timestamp_delta: int = 0,
) -> tuple[bytes, int]:
    """Reference of :func:`encode_records`."""
    if not 0 <= delta_base <= 0x7FFFFFFF:
        raise ValueError("encode_records: delta_base outside 0..2**31-1")
    if rows is not None:
        raw = memoryview(rows).cast("B")
        order = list(struct.unpack(f"<{len(raw) // 8}q", raw[: len(raw) // 8 * 8]))
    else:
        order = list(range(values[5]))
    if not 0 <= start <= stop <= len(order):
        raise ValueError("encode_records: start/stop outside the rows")
    out = bytearray()
    for k in range(start, stop):
        row = order[k]
        key = _get(keys, row) if keys is not None else None
        value = _get(values, row)
        hdrs = _get(headers, row) if headers is not None else None
        body = b"".join(
            (
                b"\x00",  # attributes
                _zigzag_varint(timestamp_delta),
                _zigzag_varint(k - start + delta_base),
                _zigzag_varint(-1 if key is None else len(key)),
                key or b"",
                _zigzag_varint(-1 if value is None else len(value)),
                value or b"",
                hdrs or b"\x00",  # the headers section (a count of 0 when none)
            )
        )
        record = _zigzag_varint(len(body)) + body
        if k > start and len(out) + len(record) > max_bytes:
            return bytes(out), k - start
        out += record
    return bytes(out), stop - start


def encode_key_values(pairs: list[tuple[bytes | None, bytes | None]]) -> bytes:
    """The records section of a few ``(key, value)`` records without headers, for
    :func:`build_batch` (the slow path for small writes such as progress records)."""
    out = bytearray()
    for delta, (key, value) in enumerate(pairs):
        body = b"".join(
            (
                b"\x00\x00",  # attributes, timestampDelta
                _zigzag_varint(delta),
                _zigzag_varint(-1 if key is None else len(key)),
                key or b"",
                _zigzag_varint(-1 if value is None else len(value)),
                value or b"",
                b"\x00",  # no headers
            )
        )
        out += _zigzag_varint(len(body)) + body
    return bytes(out)


# --- the entry points ------------------------------------------------------------------------


def partition_keys(keys: pa.Array, num_partitions: int) -> bytes:
    """Kafka's default partition of each key, as int32 little-endian per row (-1: null)."""
    spec = column_spec(keys)
    if NATIVE:
        return bytes(_native_batches.partition_keys(spec, num_partitions))
    return partition_keys_py(spec, num_partitions)


def encode_headers(headers: pa.Array, row_base: int = 0) -> pa.Array:
    """Each row's headers section (header count varint, then each header), as a binary
        array; null where a row has no headers. ``headers`` is Spark's ``array<struct<key string,
        value binary>>`` column; a header with a null key raises ``ValueError`` naming the row
    (numbered from ``row_base``)."""
    out: list[bytes | None] = []
    for row, items in enumerate(headers.to_pylist()):
        if not items:
            out.append(None)
            continue
        parts = [_zigzag_varint(len(items))]
        for item in items:
            key = item.get("key") if item is not None else None
            if key is None:
                raise ValueError(
                    f"column 'headers': row {row_base + row} has a header with a null key"
                )
            raw_key = key.encode() if isinstance(key, str) else bytes(key)
            value = item.get("value")
            parts.append(_zigzag_varint(len(raw_key)))
            parts.append(raw_key)
            if value is None:
                parts.append(_zigzag_varint(-1))
            else:
                raw = bytes(value)
                parts.append(_zigzag_varint(len(raw)))
                parts.append(raw)
        out.append(b"".join(parts))
    return pa.array(out, type=pa.binary())


def encode_records(
    keys: ColumnSpec | None,
    values: ColumnSpec,
    rows: Any,
    start: int,
    stop: int,
    max_bytes: int,
    headers: ColumnSpec | None = None,
    delta_base: int = 0,
    timestamp_delta: int = 0,
) -> tuple[bytes, int]:
    """The records section holding ``rows[start:stop]`` (row numbers as int64 little-endian;
    None: rows ``start`` to ``stop - 1``), cut short before the record that would take it past
    ``max_bytes`` (the first record always goes in). ``headers`` is the column of
    :func:`encode_headers` (None: no row has headers). The records' offset deltas start at
    ``delta_base`` (records appended to a batch already holding that many) and each carries
    ``timestamp_delta`` (milliseconds after the batch's base timestamp). Returns the bytes
    and the rows taken."""
    if NATIVE:
        if headers is None and delta_base == 0 and timestamp_delta == 0:
            data, taken = _native_batches.encode_records(keys, values, rows, start, stop, max_bytes)
        else:
            data, taken = _native_batches.encode_records(
                keys, values, rows, start, stop, max_bytes, headers, delta_base, timestamp_delta
            )
        return data, taken
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "the native batch encoder (spark_connector.records._native_batches) is not built: "
            "format('millrace') writes encode records in Python, many times slower "
            "(pip install -e . with a C compiler builds it)"
        )
    return encode_records_py(
        keys, values, rows, start, stop, max_bytes, headers, delta_base, timestamp_delta
    )


def _gzip(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _snappy(data: bytes) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.compress_raw(data))


def _lz4(data: bytes) -> bytes:
    import lz4.frame

    # Kafka's KafkaLZ4BlockInputStream reads independent blocks without a content size.
    return bytes(
        lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    )


def _zstd(data: bytes) -> bytes:
    import zstandard

    return bytes(zstandard.ZstdCompressor().compress(data))


def compressor(codec: int) -> Callable[[bytes], bytes] | None:
    """The function compressing a records section with ``codec`` (None for ``none``)."""
    return {0: None, 1: _gzip, 2: _snappy, 3: _lz4, 4: _zstd}[codec]


def build_batch(
    records: bytes,
    count: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    codec: int = 0,
    timestamp_ms: int | None = None,
    transactional: bool = False,
    max_timestamp_ms: int | None = None,
) -> bytes:
    """A whole v2 record batch around an (uncompressed) records section of ``count``
    records (see the module docstring); ``transactional`` sets the attributes' bit 4 (the
    batch belongs to the producer's open transaction). ``timestamp_ms`` is the base
    timestamp (now by default), ``max_timestamp_ms`` the largest record timestamp (base +
    the largest timestampDelta; the base by default)."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    max_ts = ts if max_timestamp_ms is None else max_timestamp_ms
    compress = compressor(codec)
    body = compress(records) if compress is not None else records
    header = bytearray(
        _HEADER.pack(
            0,
            HEADER_SIZE - 12 + len(body),
            -1,
            2,
            0,
            codec | (_TRANSACTIONAL if transactional else 0),
            count - 1,
            ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(bytes(header[_CRC_FROM:])))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + body
