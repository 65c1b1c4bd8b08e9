"""The broker-side metadata cache: live brokers, topics, partition leadership.

Filled only from the controller's UpdateMetadata requests (``api/inter_broker.py``, which
also removes deleted topics); this broker's controller role also records the controller id
it sees when it takes part in an election. Metadata, DescribeCluster, FindCoordinator and
the admin handlers answer from it.

Until the first UpdateMetadata arrives (a broker just started, or restarted faster than its
old ZooKeeper session expired) the cache is empty but not *initialized*: it knows nothing,
which is not the same as knowing that a topic does not exist. :meth:`wait_initialized`
lets the Metadata handler wait a little for the controller rather than tell clients that
their topic is gone (librdkafka then fails every produce to it at once).

Concurrency: read and written only on the broker's event loop thread; values are immutable
and replaced whole, so a handler that holds one never sees it change.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field

from broker.types import BrokerId


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker: ``host``/``port`` of its inter-broker listener, and every advertised
    endpoint as (listener, host, port), so a client is told the addresses of the listener it
    connected to (as Kafka's Metadata does)."""

    id: BrokerId
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def address_for(self, listener: str) -> tuple[str, int]:
        """(host, port) on ``listener``; the inter-broker address if it has no such one."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    internal: bool = False


class MetadataCache:
    """What this broker believes about the cluster."""

    def __init__(self, cluster_id: str = "") -> None:
        self.cluster_id = cluster_id
        self.controller_id: int = -1
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._initialized = asyncio.Event()

    @property
    def initialized(self) -> bool:
        """Whether the controller has sent this broker its view at least once."""
        return self._initialized.is_set()

    def mark_initialized(self) -> None:
        self._initialized.set()

    async def wait_initialized(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the first UpdateMetadata; returns whether it came."""
        if not self._initialized.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._initialized.wait()
        return self._initialized.is_set()

    # brokers
    def set_brokers(self, brokers: list[BrokerInfo]) -> None:
        self._brokers = {b.id: b for b in brokers}

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.id)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    # topics
    def update_partitions(
        self, name: str, topic_id: uuid.UUID | None, partitions: list[PartitionInfo]
    ) -> None:
        """Merge changed partition states into a topic (creating it if new)."""
        current = self._topics.get(name)
        merged = dict(current.partitions) if current is not None else {}
        for p in partitions:
            merged[p.partition] = p
        if topic_id is None:
            topic_id = current.topic_id if current is not None else uuid.UUID(int=0)
        self._topics[name] = TopicInfo(name, topic_id, merged, name.startswith("__"))

    def remove_topic(self, name: str) -> None:
        self._topics.pop(name, None)

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self._topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def topics(self) -> list[TopicInfo]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        t = self._topics.get(topic)
        return None if t is None else t.partitions.get(partition)
