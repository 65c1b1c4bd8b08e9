"""DeleteRecords (21) and OffsetForLeaderEpoch (23).

DeleteRecords moves a partition's log start offset forward (offset -1 means the high
watermark); the answer is the new low watermark. OffsetForLeaderEpoch answers, from the
leader epoch cache, the end offset of the requested epoch (the start offset of the next
larger epoch, or the log end offset for the current one), as KIP-101/KIP-279 define.

Authorization (Kafka's ``KafkaApis``): DeleteRecords needs DELETE on each topic;
OffsetForLeaderEpoch CLUSTER_ACTION on the cluster (a follower) or else DESCRIBE on each
topic (a consumer checking for truncation, KIP-320). A refused topic's partitions answer
TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api.authorization import denied
from broker.api.context import RequestContext
from broker.api.responses import per_partition
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acl import Operation, ResourceType
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle_delete_records(
    ctx: RequestContext, request: messages.DeleteRecordsRequest
) -> messages.DeleteRecordsResponse:
    cls = registry.response_class(ApiKey.DELETE_RECORDS, ctx.version)
    rm = ctx.services.replica_manager
    targets = {
        TopicPartition(t.name, int(p.partition_index)): int(p.offset)
        for t in request.topics
        for p in t.partitions
    }

    refused = denied(
        ctx, Operation.DELETE, ResourceType.TOPIC, (str(t.name) for t in request.topics)
    )

    def answer(tp: TopicPartition) -> dict[str, Any]:
        if tp.topic in refused:
            raise KafkaError(code=ErrorCode.topic_authorization_failed)
        low = rm.delete_records(tp, targets[tp])
        return {"low_watermark": low, "error_code": ErrorCode.none}

    def on_error(_tp: TopicPartition, code: ErrorCode) -> dict[str, Any]:
        return {"low_watermark": -1, "error_code": code}

    topics = per_partition(
        ((t.name, (p.partition_index for p in t.partitions)) for t in request.topics),
        answer,
        on_error,
        topic_cls=registry.nested(cls, "DeleteRecordsTopicResult"),
        part_cls=registry.nested(cls, "DeleteRecordsPartitionResult"),
    )
    return registry.build(cls, throttle_time=datetime.timedelta(0), topics=topics)


async def handle_offset_for_leader_epoch(
    ctx: RequestContext, request: messages.OffsetForLeaderEpochRequest
) -> messages.OffsetForLeaderEpochResponse:
    cls = registry.response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.version)
    rm = ctx.services.replica_manager
    wanted = {
        TopicPartition(t.topic, int(p.partition)): (
            int(p.leader_epoch),
            int(p.current_leader_epoch),
        )
        for t in request.topics
        for p in t.partitions
    }

    refused: frozenset[str] = frozenset()
    if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):
        refused = denied(
            ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in request.topics)
        )

    def answer(tp: TopicPartition) -> dict[str, Any]:
        if tp.topic in refused:
            raise KafkaError(code=ErrorCode.topic_authorization_failed)
        leader_epoch, current = wanted[tp]
        epoch, end = rm.end_offset_for_epoch(tp, leader_epoch, current_leader_epoch=current)
        return {"error_code": ErrorCode.none, "leader_epoch": epoch, "end_offset": end}

    def on_error(_tp: TopicPartition, code: ErrorCode) -> dict[str, Any]:
        return {"error_code": code, "leader_epoch": -1, "end_offset": -1}

    topics = per_partition(
        ((t.topic, (p.partition for p in t.partitions)) for t in request.topics),
        answer,
        on_error,
        topic_cls=registry.nested(cls, "OffsetForLeaderTopicResult"),
        part_cls=registry.nested(cls, "EpochEndOffset"),
        topic_key="topic",
        partition_key="partition",
    )
    return registry.build(cls, throttle_time=datetime.timedelta(0), topics=topics)
