"""Topic administration rules (broker/controller/topic_admin.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from broker.controller import topic_admin as ta
from broker.protocol.errors import ErrorCode

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
    with pytest.raises(ta.InvalidTopicError):
        ta.validate_topic_name(name)


@pytest.mark.parametrize("name", ["a", "my_topic.v1-2", "A" * 249, "__consumer_offsets"])
def test_legal_topic_names(name: str) -> None:
    ta.validate_topic_name(name)


def test_config_validation_names_the_property() -> None:
    with pytest.raises(ta.InvalidConfigError, match="retention.ms"):
        ta.validate_configs({"retention.ms": "soon"})
    with pytest.raises(ta.InvalidConfigError, match="no.such.config"):
        ta.validate_configs({"no.such.config": "1"})
    assert ta.validate_configs({"cleanup.policy": "compact", "segment.ms": None}) == {
        "cleanup.policy": "compact"
    }


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
