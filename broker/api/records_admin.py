"""DeleteRecords (21) and OffsetForLeaderEpoch (23).

DeleteRecords moves a partition's log start offset forward (offset -1 means the high
watermark); the answer is the new low watermark. OffsetForLeaderEpoch answers, from the
leader epoch cache, the end offset of the requested epoch (the start offset of the next
larger epoch, or the log end offset for the current one), as KIP-101/KIP-279 define.
"""

from __future__ import annotations

import datetime
from typing import Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.errors import ErrorCode, KafkaError
from broker.types import TopicPartition


async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(21, ctx.version)
    topic_cls = registry.nested(cls, "DeleteRecordsTopicResult")
    part_cls = registry.nested(cls, "DeleteRecordsPartitionResult")
    rm = ctx.services.replica_manager
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                low = rm.delete_records(
                    TopicPartition(t.name, int(p.partition_index)), int(p.offset)
                )
                parts.append(
                    registry.build(
                        part_cls,
                        partition_index=p.partition_index,
                        low_watermark=low,
                        error_code=ErrorCode.none,
                    )
                )
            except KafkaError as exc:
                parts.append(
                    registry.build(
                        part_cls,
                        partition_index=p.partition_index,
                        low_watermark=-1,
                        error_code=exc.code,
                    )
                )
        topics.append(registry.build(topic_cls, name=t.name, partitions=tuple(parts)))
    return registry.build(cls, throttle_time=datetime.timedelta(0), topics=tuple(topics))


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(23, ctx.version)
    topic_cls = registry.nested(cls, "OffsetForLeaderTopicResult")
    part_cls = registry.nested(cls, "EpochEndOffset")
    rm = ctx.services.replica_manager
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.topic, int(p.partition))
            try:
                epoch, end = rm.end_offset_for_epoch(
                    tp, int(p.leader_epoch), current_leader_epoch=int(p.current_leader_epoch)
                )
                parts.append(
                    registry.build(
                        part_cls,
                        error_code=ErrorCode.none,
                        partition=p.partition,
                        leader_epoch=epoch,
                        end_offset=end,
                    )
                )
            except KafkaError as exc:
                parts.append(
                    registry.build(
                        part_cls,
                        error_code=exc.code,
                        partition=p.partition,
                        leader_epoch=-1,
                        end_offset=-1,
                    )
                )
        topics.append(registry.build(topic_cls, topic=t.topic, partitions=tuple(parts)))
    return registry.build(cls, throttle_time=datetime.timedelta(0), topics=tuple(topics))
