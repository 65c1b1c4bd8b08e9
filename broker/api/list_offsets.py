"""ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3, v7+), or the earliest
offset whose timestamp is >= the target. read_committed (isolation level 1) and
read_uncommitted both stop at the high watermark here (no transactions yet, so the last
stable offset equals the high watermark)."""

from __future__ import annotations

import datetime
from typing import Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.errors import ErrorCode, KafkaError
from broker.types import TopicPartition


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(2, ctx.version)
    topic_cls = registry.nested(cls, "ListOffsetsTopicResponse")
    part_cls = registry.nested(cls, "ListOffsetsPartitionResponse")
    rm = ctx.services.replica_manager
    committed_only = int(request.replica_id) < 0
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            tp = TopicPartition(topic.name, int(p.partition_index))
            try:
                offset, ts, epoch = rm.list_offset(
                    tp,
                    int(p.timestamp),
                    current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                    committed_only=committed_only,
                )
                parts.append(
                    registry.build(
                        part_cls,
                        partition_index=p.partition_index,
                        error_code=ErrorCode.none,
                        timestamp=ts,
                        offset=offset,
                        leader_epoch=epoch,
                    )
                )
            except KafkaError as exc:
                parts.append(
                    registry.build(
                        part_cls,
                        partition_index=p.partition_index,
                        error_code=exc.code,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                )
        topics.append(registry.build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return registry.build(cls, throttle_time=datetime.timedelta(0), topics=tuple(topics))
