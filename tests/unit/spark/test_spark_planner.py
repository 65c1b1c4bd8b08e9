"""The pure range planner and rate limiter of the Spark connector, and the offsets JSON."""

from __future__ import annotations

import pytest

from spark_connector.read.offsets import (
    TopicPartition,
    from_json_dict,
    parse_assign_json,
    parse_partition_json,
    serialize,
    to_json_dict,
)
from spark_connector.read.planner import OffsetRange, plan_ranges, rate_limit

pytestmark = pytest.mark.unit

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def _covered(ranges: list[OffsetRange]) -> dict[TopicPartition, list[int]]:
    out: dict[TopicPartition, list[int]] = {}
    for r in ranges:
        out.setdefault(r.topic_partition, []).extend(range(r.from_offset, r.until_offset))
    return out


def test_one_range_per_partition_sorted_and_empty_dropped() -> None:
    ranges = plan_ranges({B0: 5, A1: 0, A0: 3}, {B0: 9, A1: 0, A0: 10})
    assert ranges == [OffsetRange("a", 0, 3, 10), OffsetRange("b", 0, 5, 9)]


def test_missing_start_counts_as_zero() -> None:
    assert plan_ranges({}, {A0: 4}) == [OffsetRange("a", 0, 0, 4)]


def test_end_before_start_yields_nothing() -> None:
    assert plan_ranges({A0: 10}, {A0: 4}) == []


def test_max_records_per_partition_caps_every_range() -> None:
    ranges = plan_ranges({A0: 0, B0: 0}, {A0: 25, B0: 10}, max_records_per_partition=10)
    assert [r.size for r in ranges] == [8, 8, 9, 10]
    assert all(r.size <= 10 for r in ranges)
    assert _covered(ranges) == {A0: list(range(25)), B0: list(range(10))}


def test_min_partitions_splits_large_ranges_proportionally_like_spark() -> None:
    # Spark's KafkaOffsetRangeCalculator example: sizes 1, 2, 10000 with minPartitions 3.
    start = {A0: 0, A1: 0, B0: 0}
    end = {A0: 1, A1: 2, B0: 10_000}
    ranges = plan_ranges(start, end, min_partitions=3)
    assert ranges == [
        OffsetRange("a", 0, 0, 1),
        OffsetRange("a", 1, 0, 2),
        OffsetRange("b", 0, 0, 10_000),
    ]
    ranges = plan_ranges(start, end, min_partitions=4)
    assert [(r.topic, r.size) for r in ranges] == [("a", 1), ("a", 2), ("b", 5000), ("b", 5000)]


def test_min_partitions_always_reached_when_possible() -> None:
    for n in range(1, 30):
        ranges = plan_ranges({A0: 0, B0: 0}, {A0: 13, B0: 7}, min_partitions=n)
        assert len(ranges) >= min(n, 20)
        assert _covered(ranges) == {A0: list(range(13)), B0: list(range(7))}
    # Cannot split single records.
    assert len(plan_ranges({A0: 0}, {A0: 2}, min_partitions=5)) == 2


def test_plan_is_deterministic() -> None:
    start = {A0: 3, A1: 100, B0: 0}
    end = {A0: 1000, A1: 157, B0: 99}
    first = plan_ranges(start, end, min_partitions=11, max_records_per_partition=300)
    for _ in range(3):
        again = plan_ranges(
            dict(reversed(start.items())),
            dict(reversed(end.items())),
            min_partitions=11,
            max_records_per_partition=300,
        )
        assert again == first


def test_bad_planner_arguments() -> None:
    with pytest.raises(ValueError, match="min_partitions"):
        plan_ranges({}, {A0: 1}, min_partitions=0)
    with pytest.raises(ValueError, match="max_records_per_partition"):
        plan_ranges({}, {A0: 1}, max_records_per_partition=-1)


def test_rate_limit_proportional_to_backlog_and_exact_budget() -> None:
    end = rate_limit({A0: 0, A1: 0, B0: 0}, {A0: 100, A1: 300, B0: 0}, 40)
    assert end == {A0: 10, A1: 30, B0: 0}
    end = rate_limit({A0: 10, A1: 0}, {A0: 13, A1: 1000}, 10)
    assert sum(end[tp] - s for tp, s in {A0: 10, A1: 0}.items()) == 10
    assert end[A0] <= 13


def test_rate_limit_everything_fits() -> None:
    latest = {A0: 5, A1: 7}
    assert rate_limit({A0: 0, A1: 0}, latest, 100) == latest


def test_rate_limit_new_partition_starts_at_zero_and_remainders_deterministic() -> None:
    end = rate_limit({A0: 0}, {A0: 10, A1: 10, B0: 10}, 10)
    assert sum(end.values()) == 10
    assert end == {A0: 4, A1: 3, B0: 3}  # ties go to the first partition in order
    with pytest.raises(ValueError):
        rate_limit({}, {A0: 1}, 0)


def test_offsets_json_round_trip() -> None:
    offsets = parse_partition_json('{"b": {"0": 7}, "a": {"1": -1, "0": -2}}', "startingOffsets")
    assert offsets == {A0: -2, A1: -1, B0: 7}
    assert serialize(offsets) == '{"a":{"0":-2,"1":-1},"b":{"0":7}}'
    assert from_json_dict(to_json_dict(offsets)) == offsets


@pytest.mark.parametrize(
    "text",
    ['{"a": {"x": 1}}', '{"a": [1]}', '{"a": {"0": "1"}}', "[1]", "{bad", '{"a": {"-1": 1}}'],
)
def test_offsets_json_errors_name_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="endingOffsets"):
        parse_partition_json(text, "endingOffsets")


def test_assign_json() -> None:
    assert parse_assign_json('{"b": [0], "a": [1, 0]}') == [A0, A1, B0]
    with pytest.raises(ValueError, match="assign"):
        parse_assign_json('{"a": 0}')
    with pytest.raises(ValueError, match="assign"):
        parse_assign_json("{}")
