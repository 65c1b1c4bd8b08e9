"""Building the controller's requests to brokers from the controller context.

LeaderAndIsr goes to the online replicas (live broker, not in an offline log directory) of
the partitions whose leadership or replica set changed, one request per broker with the
leaders' addresses; StopReplica stops (and optionally deletes) replicas on one broker;
UpdateMetadata carries every live broker and the changed partitions (leader -1 when the
leader is not live, the replicas that are offline: on a dead broker or in an offline log
directory), and marks deleted topics with leader -2 (``LeaderDuringDelete``). Every request
carries the controller id and epoch and (from the versions that have it) the target broker's
epoch. The responses to LeaderAndIsr go to the sender's ``on_leader_and_isr_response`` (the
controller learns from them which replicas are in offline log directories, KIP-112).

Versions: those Kafka 3.9's ``ControllerChannelManager`` sends for the broker's
``inter.broker.protocol.version`` (:mod:`broker.protocol.inter_broker_protocol`): at the
default 3.9, LeaderAndIsr v7 (with each partition's LeaderRecoveryState), UpdateMetadata v8
and StopReplica v4; at 2.8, v5, v7 and v3; down to v0 of each. Each builder fills the fields
of its version (registry.build drops the others): v0-v1 LeaderAndIsr and v0-v4
UpdateMetadata list partitions with their topic names, StopReplica v0-v2 have one
``DeletePartitions`` flag per request, topic ids from LeaderAndIsr v5 and UpdateMetadata
v7, UpdateMetadata v0 one PLAINTEXT address per broker.

The builders are pure functions: they read the context and return ``(broker_id, (api_key,
version), request)`` triples. :class:`ControllerRequestSender` builds and queues them on the
controller's current channel (none while the broker is not the controller).

Concurrency: event loop only (the controller's event task).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from broker.controller.channel import RequestChannel
from broker.controller.context import ControllerContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.inter_broker_protocol import DEFAULT as DEFAULT_IBP
from broker.protocol.inter_broker_protocol import InterBrokerProtocolVersion
from broker.types import NO_LEADER, TopicPartition

LEADER_AND_ISR = (ApiKey.LEADER_AND_ISR, DEFAULT_IBP.leader_and_isr_version)
STOP_REPLICA = (ApiKey.STOP_REPLICA, DEFAULT_IBP.stop_replica_version)
UPDATE_METADATA = (ApiKey.UPDATE_METADATA, DEFAULT_IBP.update_metadata_version)
"""(api key, version at the default inter.broker.protocol.version)."""
LEADER_DURING_DELETE = -2
EPOCH_DURING_DELETE = -2
PLAINTEXT = 0
# Kafka's SecurityProtocol ids, as UpdateMetadata carries them
_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_UNKNOWN_TYPE = 0  # AbstractControlRequest.Type.UNKNOWN: what a ZooKeeper controller sends

Outgoing = tuple[int, tuple[int, int], Any]


def _request_class(api_key: ApiKey, version: int) -> type[Any]:
    return registry.request_class(api_key, version)


def _partition_state_entry(
    ctx: ControllerContext, tp: TopicPartition, state_cls: type[Any], *, is_new: bool
) -> Any:
    st = ctx.states[tp]
    a = ctx.assignments[tp]
    return registry.build(
        state_cls,
        topic_name=tp.topic,
        partition_index=tp.partition,
        controller_epoch=st.controller_epoch,
        leader=st.leader,
        leader_epoch=st.leader_epoch,
        isr=tuple(st.isr),
        partition_epoch=ctx.state_versions.get(tp, 0),
        replicas=a.replicas,
        adding_replicas=a.adding,
        removing_replicas=a.removing,
        is_new=is_new,
        leader_recovery_state=st.leader_recovery_state,
    )


def leader_and_isr_requests(
    ctx: ControllerContext,
    controller_id: int,
    partitions: Iterable[TopicPartition],
    *,
    only: Iterable[int] | None = None,
    exclude: Iterable[int] = (),
    new: Iterable[TopicPartition] = (),
    include_offline_dirs: bool = False,
    version: int = LEADER_AND_ISR[1],
) -> list[Outgoing]:
    """LeaderAndIsr for ``partitions`` to their live replicas (optionally limited), except
    replicas in offline log directories unless ``include_offline_dirs`` (the controller's
    probe after a log-dir event asks them all)."""
    cls = _request_class(ApiKey.LEADER_AND_ISR, version)
    state_cls = registry.nested(cls, "LeaderAndIsrPartitionState")
    leader_cls = registry.nested(cls, "LeaderAndIsrLiveLeader")
    out: list[Outgoing] = []
    only_set = set(only) if only is not None else None
    excluded = set(exclude)
    new_set = set(new)
    offline_dirs = ctx.replicas_on_offline_dirs
    per_broker: dict[int, dict[str, list[Any]]] = {}
    for tp in partitions:
        if tp not in ctx.states or tp not in ctx.assignments:
            continue
        for r in ctx.assignments[tp].replicas:
            if r not in ctx.live_brokers or r in excluded:
                continue
            if only_set is not None and r not in only_set:
                continue
            if not include_offline_dirs and tp in offline_dirs.get(r, ()):
                continue
            per_broker.setdefault(r, {}).setdefault(tp.topic, []).append(
                _partition_state_entry(ctx, tp, state_cls, is_new=tp in new_set)
            )
    for broker_id, topics in per_broker.items():
        leaders = {
            ctx.states[TopicPartition(t, p.partition_index)].leader
            for t, ps in topics.items()
            for p in ps
        }
        live_leaders = []
        for leader in sorted(leaders):
            node = ctx.live_brokers.get(leader)
            if node is not None:
                host, port = ctx.address(node)
                live_leaders.append(leader_cls(broker_id=leader, host_name=host, port=port))
        fields = _partition_state_fields(
            ctx, cls, "LeaderAndIsrTopicState", topics, grouped=version >= 2
        )
        request = registry.build(
            cls,
            controller_id=controller_id,
            is_k_raft_controller=False,
            controller_epoch=ctx.epoch,
            broker_epoch=ctx.broker_epochs.get(broker_id, -1),
            type_=_UNKNOWN_TYPE,
            live_leaders=tuple(live_leaders),
            **fields,
        )
        out.append((broker_id, (ApiKey.LEADER_AND_ISR, version), request))
    return out


def stop_replica_requests(
    ctx: ControllerContext,
    controller_id: int,
    broker_id: int,
    partitions: Iterable[TopicPartition],
    *,
    delete: bool,
    version: int = STOP_REPLICA[1],
) -> list[Outgoing]:
    """StopReplica of ``partitions`` for one live broker (deleting the logs if asked)."""
    if broker_id not in ctx.live_brokers:
        return []
    cls = _request_class(ApiKey.STOP_REPLICA, version)
    topics: dict[str, list[tuple[int, int]]] = {}
    for tp in partitions:
        st = ctx.states.get(tp)
        epoch = EPOCH_DURING_DELETE if delete else (st.leader_epoch if st else -1)
        topics.setdefault(tp.topic, []).append((tp.partition, epoch))
    if not topics:
        return []
    fields: dict[str, Any] = {}
    if version >= 3:
        topic_cls = registry.nested(cls, "StopReplicaTopicState")
        state_cls = registry.nested(cls, "StopReplicaPartitionState")
        fields["topic_states"] = tuple(
            topic_cls(
                topic_name=t,
                partition_states=tuple(
                    state_cls(partition_index=p, leader_epoch=e, delete_partition=delete)
                    for p, e in ps
                ),
            )
            for t, ps in sorted(topics.items())
        )
    elif version >= 1:
        topic_cls = registry.nested(cls, "StopReplicaTopicV1")
        fields["delete_partitions"] = delete
        fields["topics"] = tuple(
            topic_cls(name=t, partition_indexes=tuple(p for p, _e in ps))
            for t, ps in sorted(topics.items())
        )
    else:
        partition_cls = registry.nested(cls, "StopReplicaPartitionV0")
        fields["delete_partitions"] = delete
        fields["ungrouped_partitions"] = tuple(
            partition_cls(topic_name=t, partition_index=p)
            for t, ps in sorted(topics.items())
            for p, _e in ps
        )
    request = registry.build(
        cls,
        controller_id=controller_id,
        is_k_raft_controller=False,
        controller_epoch=ctx.epoch,
        broker_epoch=ctx.broker_epochs.get(broker_id, -1),
        **fields,
    )
    return [(broker_id, (ApiKey.STOP_REPLICA, version), request)]


def _live_broker_entries(ctx: ControllerContext, cls: type[Any], version: int) -> list[Any]:
    broker_cls = registry.nested(cls, "UpdateMetadataBroker")
    endpoint_cls = registry.nested_optional(cls, "UpdateMetadataEndpoint")
    out = []
    for broker_id, node in sorted(ctx.live_brokers.items()):
        protocols = node.listener_security_protocol_map
        if endpoint_cls is None:  # v0: one PLAINTEXT address
            plain = [
                e for e in node.parsed_endpoints if protocols.get(e.listener) in (None, "PLAINTEXT")
            ]
            chosen = (plain or list(node.parsed_endpoints))[:1]
            host, port = (chosen[0].host, chosen[0].port) if chosen else ctx.address(node)
            out.append(broker_cls(id=broker_id, v0_host=host, v0_port=port))
            continue
        endpoints = tuple(
            registry.build(
                endpoint_cls,
                port=e.port,
                host=e.host,
                listener=e.listener,
                security_protocol=_SECURITY_PROTOCOL_IDS.get(
                    protocols.get(e.listener, "PLAINTEXT"), PLAINTEXT
                ),
            )
            for e in node.parsed_endpoints
        )
        out.append(registry.build(broker_cls, id=broker_id, endpoints=endpoints, rack=node.rack))
    return out


def update_metadata_requests(
    ctx: ControllerContext,
    controller_id: int,
    partitions: Iterable[TopicPartition] | None,
    *,
    deleted: Iterable[TopicPartition] = (),
    brokers: Iterable[int] | None = None,
    version: int = UPDATE_METADATA[1],
) -> list[Outgoing]:
    """UpdateMetadata with ``partitions`` (None: all) to ``brokers`` (None: all live)."""
    cls = _request_class(ApiKey.UPDATE_METADATA, version)
    state_cls = registry.nested(cls, "UpdateMetadataPartitionState")
    out: list[Outgoing] = []
    live = ctx.live_or_shutting_down()
    wanted = sorted(ctx.states) if partitions is None else sorted(set(partitions))
    topics: dict[str, list[Any]] = {}
    for tp in wanted:
        st = ctx.states.get(tp)
        a = ctx.assignments.get(tp)
        if st is None or a is None:
            continue
        topics.setdefault(tp.topic, []).append(
            registry.build(
                state_cls,
                topic_name=tp.topic,
                partition_index=tp.partition,
                controller_epoch=st.controller_epoch,
                leader=st.leader if st.leader in live else NO_LEADER,
                leader_epoch=st.leader_epoch,
                isr=tuple(st.isr),
                zk_version=ctx.state_versions.get(tp, 0),
                replicas=a.replicas,
                offline_replicas=tuple(
                    r
                    for r in a.replicas
                    if not ctx.is_replica_online(r, tp, include_shutting_down=True)
                ),
            )
        )
    for tp in deleted:
        topics.setdefault(tp.topic, []).append(
            registry.build(
                state_cls,
                topic_name=tp.topic,
                partition_index=tp.partition,
                controller_epoch=ctx.epoch,
                leader=LEADER_DURING_DELETE,
                leader_epoch=0,
                isr=(),
                zk_version=0,
                replicas=(),
                offline_replicas=(),
            )
        )
    fields = _partition_state_fields(
        ctx, cls, "UpdateMetadataTopicState", topics, grouped=version >= 5
    )
    live_brokers = tuple(_live_broker_entries(ctx, cls, version))
    for broker_id in sorted(ctx.live_brokers if brokers is None else brokers):
        request = registry.build(
            cls,
            controller_id=controller_id,
            is_k_raft_controller=False,
            type_=_UNKNOWN_TYPE,
            controller_epoch=ctx.epoch,
            broker_epoch=ctx.broker_epochs.get(broker_id, -1),
            live_brokers=live_brokers,
            **fields,
        )
        out.append((broker_id, (ApiKey.UPDATE_METADATA, version), request))
    return out


class ControllerRequestSender:
    """Builds LeaderAndIsr / StopReplica / UpdateMetadata from the context and queues them on
    the channel, which delivers them to each broker in order (Kafka's
    ``ControllerBrokerRequestBatch``)."""

    def __init__(
        self,
        ctx: ControllerContext,
        controller_id: int,
        ibp: InterBrokerProtocolVersion = DEFAULT_IBP,
    ) -> None:
        """``ibp``: this broker's ``inter.broker.protocol.version``, which picks the
        versions sent."""
        self.ctx = ctx
        self.controller_id = controller_id
        self.ibp = ibp
        self.channel: RequestChannel | None = None
        self.on_leader_and_isr_response: Callable[[int, Any], None] | None = None
        """Called with (broker id, response) for every answered LeaderAndIsr."""

    def _deliver(self, outgoing: list[Outgoing]) -> None:
        if self.channel is not None:
            for broker_id, (api_key, version), request in outgoing:
                callback = None
                if api_key == LEADER_AND_ISR[0] and self.on_leader_and_isr_response is not None:
                    callback = functools.partial(self.on_leader_and_isr_response, broker_id)
                self.channel.send(broker_id, api_key, version, request, callback)

    def leader_and_isr(
        self,
        partitions: Iterable[TopicPartition],
        *,
        only: Iterable[int] | None = None,
        exclude: Iterable[int] = (),
        new: Iterable[TopicPartition] = (),
        include_offline_dirs: bool = False,
    ) -> None:
        self._deliver(
            leader_and_isr_requests(
                self.ctx,
                self.controller_id,
                partitions,
                only=only,
                exclude=exclude,
                new=new,
                include_offline_dirs=include_offline_dirs,
                version=self.ibp.leader_and_isr_version,
            )
        )

    def stop_replica(
        self, broker_id: int, partitions: Iterable[TopicPartition], *, delete: bool
    ) -> None:
        self._deliver(
            stop_replica_requests(
                self.ctx,
                self.controller_id,
                broker_id,
                partitions,
                delete=delete,
                version=self.ibp.stop_replica_version,
            )
        )

    def update_metadata(
        self,
        partitions: Iterable[TopicPartition] | None,
        *,
        deleted: Iterable[TopicPartition] = (),
        brokers: Iterable[int] | None = None,
    ) -> None:
        self._deliver(
            update_metadata_requests(
                self.ctx,
                self.controller_id,
                partitions,
                deleted=deleted,
                brokers=brokers,
                version=self.ibp.update_metadata_version,
            )
        )


def _partition_state_fields(
    ctx: ControllerContext,
    cls: Any,
    topic_struct: str,
    topics: Mapping[str, Sequence[Any]],
    *,
    grouped: bool,
) -> dict[str, Any]:
    """The partition states of a LeaderAndIsr or UpdateMetadata request: one flat
    ``ungrouped_partition_states`` list in the old versions, else grouped per topic
    (``topic_struct``, with its topic id)."""
    if not grouped:
        return {
            "ungrouped_partition_states": tuple(p for _t, ps in sorted(topics.items()) for p in ps)
        }
    topic_cls = registry.nested(cls, topic_struct)
    return {
        "topic_states": tuple(
            registry.build(
                topic_cls,
                topic_name=t,
                topic_id=ctx.topic_ids.get(t),
                partition_states=tuple(ps),
            )
            for t, ps in sorted(topics.items())
        )
    }
