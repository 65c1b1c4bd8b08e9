"""Partition and replica state machines (broker/controller/state_machines.py): every legal and
illegal transition, queries, and a Hypothesis comparison against a dict model."""

from __future__ import annotations

from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.controller.state_machines import (
    IllegalStateTransition,
    PartitionReplica,
    PartitionState,
    PartitionStateMachine,
    ReplicaState,
    ReplicaStateMachine,
)
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

P = PartitionState
R = ReplicaState

# Kafka 3.9's transition graphs, written as (from, to) edges.
PARTITION_EDGES = {
    (P.NonExistentPartition, P.NewPartition),
    (P.NewPartition, P.OnlinePartition),
    (P.OnlinePartition, P.OnlinePartition),
    (P.OfflinePartition, P.OnlinePartition),
    (P.NewPartition, P.OfflinePartition),
    (P.OnlinePartition, P.OfflinePartition),
    (P.OfflinePartition, P.OfflinePartition),
    (P.OfflinePartition, P.NonExistentPartition),
}
REPLICA_EDGES = {
    (R.NonExistentReplica, R.NewReplica),
    *((s, R.OnlineReplica) for s in (R.NewReplica, R.OnlineReplica, R.OfflineReplica)),
    (R.ReplicaDeletionIneligible, R.OnlineReplica),
    *((s, R.OfflineReplica) for s in (R.NewReplica, R.OnlineReplica, R.OfflineReplica)),
    (R.ReplicaDeletionIneligible, R.OfflineReplica),
    (R.OfflineReplica, R.ReplicaDeletionStarted),
    (R.ReplicaDeletionStarted, R.ReplicaDeletionSuccessful),
    (R.OfflineReplica, R.ReplicaDeletionIneligible),
    (R.ReplicaDeletionStarted, R.ReplicaDeletionIneligible),
    (R.ReplicaDeletionSuccessful, R.NonExistentReplica),
}

TP = TopicPartition("t", 0)
KEY = PartitionReplica(TP, 1)


def test_state_values_are_kafkas_bytes() -> None:
    assert [s.value for s in P] == [0, 1, 2, 3]
    assert [(s.name, s.value) for s in R] == [
        ("NewReplica", 1),
        ("OnlineReplica", 2),
        ("OfflineReplica", 3),
        ("ReplicaDeletionStarted", 4),
        ("ReplicaDeletionSuccessful", 5),
        ("ReplicaDeletionIneligible", 6),
        ("NonExistentReplica", 7),
    ]
    assert str(P.OnlinePartition) == "OnlinePartition"
    assert str(R.OfflineReplica) == "OfflineReplica"


def test_valid_previous_states_match_the_graph() -> None:
    for target in P:
        assert target.valid_previous_states == {f for f, t in PARTITION_EDGES if t is target}
    for replica_target in R:
        assert replica_target.valid_previous_states == {
            f for f, t in REPLICA_EDGES if t is replica_target
        }


@pytest.mark.parametrize(("source", "target"), list(product(P, P)))
def test_every_partition_transition(source: PartitionState, target: PartitionState) -> None:
    sm = PartitionStateMachine()
    sm.initialize(TP, source)
    assert sm.is_valid_transition(TP, target) == ((source, target) in PARTITION_EDGES)
    if (source, target) in PARTITION_EDGES:
        assert sm.transition(TP, target) is source
        assert sm.state(TP) is target
    else:
        with pytest.raises(IllegalStateTransition) as info:
            sm.transition(TP, target)
        assert info.value.key == TP
        assert info.value.from_state is source
        assert info.value.to_state is target
        message = str(info.value)
        assert "t-0" in message and source.name in message and target.name in message
        assert sm.state(TP) is source  # unchanged


@pytest.mark.parametrize(("source", "target"), list(product(R, R)))
def test_every_replica_transition(source: ReplicaState, target: ReplicaState) -> None:
    sm = ReplicaStateMachine()
    sm.initialize(KEY, source)
    assert sm.is_valid_transition(KEY, target) == ((source, target) in REPLICA_EDGES)
    if (source, target) in REPLICA_EDGES:
        assert sm.transition(KEY, target) is source
        assert sm.state(KEY) is target
    else:
        with pytest.raises(IllegalStateTransition) as info:
            sm.transition(KEY, target)
        assert info.value.key == KEY
        assert info.value.from_state is source
        assert info.value.to_state is target
        message = str(info.value)
        assert "Replica=1" in message and source.name in message and target.name in message
        assert sm.state(KEY) is source


def test_unknown_keys_are_non_existent() -> None:
    psm = PartitionStateMachine()
    rsm = ReplicaStateMachine()
    assert psm.state(TP) is P.NonExistentPartition
    assert rsm.state(KEY) is R.NonExistentReplica
    assert len(psm) == 0 and len(rsm) == 0
    with pytest.raises(IllegalStateTransition):
        psm.transition(TP, P.OnlinePartition)
    with pytest.raises(IllegalStateTransition):
        rsm.transition(KEY, R.OnlineReplica)
    assert TP not in psm and KEY not in rsm


def test_partition_lifecycle_and_queries() -> None:
    sm = PartitionStateMachine()
    tps = [TopicPartition("a", i) for i in range(3)] + [TopicPartition("b", 0)]
    for tp in tps:
        assert sm.transition(tp, P.NewPartition) is P.NonExistentPartition
        sm.transition(tp, P.OnlinePartition)
    sm.transition(tps[1], P.OfflinePartition)
    sm.transition(tps[3], P.OfflinePartition)
    assert sm.offline_count == 2
    assert sm.partitions_in(P.OfflinePartition) == [tps[1], tps[3]]
    assert sm.partitions_in(P.OfflinePartition, topic="a") == [tps[1]]
    assert sm.partitions_in(P.OnlinePartition, P.OfflinePartition) == sorted(tps)
    assert sm.partitions_in() == []
    # topic deletion of b
    sm.transition(tps[3], P.NonExistentPartition)
    assert sm.offline_count == 1
    assert sm.partitions_in(P.NonExistentPartition) == [tps[3]]
    sm.remove(tps[3])
    sm.remove(tps[3])  # idempotent
    assert tps[3] not in sm and len(sm) == 3
    assert sm.state(tps[3]) is P.NonExistentPartition
    # recreate
    sm.transition(tps[3], P.NewPartition)
    assert sm.state(tps[3]) is P.NewPartition


def test_replica_lifecycle_and_queries() -> None:
    sm = ReplicaStateMachine()
    a0, a1 = TopicPartition("a", 0), TopicPartition("a", 1)
    b0 = TopicPartition("b", 0)
    for tp in (a0, a1, b0):
        for broker in (3, 1, 2):
            sm.transition((tp, broker), R.NewReplica)
            sm.transition((tp, broker), R.OnlineReplica)
    assert len(sm) == 9
    assert sm.replicas_of(a0) == {1: R.OnlineReplica, 2: R.OnlineReplica, 3: R.OnlineReplica}
    assert list(sm.replicas_of(a0)) == [1, 2, 3]
    assert sm.replicas_of(TopicPartition("zzz", 0)) == {}
    # broker 2 dies
    for tp in (a0, a1, b0):
        sm.transition((tp, 2), R.OfflineReplica)
    assert sm.offline_count == 3
    offline = sm.replicas_in(R.OfflineReplica)
    assert offline == [PartitionReplica(a0, 2), PartitionReplica(a1, 2), PartitionReplica(b0, 2)]
    assert all(isinstance(k, PartitionReplica) for k in offline)
    assert offline[0] == (a0, 2)  # a plain tuple is an equal key
    assert sm.replicas_in(R.OfflineReplica, topic="b") == [(b0, 2)]
    assert sm.partitions_in(R.OfflineReplica, topic="a") == [a0, a1]
    # delete topic b: all replicas offline, deletion started, successful, gone
    for broker in (1, 3):
        sm.transition((b0, broker), R.OfflineReplica)
    for broker in (1, 2, 3):
        sm.transition((b0, broker), R.ReplicaDeletionStarted)
    sm.transition((b0, 2), R.ReplicaDeletionIneligible)  # broker 2 is down
    for broker in (1, 3):
        sm.transition((b0, broker), R.ReplicaDeletionSuccessful)
        sm.transition((b0, broker), R.NonExistentReplica)
        sm.remove((b0, broker))
    assert sm.replicas_of(b0) == {2: R.ReplicaDeletionIneligible}
    assert (b0, 2) in sm and (b0, 1) not in sm
    # broker 2 comes back: ineligible -> offline -> deletion retried
    sm.transition((b0, 2), R.OfflineReplica)
    sm.transition((b0, 2), R.ReplicaDeletionStarted)
    sm.remove((b0, 2))
    assert sm.replicas_of(b0) == {}
    assert sm.partitions_in(R.OnlineReplica, R.OfflineReplica) == [a0, a1]
    sm.remove_partition(a1)
    sm.remove_partition(a1)
    sm.remove((a1, 7))  # unknown: ignored
    assert sm.partitions_in(*R) == [a0]
    assert len(sm) == 3
    assert "not a key" not in sm and (a0,) not in sm


def test_exception_messages_read_like_kafkas() -> None:
    sm = PartitionStateMachine()
    with pytest.raises(IllegalStateTransition, match=r"Partition t-0 should be in one of "):
        sm.transition(TP, P.OnlinePartition)
    rsm = ReplicaStateMachine()
    with pytest.raises(
        IllegalStateTransition,
        match=r"Replica \[Topic=t,Partition=0,Replica=1\] .* Instead it is in NonExistentReplica",
    ):
        rsm.transition((TP, 1), R.OfflineReplica)


# ---------------------------------------------------------------------------- property

partition_ops = st.lists(
    st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 2), st.sampled_from(list(P))),
    max_size=60,
)


@pytest.mark.property
@settings(max_examples=200, deadline=None)
@given(ops=partition_ops)
def test_partition_machine_matches_model(ops: list[tuple[str, int, PartitionState]]) -> None:
    sm = PartitionStateMachine()
    model: dict[TopicPartition, PartitionState] = {}
    for topic, index, target in ops:
        tp = TopicPartition(topic, index)
        current = model.get(tp, P.NonExistentPartition)
        if (current, target) in PARTITION_EDGES:
            assert sm.transition(tp, target) is current
            model[tp] = target
        else:
            with pytest.raises(IllegalStateTransition):
                sm.transition(tp, target)
        assert sm.offline_count == sum(s is P.OfflinePartition for s in model.values())
    for state in P:
        assert sm.partitions_in(state) == sorted(tp for tp, s in model.items() if s is state)


replica_ops = st.lists(
    st.tuples(st.integers(0, 2), st.integers(1, 3), st.sampled_from(list(R))), max_size=80
)


@pytest.mark.property
@settings(max_examples=200, deadline=None)
@given(ops=replica_ops)
def test_replica_machine_matches_model(ops: list[tuple[int, int, ReplicaState]]) -> None:
    sm = ReplicaStateMachine()
    model: dict[tuple[TopicPartition, int], ReplicaState] = {}
    for index, broker, target in ops:
        key = (TopicPartition("t", index), broker)
        current = model.get(key, R.NonExistentReplica)
        if (current, target) in REPLICA_EDGES:
            assert sm.transition(key, target) is current
            model[key] = target
        else:
            with pytest.raises(IllegalStateTransition):
                sm.transition(key, target)
    assert len(sm) == len(model)
    for state in R:
        assert sm.replicas_in(state) == sorted(k for k, s in model.items() if s is state)
    for index in range(3):
        tp = TopicPartition("t", index)
        assert sm.replicas_of(tp) == {b: s for (t, b), s in sorted(model.items()) if t == tp}
