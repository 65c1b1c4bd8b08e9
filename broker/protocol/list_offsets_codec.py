"""ListOffsets (key 2) requests and responses, v1-v9, decoded and encoded by hand (sans-IO).

Why by hand: Spark's Kafka connector asks for the earliest and latest offsets of its
partition after every ``poll()`` (two ListOffsets per 500 records), so this small request is
as frequent as Fetch; through the generic kio codec it cost the broker more CPU than the
fetch itself. The formats (Kafka's ``ListOffsetsRequest.json`` / ``ListOffsetsResponse.json``):

Request: ``replica_id int32``, ``isolation_level int8`` (v2+), ``topics[]``: ``name
string``, ``partitions[]``: ``partition_index int32``, ``current_leader_epoch int32``
(v4+), ``timestamp int64``. v8 and v9 add no field (only the timestamps -4 and -5, KIP-405;
served for Kafka followers, see registry.py). v6+ is flexible: compact arrays and strings (unsigned varint
length + 1) and a tagged-field section after every struct and at the end.

Response: ``throttle_time_ms int32`` (v2+), ``topics[]``: ``name string``,
``partitions[]``: ``partition_index int32``, ``error_code int16``, ``timestamp int64``,
``offset int64``, ``leader_epoch int32`` (v4+); flexible from v6 as above.

A request that does not parse (truncated, a length past the end, an impossible count)
raises :class:`~broker.protocol.framing.InvalidRequestError`; nothing is allocated from a
count before the bytes that back it have been read.

Concurrency: pure functions.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from broker.protocol.framing import (
    Buffer,
    InvalidRequestError,
    read_count,
    read_string,
    skip_tagged_fields,
    write_uvarint,
)

__all__ = [
    "ListOffsetsPartition",
    "ListOffsetsQuery",
    "ListOffsetsTopic",
    "PartitionOffset",
    "decode_request",
    "encode_response",
]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_V1 = struct.Struct(">iq")  # partition_index, timestamp
_PART_V4 = struct.Struct(">iiq")  # partition_index, current_leader_epoch, timestamp
_OUT_V1 = struct.Struct(">ihqq")  # partition_index, error_code, timestamp, offset
_OUT_V4 = struct.Struct(">ihqqi")  # ... leader_epoch
FLEXIBLE_FROM = 6


class ListOffsetsPartition(NamedTuple):
    partition_index: int
    current_leader_epoch: int
    timestamp: int


class ListOffsetsTopic(NamedTuple):
    name: str
    partitions: list[ListOffsetsPartition]


class ListOffsetsQuery(NamedTuple):
    """A decoded request (the field names of kio's, so handlers read either)."""

    replica_id: int
    isolation_level: int
    topics: list[ListOffsetsTopic]


class PartitionOffset(NamedTuple):
    """One partition's answer."""

    partition_index: int
    error_code: int
    timestamp: int
    offset: int
    leader_epoch: int


def decode_request(version: int, buf: Buffer, pos: int) -> ListOffsetsQuery:
    """Decode a ListOffsets request body starting at ``pos`` (after the header)."""
    flexible = version >= FLEXIBLE_FROM
    part_struct = _PART_V4 if version >= 4 else _PART_V1
    try:
        (replica_id,) = _I32.unpack_from(buf, pos)
        pos += 4
        isolation_level = 0
        if version >= 2:
            (isolation_level,) = _I8.unpack_from(buf, pos)
            pos += 1
        topics: list[ListOffsetsTopic] = []
        n_topics, pos = read_count(buf, pos, flexible)
        for _ in range(n_topics):
            name, pos = read_string(buf, pos, flexible)
            parts: list[ListOffsetsPartition] = []
            n_parts, pos = read_count(buf, pos, flexible)
            for _ in range(n_parts):
                if version >= 4:
                    index, epoch, timestamp = part_struct.unpack_from(buf, pos)
                else:
                    index, timestamp = part_struct.unpack_from(buf, pos)
                    epoch = -1
                pos += part_struct.size
                if flexible:
                    pos = skip_tagged_fields(buf, pos)
                parts.append(ListOffsetsPartition(index, epoch, timestamp))
            if flexible:
                pos = skip_tagged_fields(buf, pos)
            topics.append(ListOffsetsTopic(name, parts))
        if flexible:
            pos = skip_tagged_fields(buf, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed ListOffsets v{version}: {exc}") from exc
    return ListOffsetsQuery(replica_id, isolation_level, topics)


def encode_response(
    version: int, topics: list[tuple[str, list[PartitionOffset]]], throttle_time_ms: int = 0
) -> bytes:
    """The response body (without the response header)."""
    flexible = version >= FLEXIBLE_FROM
    out = bytearray()
    if version >= 2:
        out += _I32.pack(throttle_time_ms)
    out += write_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, parts in topics:
        raw = name.encode("utf-8")
        if flexible:
            out += write_uvarint(len(raw) + 1)
        else:
            out += _I16.pack(len(raw))
        out += raw
        out += write_uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts))
        for p in parts:
            if version >= 4:
                out += _OUT_V4.pack(*p)
            else:
                out += _OUT_V1.pack(p[0], p[1], p[2], p[3])
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    return bytes(out)
