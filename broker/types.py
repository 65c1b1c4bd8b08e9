"""Identifier types that must not be mixed up (DESIGN.md section 7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

BrokerId = NewType("BrokerId", int)
Offset = NewType("Offset", int)
LeaderEpoch = NewType("LeaderEpoch", int)
ProducerId = NewType("ProducerId", int)


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and a partition index; ``str()`` is Kafka's directory name ``topic-N``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
