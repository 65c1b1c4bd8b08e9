"""Delayed operations: requests that wait for a condition or a timeout (Kafka's purgatory).

A delayed operation (a long-poll Fetch waiting for ``min_bytes``, an acks=all Produce
waiting for the ISR) watches one or more keys (topic-partitions). Whoever changes the state
behind a key (an append, a high-watermark move) calls ``notify(key)``; the waiting
operations wake up at once, re-check their condition, and either complete or wait again
until their deadline.

Deadlines come from the injected :class:`~broker.clock.Clock` (``monotonic()``), not from
the event loop's own time, so tests drive them: with a ``ManualClock`` a test advances the
clock and calls :meth:`Purgatory.expire`, which wakes every operation whose deadline has
passed; nothing sleeps. In production a loop timer (``call_later`` for the remaining time)
also wakes each operation at its deadline, so an expired operation answers within a
millisecond or so of it, as with Kafka's timing wheel.

Concurrency: event loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable

from broker.clock import SYSTEM_CLOCK, Clock


class Purgatory:
    """Keys -> futures of the operations watching them, with their clock deadlines."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._watchers: dict[Hashable, set[asyncio.Future[bool]]] = {}
        self._deadlines: dict[asyncio.Future[bool], float] = {}
        self._fired: dict[asyncio.Future[bool], set[Hashable]] = {}
        """Per waiting operation of :meth:`wait_for_changes`: the keys notified since it last
        looked (a key notified after the wake-up but before the operation ran is kept too)."""

    def notify(self, key: Hashable) -> int:
        """Wake the operations watching ``key``; returns how many were woken."""
        waiters = self._watchers.pop(key, None)
        if not waiters:
            return 0
        woken = 0
        fired = self._fired
        for fut in waiters:
            keys = fired.get(fut)
            if keys is not None:
                keys.add(key)
            if not fut.done():
                fut.set_result(True)
                woken += 1
        return woken

    def expire(self) -> int:
        """Wake every operation whose deadline (by the clock) has passed; returns how many."""
        now = self._clock.monotonic()
        woken = 0
        for fut, deadline in list(self._deadlines.items()):
            if deadline <= now and not fut.done():
                fut.set_result(False)
                woken += 1
        return woken

    def sizes_by_kind(self, kind_of: Callable[[Hashable], str]) -> dict[str, tuple[int, int]]:
        """Per kind of key (``kind_of(key)``, e.g. Produce or Fetch): (watch entries, waiting
        operations), Kafka's PurgatorySize and NumDelayedOperations."""
        watches: dict[str, int] = {}
        operations: dict[str, set[asyncio.Future[bool]]] = {}
        for key, waiters in self._watchers.items():
            kind = kind_of(key)
            watches[kind] = watches.get(kind, 0) + len(waiters)
            operations.setdefault(kind, set()).update(w for w in waiters if not w.done())
        return {kind: (watches[kind], len(operations[kind])) for kind in watches}

    @property
    def watched_keys(self) -> int:
        return len(self._watchers)

    @property
    def waiting(self) -> int:
        """Operations waiting now."""
        return len(self._deadlines)

    async def wait_until(
        self,
        keys: Iterable[Hashable],
        condition: Callable[[], bool],
        timeout_s: float,
        *,
        recheck_at_deadline: bool = True,
    ) -> bool:
        """Wait until ``condition()`` holds (re-checked after every notification on one of
        ``keys``) or the timeout expires. Returns the final value of ``condition()``.

        With ``recheck_at_deadline=False`` the condition is not checked again when the
        deadline passes without a notification since the last check (nothing the caller
        watches changed): False is returned at once. A long-poll fetch uses this to skip
        re-reading every partition of an idle request at its deadline."""
        keys = list(keys)
        deadline = self._clock.monotonic() + max(timeout_s, 0.0)
        while not condition():
            notified = await self._wait_once(keys, deadline, None)
            if notified is None or (not notified and not recheck_at_deadline):
                return False
        return True

    async def wait_for_changes(
        self,
        keys: Iterable[Hashable],
        changed: Callable[[set[Hashable]], bool],
        timeout_s: float,
    ) -> bool:
        """Wait until ``changed(notified)`` holds or the timeout expires; ``notified`` is the
        set of ``keys`` notified since the previous call (never empty). The caller has just
        checked its condition, so nothing is checked before the first notification, nor at
        a deadline with no notification since the last check (False is returned at once).

        A long-poll fetch of thousands of partitions uses this to re-read only the
        partitions that changed (Kafka's DelayedFetch looks at each partition's position;
        re-reading all of them on every notification made an idle follower fetch cost
        quadratic in its partitions while ISRs changed)."""
        keys = list(keys)
        deadline = self._clock.monotonic() + max(timeout_s, 0.0)
        while True:
            notified: set[Hashable] = set()
            woken = await self._wait_once(keys, deadline, notified)
            if not woken or not notified:
                return False
            if changed(notified):
                return True

    async def _wait_once(
        self, keys: list[Hashable], deadline: float, notified: set[Hashable] | None
    ) -> bool | None:
        """Watch ``keys`` until a notification (True) or ``deadline`` (False); None if the
        deadline has already passed. ``notified``, if given, collects the keys notified."""
        remaining = deadline - self._clock.monotonic()
        if remaining <= 0:
            return None
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._watchers.setdefault(key, set()).add(fut)
        self._deadlines[fut] = deadline
        if notified is not None:
            self._fired[fut] = notified
        timer = asyncio.get_running_loop().call_later(remaining, _wake, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            del self._deadlines[fut]
            self._fired.pop(fut, None)
            for key in keys:
                waiters = self._watchers.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._watchers[key]


def _wake(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
