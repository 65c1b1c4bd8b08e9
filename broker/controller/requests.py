"""Building the controller's requests to brokers from the controller context.

LeaderAndIsr (v5) goes to the online replicas (live broker, not in an offline log
directory) of the partitions whose leadership or replica set changed, one request per broker
with the leaders' addresses; StopReplica (v3) stops (and optionally deletes) replicas on one
broker; UpdateMetadata (v7) carries every live broker and the changed partitions (leader -1
when the leader is not live, the replicas that are offline: on a dead broker or in an offline
log directory), and marks deleted topics with leader -2 (``LeaderDuringDelete``). Every
request carries the controller id and epoch and the target broker's epoch. The responses to
LeaderAndIsr go to the sender's ``on_leader_and_isr_response`` (the controller learns from
them which replicas are in offline log directories, KIP-112).

The builders are pure functions: they read the context and return ``(broker_id, (api_key,
version), request)`` triples. :class:`ControllerRequestSender` builds and queues them on the
controller's current channel (none while the broker is not the controller).

Concurrency: event loop only (the controller's event task).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from broker.controller.channel import RequestChannel
from broker.controller.context import ControllerContext
from broker.protocol import interbroker as _interbroker
from broker.protocol.api_keys import ApiKey
from broker.types import NO_LEADER, TopicPartition

# kio-style message classes take kio's NewTypes (i32, BrokerId, ...); built from plain ints
ib: Any = _interbroker

LEADER_AND_ISR = (ApiKey.LEADER_AND_ISR, 5)
STOP_REPLICA = (ApiKey.STOP_REPLICA, 3)
UPDATE_METADATA = (ApiKey.UPDATE_METADATA, 7)
LEADER_DURING_DELETE = -2
PLAINTEXT = 0
# Kafka's SecurityProtocol ids, as UpdateMetadata carries them
_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

Outgoing = tuple[int, tuple[int, int], Any]


def _partition_state_entry(ctx: ControllerContext, tp: TopicPartition, *, is_new: bool) -> Any:
    st = ctx.states[tp]
    a = ctx.assignments[tp]
    return ib.LeaderAndIsrPartitionState(
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
) -> list[Outgoing]:
    """LeaderAndIsr for ``partitions`` to their live replicas (optionally limited), except
    replicas in offline log directories unless ``include_offline_dirs`` (the controller's
    probe after a log-dir event asks them all)."""
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
                _partition_state_entry(ctx, tp, is_new=tp in new_set)
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
                live_leaders.append(
                    ib.LeaderAndIsrLiveLeader(broker_id=leader, host_name=host, port=port)
                )
        request = ib.LeaderAndIsrRequest(
            controller_id=controller_id,
            controller_epoch=ctx.epoch,
            broker_epoch=ctx.broker_epochs.get(broker_id, -1),
            type_=0,
            topic_states=tuple(
                ib.LeaderAndIsrTopicState(
                    topic_name=t, topic_id=ctx.topic_ids.get(t), partition_states=tuple(ps)
                )
                for t, ps in sorted(topics.items())
            ),
            live_leaders=tuple(live_leaders),
        )
        out.append((broker_id, LEADER_AND_ISR, request))
    return out


def stop_replica_requests(
    ctx: ControllerContext,
    controller_id: int,
    broker_id: int,
    partitions: Iterable[TopicPartition],
    *,
    delete: bool,
) -> list[Outgoing]:
    """StopReplica of ``partitions`` for one live broker (deleting the logs if asked)."""
    if broker_id not in ctx.live_brokers:
        return []
    topics: dict[str, list[Any]] = {}
    for tp in partitions:
        st = ctx.states.get(tp)
        topics.setdefault(tp.topic, []).append(
            ib.StopReplicaPartitionState(
                partition_index=tp.partition,
                leader_epoch=-2 if delete else (st.leader_epoch if st else -1),
                delete_partition=delete,
            )
        )
    if not topics:
        return []
    request = ib.StopReplicaRequest(
        controller_id=controller_id,
        controller_epoch=ctx.epoch,
        broker_epoch=ctx.broker_epochs.get(broker_id, -1),
        topic_states=tuple(
            ib.StopReplicaTopicState(topic_name=t, partition_states=tuple(ps))
            for t, ps in sorted(topics.items())
        ),
    )
    return [(broker_id, STOP_REPLICA, request)]


def update_metadata_requests(
    ctx: ControllerContext,
    controller_id: int,
    partitions: Iterable[TopicPartition] | None,
    *,
    deleted: Iterable[TopicPartition] = (),
    brokers: Iterable[int] | None = None,
) -> list[Outgoing]:
    """UpdateMetadata with ``partitions`` (None: all) to ``brokers`` (None: all live)."""
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
            ib.UpdateMetadataPartitionState(
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
            ib.UpdateMetadataPartitionState(
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
    live_brokers = []
    for broker_id, node in sorted(ctx.live_brokers.items()):
        endpoints = tuple(
            ib.UpdateMetadataEndpoint(
                port=e.port,
                host=e.host,
                listener=e.listener,
                security_protocol=_SECURITY_PROTOCOL_IDS.get(
                    node.listener_security_protocol_map.get(e.listener, "PLAINTEXT"), PLAINTEXT
                ),
            )
            for e in node.parsed_endpoints
        )
        live_brokers.append(
            ib.UpdateMetadataBroker(id=broker_id, endpoints=endpoints, rack=node.rack)
        )
    for broker_id in sorted(ctx.live_brokers if brokers is None else brokers):
        request = ib.UpdateMetadataRequest(
            controller_id=controller_id,
            controller_epoch=ctx.epoch,
            broker_epoch=ctx.broker_epochs.get(broker_id, -1),
            topic_states=tuple(
                ib.UpdateMetadataTopicState(
                    topic_name=t,
                    topic_id=ctx.topic_ids.get(t),
                    partition_states=tuple(ps),
                )
                for t, ps in sorted(topics.items())
            ),
            live_brokers=tuple(live_brokers),
        )
        out.append((broker_id, UPDATE_METADATA, request))
    return out


class ControllerRequestSender:
    """Builds LeaderAndIsr / StopReplica / UpdateMetadata from the context and queues them on
    the channel, which delivers them to each broker in order (Kafka's
    ``ControllerBrokerRequestBatch``)."""

    def __init__(self, ctx: ControllerContext, controller_id: int) -> None:
        self.ctx = ctx
        self.controller_id = controller_id
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
            )
        )

    def stop_replica(
        self, broker_id: int, partitions: Iterable[TopicPartition], *, delete: bool
    ) -> None:
        self._deliver(
            stop_replica_requests(
                self.ctx, self.controller_id, broker_id, partitions, delete=delete
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
                self.ctx, self.controller_id, partitions, deleted=deleted, brokers=brokers
            )
        )
