"""ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3, v7+), or the earliest
offset whose timestamp is >= the target. Consumers stop at the high watermark
(read_uncommitted) or at the last stable offset (``isolation_level`` 1, read_committed,
v2+); followers' and tools' requests (``replica_id`` >= 0) see the log end."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api.context import RequestContext
from broker.api.responses import per_partition
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle(
    ctx: RequestContext, request: messages.ListOffsetsRequest
) -> messages.ListOffsetsResponse:
    cls = registry.response_class(ApiKey.LIST_OFFSETS, ctx.version)
    rm = ctx.services.replica_manager
    committed_only = int(request.replica_id) < 0
    read_committed = committed_only and int(getattr(request, "isolation_level", 0)) == 1
    requested = {
        TopicPartition(t.name, int(p.partition_index)): p
        for t in request.topics
        for p in t.partitions
    }

    def answer(tp: TopicPartition) -> dict[str, Any]:
        p = requested[tp]
        offset, ts, epoch = rm.list_offset(
            tp,
            int(p.timestamp),
            current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
            committed_only=committed_only,
            read_committed=read_committed,
        )
        return {
            "error_code": ErrorCode.none,
            "timestamp": ts,
            "offset": offset,
            "leader_epoch": epoch,
        }

    def on_error(_tp: TopicPartition, code: ErrorCode) -> dict[str, Any]:
        return {"error_code": code, "timestamp": -1, "offset": -1, "leader_epoch": -1}

    topics = per_partition(
        ((t.name, (p.partition_index for p in t.partitions)) for t in request.topics),
        answer,
        on_error,
        topic_cls=registry.nested(cls, "ListOffsetsTopicResponse"),
        part_cls=registry.nested(cls, "ListOffsetsPartitionResponse"),
    )
    return registry.build(cls, throttle_time=datetime.timedelta(0), topics=topics)
