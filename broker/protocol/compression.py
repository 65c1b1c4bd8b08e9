"""Record batch compression codecs (attribute bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4,
4 zstd.

Decompression is bounded: every codec stops (raising CorruptRecordError via the caller's
``KafkaError``) once the output would exceed ``max_bytes``, so a small "zip bomb" batch cannot
make the broker allocate without limit.

Kafka's snappy uses the xerial framing when written by the Java client (magic
``\\x82SNAPPY\\x00``); librdkafka and kafka-python read and write both, so both are accepted.
Kafka's lz4 is the standard LZ4 frame format.

Concurrency: pure functions.
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from broker.protocol.errors import ErrorCode, KafkaError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BY_NAME = {v: k for k, v in NAMES.items()} | {"uncompressed": NONE}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_CHUNK = 64 * 1024


class DecompressionError(KafkaError):
    code = ErrorCode.corrupt_message


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6)
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(lz4.frame.compress(data))
    if codec == ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    raise DecompressionError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes, max_bytes: int) -> bytes:
    """Decompress ``data`` with ``codec``; raise DecompressionError past ``max_bytes``."""
    try:
        if codec == NONE:
            return data
        if codec == GZIP:
            return _bounded_zlib(data, max_bytes)
        if codec == SNAPPY:
            return _snappy(data, max_bytes)
        if codec == LZ4:
            return _bounded_lz4(data, max_bytes)
        if codec == ZSTD:
            return _bounded_zstd(data, max_bytes)
    except DecompressionError:
        raise
    except (
        OSError,
        ValueError,
        EOFError,
        RuntimeError,
        zlib.error,
        zstandard.ZstdError,
        cramjam.DecompressionError,
    ) as exc:
        raise DecompressionError(f"cannot decompress {NAMES.get(codec)} batch: {exc}") from exc
    raise DecompressionError(f"unknown compression codec {codec}")


def _too_big(max_bytes: int) -> DecompressionError:
    return DecompressionError(f"decompressed batch exceeds {max_bytes} bytes")


def _bounded_zlib(data: bytes, max_bytes: int) -> bytes:
    d = zlib.decompressobj(wbits=47)  # auto-detect gzip/zlib header
    out = d.decompress(data, max_bytes + 1)
    if len(out) > max_bytes or d.unconsumed_tail:
        raise _too_big(max_bytes)
    return out


def _bounded_lz4(data: bytes, max_bytes: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(data, max_length=max_bytes + 1)
    if len(out) > max_bytes:
        raise _too_big(max_bytes)
    return bytes(out)


def _bounded_zstd(data: bytes, max_bytes: int) -> bytes:
    # read in chunks: read(max_bytes + 1) would allocate the whole bound for every batch
    # (into one growing buffer: a list joined at the end would hold the output twice)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
    out = bytearray()
    while True:
        chunk = reader.read(min(_CHUNK * 4, max_bytes + 1 - len(out)))
        if not chunk:
            return bytes(out)
        out += chunk
        if len(out) > max_bytes:
            raise _too_big(max_bytes)


def _snappy_block(block: bytes, max_bytes: int) -> bytes:
    n = _snappy_uncompressed_length(block)
    if n > max_bytes:
        raise _too_big(max_bytes)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_uncompressed_length(block: bytes) -> int:
    result = shift = 0
    for i, b in enumerate(block[:5]):
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
        if i == 4:
            break
    raise DecompressionError("bad snappy length preamble")


def _snappy(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, max_bytes)
    # xerial framing: 8-byte magic, two int32 versions, then (int32 length, block)*
    pos = 16
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecompressionError("truncated xerial snappy chunk")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise DecompressionError("bad xerial snappy chunk length")
        chunk = _snappy_block(data[pos : pos + n], max_bytes - total)
        total += len(chunk)
        parts.append(chunk)
        pos += n
    return b"".join(parts)
