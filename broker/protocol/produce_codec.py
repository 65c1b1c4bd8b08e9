"""Produce (key 0) requests and responses, v3-v9, decoded and encoded by hand (sans-IO).

Why by hand: every acknowledged produce request is answered with one of these, and building
and encoding it through kio's dataclasses cost more than decoding the request and appending
its records. The request is decoded by hand so that its records are not copied: kio copies
each partition's ``records`` out of the frame into new ``bytes``, a megabyte per request of
1 MB batches (with the allocation's page faults); here ``records`` is a read-only
``memoryview`` of the frame.

Request (Kafka's ``ProduceRequest.json``): ``transactional_id nullable string``, ``acks
int16``, ``timeout_ms int32``, ``topic_data[]``: ``name string``, ``partition_data[]``:
``index int32``, ``records nullable bytes``; v9 is flexible (compact arrays, strings and
bytes, a tagged-field section after every struct and at the end). A request that does not
parse (truncated, a length past the end, a null where none is allowed, a name that is not
UTF-8) raises :class:`~broker.protocol.framing.InvalidRequestError`; nothing is allocated
from a count before the bytes that back it have been read.

Response (Kafka's ``ProduceResponse.json``): ``responses[]``: ``name
string``, ``partition_responses[]``: ``index int32``, ``error_code int16``, ``base_offset
int64``, ``log_append_time_ms int64`` (-1 unless the topic uses LogAppendTime),
``log_start_offset int64`` (v5+), ``record_errors[]`` (v8+: ``batch_index int32``,
``batch_index_error_message nullable string``), ``error_message nullable string`` (v8+);
then ``throttle_time_ms int32``. v9 is flexible: compact arrays and strings (unsigned
varint length + 1, 0 = null) and a tagged-field section after every struct and at the end.

Concurrency: pure functions.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass
from typing import NamedTuple

from broker.protocol.framing import (
    Buffer,
    InvalidRequestError,
    read_count,
    read_nullable_bytes,
    read_nullable_string,
    read_string,
    skip_tagged_fields,
    write_uvarint,
)

__all__ = [
    "PartitionResult",
    "ProducePartitionData",
    "ProduceRequest",
    "ProduceTopicData",
    "decode_request",
    "encode_response",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PART_V5 = struct.Struct(">ihqqq")  # ... log_start_offset
_ACKS_TIMEOUT = struct.Struct(">hi")  # acks, timeout_ms
FLEXIBLE_FROM = 9


@dataclass(frozen=True, slots=True)
class ProducePartitionData:
    index: int
    records: memoryview | None
    """The partition's record batches: a view of the request's frame (read-only), or None."""


class ProduceTopicData(NamedTuple):
    name: str
    partition_data: tuple[ProducePartitionData, ...]


class ProduceRequest(NamedTuple):
    """A decoded request (the field names and types of kio's, so handlers read either)."""

    transactional_id: str | None
    acks: int
    timeout: datetime.timedelta
    topic_data: tuple[ProduceTopicData, ...]


def decode_request(version: int, buf: Buffer, pos: int) -> ProduceRequest:
    """Decode a Produce request body starting at ``pos`` (after the header); ``records`` are
    views of ``buf``, which must stay unchanged while they are used."""
    flexible = version >= FLEXIBLE_FROM
    view = memoryview(buf)
    try:
        transactional_id, pos = read_nullable_string(buf, pos, flexible)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
        pos += _ACKS_TIMEOUT.size
        topics: list[ProduceTopicData] = []
        n_topics, pos = read_count(buf, pos, flexible)
        for _ in range(n_topics):
            name, pos = read_string(buf, pos, flexible)
            parts: list[ProducePartitionData] = []
            n_parts, pos = read_count(buf, pos, flexible)
            for _ in range(n_parts):
                (index,) = _I32.unpack_from(buf, pos)
                records, pos = read_nullable_bytes(view, pos + 4, flexible)
                if flexible:
                    pos = skip_tagged_fields(buf, pos)
                parts.append(ProducePartitionData(index, records))
            if flexible:
                pos = skip_tagged_fields(buf, pos)
            topics.append(ProduceTopicData(name, tuple(parts)))
        if flexible:
            pos = skip_tagged_fields(buf, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed Produce v{version}: {exc}") from exc
    return ProduceRequest(
        transactional_id, acks, datetime.timedelta(milliseconds=timeout_ms), tuple(topics)
    )


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
