"""ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3, v7+), or the earliest
offset whose timestamp is >= the target. Consumers stop at the high watermark
(read_uncommitted) or at the last stable offset (``isolation_level`` 1, read_committed,
v2+); followers' and tools' requests (``replica_id`` >= 0) see the log end.

The request arrives decoded by :mod:`broker.protocol.list_offsets_codec` (Spark's connector
sends two of these per ``poll()``, so the path skips the generic codec) and the response
leaves as that module's bytes.

Authorization (Kafka's ``KafkaApis.handleListOffsetRequest``): each topic needs DESCRIBE, else
its partitions answer TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

from broker.api.authorization import denied
from broker.api.context import RequestContext
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.list_offsets_codec import ListOffsetsQuery, PartitionOffset, encode_response
from broker.protocol.response import Response
from broker.security.acl import Operation, ResourceType
from broker.types import TopicPartition


async def handle(ctx: RequestContext, request: ListOffsetsQuery) -> Response:
    rm = ctx.services.replica_manager
    committed_only = request.replica_id < 0
    read_committed = committed_only and request.isolation_level == 1
    topics: list[tuple[str, list[PartitionOffset]]] = []
    refused: frozenset[str] = frozenset()
    if ctx.services.authorizer is not None:
        refused = denied(
            ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics)
        )
    for topic in request.topics:
        parts: list[PartitionOffset] = []
        if refused and topic.name in refused:
            code = ErrorCode.topic_authorization_failed
            parts = [PartitionOffset(p.partition_index, code, -1, -1, -1) for p in topic.partitions]
            topics.append((topic.name, parts))
            continue
        for p in topic.partitions:
            try:
                offset, ts, epoch = rm.list_offset(
                    TopicPartition(topic.name, p.partition_index),
                    p.timestamp,
                    current_leader_epoch=p.current_leader_epoch,
                    committed_only=committed_only,
                    read_committed=read_committed,
                )
            except KafkaError as exc:
                parts.append(PartitionOffset(p.partition_index, exc.code, -1, -1, -1))
            else:
                parts.append(PartitionOffset(p.partition_index, ErrorCode.none, ts, offset, epoch))
        topics.append((topic.name, parts))
    body = encode_response(ctx.version, topics)
    return Response([body], len(body))
