"""Identifier types that must not be mixed up (DESIGN.md section 7)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NewType

BrokerId = NewType("BrokerId", int)
Offset = NewType("Offset", int)
LeaderEpoch = NewType("LeaderEpoch", int)
ProducerId = NewType("ProducerId", int)

NO_LEADER = -1
"""The leader of a partition that has none (partition-state znodes, Metadata, LeaderAndIsr)."""


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and a partition index; ``str()`` is Kafka's directory name ``topic-N``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def group_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions per topic, topics and partitions in first-seen order, without repeats."""
    out: dict[str, list[int]] = {}
    seen: set[TopicPartition] = set()
    for tp in partitions:
        if tp not in seen:
            seen.add(tp)
            out.setdefault(tp.topic, []).append(tp.partition)
    return out
