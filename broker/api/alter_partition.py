"""AlterPartition (56) v0-v3 and AllocateProducerIds (67) v0: what Kafka 3.9 brokers ask the
controller (ISR changes from IBP 2.7, producer-id blocks from IBP 3.0).

The handlers only translate the wire format; the active controller decides
(:mod:`broker.controller.alter_partition`, :mod:`broker.controller.producer_id_blocks`).
Versions: AlterPartition v0-v1 name topics, v2+ give topic ids; v1+ carry the
LeaderRecoveryState (KIP-704); v3 lists the new ISR with broker epochs (KIP-903), of which a
ZooKeeper-mode controller uses the broker ids only, as Kafka's does.

Authorization (Kafka's ``KafkaApis.handleAlterPartitionRequest`` /
``handleAllocateProducerIdsRequest``): CLUSTER_ACTION on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top level. A broker that is not the active controller
answers NOT_CONTROLLER (the sender finds the controller again). Both are answered without
quota throttling (the dispatcher's exempt list).

Concurrency: event loop; the controller's event queue serialises the decisions.
"""

from __future__ import annotations

import datetime
from typing import Any

from broker.api.context import RequestContext
from broker.controller.alter_partition import (
    AlterPartition,
    AlterPartitionResult,
    IsrProposal,
    TopicProposals,
)
from broker.controller.event_manager import NotControllerError
from broker.controller.producer_id_blocks import ProducerIdBlock
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation


def _proposals(request: Any, version: int) -> list[TopicProposals]:
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if version >= 3:
                isr = tuple(int(b.broker_id) for b in p.new_isr_with_epochs)
            else:
                isr = tuple(int(b) for b in p.new_isr)
            partitions.append(
                IsrProposal(
                    int(p.partition_index),
                    int(p.leader_epoch),
                    isr,
                    int(getattr(p, "leader_recovery_state", 0)),
                    int(p.partition_epoch),
                )
            )
        topics.append(
            TopicProposals(
                None if version >= 2 else str(topic.topic_name),
                topic.topic_id if version >= 2 else None,
                partitions,
            )
        )
    return topics


def _response(version: int, result: AlterPartitionResult) -> Any:
    cls = registry.response_class(ApiKey.ALTER_PARTITION, version)
    topic_cls = registry.nested(cls, "TopicData")
    part_cls = registry.nested(cls, "PartitionData")
    return cls(
        throttle_time=datetime.timedelta(0),
        error_code=result.error,
        topics=tuple(
            registry.build(
                topic_cls,
                topic_name=t.name or "",
                topic_id=t.topic_id,
                partitions=tuple(
                    registry.build(
                        part_cls,
                        partition_index=p.partition,
                        error_code=p.error,
                        leader_id=p.leader,
                        leader_epoch=p.leader_epoch,
                        isr=p.isr,
                        leader_recovery_state=p.leader_recovery_state,
                        partition_epoch=p.partition_epoch,
                    )
                    for p in t.partitions
                ),
            )
            for t in result.topics
        ),
    )


async def handle_alter_partition(ctx: RequestContext, request: Any) -> Any:
    version = ctx.version
    if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):
        return _response(version, AlterPartitionResult(ErrorCode.cluster_authorization_failed))
    controller = ctx.services.controller
    if not controller.is_active:
        return _response(version, AlterPartitionResult(ErrorCode.not_controller))
    event = AlterPartition(
        int(request.broker_id), int(request.broker_epoch), version, _proposals(request, version)
    )
    try:
        result = await controller.alter_partition(event)
    except NotControllerError:
        result = AlterPartitionResult(ErrorCode.not_controller)
    return _response(version, result)


def _block_response(block: ProducerIdBlock) -> Any:
    cls = registry.response_class(ApiKey.ALLOCATE_PRODUCER_IDS, 0)
    return cls(
        throttle_time=datetime.timedelta(0),
        error_code=block.error,
        producer_id_start=block.first,
        producer_id_len=block.length,
    )


async def handle_allocate_producer_ids(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):
        return _block_response(ProducerIdBlock(ErrorCode.cluster_authorization_failed))
    controller = ctx.services.controller
    if not controller.is_active:
        return _block_response(ProducerIdBlock(ErrorCode.not_controller))
    try:
        block = await controller.allocate_producer_ids(
            int(request.broker_id), int(request.broker_epoch)
        )
    except NotControllerError:
        block = ProducerIdBlock(ErrorCode.not_controller)
    return _block_response(block)
