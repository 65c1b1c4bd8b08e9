"""Producer id allocation: blocks of ids reserved in ZooKeeper (``/latest_producer_id_block``,
updated with a conditional write), handed out one at a time, so ids never repeat across
restarts or brokers (as ZooKeeper-mode Kafka's ProducerIdManager).

Concurrency: event loop thread; a lock serialises block fetches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from broker.protocol.errors import ErrorCode, KafkaError

BLOCK_SIZE = 1000


class ProducerIdManager:
    """Hands out producer ids from blocks that ``allocate_block`` reserves."""

    def __init__(self, allocate_block: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self._allocate_block = allocate_block
        self._next = 0
        self._end = -1  # inclusive
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next > self._end:
                try:
                    start, end = await self._allocate_block()
                except Exception as exc:
                    raise KafkaError(
                        f"cannot allocate producer ids: {exc}", ErrorCode.coordinator_not_available
                    ) from exc
                self._next, self._end = start, end
            pid = self._next
            self._next += 1
            return pid
