"""The active controller's in-memory view of the cluster (Kafka's ControllerContext).

Filled from ZooKeeper when a broker becomes controller and kept current by the controller's
events: live brokers with their epochs (the czxid of ``/brokers/ids/<id>``, which tells a
restarted broker from the old one), brokers in controlled shutdown, topic ids and the
version of each topic znode, every partition's replica assignment (with in-flight
reassignment) and its leader/ISR state with the version of its state znode (for conditional
updates), the brokers fenced because their process died while their registration lives
on (docs/failover.md), the topics being deleted, the replicas in offline log directories of live brokers
(KIP-112: learnt from LeaderAndIsr responses with KAFKA_STORAGE_ERROR, forgotten when the
broker stops or restarts), and (as in Kafka) the partition and replica states of the state
machines. A replica is *online* when its broker is live and it is not in an offline log
directory; only online replicas are elected, stay in the ISR, and get LeaderAndIsr. One context lives as long as the controller; :meth:`reset` empties it
when the broker becomes controller or resigns.

Concurrency: owned by the controller's event task; only events read or change it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields

from broker.controller.reassignment import ReplicaAssignment
from broker.controller.state_machines import PartitionStateMachine, ReplicaStateMachine
from broker.types import TopicPartition
from broker.zk import znodes


@dataclass(slots=True)
class ControllerContext:
    """What the active controller knows (Kafka's ControllerContext)."""

    epoch: int = 0
    epoch_zk_version: int = 0
    live_brokers: dict[int, znodes.BrokerIdZNode] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    # brokers whose process was found dead (docs/failover.md) -> the broker epoch of the
    # registration that is still in ZooKeeper and is not counted live
    fenced: dict[int, int] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    topic_versions: dict[str, int] = field(default_factory=dict)
    assignments: dict[TopicPartition, ReplicaAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, znodes.PartitionState] = field(default_factory=dict)
    state_versions: dict[TopicPartition, int] = field(default_factory=dict)
    # the zxid of each partition state's last write, as read when the topic was loaded
    # (fail-over uses it to find brokers that restarted since: see Controller)
    state_zxids: dict[TopicPartition, int] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)
    partition_states: PartitionStateMachine = field(default_factory=PartitionStateMachine)
    replica_states: ReplicaStateMachine = field(default_factory=ReplicaStateMachine)
    inter_broker_listener: str | None = None
    """The listener brokers reach each other on (``inter.broker.listener.name``); None: the
    first advertised one."""

    def reset(self, epoch: int = 0, epoch_zk_version: int = 0) -> None:
        """Forget everything (a new term as controller, or a resignation)."""
        fresh = ControllerContext(
            epoch=epoch,
            epoch_zk_version=epoch_zk_version,
            inter_broker_listener=self.inter_broker_listener,
        )
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def live_ids(self) -> set[int]:
        """Live brokers that are not shutting down (eligible as leaders)."""
        return set(self.live_brokers) - self.shutting_down

    def live_or_shutting_down(self) -> set[int]:
        return set(self.live_brokers)

    def is_replica_online(
        self, broker_id: int, tp: TopicPartition, *, include_shutting_down: bool = False
    ) -> bool:
        """Kafka's ``isReplicaOnline``: the broker is live (not shutting down, unless
        ``include_shutting_down``) and the replica is not in an offline log directory."""
        live = broker_id in self.live_brokers and (
            include_shutting_down or broker_id not in self.shutting_down
        )
        return live and tp not in self.replicas_on_offline_dirs.get(broker_id, ())

    def online_ids(self, tp: TopicPartition) -> set[int]:
        """The brokers whose replica of ``tp`` is online (eligible as leader, kept in the
        ISR): ``live_ids()`` without those holding ``tp`` in an offline log directory."""
        live = self.live_ids()
        offline = self.replicas_on_offline_dirs
        if not offline:
            return live
        return {b for b in live if tp not in offline.get(b, ())}

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.assignments if tp.topic == topic)

    def address(self, node: znodes.BrokerIdZNode) -> tuple[str, int]:
        """The (host, port) of a broker's inter-broker endpoint (its first advertised one
        when it has no endpoint of that listener)."""
        endpoints = node.parsed_endpoints
        if self.inter_broker_listener is not None:
            for ep in endpoints:
                if ep.listener == self.inter_broker_listener:
                    return ep.host, ep.port
        if endpoints:
            return endpoints[0].host, endpoints[0].port
        return node.host or "127.0.0.1", node.port
