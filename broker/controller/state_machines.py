"""The controller's partition and replica state machines (Kafka 3.9, ZooKeeper mode).

Theory of operation: the controller tracks a state for every partition and for every replica
(a partition on one broker). Each state names the states it may be entered from
(``valid_previous_states``, exactly Kafka's ``validPreviousStates``); a transition from any
other state raises :class:`IllegalStateTransition` and changes nothing. Some states may be
re-entered (``OnlinePartition -> OnlinePartition`` is a leader re-election). A key never seen
is in the ``NonExistent`` state.

Partition states::

    NonExistentPartition -> NewPartition -> OnlinePartition <-> OfflinePartition
    OfflinePartition -> NonExistentPartition                   (topic deletion)

Replica states::

    NonExistentReplica -> NewReplica -> OnlineReplica <-> OfflineReplica
    OfflineReplica -> ReplicaDeletionStarted -> ReplicaDeletionSuccessful -> NonExistentReplica
    OfflineReplica, ReplicaDeletionStarted -> ReplicaDeletionIneligible
    ReplicaDeletionIneligible -> OnlineReplica, OfflineReplica

The machines record states and check transitions; the side effects (leader election,
znode writes) are performed by :mod:`broker.controller.state_driver`, which asks the machine
whether a transition is legal *before* any side effect, calls :meth:`transition` after it,
and picks the partitions to elect from the machine (every New and Offline partition). On
controller failover the driver seeds the machines with :meth:`initialize`, which records a
state without checking the transition, as Kafka's ``initializePartitionState`` /
``initializeReplicaState`` do. The machines live in the controller context.

Concurrency: not thread-safe; the controller mutates them only from its single event loop.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import NamedTuple

from broker.types import TopicPartition

__all__ = [
    "IllegalStateTransition",
    "PartitionReplica",
    "PartitionState",
    "PartitionStateMachine",
    "ReplicaState",
    "ReplicaStateMachine",
]


class PartitionState(enum.Enum):
    """A partition's state; the value is Kafka's state byte."""

    NewPartition = 0
    OnlinePartition = 1
    OfflinePartition = 2
    NonExistentPartition = 3

    @property
    def valid_previous_states(self) -> frozenset[PartitionState]:
        """The states this state may be entered from."""
        return _PARTITION_PREVIOUS[self]

    def __str__(self) -> str:
        return self.name


class ReplicaState(enum.Enum):
    """A replica's state; the value is Kafka's state byte."""

    NewReplica = 1
    OnlineReplica = 2
    OfflineReplica = 3
    ReplicaDeletionStarted = 4
    ReplicaDeletionSuccessful = 5
    ReplicaDeletionIneligible = 6
    NonExistentReplica = 7

    @property
    def valid_previous_states(self) -> frozenset[ReplicaState]:
        """The states this state may be entered from."""
        return _REPLICA_PREVIOUS[self]

    def __str__(self) -> str:
        return self.name


_P = PartitionState
_PARTITION_PREVIOUS: dict[PartitionState, frozenset[PartitionState]] = {
    _P.NewPartition: frozenset({_P.NonExistentPartition}),
    _P.OnlinePartition: frozenset({_P.NewPartition, _P.OnlinePartition, _P.OfflinePartition}),
    _P.OfflinePartition: frozenset({_P.NewPartition, _P.OnlinePartition, _P.OfflinePartition}),
    _P.NonExistentPartition: frozenset({_P.OfflinePartition}),
}

_R = ReplicaState
_REPLICA_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    _R.NewReplica: frozenset({_R.NonExistentReplica}),
    _R.OnlineReplica: frozenset(
        {_R.NewReplica, _R.OnlineReplica, _R.OfflineReplica, _R.ReplicaDeletionIneligible}
    ),
    _R.OfflineReplica: frozenset(
        {_R.NewReplica, _R.OnlineReplica, _R.OfflineReplica, _R.ReplicaDeletionIneligible}
    ),
    _R.ReplicaDeletionStarted: frozenset({_R.OfflineReplica}),
    _R.ReplicaDeletionSuccessful: frozenset({_R.ReplicaDeletionStarted}),
    _R.ReplicaDeletionIneligible: frozenset({_R.OfflineReplica, _R.ReplicaDeletionStarted}),
    _R.NonExistentReplica: frozenset({_R.ReplicaDeletionSuccessful}),
}


class PartitionReplica(NamedTuple):
    """The key of a replica: a partition and the broker that holds the replica.

    A plain ``(TopicPartition, int)`` tuple is an equal key."""

    topic_partition: TopicPartition
    replica: int

    def __str__(self) -> str:
        return f"[Topic={self.topic_partition.topic},Partition={self.topic_partition.partition},Replica={self.replica}]"


class IllegalStateTransition(Exception):
    """A state change from a state the target state may not be entered from."""

    def __init__(
        self,
        key: TopicPartition | PartitionReplica,
        from_state: PartitionState | ReplicaState,
        to_state: PartitionState | ReplicaState,
    ) -> None:
        kind = "Partition" if isinstance(key, TopicPartition) else "Replica"
        allowed = ",".join(sorted(s.name for s in to_state.valid_previous_states))
        super().__init__(
            f"{kind} {key} should be in one of {allowed} states before moving to "
            f"{to_state.name} state. Instead it is in {from_state.name} state"
        )
        self.key = key
        self.from_state = from_state
        self.to_state = to_state


class PartitionStateMachine:
    """The state of every partition the controller knows, keyed by :class:`TopicPartition`.

    A partition never recorded (or removed) is ``NonExistentPartition``. Not thread-safe:
    used only from the controller's event loop.
    """

    __slots__ = ("_states",)

    def __init__(self) -> None:
        self._states: dict[TopicPartition, PartitionState] = {}

    def state(self, tp: TopicPartition) -> PartitionState:
        """The partition's state (``NonExistentPartition`` if unknown)."""
        return self._states.get(tp, PartitionState.NonExistentPartition)

    def is_valid_transition(self, tp: TopicPartition, target: PartitionState) -> bool:
        """Whether ``tp`` may move to ``target`` now."""
        return self.state(tp) in target.valid_previous_states

    def transition(self, tp: TopicPartition, target: PartitionState) -> PartitionState:
        """Move ``tp`` to ``target`` and return its previous state.

        Raises :class:`IllegalStateTransition` (and changes nothing) if the current state is
        not one of ``target.valid_previous_states``."""
        previous = self.state(tp)
        if previous not in target.valid_previous_states:
            raise IllegalStateTransition(tp, previous, target)
        self._states[tp] = target
        return previous

    def initialize(self, tp: TopicPartition, state: PartitionState) -> None:
        """Record ``state`` without checking the transition (controller failover)."""
        self._states[tp] = state

    def remove(self, tp: TopicPartition) -> None:
        """Forget ``tp`` (it becomes ``NonExistentPartition``); unknown partitions are ignored."""
        self._states.pop(tp, None)

    def partitions_in(
        self, *states: PartitionState, topic: str | None = None
    ) -> list[TopicPartition]:
        """The recorded partitions in any of ``states`` (of ``topic`` if given), sorted."""
        wanted = frozenset(states)
        return sorted(
            tp
            for tp, s in self._states.items()
            if s in wanted and (topic is None or tp.topic == topic)
        )

    @property
    def offline_count(self) -> int:
        """How many partitions are ``OfflinePartition`` (Kafka's OfflinePartitionsCount)."""
        return sum(1 for s in self._states.values() if s is PartitionState.OfflinePartition)

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, tp: object) -> bool:
        return tp in self._states


class ReplicaStateMachine:
    """The state of every replica the controller knows, keyed by ``(TopicPartition, replica)``.

    Keys may be given as :class:`PartitionReplica` or as plain tuples; keys returned are
    :class:`PartitionReplica`. A replica never recorded (or removed) is
    ``NonExistentReplica``. Not thread-safe: used only from the controller's event loop.
    """

    __slots__ = ("_by_partition",)

    def __init__(self) -> None:
        self._by_partition: dict[TopicPartition, dict[int, ReplicaState]] = {}

    def state(self, key: tuple[TopicPartition, int]) -> ReplicaState:
        """The replica's state (``NonExistentReplica`` if unknown)."""
        tp, replica = key
        return self._by_partition.get(tp, {}).get(replica, ReplicaState.NonExistentReplica)

    def is_valid_transition(self, key: tuple[TopicPartition, int], target: ReplicaState) -> bool:
        """Whether the replica may move to ``target`` now."""
        return self.state(key) in target.valid_previous_states

    def transition(self, key: tuple[TopicPartition, int], target: ReplicaState) -> ReplicaState:
        """Move the replica to ``target`` and return its previous state.

        Raises :class:`IllegalStateTransition` (and changes nothing) if the current state is
        not one of ``target.valid_previous_states``."""
        previous = self.state(key)
        if previous not in target.valid_previous_states:
            raise IllegalStateTransition(PartitionReplica(*key), previous, target)
        self.initialize(key, target)
        return previous

    def initialize(self, key: tuple[TopicPartition, int], state: ReplicaState) -> None:
        """Record ``state`` without checking the transition (controller failover)."""
        tp, replica = key
        self._by_partition.setdefault(tp, {})[replica] = state

    def remove(self, key: tuple[TopicPartition, int]) -> None:
        """Forget one replica (it becomes ``NonExistentReplica``); unknown keys are ignored."""
        tp, replica = key
        replicas = self._by_partition.get(tp)
        if replicas is not None:
            replicas.pop(replica, None)
            if not replicas:
                del self._by_partition[tp]

    def remove_partition(self, tp: TopicPartition) -> None:
        """Forget every replica of ``tp``."""
        self._by_partition.pop(tp, None)

    def replicas_in(
        self, *states: ReplicaState, topic: str | None = None
    ) -> list[PartitionReplica]:
        """The recorded replicas in any of ``states`` (of ``topic`` if given), sorted."""
        wanted = frozenset(states)
        return sorted(
            PartitionReplica(tp, replica)
            for tp, replica, s in self._items()
            if s in wanted and (topic is None or tp.topic == topic)
        )

    def replicas_of(self, tp: TopicPartition) -> dict[int, ReplicaState]:
        """The recorded replicas of ``tp`` and their states, by ascending replica id."""
        return dict(sorted(self._by_partition.get(tp, {}).items()))

    def partitions_in(
        self, *states: ReplicaState, topic: str | None = None
    ) -> list[TopicPartition]:
        """The partitions with at least one replica in any of ``states``, sorted."""
        wanted = frozenset(states)
        return sorted(
            tp
            for tp, replicas in self._by_partition.items()
            if (topic is None or tp.topic == topic) and any(s in wanted for s in replicas.values())
        )

    @property
    def offline_count(self) -> int:
        """How many replicas are ``OfflineReplica``."""
        return sum(1 for _, _, s in self._items() if s is ReplicaState.OfflineReplica)

    def _items(self) -> Iterable[tuple[TopicPartition, int, ReplicaState]]:
        for tp, replicas in self._by_partition.items():
            for replica, s in replicas.items():
                yield tp, replica, s

    def __len__(self) -> int:
        return sum(len(r) for r in self._by_partition.values())

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        tp, replica = key
        return replica in self._by_partition.get(tp, {})
