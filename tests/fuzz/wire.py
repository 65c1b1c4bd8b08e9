"""Kafka wire primitives for the fuzzer, written without the checks kio's writers make.

Every writer takes the value to write *and*, where the format has one, the length or count to
claim, so a test can write a string of 3 bytes that says it has 2**31-1, an array of one
element that claims -7 elements, or a null (-1) where the schema says the field is not
nullable. Integers are wrapped to their width (two's complement) rather than rejected, so a
"strange" value is simply whatever bits fit.

Formats (Kafka's protocol guide): int8/16/32/64 big-endian; legacy STRING = int16 length
(-1 null) + UTF-8; legacy BYTES/RECORDS = int32 length (-1 null); ARRAY = int32 count (-1
null); flexible (compact) forms use an unsigned varint of length+1 (0 = null); tagged fields =
uvarint count, then (uvarint tag, uvarint size, bytes) each.

Concurrency: pure functions.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def wrap(value: int, bits: int) -> int:
    """``value`` reduced to a signed ``bits``-bit integer (two's complement)."""
    mask = (1 << bits) - 1
    value &= mask
    return value - (1 << bits) if value >> (bits - 1) else value


def i8(value: int) -> bytes:
    return bytes([value & 0xFF])


def i16(value: int) -> bytes:
    return _I16.pack(wrap(value, 16))


def i32(value: int) -> bytes:
    return _I32.pack(wrap(value, 32))


def i64(value: int) -> bytes:
    return _I64.pack(wrap(value, 64))


def uvarint(value: int, *, min_bytes: int = 1) -> bytes:
    """Unsigned LEB128; ``min_bytes`` pads with continuation bytes (an overlong but legal
    encoding when small, an out-of-range one when long). Negative values are written as
    their 64-bit two's complement, i.e. 10 bytes."""
    if value < 0:
        value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80 or len(out) + 1 < min_bytes:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value & 0x7F)
    return bytes(out)


def zigzag(value: int, *, min_bytes: int = 1) -> bytes:
    """Signed varint (zigzag, 64-bit) as in record fields."""
    encoded = (value << 1) ^ (value >> 63)
    return uvarint(encoded & ((1 << 64) - 1) if value < 0 else encoded, min_bytes=min_bytes)


def length(n: int | None, flexible: bool, legacy_width: int) -> bytes:
    """A length or count prefix: ``None`` is null; legacy widths are 16 or 32 bits."""
    if flexible:
        return uvarint(0 if n is None else n + 1)
    value = -1 if n is None else n
    return i16(value) if legacy_width == 16 else i32(value)


def string(data: bytes | None, flexible: bool, *, claim: int | None = None) -> bytes:
    """A STRING / COMPACT_STRING; ``claim`` overrides the length written (may lie)."""
    if data is None:
        return length(None if claim is None else claim, flexible, 16)
    n = len(data) if claim is None else claim
    return length(n, flexible, 16) + data


def blob(data: bytes | None, flexible: bool, *, claim: int | None = None) -> bytes:
    """BYTES / COMPACT_BYTES (and RECORDS): like :func:`string` with a 32-bit legacy length."""
    if data is None:
        return length(None if claim is None else claim, flexible, 32)
    n = len(data) if claim is None else claim
    return length(n, flexible, 32) + data


def array_prefix(count: int | None, flexible: bool) -> bytes:
    return length(count, flexible, 32)


def tagged_fields(fields: list[tuple[int, bytes]], *, claim_count: int | None = None) -> bytes:
    """A tagged-field section; ``claim_count`` overrides the count written."""
    out = bytearray(uvarint(len(fields) if claim_count is None else claim_count))
    for tag, payload in fields:
        out += uvarint(tag)
        out += uvarint(len(payload))
        out += payload
    return bytes(out)


def request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: bytes | None,
    *,
    flexible: bool,
    tags: list[tuple[int, bytes]] | None = None,
) -> bytes:
    """Request header v1 (``flexible=False``) or v2 (adds tagged fields). The client id is
    a legacy (int16-length) string in both."""
    out = i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id, False)
    if flexible:
        out += tagged_fields(tags or [])
    return out


def frame(payload: bytes, *, claim: int | None = None) -> bytes:
    """A size-prefixed frame; ``claim`` overrides the size written."""
    return i32(len(payload) if claim is None else claim) + payload
