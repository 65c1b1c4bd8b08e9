"""Request/response framing and headers, and the wire readers the hand-written codecs share
(sans-IO).

Wire format: every request and response is a 4-byte big-endian size followed by that many
bytes. A request starts with a header: ``api_key int16, api_version int16, correlation_id
int32, client_id nullable string (int16 length)``; header v2 (used when the request body
is flexible) adds tagged fields (an unsigned varint count, then ``tag, size, bytes``).
Responses start with ``correlation_id int32``; response header v1 (flexible bodies) adds
an empty tagged-field section. ApiVersions responses always use header v0, so a client
that sent a version the broker does not know can still read the answer (KIP-511).

The readers of message bodies (``read_length``, ``read_count``, ``read_string``,
``read_nullable_string``, ``read_nullable_bytes``, ``read_tagged_field``) serve the codecs
written by hand for speed (``produce_codec``, ``list_offsets_codec``, ``fetch_response``).
Each takes the buffer and a position and returns the value and the position after it; a
``flexible`` message (KIP-482) uses compact lengths (an unsigned varint of n + 1, 0 = null),
an older one int16 string lengths and int32 array and bytes lengths (-1 = null). A length
past the end or a null where none is allowed raises :class:`InvalidRequestError`; a
truncated fixed-width length raises ``struct.error``, which the codecs turn into
:class:`InvalidRequestError` with the rest of their fixed-width fields.

Concurrency: pure functions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.protocol.errors import ErrorCode, KafkaError

Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct(">hhih")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class InvalidRequestError(KafkaError):
    """A request whose header or body cannot be parsed; the connection is closed."""

    code = ErrorCode.invalid_request


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise InvalidRequestError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise InvalidRequestError("varint too long")


def write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def parse_request_header(buf: Buffer) -> tuple[RequestHeader, int]:
    """Parse the header fields common to v1 and v2; return it and the offset after it.

    The caller decides from (api_key, api_version) whether tagged fields follow
    (``skip_tagged_fields``).
    """
    if len(buf) < _HEADER.size:
        raise InvalidRequestError("request shorter than its header")
    api_key, api_version, correlation_id, client_len = _HEADER.unpack_from(buf, 0)
    pos = _HEADER.size
    client_id: str | None = None
    if client_len >= 0:
        if pos + client_len > len(buf):
            raise InvalidRequestError("client_id runs past the end of the request")
        client_id = bytes(buf[pos : pos + client_len]).decode("utf-8", "replace")
        pos += client_len
    elif client_len != -1:
        raise InvalidRequestError("negative client_id length")
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (``flexible=False``) or v1 (with an empty tagged-field section)."""
    return _I32.pack(correlation_id) + (b"\x00" if flexible else b"")


def size_prefix(n: int) -> bytes:
    return _I32.pack(n)


# --- the readers of message bodies -------------------------------------------------------


def read_length(buf: Buffer, pos: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length or count, -1 for null: compact when ``flexible``, else int32 (``wide``: arrays
    and bytes) or int16 (strings)."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    if wide:
        return _I32.unpack_from(buf, pos)[0], pos + 4
    return _I16.unpack_from(buf, pos)[0], pos + 2


def read_count(buf: Buffer, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's element count (null is refused)."""
    n, pos = read_length(buf, pos, flexible, True)
    if n < 0:
        raise InvalidRequestError("null or negative array length")
    return n, pos


def read_string(buf: Buffer, pos: int, flexible: bool) -> tuple[str, int]:
    """A string (UTF-8; null is refused; invalid UTF-8 raises ``UnicodeDecodeError``)."""
    n, pos = read_length(buf, pos, flexible, False)
    if n < 0:
        raise InvalidRequestError("null or negative string length")
    end = pos + n
    if end > len(buf):
        raise InvalidRequestError("string runs past the end of the frame")
    return str(buf[pos:end], "utf-8"), end


def read_nullable_string(buf: Buffer, pos: int, flexible: bool) -> tuple[str | None, int]:
    """A string or null (once per request at most: its length is read twice)."""
    n, after = read_length(buf, pos, flexible, False)
    if n == -1:
        return None, after
    return read_string(buf, pos, flexible)


def read_nullable_bytes(
    view: memoryview, pos: int, flexible: bool
) -> tuple[memoryview | None, int]:
    """Nullable bytes as a view of ``view`` (no copy)."""
    n, pos = read_length(view, pos, flexible, True)
    if n < 0:
        if n != -1:
            raise InvalidRequestError("negative bytes length")
        return None, pos
    end = pos + n
    if end > len(view):
        raise InvalidRequestError("bytes run past the end of the frame")
    return view[pos:end], end


def read_tagged_field(buf: Buffer, pos: int, tag: int) -> tuple[Buffer | None, int]:
    """Read a tagged-field section (an unsigned varint count, then ``tag, size, bytes``):
    the value of field ``tag`` (the last one, if repeated; None when absent; -1 asks for
    none) and the position after the section. The other fields are skipped (KIP-482)."""
    count, pos = read_uvarint(buf, pos)
    value = None
    for _ in range(count):
        field, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise InvalidRequestError("tagged field runs past the end of the frame")
        if field == tag:
            value = buf[pos:end]
        pos = end
    return value, pos


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """The position after a tagged-field section, its fields ignored."""
    if pos < len(buf) and buf[pos] == 0:  # no tagged fields: nearly always
        return pos + 1
    return read_tagged_field(buf, pos, -1)[1]
