"""The controller-to-broker APIs of ZooKeeper-mode Kafka: LeaderAndIsr (4), StopReplica (5),
UpdateMetadata (6), and the broker-to-controller ControlledShutdown (7).

Every controller request carries the controller epoch; a request from an older epoch than
the newest this broker has seen is answered with STALE_CONTROLLER_EPOCH and ignored, so a
deposed controller cannot undo its successor's decisions (checklist section 11).

It also carries the broker epoch the controller knows for this broker (KIP-380). A request
waits until this broker has registered (a restarted broker opens its listeners first, and
Kafka does not process requests before registering), and one naming an older epoch than this
broker's is answered with STALE_BROKER_EPOCH and ignored: it was meant for the previous
instance of this broker id (killed, and restarted before its ZooKeeper session expired),
which may have held records this instance's recovery cut off, so acting on it could make
this instance a leader the controller believes holds them. -1 is not checked.

UpdateMetadata is incremental, as in Kafka: it lists every live broker and the partitions
whose state changed; a partition whose leader is -2 (``LeaderDuringDelete``) removes its
topic from the metadata cache.

Authorization (Kafka's ``authorizeClusterOperation``): every one of them needs CLUSTER_ACTION
on the cluster (the brokers' principal is a super user); refused, the request is answered
CLUSTER_AUTHORIZATION_FAILED (at the top level and for each partition it names, as Kafka's
``getErrorResponse``) and ignored.

Concurrency: event loop thread; each handler applies its request synchronously after the
(ZooKeeper) topic-config lookup, so requests take effect in the order the controller sent
them on its connection.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from broker.api.context import RequestContext
from broker.metadata.cache import BrokerInfo, PartitionInfo
from broker.protocol import interbroker as _interbroker
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.replica_manager import PartitionStateSpec
from broker.security.acl import Operation
from broker.types import BrokerId, TopicPartition

log = logging.getLogger(__name__)
# kio-style message classes take kio's NewTypes (i32, BrokerId, ...); built from plain ints
ib: Any = _interbroker

LEADER_DURING_DELETE = -2
REFUSED = ErrorCode.cluster_authorization_failed

if TYPE_CHECKING:
    from broker.protocol import messages


def _may_act(ctx: RequestContext) -> bool:
    """CLUSTER_ACTION on the cluster: what a controller (or broker) request needs."""
    return ctx.authorize_cluster(Operation.CLUSTER_ACTION)


async def _stale_broker_epoch(ctx: RequestContext, request_epoch: int) -> bool:
    """True if ``request_epoch`` is older than this broker's (after waiting for it)."""
    own = ctx.services.own_broker_epoch
    if own is None or request_epoch < 0:
        return False
    epoch = await own()
    if request_epoch < epoch:
        log.info(
            "ignoring a controller request for broker epoch %d (this broker's is %d)",
            request_epoch,
            epoch,
        )
        return True
    return False


async def handle_leader_and_isr(
    ctx: RequestContext, request: messages.LeaderAndIsrRequest
) -> messages.LeaderAndIsrResponse:
    services = ctx.services
    rm = services.replica_manager
    specs: list[PartitionStateSpec] = []
    topic_ids: dict[str, Any] = {}
    for topic in request.topic_states:
        topic_ids[str(topic.topic_name)] = topic.topic_id
        for p in topic.partition_states:
            specs.append(
                PartitionStateSpec(
                    TopicPartition(str(topic.topic_name), int(p.partition_index)),
                    leader=int(p.leader),
                    leader_epoch=int(p.leader_epoch),
                    isr=tuple(int(r) for r in p.isr),
                    replicas=tuple(int(r) for r in p.replicas),
                    zk_version=int(p.partition_epoch),
                    is_new=bool(p.is_new),
                )
            )
    leaders = {int(x.broker_id): (str(x.host_name), int(x.port)) for x in request.live_leaders}
    if not _may_act(ctx):
        results = {s.tp: REFUSED for s in specs}
        top = REFUSED
    elif await _stale_broker_epoch(ctx, int(request.broker_epoch)):
        results = {s.tp: ErrorCode.stale_broker_epoch for s in specs}
        top = ErrorCode.stale_broker_epoch
    elif int(request.controller_epoch) < rm.controller_epoch:
        results = {s.tp: ErrorCode.stale_controller_epoch for s in specs}
        top = ErrorCode.stale_controller_epoch
    else:
        await services.topic_configs.ensure_loaded(sorted(topic_ids))
        results = rm.become_leader_or_follower(
            int(request.controller_epoch), specs, leaders, services.topic_configs.log_config_for
        )
        top = ErrorCode.none
    by_topic: dict[str, list[Any]] = {}
    for tp, code in results.items():
        by_topic.setdefault(tp.topic, []).append(
            ib.LeaderAndIsrPartitionError(partition_index=tp.partition, error_code=code)
        )
    return ib.LeaderAndIsrResponse(
        error_code=top,
        topics=tuple(
            ib.LeaderAndIsrTopicError(topic_id=topic_ids.get(t), partition_errors=tuple(errs))
            for t, errs in by_topic.items()
        ),
    )


async def handle_stop_replica(
    ctx: RequestContext, request: messages.StopReplicaRequest
) -> messages.StopReplicaResponse:
    rm = ctx.services.replica_manager
    wanted = [
        (TopicPartition(str(t.topic_name), int(p.partition_index)), bool(p.delete_partition))
        for t in request.topic_states
        for p in t.partition_states
    ]
    if not _may_act(ctx):
        return ib.StopReplicaResponse(
            error_code=REFUSED,
            partition_errors=tuple(
                ib.StopReplicaPartitionError(
                    topic_name=tp.topic, partition_index=tp.partition, error_code=REFUSED
                )
                for tp, _delete in wanted
            ),
        )
    if await _stale_broker_epoch(ctx, int(request.broker_epoch)):
        return ib.StopReplicaResponse(error_code=ErrorCode.stale_broker_epoch, partition_errors=())
    if int(request.controller_epoch) < rm.controller_epoch:
        return ib.StopReplicaResponse(
            error_code=ErrorCode.stale_controller_epoch, partition_errors=()
        )
    results = rm.stop_replicas(int(request.controller_epoch), wanted)
    return ib.StopReplicaResponse(
        error_code=ErrorCode.none,
        partition_errors=tuple(
            ib.StopReplicaPartitionError(
                topic_name=tp.topic, partition_index=tp.partition, error_code=code
            )
            for tp, code in results.items()
        ),
    )


async def handle_update_metadata(
    ctx: RequestContext, request: messages.UpdateMetadataRequest
) -> messages.UpdateMetadataResponse:
    services = ctx.services
    rm = services.replica_manager
    if not _may_act(ctx):
        return ib.UpdateMetadataResponse(error_code=REFUSED)
    if await _stale_broker_epoch(ctx, int(request.broker_epoch)):
        return ib.UpdateMetadataResponse(error_code=ErrorCode.stale_broker_epoch)
    if not rm.check_controller_epoch(int(request.controller_epoch)):
        return ib.UpdateMetadataResponse(error_code=ErrorCode.stale_controller_epoch)
    cache = services.metadata
    brokers = []
    listener = ctx.connection.listener
    for b in request.live_brokers:
        endpoints = list(b.endpoints)
        chosen = next((e for e in endpoints if e.listener == listener), None)
        if chosen is None and endpoints:
            chosen = endpoints[0]
        if chosen is not None:
            brokers.append(
                BrokerInfo(
                    BrokerId(int(b.id)),
                    str(chosen.host),
                    int(chosen.port),
                    b.rack,
                    tuple((str(e.listener), str(e.host), int(e.port)) for e in endpoints),
                )
            )
    cache.set_brokers(brokers)
    cache.controller_id = int(request.controller_id)
    for topic in request.topic_states:
        name = str(topic.topic_name)
        parts = list(topic.partition_states)
        if any(int(p.leader) == LEADER_DURING_DELETE for p in parts):
            cache.remove_topic(name)
            continue
        cache.update_partitions(
            name,
            topic.topic_id,
            [
                PartitionInfo(
                    int(p.partition_index),
                    int(p.leader),
                    int(p.leader_epoch),
                    tuple(int(r) for r in p.replicas),
                    tuple(int(r) for r in p.isr),
                    tuple(int(r) for r in p.offline_replicas),
                )
                for p in parts
            ],
        )
    cache.mark_initialized()
    return ib.UpdateMetadataResponse(error_code=ErrorCode.none)


async def handle_controlled_shutdown(
    ctx: RequestContext, request: messages.ControlledShutdownRequest
) -> messages.ControlledShutdownResponse:
    if not _may_act(ctx):
        return ib.ControlledShutdownResponse(error_code=REFUSED, remaining_partitions=())
    try:
        remaining = await ctx.services.controller.controlled_shutdown(
            int(request.broker_id), int(request.broker_epoch)
        )
    except KafkaError as exc:
        return ib.ControlledShutdownResponse(error_code=exc.code, remaining_partitions=())
    return ib.ControlledShutdownResponse(
        error_code=ErrorCode.none,
        remaining_partitions=tuple(
            ib.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
            for tp in remaining
        ),
    )
