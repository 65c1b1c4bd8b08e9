"""The controller-to-broker channel (Kafka's ControllerChannelManager).

Theory of operation. The controller keeps one ordered queue per live broker and one sender
task per broker that drains it: it sends the request at the head of the queue, waits for
the response, calls the request's callback with it, and only then moves on to the next
request, so a broker sees LeaderAndIsr / UpdateMetadata / StopReplica requests in exactly
the order the controller issued them. A request that fails with ``ConnectionError`` or
``TimeoutError`` is retried (after ``retry_backoff_s``, on a fresh connection) until it
succeeds or the broker is removed, as Kafka's RequestSendThread does. Any other failure
(a request that cannot be encoded, a response that cannot be decoded, a local handler that
raises) is logged and the request is dropped without calling its callback, so one bad
request cannot wedge the queue.

Requests for the controller's own broker (``broker_id == controller_id``) go through the
same queue and sender task but are handed to ``local_handler`` instead of a socket, so they
keep the same ordering guarantees. That broker must still be added with ``add_broker`` (its
address is not used).

Concurrency: event loop only. ``add_broker``, ``remove_broker`` and ``send`` are synchronous
and must be called on the loop; the channel owns its sender tasks (one per broker) and
cancels and awaits them in ``close`` (tasks of removed brokers too).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker.network.client import BrokerConnection

log = logging.getLogger(__name__)

LocalHandler = Callable[[int, int, Any], Awaitable[Any]]
"""(api_key, api_version, request) -> response, for requests to the controller's broker."""

Callback = Callable[[Any], None]


class RequestChannel(Protocol):
    """What the controller needs of its channel (:class:`ControllerChannel`; tests capture
    requests with a fake)."""

    def add_broker(self, broker_id: int, host: str, port: int) -> None: ...

    def remove_broker(self, broker_id: int) -> None: ...

    def send(
        self,
        broker_id: int,
        api_key: int,
        api_version: int,
        request: Any,
        callback: Callback | None = None,
    ) -> None: ...

    async def close(self) -> None: ...


ChannelFactory = Callable[[int, LocalHandler], RequestChannel]
"""(controller id, local handler) -> a new channel, when a broker becomes controller."""


@dataclass(frozen=True, slots=True)
class _QueuedRequest:
    api_key: int
    api_version: int
    request: Any
    callback: Callback | None


@dataclass(slots=True)
class _BrokerState:
    """One broker's queue, sender task and connection (owned by the sender task)."""

    broker_id: int
    host: str
    port: int
    queue: collections.deque[_QueuedRequest] = field(default_factory=collections.deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    connection: BrokerConnection | None = None


class ControllerChannel:
    """Per-broker ordered request queues from the controller; one sender task per broker.

    ``queue_size`` counts the requests not yet answered, including the one being sent.
    """

    def __init__(
        self,
        controller_id: int,
        local_handler: LocalHandler,
        *,
        client_id: str = "millrace-controller",
        retry_backoff_s: float = 0.1,
        connect_timeout_s: float = 10.0,
        request_timeout_s: float = 30.0,
        security: Any = None,
    ) -> None:
        """``security``: the inter-broker listener's ``ClientSecurity`` (None: plaintext)."""
        self._security = security
        self.controller_id = controller_id
        self._local_handler = local_handler
        self._client_id = client_id
        self._retry_backoff_s = retry_backoff_s
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._brokers: dict[int, _BrokerState] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._closed = False

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        """Start the broker's queue and sender task; a no-op if it is already known (a new
        address is remembered and used from the next request on)."""
        if self._closed:
            log.debug("channel closed; not adding broker %d", broker_id)
            return
        state = self._brokers.get(broker_id)
        if state is not None:
            if (state.host, state.port) != (host, port):
                log.info(
                    "broker %d moved from %s:%d to %s:%d",
                    broker_id,
                    state.host,
                    state.port,
                    host,
                    port,
                )
                state.host, state.port = host, port
            return
        state = _BrokerState(broker_id, host, port)
        state.task = asyncio.get_running_loop().create_task(
            self._send_loop(state), name=f"controller-channel-sender broker={broker_id}"
        )
        self._brokers[broker_id] = state
        log.info(
            "controller %d: added broker %d at %s:%d", self.controller_id, broker_id, host, port
        )

    def remove_broker(self, broker_id: int) -> None:
        """Stop sending to the broker: cancel its sender task, drop its queued requests
        (their callbacks are never called) and close its connection."""
        state = self._brokers.pop(broker_id, None)
        if state is None:
            return
        dropped = len(state.queue)
        state.queue.clear()
        task = state.task
        if task is not None and not task.done():
            task.cancel()
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        log.info(
            "controller %d: removed broker %d (%d queued requests dropped)",
            self.controller_id,
            broker_id,
            dropped,
        )

    def send(
        self,
        broker_id: int,
        api_key: int,
        api_version: int,
        request: Any,
        callback: Callback | None = None,
    ) -> None:
        """Queue a request for the broker; ``callback(response)`` runs on the event loop once
        it is answered. A no-op (debug log) if the broker is unknown."""
        state = self._brokers.get(broker_id)
        if state is None:
            log.debug(
                "not sending api_key=%d v%d to unknown broker %d", api_key, api_version, broker_id
            )
            return
        state.queue.append(_QueuedRequest(api_key, api_version, request, callback))
        state.wakeup.set()

    def queue_size(self, broker_id: int) -> int:
        state = self._brokers.get(broker_id)
        return 0 if state is None else len(state.queue)

    @property
    def broker_ids(self) -> frozenset[int]:
        return frozenset(self._brokers)

    async def close(self) -> None:
        """Cancel and await every sender task; their connections are closed."""
        self._closed = True
        tasks = list(self._retiring)
        for broker_id in list(self._brokers):
            state = self._brokers[broker_id]
            if state.task is not None:
                tasks.append(state.task)
            self.remove_broker(broker_id)
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                log.warning("controller channel sender ended with %r", result)
        self._retiring.clear()

    async def _send_loop(self, state: _BrokerState) -> None:
        try:
            while True:
                while not state.queue:
                    state.wakeup.clear()
                    await state.wakeup.wait()
                item = state.queue[0]
                try:
                    if state.broker_id == self.controller_id:
                        response = await self._local_handler(
                            item.api_key, item.api_version, item.request
                        )
                    else:
                        response = await self._send_remote(state, item)
                except Exception:
                    log.exception(
                        "dropping api_key=%d v%d for broker %d after an unexpected error",
                        item.api_key,
                        item.api_version,
                        state.broker_id,
                    )
                    self._pop_head(state, item)
                    continue
                self._pop_head(state, item)
                if item.callback is not None:
                    try:
                        item.callback(response)
                    except Exception:
                        log.exception(
                            "callback for api_key=%d v%d to broker %d failed",
                            item.api_key,
                            item.api_version,
                            state.broker_id,
                        )
        finally:
            connection, state.connection = state.connection, None
            if connection is not None:
                await connection.close()

    @staticmethod
    def _pop_head(state: _BrokerState, item: _QueuedRequest) -> None:
        if state.queue and state.queue[0] is item:
            state.queue.popleft()

    async def _send_remote(self, state: _BrokerState, item: _QueuedRequest) -> Any:
        """Send ``item`` until it is answered, reconnecting after connection loss or timeout."""
        failures = 0
        while True:
            connection = state.connection
            try:
                if (
                    connection is None
                    or not connection.connected
                    or (connection.host, connection.port) != (state.host, state.port)
                ):
                    if connection is not None:
                        state.connection = None
                        await connection.close()
                    connection = BrokerConnection(
                        state.host,
                        state.port,
                        client_id=self._client_id,
                        connect_timeout_s=self._connect_timeout_s,
                        request_timeout_s=self._request_timeout_s,
                        security=self._security,
                    )
                    state.connection = connection
                    await connection.connect()
                response = await connection.request(item.api_key, item.api_version, item.request)
            except (ConnectionError, TimeoutError) as exc:
                failures += 1
                log_level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(
                    log_level,
                    "controller %d: api_key=%d v%d to broker %d at %s:%d failed (attempt %d), "
                    "retrying: %s",
                    self.controller_id,
                    item.api_key,
                    item.api_version,
                    state.broker_id,
                    state.host,
                    state.port,
                    failures,
                    exc,
                )
                if state.connection is not None:
                    stale, state.connection = state.connection, None
                    await stale.close()
                await asyncio.sleep(self._retry_backoff_s)
                continue
            if failures:
                log.info(
                    "controller %d: broker %d answered api_key=%d after %d retries",
                    self.controller_id,
                    state.broker_id,
                    item.api_key,
                    failures,
                )
            return response
