"""Reassignment and leader-balance helpers (broker/controller/reassignment.py)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.controller import topic_admin as ta
from broker.controller.reassignment import (
    ReplicaAssignment,
    build_reassignment,
    format_reassignment_json,
    format_topics_to_move_json,
    generate_reassignment,
    leader_imbalance,
    parse_reassignment_json,
    parse_topics_to_move_json,
    partitions_to_rebalance,
    validate_target_replicas,
)
from broker.types import TopicPartition

pytestmark = pytest.mark.unit


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


# ------------------------------------------------------------------ ReplicaAssignment


def test_plain_assignment_is_not_being_reassigned() -> None:
    a = ReplicaAssignment((1, 2, 3))
    assert not a.is_being_reassigned
    assert a.target_replicas == a.original_replicas == (1, 2, 3)


def test_reassign_to_disjoint_target() -> None:
    a = ReplicaAssignment((1, 2, 3)).reassign_to([4, 5, 6])
    assert a == ReplicaAssignment((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert a.is_being_reassigned
    assert a.target_replicas == (4, 5, 6)
    assert a.original_replicas == (1, 2, 3)


def test_reassign_to_overlapping_target() -> None:
    a = ReplicaAssignment((1, 2, 3)).reassign_to([3, 4, 5])
    assert a == ReplicaAssignment((3, 4, 5, 1, 2), (4, 5), (1, 2))
    assert a.target_replicas == (3, 4, 5)
    assert a.original_replicas == (3, 1, 2)  # same brokers; order follows `replicas`


def test_reassign_while_reassigning_starts_from_the_original() -> None:
    first = ReplicaAssignment((1, 2, 3)).reassign_to([3, 4, 5])
    second = first.reassign_to([6])
    # 4 and 5 are dropped: they were never part of the original assignment
    assert second == ReplicaAssignment((6, 3, 1, 2), (6,), (3, 1, 2))
    assert set(second.original_replicas) == {1, 2, 3}
    assert second.target_replicas == (6,)


def test_cancel_and_no_op_reassignments() -> None:
    ongoing = ReplicaAssignment((1, 2, 3)).reassign_to([4, 5, 6])
    cancelled = build_reassignment(ongoing, None)
    assert cancelled == ReplicaAssignment((1, 2, 3))
    assert cancelled is not None and not cancelled.is_being_reassigned
    assert build_reassignment(ReplicaAssignment((1, 2)), None) is None
    assert build_reassignment(ReplicaAssignment((1, 2)), [2, 3]) == ReplicaAssignment(
        (2, 3, 1), (3,), (1,)
    )
    # a reorder only completes at once
    assert ReplicaAssignment((1, 2)).reassign_to([2, 1]) == ReplicaAssignment((2, 1))
    # the same target is not a reassignment
    assert ReplicaAssignment((1, 2)).reassign_to([1, 2]) == ReplicaAssignment((1, 2))


def test_remove_replica() -> None:
    a = ReplicaAssignment((4, 5, 1, 2), (4, 5), (1, 2))
    assert a.remove_replica(1) == ReplicaAssignment((4, 5, 2), (4, 5), (2,))
    assert a.remove_replica(4) == ReplicaAssignment((5, 1, 2), (5,), (1, 2))
    assert a.remove_replica(9) == a


@pytest.mark.property
@settings(max_examples=300, deadline=None)
@given(
    original=st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True),
    targets=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True), max_size=4),
)
def test_reassign_to_properties(original: list[int], targets: list[list[int]]) -> None:
    a = ReplicaAssignment(tuple(original))
    for target in targets:
        a = a.reassign_to(target)
        assert a.target_replicas == tuple(target)
        assert set(a.original_replicas) == set(original)
        assert len(set(a.replicas)) == len(a.replicas)
        assert set(a.replicas) == set(target) | set(original)
        assert a.replicas[: len(target)] == tuple(target)
        assert set(a.adding) == set(target) - set(original)
        assert set(a.removing) == set(original) - set(target)
        assert a.is_being_reassigned == (set(target) != set(original))
    cancelled = build_reassignment(a, None)
    if cancelled is not None:
        assert not cancelled.is_being_reassigned
        assert set(cancelled.replicas) == set(original)


def test_validate_target_replicas() -> None:
    current = ReplicaAssignment((1, 2))
    assert validate_target_replicas(current, [2, 3], {1, 2, 3}) is None
    assert "Empty replica list" in (validate_target_replicas(current, [], {1}) or "")
    assert "Duplicate replica ids" in (validate_target_replicas(current, [3, 3], {3}) or "")
    assert "Invalid broker id" in (validate_target_replicas(current, [-1], {1}) or "")
    message = validate_target_replicas(current, [2, 4], {1, 2, 3})
    assert message is not None and "not alive" in message and "[4]" in message
    # replicas already in the original assignment may be down
    assert validate_target_replicas(current, [1], {2}) is None


# --------------------------------------------------------------------------- JSON files


def test_parse_reassignment_json() -> None:
    text = json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": "tp_re_02", "partition": 0, "replicas": [0, 1]},
                {
                    "topic": "tp_re_02",
                    "partition": 2,
                    "replicas": [1, 0],
                    "log_dirs": ["any", "any"],
                },
                {"topic": "other", "partition": 0, "replicas": [3], "log_dirs": ["/data/a"]},
            ],
        }
    )
    assert parse_reassignment_json(text) == {
        tp("tp_re_02", 0): [0, 1],
        tp("tp_re_02", 2): [1, 0],
        tp("other", 0): [3],
    }
    # version defaults to 1
    assert parse_reassignment_json(
        '{"partitions":[{"topic":"a","partition":1,"replicas":[2]}]}'
    ) == {tp("a", 1): [2]}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("not json", "not a valid JSON"),
        ("[1, 2]", "must be an object"),
        ('{"version": 2, "partitions": []}', "Not supported version field value 2"),
        ('{"version": "1", "partitions": []}', "Not supported version"),
        ('{"version": 1}', "Partition reassignment list cannot be empty"),
        ('{"partitions": []}', "Partition reassignment list cannot be empty"),
        ('{"partitions": {}}', "'partitions' must be a list"),
        ('{"partitions": [3]}', r"partitions\[0\] must be an object"),
        ('{"partitions": [{"partition": 0, "replicas": [1]}]}', "'topic' must be a string"),
        ('{"partitions": [{"topic": 5, "partition": 0, "replicas": [1]}]}', "'topic'"),
        ('{"partitions": [{"topic": "t", "replicas": [1]}]}', "'partition' must be"),
        ('{"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]}', "'partition'"),
        ('{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', "non-negative"),
        ('{"partitions": [{"topic": "t", "partition": true, "replicas": [1]}]}', "'partition'"),
        ('{"partitions": [{"topic": "t", "partition": 0}]}', "'replicas' must be a list"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": 1}]}', "'replicas'"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": ["1"]}]}', "integers"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1.5]}]}', "integers"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [true]}]}', "integers"),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": "any"}]}',
            "'log_dirs' must be a list",
        ),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": [1]}]}',
            "'log_dirs' must be strings",
        ),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}',
            r"Size of replicas list \[1, 2\] is different from size of log dirs list .* t-0",
        ),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}',
            "Partition replica list cannot be empty: t-0",
        ),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]},'
            ' {"topic": "t", "partition": 0, "replicas": [2]}]}',
            "duplicate topic partitions: t-0",
        ),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 1, 2]},'
            ' {"topic": "u", "partition": 3, "replicas": [4, 4]}]}',
            "may not contain duplicate entries: t-0 contains multiple entries for 1,2. "
            "u-3 contains multiple entries for 4",
        ),
    ],
)
def test_parse_reassignment_json_errors(document: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_reassignment_json(document)


def test_format_reassignment_json_is_kafkas() -> None:
    text = format_reassignment_json({tp("b", 0): [2], tp("a", 10): [1, 2], tp("a", 2): (3, 1)})
    assert text == (
        '{"version":1,"partitions":['
        '{"topic":"a","partition":2,"replicas":[3,1],"log_dirs":["any","any"]},'
        '{"topic":"a","partition":10,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"b","partition":0,"replicas":[2],"log_dirs":["any"]}]}'
    )
    assert format_reassignment_json({}) == '{"version":1,"partitions":[]}'


@pytest.mark.property
@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.builds(
            TopicPartition,
            st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True),
            st.integers(0, 1000),
        ),
        st.lists(st.integers(0, 1 << 30), min_size=1, max_size=6, unique=True),
        min_size=1,
        max_size=10,
    )
)
def test_reassignment_json_round_trip(assignment: dict[TopicPartition, list[int]]) -> None:
    assert parse_reassignment_json(format_reassignment_json(assignment)) == assignment


def test_topics_to_move_json() -> None:
    assert parse_topics_to_move_json('{"topics":[{"topic":"tp_re_01"}],"version":1}') == [
        "tp_re_01"
    ]
    assert parse_topics_to_move_json('{"topics":[{"topic":"b"},{"topic":"a"}]}') == ["b", "a"]
    assert parse_topics_to_move_json('{"version":1}') == []
    assert parse_topics_to_move_json(format_topics_to_move_json(["x", "y"])) == ["x", "y"]
    assert format_topics_to_move_json(["t"]) == '{"topics":[{"topic":"t"}],"version":1}'


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{", "not a valid JSON"),
        ('"t"', "must be an object"),
        ('{"topics":[],"version":3}', "Not supported version field value 3"),
        ('{"topics":{"topic":"t"}}', "'topics' must be a list"),
        ('{"topics":["t"]}', r"topics\[0\] must be an object"),
        ('{"topics":[{"name":"t"}]}', "string 'topic'"),
        ('{"topics":[{"topic":1}]}', "string 'topic'"),
        ('{"topics":[{"topic":"a"},{"topic":"b"},{"topic":"a"}]}', "duplicate entries: a"),
    ],
)
def test_topics_to_move_json_errors(document: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_topics_to_move_json(document)


# ------------------------------------------------------------------------- --generate


CURRENT = {
    **{tp("tp_re_01", p): [0] for p in range(5)},
    **{tp("two", p): [1, 2] for p in range(3)},
    tp("untouched", 0): [0, 1, 2],
}


def test_generate_reassignment_keeps_partition_count_and_rf() -> None:
    proposal = generate_reassignment(
        CURRENT, ["tp_re_01", "two"], [0, 1], start_index=0, replica_shift=0
    )
    assert set(proposal) == {tp("tp_re_01", p) for p in range(5)} | {tp("two", p) for p in range(3)}
    assert all(len(proposal[tp("tp_re_01", p)]) == 1 for p in range(5))
    assert all(sorted(proposal[tp("two", p)]) == [0, 1] for p in range(3))
    # the same placement as assign_replicas per topic
    assert {k.partition: v for k, v in proposal.items() if k.topic == "two"} == ta.assign_replicas(
        [0, 1], 3, 2, start_index=0, replica_shift=0
    )
    # leaders spread over the new brokers
    assert Counter(proposal[tp("tp_re_01", p)][0] for p in range(5)) == {0: 3, 1: 2}


def test_generate_reassignment_random_placement_stays_valid() -> None:
    for _ in range(20):
        proposal = generate_reassignment(CURRENT, ["untouched"], [3, 4, 5, 6])
        assert set(proposal) == {tp("untouched", 0)}
        replicas = proposal[tp("untouched", 0)]
        assert len(set(replicas)) == 3 and set(replicas) <= {3, 4, 5, 6}


def test_generate_reassignment_rack_aware() -> None:
    racks: dict[int, str | None] = {0: "a", 1: "a", 2: "b", 3: "b", 9: "z"}
    current = {tp("t", p): [0, 1] for p in range(8)}
    proposal = generate_reassignment(current, ["t"], [0, 1, 2, 3], racks)
    assert all(len({racks[b] for b in r}) == 2 for r in proposal.values())
    with pytest.raises(ta.RackAwareAssignmentError):
        generate_reassignment(current, ["t"], [0, 1, 2, 3, 4], racks)


def test_generate_reassignment_errors() -> None:
    with pytest.raises(ValueError, match="Broker list contains duplicate entries: \\[1\\]"):
        generate_reassignment(CURRENT, ["two"], [1, 1, 2])
    with pytest.raises(ValueError, match="Topic nope not found"):
        generate_reassignment(CURRENT, ["two", "nope"], [1, 2])
    with pytest.raises(ta.InvalidReplicationFactorError):
        generate_reassignment(CURRENT, ["untouched"], [1, 2])
    assert generate_reassignment(CURRENT, [], [1, 2]) == {}


# ----------------------------------------------------------------------- leader balance


def test_leader_imbalance_ratio() -> None:
    assignments = {
        tp("t", 0): [1, 2],
        tp("t", 1): [1, 2],
        tp("t", 2): [1, 3],
        tp("t", 3): [1, 3],
        tp("t", 4): [2, 1],
        tp("t", 5): [3, 1],
        tp("t", 6): [],
    }
    leaders = {tp("t", 0): 2, tp("t", 1): 1, tp("t", 2): 3, tp("t", 4): 2, tp("t", 5): 1}
    # broker 1 prefers 4 partitions: 2 led elsewhere, 1 without a leader (counts below only)
    assert leader_imbalance(assignments, leaders) == {1: 0.5, 2: 0.0, 3: 1.0}
    assert leader_imbalance({}, {}) == {}


def test_partitions_to_rebalance() -> None:
    assignments = {tp("t", p): [1, 2] for p in range(10)} | {tp("u", 0): [2, 1], tp("u", 1): [3, 1]}
    leaders = {tp("t", p): 2 if p == 0 else 1 for p in range(10)} | {tp("u", 0): 1, tp("u", 1): 1}
    live = {1, 2, 3}
    # broker 1: 1/10 = 10%, not above 10%; broker 2 and 3: 100%
    assert partitions_to_rebalance(assignments, leaders, live, 10) == [tp("u", 0), tp("u", 1)]
    # lower threshold: broker 1's partition 0 too
    assert partitions_to_rebalance(assignments, leaders, live, 9) == [
        tp("t", 0),
        tp("u", 0),
        tp("u", 1),
    ]
    # a dead preferred broker is skipped
    assert partitions_to_rebalance(assignments, leaders, {1, 2}, 9) == [tp("t", 0), tp("u", 0)]
    # preferred broker not in the ISR is skipped when ISRs are given
    isrs = {tp("t", 0): [2, 1], tp("u", 0): [1], tp("u", 1): [3, 1]}
    assert partitions_to_rebalance(assignments, leaders, live, 9, isrs=isrs) == [
        tp("t", 0),
        tp("u", 1),
    ]
    # balanced cluster: nothing to do
    balanced = {k: v[0] for k, v in assignments.items()}
    assert partitions_to_rebalance(assignments, balanced, live, 0) == []
    # partitions without a leader are never moved
    assert partitions_to_rebalance({tp("x", 0): [1]}, {}, live, 0) == []


@pytest.mark.property
@settings(max_examples=200, deadline=None)
@given(
    data=st.dictionaries(
        st.builds(TopicPartition, st.sampled_from(["a", "b"]), st.integers(0, 9)),
        st.tuples(
            st.lists(st.integers(1, 4), min_size=1, max_size=3, unique=True),
            st.one_of(st.none(), st.integers(1, 4)),
        ),
        max_size=20,
    ),
    live=st.frozensets(st.integers(1, 4)),
    threshold=st.integers(0, 100),
)
def test_rebalance_properties(
    data: dict[TopicPartition, tuple[list[int], int | None]], live: frozenset[int], threshold: int
) -> None:
    assignments = {k: v[0] for k, v in data.items()}
    leaders = {k: v[1] for k, v in data.items() if v[1] is not None}
    ratios = leader_imbalance(assignments, leaders)
    assert set(ratios) == {r[0] for r in assignments.values()}
    assert all(0.0 <= r <= 1.0 for r in ratios.values())
    chosen = partitions_to_rebalance(assignments, leaders, live, threshold)
    assert chosen == sorted(chosen)
    for k in chosen:
        preferred = assignments[k][0]
        assert preferred in live and leaders[k] != preferred
        assert ratios[preferred] > threshold / 100
    # threshold 100 never triggers
    assert partitions_to_rebalance(assignments, leaders, live, 100) == []
