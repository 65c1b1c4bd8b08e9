"""Hostile record batches for Produce requests, each with the error codes Kafka answers it with.

Every generator returns a :class:`FuzzBatch`: the ``records`` bytes of one partition and the
set of partition error codes a correct broker may answer (Kafka 3.9 as the reference):

* a well-formed batch (any codec) -> NONE;
* a wrong CRC-32C, or a batch length that runs past the data -> CORRUPT_MESSAGE;
* a CRC recomputed over a lie inside the CRC-covered part (record count, lastOffsetDelta,
  record lengths, overlong or overflowing varints, bytes after the last record, garbage
  where compressed data should be, a payload that decompresses enormously) -> INVALID_RECORD
  or CORRUPT_MESSAGE;
* magic 0/1 message sets, an empty payload, two batches in one partition -> INVALID_RECORD
  (``ProduceRequest.validateRecords``); zstd below Produce v7 -> UNSUPPORTED_COMPRESSION_TYPE;
* an unknown codec (attributes 5-7) -> UNSUPPORTED_COMPRESSION_TYPE (or CORRUPT_MESSAGE);
* a control batch from a client, a producer id with a negative sequence -> INVALID_RECORD.

Decompression bombs are built once per codec (compressing many MiB of zeros) and cached.

Concurrency: the bomb cache is filled on first use; call :func:`warm_up` from one thread
before sharing.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import crc32c

from broker.protocol import compression
from broker.protocol import records as rec
from tests.fuzz import wire

NONE = 0
CORRUPT = 2
TOO_LARGE = 10
INVALID_TIMESTAMP = 32
UNSUPPORTED_CODEC = 76
INVALID_RECORD = 87
STRUCTURE = frozenset({CORRUPT, INVALID_RECORD})
# A partition can also fail for reasons outside the batch: the fuzzer's other requests may
# have reassigned, deleted or reconfigured it meanwhile.
ENVIRONMENT = frozenset({3, 6, 5, 19, 20, 44, 74})


class Choices(Protocol):
    """The choices a generator makes (random.Random or Hypothesis behind it)."""

    def integer(self, low: int, high: int) -> int: ...
    def chance(self, p: float) -> bool: ...
    def raw(self, n: int) -> bytes: ...


@dataclass(frozen=True, slots=True)
class FuzzBatch:
    kind: str
    data: bytes | None
    expect: frozenset[int]


def _fix_crc(buf: bytearray, position: int = 0) -> None:
    (batch_length,) = struct.unpack_from(">i", buf, position + 8)
    end = min(len(buf), position + 12 + max(batch_length, 0))
    crc = crc32c.crc32c(memoryview(buf)[position + rec.ATTRIBUTES_OFFSET : end])
    struct.pack_into(">I", buf, position + rec.CRC_OFFSET, crc)


def _records(src: Choices, n: int, key_always: bool) -> list[rec.SimpleRecord]:
    now = int(time.time() * 1000)
    out = []
    for i in range(n):
        key = None if (not key_always and src.chance(0.3)) else src.raw(src.integer(0, 12))
        value = None if src.chance(0.05) else src.raw(src.integer(0, 64))
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if src.chance(0.2):
            headers = (("h", src.raw(src.integer(0, 8))),)
        out.append(rec.SimpleRecord(value=value, key=key, timestamp=now + i, headers=headers))
    return out


def valid_batch(src: Choices, codec: int | None = None, *, key_always: bool = False) -> bytes:
    if codec is None:
        codec = src.integer(0, 4) if src.chance(0.5) else 0
    n = src.integer(1, 5)
    return rec.encode_batch(_records(src, n, key_always), compression_type=codec)


def _record_bytes(fields: list[bytes]) -> bytes:
    body = b"".join(fields)
    return wire.zigzag(len(body)) + body


def _raw_batch(payload: bytes, count: int, attrs: int = 0, last_delta: int | None = None) -> bytes:
    """A batch around an arbitrary records section, with a correct length and CRC."""
    now = int(time.time() * 1000)
    header = rec.HEADER.pack(
        0,
        rec.HEADER_SIZE - rec.LOG_OVERHEAD + len(payload),
        -1,
        2,
        0,
        attrs,
        count - 1 if last_delta is None else last_delta,
        now,
        now,
        -1,
        -1,
        -1,
        count,
    )
    buf = bytearray(header + payload)
    _fix_crc(buf)
    return bytes(buf)


_BOMBS: dict[int, bytes] = {}
BOMB_BYTES = 256 * 2**20  # what a bomb expands to


def _bomb(codec: int) -> bytes:
    """``BOMB_BYTES`` of zeros compressed with ``codec`` (snappy: as many xerial chunks of
    64 KiB zeros as fit in ~900 KiB, each claiming its real size)."""
    cached = _BOMBS.get(codec)
    if cached is not None:
        return cached
    if codec == compression.GZIP:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        block = bytes(2**20)
        parts = [c.compress(block) for _ in range(BOMB_BYTES // len(block))]
        data = b"".join(parts) + c.flush()
    elif codec == compression.ZSTD:
        import zstandard

        data = zstandard.ZstdCompressor(level=3).compress(bytes(BOMB_BYTES))
    elif codec == compression.LZ4:
        import lz4.frame

        data = lz4.frame.compress(bytes(128 * 2**20))  # lz4 tops out near 255:1
    else:
        import cramjam

        chunk = bytes(cramjam.snappy.compress_raw(bytes(65536)))
        per = struct.pack(">i", len(chunk)) + chunk
        n = (900 * 1024) // len(per)
        data = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + per * n
    _BOMBS[codec] = data
    return data


def warm_up() -> None:
    for codec in (1, 2, 3, 4):
        _bomb(codec)


def _corrupt_compressed(src: Choices, codec: int) -> bytes:
    good = valid_batch(src, codec)
    buf = bytearray(good)
    # overwrite part of the compressed payload, then re-sign it
    start = rec.HEADER_SIZE + src.integer(0, max(0, len(buf) - rec.HEADER_SIZE - 1))
    for i in range(start, min(len(buf), start + src.integer(1, 8))):
        buf[i] ^= 0x5A
    _fix_crc(buf)
    return bytes(buf)


def _legacy_message(magic: int) -> bytes:
    """One magic 0/1 message (offset, size, crc, magic, attributes, [timestamp], key, value)."""
    body = bytes([magic, 0]) + (struct.pack(">q", 0) if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", 3) + b"old"
    crc = zlib.crc32(body) & 0xFFFFFFFF
    msg = struct.pack(">I", crc) + body
    return struct.pack(">qi", 0, len(msg)) + msg


KINDS = (
    "valid",
    "valid_compressed",
    "bad_crc",
    "length_past_end",
    "length_short",
    "count_lie",
    "last_delta_lie",
    "record_length_lie",
    "varint_overlong",
    "varint_overflow",
    "header_count_lie",
    "trailing_bytes",
    "compressed_garbage",
    "bomb",
    "unknown_codec",
    "magic_legacy",
    "empty",
    "null",
    "two_batches",
    "control_bit",
    "negative_sequence",
    "truncated",
    "bad_timestamp",
)


def fuzz_batch(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    """One hostile payload of ``kind`` (see :data:`KINDS`)."""
    fb = _fuzz_batch(src, kind, produce_version)
    data = fb.data
    if (
        data
        and len(data) > rec.ATTRIBUTES_OFFSET + 1
        and produce_version < 7
        and data[rec.ATTRIBUTES_OFFSET + 1] & rec.COMPRESSION_MASK == compression.ZSTD
    ):
        # zstd before Produce v7 is refused before anything else is looked at
        return FuzzBatch(fb.kind, data, fb.expect | {UNSUPPORTED_CODEC})
    return fb


# --- one builder per kind: (src, kind, produce_version) -> FuzzBatch ---------------------


def _kind_valid(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    return FuzzBatch(kind, valid_batch(src, 0), frozenset({NONE}))


def _kind_valid_compressed(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    codec = src.integer(1, 4)
    expect: frozenset[int] = frozenset({NONE})
    if codec == compression.ZSTD and produce_version < 7:
        expect = frozenset({UNSUPPORTED_CODEC})
    data = valid_batch(src, codec)
    return FuzzBatch(f"{kind}_{compression.NAMES[codec]}", data, expect)


def _kind_bad_crc(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    buf = bytearray(valid_batch(src))
    pos = src.integer(rec.CRC_OFFSET, len(buf) - 1)
    buf[pos] ^= 1 << src.integer(0, 7)
    if pos >= rec.ATTRIBUTES_OFFSET and src.chance(0.2):
        buf[rec.CRC_OFFSET] ^= 0xFF  # make sure the CRC does not happen to match
    return FuzzBatch(kind, bytes(buf), frozenset({CORRUPT}) | _attr_codes(buf))


def _kind_length_past_end(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    buf = bytearray(valid_batch(src))
    struct.pack_into(">i", buf, 8, len(buf) - 12 + src.integer(1, 2**31 - 1 - len(buf)))
    return FuzzBatch(kind, bytes(buf), STRUCTURE)


def _kind_length_short(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    buf = bytearray(valid_batch(src))
    struct.pack_into(">i", buf, 8, src.integer(-(2**31), len(buf) - 13))
    return FuzzBatch(kind, bytes(buf), STRUCTURE)


def _kind_count_lie(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    buf = bytearray(valid_batch(src))
    (count,) = struct.unpack_from(">i", buf, 57)
    lie = src.integer(-(2**31), 2**31 - 1) if src.chance(0.5) else count + src.integer(1, 3)
    if lie == count:
        lie += 1
    struct.pack_into(">i", buf, 57, lie)
    struct.pack_into(">i", buf, 23, wire.wrap(lie - 1, 32))  # consistent header, lying body
    _fix_crc(buf)
    return FuzzBatch(kind, bytes(buf), STRUCTURE)


def _kind_last_delta_lie(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    buf = bytearray(valid_batch(src))
    (delta,) = struct.unpack_from(">i", buf, 23)
    struct.pack_into(">i", buf, 23, wire.wrap(delta + src.integer(1, 2**31 - 1), 32))
    _fix_crc(buf)
    return FuzzBatch(kind, bytes(buf), STRUCTURE)


def _kind_record_length_lie(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    claim = src.integer(-(2**31), 2**31 - 1)
    fields = [
        b"\x00",
        wire.zigzag(0),
        wire.zigzag(0),
        wire.zigzag(-1),
        wire.zigzag(1),
        b"v",
        wire.zigzag(0),
    ]
    body = b"".join(fields)
    if claim == len(body):
        claim += 1
    payload = wire.zigzag(claim) + body
    return FuzzBatch(kind, _raw_batch(payload, 1), STRUCTURE)


def _kind_varint_lie(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    # one record whose value length is written in 6..12 bytes (Kafka's varint is 5 at
    # most), or whose value length overflows 32 bits while the record length is right
    nbytes = src.integer(6, 12)
    if kind == "varint_overlong":
        vlen = wire.uvarint(2, min_bytes=nbytes)  # zigzag(1) padded
        value = b"v"
    else:
        vlen = wire.zigzag(2**32 + 1)  # 1 mod 2**32
        value = b"v"
    fields = [
        b"\x00",
        wire.zigzag(0),
        wire.zigzag(0),
        wire.zigzag(-1),
        vlen,
        value,
        wire.zigzag(0),
    ]
    return FuzzBatch(kind, _raw_batch(_record_bytes(fields), 1), STRUCTURE)


def _kind_header_count_lie(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    claim = src.integer(1, 2**31 - 1) if src.chance(0.7) else src.integer(-(2**31), -2)
    fields = [
        b"\x00",
        wire.zigzag(0),
        wire.zigzag(0),
        wire.zigzag(-1),
        wire.zigzag(1),
        b"v",
        wire.zigzag(claim),
    ]
    return FuzzBatch(kind, _raw_batch(_record_bytes(fields), 1), STRUCTURE)


def _kind_trailing_bytes(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    good = valid_batch(src, 0)
    payload = good[rec.HEADER_SIZE :] + src.raw(src.integer(1, 16))
    (count,) = struct.unpack_from(">i", good, 57)
    return FuzzBatch(kind, _raw_batch(payload, count), STRUCTURE)


def _kind_compressed_garbage(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    codec = src.integer(1, 4)
    if src.chance(0.5):
        data = _raw_batch(src.raw(src.integer(0, 200)), src.integer(1, 3), attrs=codec)
        expect = _codec_codes(codec, produce_version)
    else:
        # flipped bytes inside literal data may still decompress to well-formed records
        # (snappy, lz4 and zstd frames carry no checksum by default)
        data = _corrupt_compressed(src, codec)
        expect = _codec_codes(codec, produce_version) | {NONE}
    return FuzzBatch(f"{kind}_{compression.NAMES[codec]}", data, expect)


def _kind_bomb(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    codec = src.integer(1, 4)
    data = _raw_batch(_bomb(codec), src.integer(1, 2**31 - 1), attrs=codec)
    return FuzzBatch(
        f"{kind}_{compression.NAMES[codec]}",
        data,
        _codec_codes(codec, produce_version) | {TOO_LARGE},
    )


def _kind_unknown_codec(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    buf = bytearray(valid_batch(src, 0))
    struct.pack_into(">h", buf, rec.ATTRIBUTES_OFFSET, src.integer(5, 7))
    _fix_crc(buf)
    return FuzzBatch(kind, bytes(buf), frozenset({UNSUPPORTED_CODEC, CORRUPT, INVALID_RECORD}))


def _kind_magic_legacy(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    return FuzzBatch(
        kind, _legacy_message(src.integer(0, 1)), frozenset({INVALID_RECORD, CORRUPT, 43})
    )


def _kind_empty(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    return FuzzBatch(kind, b"", frozenset({INVALID_RECORD, CORRUPT}))


def _kind_null(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    return FuzzBatch(kind, None, frozenset({INVALID_RECORD, CORRUPT}))


def _kind_two_batches(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    return FuzzBatch(kind, valid_batch(src, 0) + valid_batch(src, 0), frozenset({INVALID_RECORD}))


def _kind_control_bit(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    buf = bytearray(valid_batch(src, 0))
    struct.pack_into(">h", buf, rec.ATTRIBUTES_OFFSET, rec.CONTROL_MASK | (src.integer(0, 1) << 4))
    _fix_crc(buf)
    return FuzzBatch(kind, bytes(buf), frozenset({INVALID_RECORD, CORRUPT}))


def _kind_negative_sequence(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    buf = bytearray(valid_batch(src, 0))
    struct.pack_into(">q", buf, 43, src.integer(0, 2**40))
    struct.pack_into(">i", buf, 53, src.integer(-(2**31), -1))
    _fix_crc(buf)
    return FuzzBatch(kind, bytes(buf), frozenset({INVALID_RECORD, 59, 45, 47}))


def _kind_truncated(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    good = valid_batch(src)
    cut = src.integer(0, len(good) - 1)
    return FuzzBatch(kind, good[:cut], frozenset({CORRUPT, INVALID_RECORD}))


def _kind_bad_timestamp(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    buf = bytearray(valid_batch(src, 0))
    ts = src.integer(-(2**63), 2**63 - 1)
    struct.pack_into(">q", buf, 35, ts)
    _fix_crc(buf)
    return FuzzBatch(kind, bytes(buf), frozenset({NONE, INVALID_TIMESTAMP, INVALID_RECORD}))


_BUILDERS: dict[str, Callable[[Choices, str, int], FuzzBatch]] = {
    "valid": _kind_valid,
    "valid_compressed": _kind_valid_compressed,
    "bad_crc": _kind_bad_crc,
    "length_past_end": _kind_length_past_end,
    "length_short": _kind_length_short,
    "count_lie": _kind_count_lie,
    "last_delta_lie": _kind_last_delta_lie,
    "record_length_lie": _kind_record_length_lie,
    "varint_overlong": _kind_varint_lie,
    "varint_overflow": _kind_varint_lie,
    "header_count_lie": _kind_header_count_lie,
    "trailing_bytes": _kind_trailing_bytes,
    "compressed_garbage": _kind_compressed_garbage,
    "bomb": _kind_bomb,
    "unknown_codec": _kind_unknown_codec,
    "magic_legacy": _kind_magic_legacy,
    "empty": _kind_empty,
    "null": _kind_null,
    "two_batches": _kind_two_batches,
    "control_bit": _kind_control_bit,
    "negative_sequence": _kind_negative_sequence,
    "truncated": _kind_truncated,
    "bad_timestamp": _kind_bad_timestamp,
}


def _fuzz_batch(src: Choices, kind: str, produce_version: int) -> FuzzBatch:
    """The payload of ``kind``: each kind has a builder of its own (:data:`_BUILDERS`)."""
    build = _BUILDERS.get(kind)
    if build is None:
        raise ValueError(kind)
    return build(src, kind, produce_version)


def _codec_codes(codec: int, produce_version: int) -> frozenset[int]:
    if codec == compression.ZSTD and produce_version < 7:
        return frozenset({UNSUPPORTED_CODEC})
    return STRUCTURE


def _attr_codes(buf: bytearray) -> frozenset[int]:
    """A bit flip may have turned the attributes into an unknown codec or a control batch,
    which a broker may report before the CRC."""
    return frozenset({UNSUPPORTED_CODEC, INVALID_RECORD})


def any_batch(src: Choices, produce_version: int) -> FuzzBatch:
    """A payload of a kind chosen by ``src`` (valid ones about a quarter of the time)."""
    if src.chance(0.25):
        return fuzz_batch(src, "valid" if src.chance(0.6) else "valid_compressed", produce_version)
    kind = KINDS[src.integer(2, len(KINDS) - 1)]
    if kind == "bomb" and not src.chance(0.05):
        kind = "compressed_garbage"  # bombs are large: keep them rare
    return fuzz_batch(src, kind, produce_version)
