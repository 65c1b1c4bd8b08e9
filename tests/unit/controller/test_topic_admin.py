"""Topic administration rules (broker/controller/topic_admin.py) and the topic-name rule
(broker/topic_names.py)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.controller import topic_admin as ta
from broker.protocol.errors import ErrorCode
from broker.topic_names import InvalidTopicError, validate_topic_name

pytestmark = pytest.mark.unit


def test_assignment_spreads_leaders_and_followers_evenly() -> None:
    a = ta.assign_replicas([1, 2, 3], 6, 3, start_index=0, replica_shift=0)
    assert sorted(a) == list(range(6))
    assert all(len(set(r)) == 3 for r in a.values())
    assert Counter(r[0] for r in a.values()) == {1: 2, 2: 2, 3: 2}
    # Kafka's example: first replicas walk the broker list, followers shifted
    assert a[0] == [1, 2, 3]
    assert a[1] == [2, 3, 1]
    assert a[3][0] == 1 and a[3] != a[0]  # the shift grows every n partitions


def test_assignment_single_broker() -> None:
    assert ta.assign_replicas([7], 3, 1) == {0: [7], 1: [7], 2: [7]}


def test_assignment_continues_from_start_partition() -> None:
    a = ta.assign_replicas([1, 2], 2, 1, start_partition=3, start_index=0, replica_shift=0)
    assert sorted(a) == [3, 4]


@pytest.mark.parametrize(
    ("partitions", "rf", "code"),
    [
        (0, 1, ErrorCode.invalid_partitions),
        (1, 0, ErrorCode.invalid_replication_factor),
        (1, 4, ErrorCode.invalid_replication_factor),
    ],
)
def test_assignment_rejects_bad_counts(partitions: int, rf: int, code: ErrorCode) -> None:
    with pytest.raises(ta.KafkaError) as info:
        ta.assign_replicas([1, 2, 3], partitions, rf)
    assert info.value.code == code


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "ümlaut", "a/b"])
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["a", "my_topic.v1-2", "A" * 249, "__consumer_offsets"])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


def test_manual_assignment_validation() -> None:
    ta.validate_assignment({0: [1, 2], 1: [2, 1]}, [1, 2])
    with pytest.raises(ta.InvalidReplicaAssignmentError):
        ta.validate_assignment({0: [1, 1]}, [1, 2])
    with pytest.raises(ta.InvalidReplicaAssignmentError):
        ta.validate_assignment({0: [1], 2: [2]}, [1, 2])
    with pytest.raises(ta.InvalidReplicaAssignmentError):
        ta.validate_assignment({0: [1, 2], 1: [1]}, [1, 2])
    with pytest.raises(ta.InvalidReplicaAssignmentError):
        ta.validate_assignment({0: [9]}, [1, 2])


# ------------------------------------------------------------------ rack-aware assignment

KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
SIX_ON_THREE = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}


def _check_distribution(
    assignment: dict[int, list[int]],
    racks: dict[int, str],
    num_partitions: int,
    rf: int,
    *,
    leaders_even: bool = True,
    replicas_even: bool = True,
) -> None:
    """Kafka's checkReplicaDistribution: racks distinct per partition, leaders and replicas
    spread evenly over brokers."""
    num_racks = len(set(racks.values()))
    assert sorted(assignment) == list(range(num_partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert len({racks[b] for b in replicas}) == min(rf, num_racks)
    if leaders_even:
        leaders = Counter(r[0] for r in assignment.values())
        assert set(leaders.values()) == {num_partitions // len(racks)}
        assert set(leaders) == set(racks)
    if replicas_even:
        counts = Counter(b for r in assignment.values() for b in r)
        assert set(counts.values()) == {num_partitions * rf // len(racks)}


def test_rack_alternated_broker_list() -> None:
    assert ta.rack_alternated_brokers(KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]
    without_5 = {b: r for b, r in KAFKA_RACKS.items() if b != 5}
    assert ta.rack_alternated_brokers(without_5) == [0, 3, 1, 4, 2]
    assert ta.rack_alternated_brokers({}) == []


def test_rack_aware_assignment_matches_kafka_example() -> None:
    a = ta.assign_replicas(
        list(KAFKA_RACKS), 7, 3, start_index=0, replica_shift=0, racks=KAFKA_RACKS
    )
    assert a == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],  # followers shift after the first round
    }


def test_rack_aware_assignment_is_deterministic_with_fixed_start() -> None:
    args = (list(SIX_ON_THREE), 12, 3)
    a = ta.assign_replicas(*args, start_index=2, replica_shift=2, racks=SIX_ON_THREE)
    b = ta.assign_replicas(*args, start_index=2, replica_shift=2, racks=SIX_ON_THREE)
    assert a == b
    # the broker order given does not matter
    c = ta.assign_replicas(
        sorted(SIX_ON_THREE, reverse=True),
        12,
        3,
        start_index=2,
        replica_shift=2,
        racks=SIX_ON_THREE,
    )
    assert a == c


@pytest.mark.parametrize("start", [None, 0, 1, 2, 5])
@pytest.mark.parametrize(("partitions", "rf"), [(6, 3), (12, 2), (6, 2), (12, 3)])
def test_rack_aware_even_spread(start: int | None, partitions: int, rf: int) -> None:
    a = ta.assign_replicas(
        list(SIX_ON_THREE),
        partitions,
        rf,
        start_index=start,
        replica_shift=start,
        racks=SIX_ON_THREE,
    )
    _check_distribution(a, SIX_ON_THREE, partitions, rf)


def test_rack_aware_uneven_cases_still_use_distinct_racks() -> None:
    a = ta.assign_replicas(
        list(SIX_ON_THREE), 13, 3, start_index=0, replica_shift=0, racks=SIX_ON_THREE
    )
    _check_distribution(a, SIX_ON_THREE, 13, 3, leaders_even=False, replicas_even=False)
    uneven_racks = {0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    a = ta.assign_replicas(list(uneven_racks), 12, 3, racks=uneven_racks)
    _check_distribution(a, uneven_racks, 12, 3, replicas_even=False)
    three = {0: "rack1", 1: "rack2", 4: "rack3"}
    _check_distribution(ta.assign_replicas(list(three), 3, 2, racks=three), three, 3, 2)
    big = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1",
           6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack1", 11: "rack3"}  # fmt: skip
    _check_distribution(ta.assign_replicas(list(big), 96, 3, racks=big), big, 96, 3)


def test_rack_aware_expansion_numbers_from_start_partition() -> None:
    racks = {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}
    a = ta.assign_replicas(list(racks), 12, 2, start_partition=12, racks=racks)
    assert sorted(a) == list(range(12, 24))
    _check_distribution({p - 12: r for p, r in a.items()}, racks, 12, 2)


def test_more_replicas_than_racks_covers_every_rack() -> None:
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    for start in range(6):
        a = ta.assign_replicas(
            list(racks), 6, 5, start_index=start, replica_shift=start, racks=racks
        )
        for replicas in a.values():
            assert len(set(replicas)) == 5
            assert {racks[b] for b in replicas} == {"rack1", "rack2", "rack3"}
    a = ta.assign_replicas(list(racks), 6, 2, racks=racks)
    assert all(len({racks[b] for b in r}) == 2 for r in a.values())


def test_single_rack_degrades_to_spread_over_brokers() -> None:
    racks = dict.fromkeys(range(6), "rack1")
    a = ta.assign_replicas(list(racks), 6, 3, racks=racks)
    assert all(len(set(r)) == 3 for r in a.values())
    assert Counter(r[0] for r in a.values()) == dict.fromkeys(range(6), 1)


def test_rack_aware_skips_brokers_already_holding_a_replica() -> None:
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}
    a = ta.assign_replicas(list(racks), 6, 4, start_index=2, replica_shift=2, racks=racks)
    for replicas in a.values():
        assert len(replicas) == 4 and len(set(replicas)) == 4
        assert {racks[b] for b in replicas} == {"a", "b", "c"}
    # every replica on all brokers
    a = ta.assign_replicas(list(racks), 5, 5, start_index=0, replica_shift=0, racks=racks)
    assert all(sorted(r) == [0, 1, 2, 3, 4] for r in a.values())


def test_partial_rack_information_is_an_error() -> None:
    racks: dict[int, str | None] = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: None}
    with pytest.raises(ta.RackAwareAssignmentError, match="Not all brokers have rack information"):
        ta.assign_replicas([0, 1, 2, 3, 4], 10, 3, racks=racks)
    # a broker missing from the mapping has no rack either
    with pytest.raises(ta.RackAwareAssignmentError, match=r"\[9\]"):
        ta.assign_replicas([0, 1, 9], 1, 1, racks={0: "a", 1: "b"})
    # count checks come first, as in Kafka
    with pytest.raises(ta.InvalidPartitionsError):
        ta.assign_replicas([0, 1, 2, 3, 4], 0, 0, racks=racks)
    with pytest.raises(ta.InvalidReplicationFactorError):
        ta.assign_replicas([0, 1, 2, 3, 4], 10, 6, racks=racks)


@pytest.mark.parametrize("racks", [None, {}, {1: None, 2: None, 3: None}, {7: "elsewhere"}])
def test_without_racks_assignment_is_unchanged(racks: dict[int, str | None] | None) -> None:
    plain = ta.assign_replicas([1, 2, 3], 9, 2, start_index=1, replica_shift=2)
    assert ta.assign_replicas([1, 2, 3], 9, 2, start_index=1, replica_shift=2, racks=racks) == plain


def test_rack_unaware_matches_kafka_example() -> None:
    a = ta.assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0)
    assert a == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


@pytest.mark.property
@settings(max_examples=200, deadline=None)
@given(
    rack_of=st.dictionaries(
        st.integers(0, 20), st.sampled_from(["r1", "r2", "r3", "r4"]), min_size=1, max_size=10
    ),
    partitions=st.integers(1, 30),
    data=st.data(),
)
def test_rack_aware_properties(
    rack_of: dict[int, str], partitions: int, data: st.DataObject
) -> None:
    n = len(rack_of)
    rf = data.draw(st.integers(1, n))
    start = data.draw(st.integers(0, n - 1))
    a = ta.assign_replicas(
        list(rack_of), partitions, rf, start_index=start, replica_shift=start, racks=rack_of
    )
    num_racks = len(set(rack_of.values()))
    assert sorted(a) == list(range(partitions))
    for replicas in a.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(rack_of)
        # at most one replica per rack until every rack has one
        assert len({rack_of[b] for b in replicas}) == min(rf, num_racks)
    # leaders walk the rack-alternated list: no broker leads more than its share (rounded up)
    leaders = Counter(r[0] for r in a.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in rack_of) <= 1


# --- found by the protocol fuzzer (issue 17) --------------------------------------------------


def test_excessive_partition_count_is_refused_before_any_assignment_is_built() -> None:
    """CreatePartitions with count 2**31-2 made the broker build a 2**31-entry assignment
    (22 GB RSS, then killed); KRaft Kafka caps one request at 10,000 partitions."""
    with pytest.raises(ta.InvalidPartitionsError, match="excessively large") as info:
        ta.assign_replicas([1, 2, 3], 2**31 - 2, 1)
    assert info.value.code == ErrorCode.invalid_partitions
    assert len(ta.assign_replicas([1], ta.MAX_PARTITIONS_PER_REQUEST, 1)) == 10_000


def test_excessive_manual_assignment_is_refused() -> None:
    big = {p: [1] for p in range(ta.MAX_PARTITIONS_PER_REQUEST + 1)}
    with pytest.raises(ta.InvalidPartitionsError, match="excessively large"):
        ta.validate_assignment(big, [1])
