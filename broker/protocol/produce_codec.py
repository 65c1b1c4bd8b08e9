"""Produce (key 0) responses, v3-v9, encoded by hand (sans-IO).

Why by hand: every acknowledged produce request is answered with one of these, and building
and encoding it through kio's dataclasses cost more than decoding the request and appending
its records. The format (Kafka's ``ProduceResponse.json``): ``responses[]``: ``name
string``, ``partition_responses[]``: ``index int32``, ``error_code int16``, ``base_offset
int64``, ``log_append_time_ms int64`` (-1 unless the topic uses LogAppendTime),
``log_start_offset int64`` (v5+), ``record_errors[]`` (v8+: ``batch_index int32``,
``batch_index_error_message nullable string``), ``error_message nullable string`` (v8+);
then ``throttle_time_ms int32``. v9 is flexible: compact arrays and strings (unsigned
varint length + 1, 0 = null) and a tagged-field section after every struct and at the end.

Concurrency: pure functions.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from broker.protocol.framing import write_uvarint

__all__ = ["PartitionResult", "encode_response"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PART_V5 = struct.Struct(">ihqqq")  # ... log_start_offset
FLEXIBLE_FROM = 9


class PartitionResult(NamedTuple):
    """One partition's answer."""

    partition: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    error_message: str | None


# An error message may echo what the client sent (a 32,767-byte topic name): cut, so the
# response always fits a Kafka string (as the dispatcher cuts kio-encoded ones).
MAX_ERROR_MESSAGE_CHARS = 1024


def _nullable_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
        return
    if len(value) > MAX_ERROR_MESSAGE_CHARS:
        value = value[: MAX_ERROR_MESSAGE_CHARS - 3] + "..."
    raw = value.encode("utf-8")
    out += write_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))
    out += raw


def encode_response(
    version: int, topics: list[tuple[str, list[PartitionResult]]], throttle_time_ms: int = 0
) -> bytes:
    """The response body (without the response header)."""
    flexible = version >= FLEXIBLE_FROM
    out = bytearray()
    out += write_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, parts in topics:
        raw = name.encode("utf-8")
        out += write_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))
        out += raw
        out += write_uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts))
        for p in parts:
            if version >= 5:
                out += _PART_V5.pack(
                    p.partition,
                    p.error_code,
                    p.base_offset,
                    p.log_append_time_ms,
                    p.log_start_offset,
                )
            else:
                out += _PART_V3.pack(p.partition, p.error_code, p.base_offset, p.log_append_time_ms)
            if version >= 8:
                out += b"\x01" if flexible else b"\x00\x00\x00\x00"  # no record errors
                _nullable_string(out, p.error_message, flexible)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out.append(0)
    return bytes(out)
