"""Kafka offsets as Spark's Kafka source spells them: JSON dicts ``{"topic": {"0": 42}}``.

The same JSON shape serves three purposes, exactly as in spark-sql-kafka-0-10:

* ``startingOffsets`` / ``endingOffsets`` options, where ``-2`` means *earliest* and ``-1``
  means *latest* for one partition;
* ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` options, where the numbers are
  epoch milliseconds;
* streaming offsets that Spark checkpoints (always concrete offsets, never -1/-2).

Internally a set of partition offsets is a ``dict[TopicPartition, int]``. Everything here is
pure, immutable-in-spirit and picklable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

EARLIEST = -2
"""Sentinel offset meaning "the partition's log start offset" (Kafka's ``ListOffsets`` -2)."""
LATEST = -1
"""Sentinel offset meaning "the partition's high watermark" (Kafka's ``ListOffsets`` -1)."""


class TopicPartition(NamedTuple):
    """One Kafka topic-partition. Orders by (topic, partition), which fixes every plan's order."""

    topic: str
    partition: int


PartitionOffsets = dict[TopicPartition, int]
"""Offsets (or timestamps) per topic-partition."""


def parse_partition_json(text: str, option: str) -> PartitionOffsets:
    """Parse ``{"topic": {"0": 42, "1": -2}}`` into ``{TopicPartition: int}``.

    ``option`` names the option in error messages. Raises ``ValueError`` on malformed input.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f'option \'{option}\': expected JSON like {{"topicA":{{"0":23,"1":-1}}}}, '
            f"got {text!r} ({exc.msg})"
        ) from None
    return from_json_dict(data, option)


def from_json_dict(data: Any, option: str = "offsets") -> PartitionOffsets:
    """Convert an already-decoded JSON dict (as Spark hands streaming offsets back)."""
    if not isinstance(data, dict):
        raise ValueError(f"option '{option}': expected a JSON object of topics, got {data!r}")
    out: PartitionOffsets = {}
    for topic, parts in data.items():
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"option '{option}': bad topic name {topic!r}")
        if not isinstance(parts, dict):
            raise ValueError(
                f"option '{option}': topic {topic!r} must map to an object of "
                f"partition -> number, got {parts!r}"
            )
        for part, value in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise ValueError(
                    f"option '{option}': bad partition {part!r} for topic {topic!r}"
                ) from None
            if partition < 0:
                raise ValueError(f"option '{option}': negative partition {part!r} in {topic!r}")
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(
                    f"option '{option}': value for {topic}[{partition}] must be an integer, "
                    f"got {value!r}"
                )
            out[TopicPartition(topic, partition)] = value
    return out


def to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{TopicPartition: int}`` -> ``{"topic": {"0": 42}}`` with sorted topics/partitions."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def serialize(offsets: Mapping[TopicPartition, int]) -> str:
    """Deterministic JSON text of ``offsets`` (sorted keys, compact)."""
    return json.dumps(to_json_dict(offsets), separators=(",", ":"))


def parse_assign_json(text: str, option: str = "assign") -> list[TopicPartition]:
    """Parse the ``assign`` option: ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"option '{option}': expected JSON like {{\"topicA\":[0,1]}}, got {text!r} ({exc.msg})"
        ) from None
    if not isinstance(data, dict) or not data:
        raise ValueError(
            f"option '{option}': expected a non-empty JSON object like {{\"topicA\":[0,1]}}, "
            f"got {text!r}"
        )
    out: list[TopicPartition] = []
    for topic, parts in data.items():
        if not topic or not isinstance(parts, list):
            raise ValueError(f"option '{option}': topic {topic!r} must map to a list of partitions")
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise ValueError(f"option '{option}': bad partition {p!r} for topic {topic!r}")
            out.append(TopicPartition(topic, p))
    return sorted(set(out))
