"""The controller-to-broker APIs of ZooKeeper-mode Kafka: LeaderAndIsr (4), StopReplica (5),
UpdateMetadata (6), and the broker-to-controller ControlledShutdown (7), in every version a
Kafka 3.9 controller sends (its ``ControllerChannelManager`` picks them from
``inter.broker.protocol.version``: LeaderAndIsr v0-v7, StopReplica v0-v4, UpdateMetadata
v0-v8; ControlledShutdown v1-v3), answered in the request's version.

Versions, as Kafka's request classes read them: LeaderAndIsr v0-v1 and UpdateMetadata v0-v4
list partitions with their topic name instead of by topic; StopReplica v0 lists (topic,
partition) pairs and v1-v2 topics with partition indexes, with one ``DeletePartitions`` flag
for all (their leader epoch is -1, not checked); UpdateMetadata v0 gives one PLAINTEXT
host/port per broker and v1-v2 endpoints named by their security protocol. LeaderAndIsr v6+
may mark a partition RECOVERING after an unclean election (KIP-704): a ZooKeeper-mode Kafka
3.9 leader marks it RECOVERED at once, and so does this broker (its next ISR write records
it). A request from a KRaft controller (``isKRaftController``, v7/v4/v8, ZooKeeper-to-KRaft
migration, KIP-866) is refused with INVALID_REQUEST: Millrace has no migration mode.

StopReplica v3+ carries each partition's leader epoch (KIP-570): a partition this broker
knows at a newer leader epoch answers FENCED_LEADER_EPOCH and is not stopped (-1 and -2,
deletion, are not checked).

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
from typing import Any

from broker.api.context import RequestContext
from broker.metadata.cache import BrokerInfo, PartitionInfo
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.replica_manager import PartitionStateSpec
from broker.security.acl import Operation
from broker.types import BrokerId, TopicPartition

log = logging.getLogger(__name__)

LEADER_DURING_DELETE = -2
REFUSED = ErrorCode.cluster_authorization_failed


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


_SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
NO_EPOCH = -1
EPOCH_DURING_DELETE = -2


def _response_class(api_key: ApiKey, request: Any) -> type[Any]:
    """The response class of the request's own version."""
    return registry.response_class(api_key, int(request.__version__))


def _from_kraft_controller(request: Any) -> bool:
    """A ZooKeeper-to-KRaft migration request (KIP-866): Millrace has no migration mode."""
    if bool(getattr(request, "is_k_raft_controller", False)):
        log.warning(
            "refusing a request of KRaft controller %d (no ZooKeeper migration here)",
            int(request.controller_id),
        )
        return True
    return False


# --------------------------------------------------------------------------- LeaderAndIsr


def leader_and_isr_partitions(request: Any) -> list[tuple[str, Any, Any]]:
    """(topic name, topic id or None, partition state) for every partition, any version."""
    if hasattr(request, "ungrouped_partition_states"):  # v0-v1
        return [(str(p.topic_name), None, p) for p in request.ungrouped_partition_states]
    return [
        (str(t.topic_name), getattr(t, "topic_id", None), p)
        for t in request.topic_states
        for p in t.partition_states
    ]


def _leader_and_isr_response(
    request: Any,
    top: ErrorCode,
    results: dict[TopicPartition, ErrorCode],
    topic_ids: dict[str, Any],
) -> Any:
    cls = _response_class(ApiKey.LEADER_AND_ISR, request)
    error_cls = registry.nested(cls, "LeaderAndIsrPartitionError")
    if int(request.__version__) < 5:
        return cls(
            error_code=top,
            partition_errors=tuple(
                error_cls(topic_name=tp.topic, partition_index=tp.partition, error_code=code)
                for tp, code in results.items()
            ),
        )
    topic_cls = registry.nested(cls, "LeaderAndIsrTopicError")
    by_topic: dict[str, list[Any]] = {}
    for tp, code in results.items():
        by_topic.setdefault(tp.topic, []).append(
            error_cls(partition_index=tp.partition, error_code=code)
        )
    return cls(
        error_code=top,
        topics=tuple(
            topic_cls(topic_id=topic_ids.get(t), partition_errors=tuple(errs))
            for t, errs in by_topic.items()
        ),
    )


async def handle_leader_and_isr(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    rm = services.replica_manager
    specs: list[PartitionStateSpec] = []
    topic_ids: dict[str, Any] = {}
    recovering: list[TopicPartition] = []
    for topic, topic_id, p in leader_and_isr_partitions(request):
        topic_ids.setdefault(topic, topic_id)
        if int(getattr(p, "leader_recovery_state", 0)) != 0:
            recovering.append(TopicPartition(topic, int(p.partition_index)))
        specs.append(
            PartitionStateSpec(
                TopicPartition(topic, int(p.partition_index)),
                leader=int(p.leader),
                leader_epoch=int(p.leader_epoch),
                isr=tuple(int(r) for r in p.isr),
                replicas=tuple(int(r) for r in p.replicas),
                zk_version=int(p.partition_epoch),
                is_new=bool(getattr(p, "is_new", False)),
            )
        )
    leaders = {int(x.broker_id): (str(x.host_name), int(x.port)) for x in request.live_leaders}
    if not _may_act(ctx):
        results = {s.tp: REFUSED for s in specs}
        top = REFUSED
    elif _from_kraft_controller(request):
        results = {s.tp: ErrorCode.invalid_request for s in specs}
        top = ErrorCode.invalid_request
    elif await _stale_broker_epoch(ctx, int(getattr(request, "broker_epoch", -1))):
        results = {s.tp: ErrorCode.stale_broker_epoch for s in specs}
        top = ErrorCode.stale_broker_epoch
    elif int(request.controller_epoch) < rm.controller_epoch:
        results = {s.tp: ErrorCode.stale_controller_epoch for s in specs}
        top = ErrorCode.stale_controller_epoch
    else:
        await services.topic_configs.ensure_loaded(sorted(topic_ids))
        rm.topic_ids.update({t: i for t, i in topic_ids.items() if i is not None})
        for tp in recovering:  # as a ZooKeeper-mode Kafka 3.9 leader does
            log.info("%s was marked RECOVERING: marking it RECOVERED", tp)
        results = await rm.apply_leader_and_isr(
            int(request.controller_epoch), specs, leaders, services.topic_configs.log_config_for
        )
        top = ErrorCode.none
    return _leader_and_isr_response(request, top, results, topic_ids)


# --------------------------------------------------------------------------- StopReplica


def stop_replica_partitions(request: Any) -> list[tuple[TopicPartition, int, bool]]:
    """(partition, leader epoch, delete) for every partition, any version."""
    if hasattr(request, "topic_states"):  # v3+
        return [
            (
                TopicPartition(str(t.topic_name), int(p.partition_index)),
                int(p.leader_epoch),
                bool(p.delete_partition),
            )
            for t in request.topic_states
            for p in t.partition_states
        ]
    delete = bool(request.delete_partitions)
    if hasattr(request, "topics"):  # v1-v2
        return [
            (TopicPartition(str(t.name), int(p)), NO_EPOCH, delete)
            for t in request.topics
            for p in t.partition_indexes
        ]
    return [  # v0
        (TopicPartition(str(p.topic_name), int(p.partition_index)), NO_EPOCH, delete)
        for p in request.ungrouped_partitions
    ]


def _stop_replica_response(
    request: Any, top: ErrorCode, results: dict[TopicPartition, ErrorCode]
) -> Any:
    cls = _response_class(ApiKey.STOP_REPLICA, request)
    error_cls = registry.nested(cls, "StopReplicaPartitionError")
    return cls(
        error_code=top,
        partition_errors=tuple(
            error_cls(topic_name=tp.topic, partition_index=tp.partition, error_code=code)
            for tp, code in results.items()
        ),
    )


async def handle_stop_replica(ctx: RequestContext, request: Any) -> Any:
    rm = ctx.services.replica_manager
    wanted = stop_replica_partitions(request)
    if not _may_act(ctx):
        return _stop_replica_response(request, REFUSED, {tp: REFUSED for tp, _e, _d in wanted})
    if _from_kraft_controller(request):
        return _stop_replica_response(request, ErrorCode.invalid_request, {})
    if await _stale_broker_epoch(ctx, int(getattr(request, "broker_epoch", -1))):
        return _stop_replica_response(request, ErrorCode.stale_broker_epoch, {})
    if int(request.controller_epoch) < rm.controller_epoch:
        return _stop_replica_response(request, ErrorCode.stale_controller_epoch, {})
    fenced: dict[TopicPartition, ErrorCode] = {}
    stopping: list[tuple[TopicPartition, bool]] = []
    for tp, epoch, delete in wanted:
        partition = rm.partitions.get(tp)
        if (
            partition is not None
            and epoch not in (NO_EPOCH, EPOCH_DURING_DELETE)
            and epoch < partition.leader_epoch
        ):
            log.info(
                "%s: ignoring StopReplica at leader epoch %d (current %d)",
                tp,
                epoch,
                partition.leader_epoch,
            )
            fenced[tp] = ErrorCode.fenced_leader_epoch
        else:
            stopping.append((tp, delete))
    results = rm.stop_replicas(int(request.controller_epoch), stopping)
    return _stop_replica_response(request, ErrorCode.none, {**results, **fenced})


# --------------------------------------------------------------------------- UpdateMetadata


def update_metadata_partitions(request: Any) -> list[tuple[str, Any, Any]]:
    """(topic name, topic id or None, partition state) for every partition, any version."""
    if hasattr(request, "ungrouped_partition_states"):  # v0-v4
        return [(str(p.topic_name), None, p) for p in request.ungrouped_partition_states]
    return [
        (str(t.topic_name), getattr(t, "topic_id", None), p)
        for t in request.topic_states
        for p in t.partition_states
    ]


def broker_endpoints(broker: Any) -> list[tuple[str, str, int]]:
    """(listener, host, port) of a live broker of any UpdateMetadata version: v0 has one
    PLAINTEXT host/port, v1-v2 name endpoints by security protocol."""
    if not hasattr(broker, "endpoints"):
        return [("PLAINTEXT", str(broker.v0_host), int(broker.v0_port))]
    out = []
    for e in broker.endpoints:
        listener = getattr(e, "listener", None)
        if listener is None:
            listener = _SECURITY_PROTOCOLS.get(int(e.security_protocol), "PLAINTEXT")
        out.append((str(listener), str(e.host), int(e.port)))
    return out


async def handle_update_metadata(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    rm = services.replica_manager
    cls = _response_class(ApiKey.UPDATE_METADATA, request)
    if not _may_act(ctx):
        return cls(error_code=REFUSED)
    if _from_kraft_controller(request):
        return cls(error_code=ErrorCode.invalid_request)
    if await _stale_broker_epoch(ctx, int(getattr(request, "broker_epoch", -1))):
        return cls(error_code=ErrorCode.stale_broker_epoch)
    if not rm.check_controller_epoch(int(request.controller_epoch)):
        return cls(error_code=ErrorCode.stale_controller_epoch)
    cache = services.metadata
    brokers = []
    listener = ctx.connection.listener
    for b in request.live_brokers:
        endpoints = broker_endpoints(b)
        chosen = next((e for e in endpoints if e[0] == listener), None)
        if chosen is None and endpoints:
            chosen = endpoints[0]
        if chosen is not None:
            brokers.append(
                BrokerInfo(
                    BrokerId(int(b.id)),
                    chosen[1],
                    chosen[2],
                    getattr(b, "rack", None),
                    tuple(endpoints),
                )
            )
    cache.set_brokers(brokers)
    cache.controller_id = int(request.controller_id)
    topics: dict[str, tuple[Any, list[Any]]] = {}
    for name, topic_id, p in update_metadata_partitions(request):
        topics.setdefault(name, (topic_id, []))[1].append(p)
    for name, (topic_id, parts) in topics.items():
        if any(int(p.leader) == LEADER_DURING_DELETE for p in parts):
            cache.remove_topic(name)
            continue
        cache.update_partitions(
            name,
            topic_id,
            [
                PartitionInfo(
                    int(p.partition_index),
                    int(p.leader),
                    int(p.leader_epoch),
                    tuple(int(r) for r in p.replicas),
                    tuple(int(r) for r in p.isr),
                    tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                )
                for p in parts
            ],
        )
    cache.mark_initialized()
    return cls(error_code=ErrorCode.none)


# --------------------------------------------------------------------------- ControlledShutdown


async def handle_controlled_shutdown(ctx: RequestContext, request: Any) -> Any:
    cls = _response_class(ApiKey.CONTROLLED_SHUTDOWN, request)
    partition_cls = registry.nested(cls, "RemainingPartition")
    if not _may_act(ctx):
        return cls(error_code=REFUSED, remaining_partitions=())
    try:
        remaining = await ctx.services.controller.controlled_shutdown(
            int(request.broker_id), int(getattr(request, "broker_epoch", -1))
        )
    except KafkaError as exc:
        return cls(error_code=exc.code, remaining_partitions=())
    return cls(
        error_code=ErrorCode.none,
        remaining_partitions=tuple(
            partition_cls(topic_name=tp.topic, partition_index=tp.partition) for tp in remaining
        ),
    )
