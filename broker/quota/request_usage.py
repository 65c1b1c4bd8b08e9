"""What one request of a client under quotas uses, and how it is recorded: its size (produce
bytes), the event-loop time its handler takes (request percentage) and, for fetches, the
response size (consume bytes). Kafka's ``KafkaApis`` does the same per API: produce records
the request size, fetch the response size (and answers a throttled fetch with no data), and
every response records the handler time (``sendResponseMaybeThrottle``).

Handler time is the time the handler's coroutine runs, step by step (:class:`TimedHandler`
drives it and adds up each step): time spent waiting (a produce waiting for its replicas, a
fetch's long poll) is not the broker's work, as Kafka does not count time in purgatory.

A throttled client's response carries ``throttle_time_ms`` and its connection is muted
(reads nothing) for that long after the response is written (KIP-219):
:meth:`RequestUsage.finish` sets ``ConnectionInfo.throttle_ms``, which the connection takes.

Concurrency: one per request, on the broker's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from broker.quota.entities import sanitize
from broker.quota.manager import NANOS_TO_PERCENTAGE_PER_SECOND, ClientQuotas

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.protocol.response import ConnectionInfo

__all__ = ["RequestUsage", "TimedHandler"]

T = TypeVar("T")


class RequestUsage:
    """One request's quota accounting (see the module docstring)."""

    __slots__ = (
        "_clock",
        "_conn",
        "_quotas",
        "_step_start_ns",
        "client_id",
        "handler_ns",
        "recorded",
        "request_bytes",
        "user",
    )

    def __init__(
        self,
        quotas: ClientQuotas,
        clock: Clock,
        conn: ConnectionInfo,
        client_id: str | None,
        request_bytes: int,
    ) -> None:
        self._quotas = quotas
        self._clock = clock
        self._conn = conn
        principal = conn.principal
        self.user = sanitize(principal[principal.find(":") + 1 :])
        self.client_id = sanitize(client_id or "")
        self.request_bytes = request_bytes
        self.handler_ns = 0
        self._step_start_ns = 0  # a step running since then (0: none)
        self.recorded = False

    def now_ms(self) -> int:
        return int(self._clock.monotonic() * 1000)

    def elapsed_ns(self) -> int:
        """The handler time so far, the step running now included."""
        running = self._step_start_ns
        return self.handler_ns + (time.perf_counter_ns() - running if running else 0)

    def record_produce(self) -> int:
        """Record the request's bytes and handler time; the throttle time (ms), which the
        connection is muted for."""
        now = self.now_ms()
        bandwidth = self._quotas.produce.record(self.user, self.client_id, self.request_bytes, now)
        return self.finish(max(bandwidth, self._record_request(now)))

    def fetch_window_bytes(self) -> int | None:
        """The most a fetch may return without certainly being throttled, or None."""
        value = self._quotas.fetch.max_value_in_window(self.user, self.client_id)
        return None if value is None else int(min(value, 2**31 - 1))

    def record_fetch(self, response_bytes: int) -> int:
        """Record the response's bytes and the handler time; the throttle time (ms). A
        throttled fetch answers no data, so its bytes are taken back (Kafka's
        ``unrecordQuotaSensor``)."""
        now = self.now_ms()
        fetch = self._quotas.fetch
        bandwidth = fetch.record(self.user, self.client_id, response_bytes, now)
        throttle = max(bandwidth, self._record_request(now))
        if throttle > 0:
            fetch.unrecord(self.user, self.client_id, response_bytes, now)
        return self.finish(throttle)

    def record_request(self) -> int:
        """Record the handler time alone (every API but produce and fetch)."""
        return self.finish(self._record_request(self.now_ms()))

    def _record_request(self, now_ms: int) -> int:
        self.recorded = True
        percent = self.elapsed_ns() * NANOS_TO_PERCENTAGE_PER_SECOND
        return self._quotas.request.record(self.user, self.client_id, percent, now_ms)

    def finish(self, throttle_ms: int) -> int:
        """Mark the request recorded; a throttle mutes the connection after the response."""
        self.recorded = True
        if throttle_ms > 0:
            self._conn.throttle(throttle_ms)
        return throttle_ms

    def timed(self, handler: Awaitable[T]) -> TimedHandler[T]:
        return TimedHandler(handler, self)


class TimedHandler(Awaitable[T]):
    """Awaits a handler (its coroutine), adding the time of each of its steps to
    ``usage.handler_ns``. What the coroutine yields (the futures it waits for, bare yields)
    passes through unchanged to whoever drives this (a task, or the connection's eager
    start), and what is sent or thrown back goes to the coroutine."""

    __slots__ = ("_handler", "_usage")

    def __init__(self, handler: Awaitable[T], usage: RequestUsage) -> None:
        self._handler = handler
        self._usage = usage

    def __await__(self) -> Generator[Any, Any, T]:
        coro = self._handler.__await__()
        usage = self._usage
        clock = time.perf_counter_ns
        send: Any = None
        error: BaseException | None = None
        while True:
            start = usage._step_start_ns = clock()
            try:
                yielded = coro.send(send) if error is None else coro.throw(error)
            except StopIteration as stop:
                usage.handler_ns += clock() - start
                usage._step_start_ns = 0
                return stop.value
            except BaseException:
                usage.handler_ns += clock() - start
                usage._step_start_ns = 0
                raise
            usage.handler_ns += clock() - start
            usage._step_start_ns = 0
            try:
                send = yield yielded
                error = None
            except BaseException as exc:  # noqa: BLE001 - the coroutine takes it (cancellation)
                send = None
                error = exc
