"""Metadata (key 3) v9 for the connector's wire client, encoded and decoded by hand.

Why by hand: every Spark task that reads a partition asks for its leader first (the fetcher's
first request), and a task is often the first thing a fresh Python worker does. Through
``kio`` that request imported kio's serializer (and with it ``asyncio``) and the Metadata
schemas: ~40 ms in each new worker, on the first micro-batch's path, against ~1 ms for the
exchange itself. The other requests of the connector's cold paths (coordinators,
transactions, topic creation) stay with kio.

Request (Kafka's ``MetadataRequest.json``, v9, flexible): ``topics`` compact nullable array
of {``name`` compact string, tagged fields} (null: every topic), then
``allow_auto_topic_creation``, ``include_cluster_authorized_operations`` and
``include_topic_authorized_operations`` (bools), then tagged fields.

Response (``MetadataResponse.json``, v9): ``throttle_time_ms`` int32; ``brokers`` compact
array of {``node_id`` int32, ``host`` compact string, ``port`` int32, ``rack`` compact nullable
string, tagged}; ``cluster_id`` compact nullable string; ``controller_id`` int32; ``topics``
compact array of {``error_code`` int16, ``name`` compact string, ``is_internal`` bool,
``partitions`` compact array of {``error_code`` int16, ``partition_index`` int32,
``leader_id`` int32, ``leader_epoch`` int32, ``replica_nodes``, ``isr_nodes``,
``offline_replicas`` (compact arrays of int32), tagged}, ``topic_authorized_operations``
int32, tagged}; ``cluster_authorized_operations`` int32; tagged fields. ``frame`` is the
response after its size, starting with the correlation id (response header v1: the id and
a tagged field section).

A response that does not parse (truncated, a length past the end, a name that is not UTF-8)
raises ``struct.error``, which the cluster treats as a failed exchange.

Concurrency: pure functions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from spark_connector.kafka.connection import read_uvarint, skip_tagged_fields, write_uvarint

__all__ = [
    "METADATA",
    "METADATA_VERSION",
    "MetadataAnswer",
    "TopicAnswer",
    "decode_response",
    "encode_request",
]

METADATA, METADATA_VERSION = 3, 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">hiii")  # error_code, partition_index, leader_id, leader_epoch


@dataclass(slots=True)
class TopicAnswer:
    """One topic of the response: its error code and ``{partition: (leader, epoch)}``."""

    name: str
    error: int
    partitions: dict[int, tuple[int, int]] = field(default_factory=dict)


@dataclass(slots=True)
class MetadataAnswer:
    brokers: dict[int, tuple[str, int]]
    controller: int
    topics: list[TopicAnswer]


def encode_request(topics: list[str] | None, *, auto_create: bool = False) -> bytes:
    """The request body for ``topics`` (None: every topic; empty: brokers only)."""
    parts: list[bytes] = []
    if topics is None:
        parts.append(b"\x00")  # null array
    else:
        parts.append(write_uvarint(len(topics) + 1))
        for name in topics:
            raw = name.encode("utf-8")
            parts += (write_uvarint(len(raw) + 1), raw, b"\x00")
    parts.append(bytes((int(auto_create), 0, 0, 0)))  # three bools, then no tagged fields
    return b"".join(parts)


def _string(frame: bytes, pos: int, *, nullable: bool = False) -> tuple[str | None, int]:
    n, pos = read_uvarint(frame, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise struct.error("a null string where the schema has none")
    end = pos + n - 1
    if end > len(frame):
        raise struct.error("a string runs past the end of the response")
    try:
        return frame[pos:end].decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise struct.error(f"a string that is not UTF-8 ({exc})") from None


def _count(frame: bytes, pos: int) -> tuple[int, int]:
    n, pos = read_uvarint(frame, pos)
    count = max(n - 1, 0)  # 0 (null) reads as empty
    if count > len(frame) - pos:  # every element takes at least one byte
        raise struct.error(f"an array of {count} elements in {len(frame) - pos} bytes")
    return count, pos


def _skip_int32_array(frame: bytes, pos: int) -> int:
    count, pos = _count(frame, pos)
    return pos + 4 * count


def decode_response(frame: bytes) -> MetadataAnswer:
    """The brokers, controller and topics of a v9 response ``frame`` (see the module
    docstring); raises ``struct.error`` when it does not parse."""
    try:
        return _decode(frame)
    except IndexError as exc:  # a varint running past the end
        raise struct.error(f"truncated Metadata response ({exc})") from None


def _decode(frame: bytes) -> MetadataAnswer:
    pos = skip_tagged_fields(frame, 4)  # after the correlation id
    pos += 4  # throttle_time_ms
    brokers: dict[int, tuple[str, int]] = {}
    n, pos = _count(frame, pos)
    for _ in range(n):
        (node,) = _I32.unpack_from(frame, pos)
        host, pos = _string(frame, pos + 4)
        (port,) = _I32.unpack_from(frame, pos)
        _rack, pos = _string(frame, pos + 4, nullable=True)
        pos = skip_tagged_fields(frame, pos)
        assert host is not None
        brokers[node] = (host, port)
    _cluster_id, pos = _string(frame, pos, nullable=True)
    (controller,) = _I32.unpack_from(frame, pos)
    pos += 4
    topics: list[TopicAnswer] = []
    n, pos = _count(frame, pos)
    for _ in range(n):
        (error,) = _I16.unpack_from(frame, pos)
        name, pos = _string(frame, pos + 2)
        assert name is not None
        topic = TopicAnswer(name, error)
        pos += 1  # is_internal
        parts, pos = _count(frame, pos)
        for _ in range(parts):
            _perr, index, leader, epoch = _PARTITION.unpack_from(frame, pos)
            pos += _PARTITION.size
            for _ in range(3):  # replicas, in-sync replicas, offline replicas
                pos = _skip_int32_array(frame, pos)
            pos = skip_tagged_fields(frame, pos)
            topic.partitions[index] = (leader, epoch)
        pos += 4  # topic_authorized_operations
        pos = skip_tagged_fields(frame, pos)
        topics.append(topic)
    _I32.unpack_from(frame, pos)  # cluster_authorized_operations
    if skip_tagged_fields(frame, pos + 4) > len(frame):
        raise struct.error("a tagged field runs past the end of the response")
    return MetadataAnswer(brokers, controller, topics)
