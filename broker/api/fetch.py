"""Fetch (key 1), versions 4-12: consumers' and followers' reads, answered with the zero-copy
encoder of :mod:`broker.protocol.fetch_response`.

Semantics: long poll (``max_wait_ms``/``min_bytes``), per-partition and per-response byte
limits (the first partition with data always returns at least one whole batch so a consumer
can make progress past a large batch), the whole batch that contains the fetch offset,
OFFSET_OUT_OF_RANGE with the log start offset and high watermark. Consumers read up to the
high watermark (read_uncommitted) or the last stable offset (``isolation_level`` 1,
read_committed, v4+), in which case the response lists the aborted transactions of the
returned range; followers (``replica_id`` >= 0) read up to the log end. Incremental fetch
sessions (KIP-227) are declined: a request that asks for a new session gets
``session_id = 0`` (the client keeps sending full requests), and one naming a session this
broker never created gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.api.context import RequestContext
from broker.protocol.errors import ErrorCode
from broker.protocol.fetch_response import (
    INVALID_SESSION_ID,
    FetchPartitionData,
    encode_fetch_response,
)
from broker.protocol.response import Response
from broker.replication.replica_manager import FetchRequestPartition
from broker.types import TopicPartition

READ_COMMITTED = 1

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle(ctx: RequestContext, request: messages.FetchRequest) -> Response:
    version = ctx.version
    session_id = int(getattr(request, "session_id", 0))
    if version >= 7 and session_id != INVALID_SESSION_ID:
        return encode_fetch_response(version, [], error=ErrorCode.fetch_session_id_not_found)
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
    replica_id = int(request.replica_id)
    read_committed = (
        replica_id < 0 and int(getattr(request, "isolation_level", 0)) == READ_COMMITTED
    )
    results = await ctx.services.replica_manager.fetch(
        wanted,
        max_wait_ms=int(request.max_wait.total_seconds() * 1000),
        min_bytes=int(request.min_bytes),
        max_bytes=max_bytes,
        committed_only=replica_id < 0,
        replica_id=replica_id,
        read_committed=read_committed,
    )
    return encode_fetch_response(
        version,
        [
            FetchPartitionData(
                r.tp.topic,
                r.tp.partition,
                r.error,
                r.high_watermark,
                r.last_stable_offset,
                r.log_start_offset,
                r.aborted_transactions,
                r.slice,
            )
            for r in results
        ],
    )
