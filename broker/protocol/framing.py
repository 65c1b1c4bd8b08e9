"""Request/response framing and headers (sans-IO).

Wire format: every request and response is a 4-byte big-endian size followed by that many
bytes. A request starts with a header: ``api_key int16, api_version int16, correlation_id
int32, client_id nullable string (int16 length)``; header v2 (used when the request body
is flexible) adds tagged fields (an unsigned varint count, then ``tag, size, bytes``).
Responses start with ``correlation_id int32``; response header v1 (flexible bodies) adds
an empty tagged-field section. ApiVersions responses always use header v0, so a client
that sent a version the broker does not know can still read the answer (KIP-511).

Concurrency: pure functions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.protocol.errors import ErrorCode, KafkaError

_HEADER = struct.Struct(">hhih")
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


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
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


def parse_request_header(buf: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
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


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise InvalidRequestError("tagged field runs past the end of the request")
    return pos


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (``flexible=False``) or v1 (with an empty tagged-field section)."""
    return _I32.pack(correlation_id) + (b"\x00" if flexible else b"")


def size_prefix(n: int) -> bytes:
    return _I32.pack(n)
