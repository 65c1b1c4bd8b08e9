"""Fetch (key 1), versions 4-12: consumers' and followers' reads, answered with the zero-copy
encoder of :mod:`broker.protocol.fetch_response`.

Semantics: long poll (``max_wait_ms``/``min_bytes``), per-partition and per-response byte
limits (the first partition with data always returns at least one whole batch so a consumer
can make progress past a large batch), the whole batch that contains the fetch offset,
OFFSET_OUT_OF_RANGE with the log start offset and high watermark. Consumers read up to the
high watermark (read_uncommitted) or the last stable offset (``isolation_level`` 1,
read_committed, v4+), in which case the response lists the aborted transactions of the
returned range; followers (``replica_id`` >= 0) read up to the log end. Incremental fetch
sessions (KIP-227, v7+): :mod:`broker.replication.fetch_sessions` decides which partitions a
request reads (its own, or its session's) and which results the response carries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.api.context import RequestContext
from broker.protocol.errors import ErrorCode
from broker.protocol.fetch_response import FetchPartitionData, encode_fetch_response
from broker.protocol.response import Response
from broker.replication.fetch_sessions import FetchContext
from broker.replication.replica_manager import FetchRequestPartition
from broker.types import TopicPartition

READ_COMMITTED = 1

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle(ctx: RequestContext, request: messages.FetchRequest) -> Response:
    version = ctx.version
    wanted = [
        FetchRequestPartition(
            TopicPartition(topic.topic, int(p.partition)),
            int(p.fetch_offset),
            int(p.partition_max_bytes),
            int(getattr(p, "current_leader_epoch", -1)),
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    replica_id = int(request.replica_id)
    if version >= 7:
        forgotten = [
            TopicPartition(t.topic, int(p))
            for t in getattr(request, "forgotten_topics_data", ())
            for p in t.partitions
        ]
        context = ctx.services.replica_manager.fetch_sessions.new_context(
            int(getattr(request, "session_id", 0)),
            int(getattr(request, "session_epoch", -1)),
            wanted,
            forgotten,
            privileged=replica_id >= 0,
            now_ms=ctx.services.clock.time_ms(),
        )
        if context.error != ErrorCode.none:
            return encode_fetch_response(version, [], error=context.error)
    else:
        context = FetchContext(wanted)
    max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
    max_bytes = min(max_bytes, ctx.services.config["fetch.max.bytes"]) if max_bytes > 0 else 0
    read_committed = (
        replica_id < 0 and int(getattr(request, "isolation_level", 0)) == READ_COMMITTED
    )
    results = await ctx.services.replica_manager.fetch(
        context.partitions,
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
            for r in context.response(results)
        ],
        session_id=context.session_id,
    )
