"""Pure offset-range planning: no Spark, no Kafka client, no I/O, no clock.

Theory of operation (mirrors ``KafkaOffsetRangeCalculator`` and ``KafkaMicroBatchStream``
``rateLimit`` in spark-sql-kafka-0-10):

* :func:`plan_ranges` turns resolved start/end offsets per topic-partition into the list of
  half-open ranges ``[from_offset, until_offset)`` that become Spark input partitions.
  Empty ranges are dropped. With ``max_records_per_partition`` every range larger than the
  cap is cut into ``ceil(size / cap)`` near-equal pieces. With ``min_partitions``, if there
  are fewer ranges than asked for, ranges are split in proportion to their size exactly as
  Spark does (a range whose share rounds to one part stays whole, the rest divide the
  remaining parts); if rounding still leaves fewer than ``min_partitions`` ranges, the largest
  range (first in (topic, partition, from) order on ties) is halved until there are enough or
  every range holds one record. The output is sorted by (topic, partition, from_offset), so the
  same inputs always give the same plan (replayed micro-batches read the same records).
* :func:`rate_limit` shares a ``maxOffsetsPerTrigger`` budget across partitions in proportion
  to their backlog, using the largest-remainder method so the total never exceeds the budget
  (Spark rounds tiny shares up, which can overshoot; we do not).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from spark_connector.read.offsets import TopicPartition


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one topic-partition. Picklable value."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(self.until_offset - self.from_offset, 0)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def _split_even(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """Cut ``r`` into ``parts`` contiguous pieces whose sizes differ by at most one (the later
    pieces take the rounding, as Spark's integer division does)."""
    out: list[OffsetRange] = []
    remaining = r.size
    start = r.from_offset
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.until_offset)
        out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return [x for x in out if x.size > 0]


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round rounds half up.
    return max(math.floor(size / total * min_parts + 0.5), 1)


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Ranges for every partition in ``end`` (missing starts count as 0). Offsets must be
    concrete (no -1/-2). Partitions whose end is not after their start yield nothing."""
    if min_partitions is not None and min_partitions <= 0:
        raise ValueError(f"min_partitions must be positive, got {min_partitions}")
    if max_records_per_partition is not None and max_records_per_partition <= 0:
        raise ValueError(
            f"max_records_per_partition must be positive, got {max_records_per_partition}"
        )
    ranges = [
        OffsetRange(tp.topic, tp.partition, start.get(tp, 0), until)
        for tp, until in sorted(end.items())
    ]
    ranges = [r for r in ranges if r.size > 0]

    if max_records_per_partition is not None:
        capped: list[OffsetRange] = []
        for r in ranges:
            capped.extend(_split_even(r, math.ceil(r.size / max_records_per_partition)))
        ranges = capped

    if min_partitions is not None and 0 < len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        unsplit = [r for r in ranges if _part_count(r.size, total, min_partitions) == 1]
        unsplit_keys = set(unsplit)
        split_total = total - sum(r.size for r in unsplit)
        split_min = max(min_partitions - len(unsplit), 1)
        proportional: list[OffsetRange] = []
        for r in ranges:
            parts = 1 if r in unsplit_keys else _part_count(r.size, split_total, split_min)
            proportional.extend(_split_even(r, parts))
        ranges = proportional
        # Rounding can leave us short of min_partitions: halve the largest until enough.
        while len(ranges) < min_partitions:
            largest = max(ranges, key=lambda r: (r.size, -ranges.index(r)))
            if largest.size < 2:
                break
            i = ranges.index(largest)
            ranges[i : i + 1] = _split_even(largest, 2)

    return sorted(ranges)


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_offsets: int,
) -> dict[TopicPartition, int]:
    """End offsets that advance from ``start`` towards ``latest`` by at most ``max_offsets``
    records in total, shared in proportion to each partition's backlog.

    Partitions missing from ``start`` start at 0 (new partitions are read from the beginning).
    Partitions with no backlog keep their ``latest`` offset. Deterministic: remainders go to
    the largest fractional shares, ties broken by (topic, partition) order."""
    if max_offsets <= 0:
        raise ValueError(f"max_offsets must be positive, got {max_offsets}")
    backlog = {tp: latest[tp] - start.get(tp, 0) for tp in sorted(latest)}
    backlog = {tp: b for tp, b in backlog.items() if b > 0}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    shares: dict[TopicPartition, int] = {}
    remainders: list[tuple[float, TopicPartition]] = []
    for tp, b in backlog.items():
        exact = max_offsets * b / total
        whole = min(math.floor(exact), b)
        shares[tp] = whole
        remainders.append((exact - whole, tp))
    left = max_offsets - sum(shares.values())
    for _frac, tp in sorted(remainders, key=lambda x: (-x[0], x[1])):
        if left <= 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            left -= 1
    out = dict(latest)
    for tp, share in shares.items():
        out[tp] = start.get(tp, 0) + share
    return out
