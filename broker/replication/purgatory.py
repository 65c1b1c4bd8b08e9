"""Delayed operations: requests that wait for a condition or a timeout (Kafka's purgatory).

A delayed operation (a long-poll Fetch waiting for ``min_bytes``, an acks=all Produce
waiting for the ISR) watches one or more keys (topic-partitions). Whoever changes the state
behind a key (an append, a high-watermark move) calls ``notify(key)``; the waiting
operations wake up, re-check their condition, and either complete or wait again until their
deadline. Instead of Kafka's timing wheel, deadlines are asyncio timeouts on the event loop.

Concurrency: event loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable


class Purgatory:
    """Keys -> futures of the operations watching them."""

    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[asyncio.Future[None]]] = {}

    def notify(self, key: Hashable) -> None:
        waiters = self._watchers.pop(key, None)
        if not waiters:
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def notify_all(self) -> None:
        for key in list(self._watchers):
            self.notify(key)

    @property
    def watched_keys(self) -> int:
        return len(self._watchers)

    async def wait_until(
        self,
        keys: Iterable[Hashable],
        condition: Callable[[], bool],
        timeout_s: float,
    ) -> bool:
        """Wait until ``condition()`` holds (re-checked after every notification on one of
        ``keys``) or the timeout expires. Returns the final value of ``condition()``."""
        keys = list(keys)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            fut: asyncio.Future[None] = loop.create_future()
            for key in keys:
                self._watchers.setdefault(key, set()).add(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                return condition()
            finally:
                for key in keys:
                    waiters = self._watchers.get(key)
                    if waiters is not None:
                        waiters.discard(fut)
                        if not waiters:
                            del self._watchers[key]
        return True
