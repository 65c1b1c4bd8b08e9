"""Fetch (key 1), versions 4-12, with a hand-written response encoder so that record bytes
go from the segment file to the socket with ``sendfile``.

Semantics: long poll (``max_wait_ms``/``min_bytes``), per-partition and per-response byte
limits (the first partition with data always returns at least one whole batch so a consumer
can make progress past a large batch), the whole batch that contains the fetch offset,
OFFSET_OUT_OF_RANGE with the log start offset and high watermark, consumers never past the
high watermark. Incremental fetch sessions (KIP-227) are declined: a request that asks for a
new session gets ``session_id = 0`` (the client keeps sending full requests), and one naming
a session this broker never created gets FETCH_SESSION_ID_NOT_FOUND.

Response layout (v4-v12; v12 is flexible: compact arrays/strings/bytes and tagged fields)::

    throttle_time_ms int32, [v7+] error_code int16, session_id int32,
    responses [topic string, partitions [partition int32, error_code int16,
        high_watermark int64, last_stable_offset int64, [v5+] log_start_offset int64,
        aborted_transactions nullable [producer_id int64, first_offset int64],
        [v11+] preferred_read_replica int32, records nullable bytes]]
"""

from __future__ import annotations

import struct
from typing import Any

from broker.api.context import RequestContext
from broker.network.server import Chunk, Response
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import write_uvarint
from broker.replication.replica_manager import FetchRequestPartition, FetchResult
from broker.types import TopicPartition

_PART_HEAD = struct.Struct(">ihqq")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
INVALID_SESSION_ID = 0
FINAL_EPOCH = -1


async def handle(ctx: RequestContext, request: Any) -> Response:
    version = ctx.version
    session_id = int(getattr(request, "session_id", 0))
    if version >= 7 and session_id != INVALID_SESSION_ID:
        return encode_response(version, [], error=ErrorCode.fetch_session_id_not_found)
    wanted: list[FetchRequestPartition] = []
    for topic in request.topics:
        for p in topic.partitions:
            wanted.append(
                FetchRequestPartition(
                    TopicPartition(topic.topic, int(p.partition)),
                    int(p.fetch_offset),
                    int(p.partition_max_bytes),
                    int(getattr(p, "current_leader_epoch", -1)),
                )
            )
    max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
    max_bytes = min(max_bytes, ctx.services.config["fetch.max.bytes"]) if max_bytes > 0 else 0
    results = await ctx.services.replica_manager.fetch(
        wanted,
        max_wait_ms=int(request.max_wait.total_seconds() * 1000),
        min_bytes=int(request.min_bytes),
        max_bytes=max_bytes,
        committed_only=int(request.replica_id) < 0,
        replica_id=int(request.replica_id),
    )
    return encode_response(version, results)


def _string(value: str, flexible: bool) -> bytes:
    raw = value.encode()
    if flexible:
        return write_uvarint(len(raw) + 1) + raw
    return _I16.pack(len(raw)) + raw


def _array_len(n: int, flexible: bool) -> bytes:
    return write_uvarint(n + 1) if flexible else _I32.pack(n)


def encode_response(
    version: int, results: list[FetchResult], *, error: ErrorCode = ErrorCode.none
) -> Response:
    flexible = version >= 12
    chunks: list[Chunk] = []
    head = bytearray(_I32.pack(0))
    if version >= 7:
        head += _I16.pack(int(error)) + _I32.pack(INVALID_SESSION_ID)
    by_topic: dict[str, list[FetchResult]] = {}
    for r in results:
        by_topic.setdefault(r.tp.topic, []).append(r)
    head += _array_len(len(by_topic), flexible)
    size = 0
    buf = head
    for topic, parts in by_topic.items():
        buf += _string(topic, flexible)
        buf += _array_len(len(parts), flexible)
        for r in parts:
            buf += _PART_HEAD.pack(
                r.tp.partition, int(r.error), r.high_watermark, r.last_stable_offset
            )
            if version >= 5:
                buf += _I64.pack(r.log_start_offset)
            buf += b"\x00" if flexible else _I32.pack(-1)  # aborted_transactions: null
            if version >= 11:
                buf += _I32.pack(-1)
            n = r.size
            buf += write_uvarint(n + 1) if flexible else _I32.pack(n)
            if n:
                chunks.append(bytes(buf))
                size += len(buf)
                assert r.slice is not None
                chunks.append(r.slice)
                size += n
                buf = bytearray()
            if flexible:
                buf += b"\x00"  # partition tagged fields
        if flexible:
            buf += b"\x00"  # topic tagged fields
    if flexible:
        buf += b"\x00"  # response tagged fields
    chunks.append(bytes(buf))
    size += len(buf)
    return Response(chunks, size)
