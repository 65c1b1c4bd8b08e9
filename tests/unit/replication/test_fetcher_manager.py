"""The follower fetcher manager: one fetcher per leader, and the fetcher of a former leader
stops once its last partition moved away (Kafka's shutdownIdleFetcherThreads)."""

from __future__ import annotations

import asyncio

import pytest

from broker.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
NOWHERE = ("127.0.0.1", 1)  # nothing listens: the fetchers just retry


class IdleSink:
    def follower_fetch_position(self, tp: TopicPartition) -> tuple[int, int, int] | None:
        return None

    def follower_end_offset_for(self, tp: TopicPartition, epoch: int) -> tuple[int, int]:
        return epoch, 0

    def truncate_follower(self, tp: TopicPartition, offset: int, *, fully: bool = False) -> None:
        pass

    def append_as_follower(
        self, tp: TopicPartition, records: bytes, leader_hw: int, leader_log_start: int
    ) -> None:
        pass


def test_the_fetcher_of_a_former_leader_stops() -> None:
    async def run() -> None:
        manager = ReplicaFetcherManager(IdleSink(), FetcherConfig(broker_id=1, backoff_ms=10))
        manager.add_partition(A0, 2, NOWHERE, 0)
        manager.add_partition(A1, 2, NOWHERE, 0)
        assert manager.fetcher_count == 1
        manager.add_partition(A0, 3, NOWHERE, 1)  # leadership of A0 moved to broker 3
        assert manager.remove_idle_fetchers() == 0  # broker 2's fetcher still has A1
        manager.remove_partition(A1)
        assert manager.remove_idle_fetchers() == 1
        assert manager.fetcher_count == 1 and manager.fetching() == {A0: 3}
        await manager.shutdown()
        assert manager.fetcher_count == 0

    asyncio.run(asyncio.wait_for(run(), 10))
