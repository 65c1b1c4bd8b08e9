"""The controller's event queue and its single processing task (Kafka's
``ControllerEventManager``).

Theory of operation: every controller action is a :mod:`~broker.controller.events` value put
on one FIFO queue and processed, one at a time and to completion, by one task that calls the
controller's ``process(event)``. So handlers never interleave and may read and change the
controller's context without locks, even across ``await``. Notifications
(:meth:`ControllerEventManager.put`) are fire-and-forget: a failure is logged. Requests
(:meth:`ControllerEventManager.call`) carry a future: the caller gets the handler's result or
its exception; a request whose caller went away (future cancelled) is skipped.

Controller-moved policy (Kafka's ``ControllerMovedException`` handling): when a handler's
ZooKeeper write is fenced by a newer controller epoch (:class:`ControllerMovedError`), the
manager runs the ``on_controller_moved`` callback (the controller resigns), answers the
caller with :class:`NotControllerError`, and queues a :class:`~broker.controller.events.Reelect`.

Concurrency: event loop only; :meth:`start` creates the processing task, :meth:`stop` cancels
and awaits it and fails the requests still queued with :class:`NotControllerError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from broker.controller.events import ControllerEvent, ControllerRequest, Reelect
from broker.protocol.errors import ErrorCode, KafkaError
from broker.zk.interface import ControllerMovedError

log = logging.getLogger(__name__)

R = TypeVar("R")


class NotControllerError(KafkaError):
    """This broker is not (or no longer) the controller."""

    code = ErrorCode.not_controller


class ControllerEventManager:
    """One queue of controller events and the task that processes them in order."""

    def __init__(
        self,
        process: Callable[[ControllerEvent], Awaitable[object]],
        on_controller_moved: Callable[[], Awaitable[None]],
    ) -> None:
        self._process = process
        self._on_controller_moved = on_controller_moved
        self._queue: asyncio.Queue[tuple[ControllerEvent, asyncio.Future[Any] | None]]
        self._queue = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="controller-events"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while not self._queue.empty():
            _, fut = self._queue.get_nowait()
            if fut is not None and not fut.done():
                fut.set_exception(NotControllerError("the controller is shutting down"))

    def put(self, event: ControllerEvent) -> None:
        """Queue a notification (no result; a failure is logged)."""
        self._queue.put_nowait((event, None))

    async def call(self, event: ControllerRequest[R]) -> R:
        """Queue a request and wait for its result (or exception)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((event, fut))
        result: R = await fut
        return result

    @property
    def queue_size(self) -> int:
        return self._queue.qsize()

    async def drain(self) -> None:
        """Wait until every event queued so far has been processed."""
        await self._queue.join()

    async def _run(self) -> None:
        while True:
            event, fut = await self._queue.get()
            try:
                await self._handle(event, fut)
            finally:
                self._queue.task_done()

    async def _handle(self, event: ControllerEvent, fut: asyncio.Future[Any] | None) -> None:
        if fut is not None and fut.cancelled():
            return
        try:
            result = await self._process(event)
        except ControllerMovedError as exc:
            log.warning("controller moved while processing %s: %s", event, exc)
            await self._on_controller_moved()
            if fut is not None and not fut.done():
                fut.set_exception(NotControllerError(str(exc)))
            self.put(Reelect())
        except Exception as exc:
            if fut is not None and not fut.done():
                fut.set_exception(exc)
            else:
                log.exception("controller event %s failed", event)
        else:
            if fut is not None and not fut.done():
                fut.set_result(result)
