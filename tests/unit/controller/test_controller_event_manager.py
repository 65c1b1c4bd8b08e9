"""The controller's event queue (broker/controller/event_manager.py): ordering, results and
exceptions through futures, logged notification failures, the controller-moved policy, and
shutdown."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from broker.controller.event_manager import ControllerEventManager, NotControllerError
from broker.controller.events import (
    ControllerEvent,
    ControllerRequest,
    Reelect,
    Startup,
)
from broker.protocol.errors import ErrorCode
from broker.zk.interface import ControllerMovedError

pytestmark = pytest.mark.unit


@dataclass(frozen=True, slots=True)
class Note(ControllerEvent):
    n: int


@dataclass(frozen=True, slots=True)
class Ask(ControllerRequest[int]):
    n: int


class Recorder:
    def __init__(self) -> None:
        self.seen: list[ControllerEvent] = []
        self.moved = 0
        self.fail_with: dict[int, Exception] = {}

    async def process(self, event: ControllerEvent) -> object:
        self.seen.append(event)
        await asyncio.sleep(0)  # handlers may await: still one at a time
        n = getattr(event, "n", None)
        if n is not None and n in self.fail_with:
            raise self.fail_with[n]
        return None if n is None else n * 10

    async def on_moved(self) -> None:
        self.moved += 1


def test_events_run_in_order_and_requests_get_results() -> None:
    async def body() -> None:
        rec = Recorder()
        manager = ControllerEventManager(rec.process, rec.on_moved)
        manager.start()
        manager.put(Note(1))
        manager.put(Note(2))
        assert await manager.call(Ask(3)) == 30
        await manager.drain()
        assert rec.seen == [Note(1), Note(2), Ask(3)]
        await manager.stop()

    asyncio.run(body())


def test_exceptions_go_to_the_caller_and_notifications_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        rec = Recorder()
        rec.fail_with = {1: RuntimeError("boom"), 2: ValueError("bad request")}
        manager = ControllerEventManager(rec.process, rec.on_moved)
        manager.start()
        manager.put(Note(1))
        with pytest.raises(ValueError, match="bad request"):
            await manager.call(Ask(2))
        assert await manager.call(Ask(4)) == 40  # the queue keeps going
        await manager.stop()

    with caplog.at_level(logging.ERROR, logger="broker.controller.event_manager"):
        asyncio.run(body())
    assert any("Note(n=1) failed" in r.getMessage() for r in caplog.records)


def test_controller_moved_resigns_answers_not_controller_and_reelects() -> None:
    async def body() -> None:
        rec = Recorder()
        rec.fail_with = {5: ControllerMovedError("epoch znode version changed")}
        manager = ControllerEventManager(rec.process, rec.on_moved)
        manager.start()
        with pytest.raises(NotControllerError) as info:
            await manager.call(Ask(5))
        assert info.value.code == ErrorCode.not_controller
        await manager.drain()
        assert rec.moved == 1
        assert rec.seen[-1] == Reelect()
        await manager.stop()

    asyncio.run(body())


def test_cancelled_requests_are_skipped_and_stop_fails_the_queued_ones() -> None:
    async def body() -> None:
        rec = Recorder()
        manager = ControllerEventManager(rec.process, rec.on_moved)
        waiter = asyncio.ensure_future(manager.call(Ask(1)))
        await asyncio.sleep(0)
        waiter.cancel()
        manager.start()
        await manager.drain()
        assert rec.seen == []
        await manager.stop()
        pending = asyncio.ensure_future(manager.call(Startup()))
        await asyncio.sleep(0)
        await manager.stop()  # not started: the queued request is failed, not left hanging
        with pytest.raises(NotControllerError, match="shutting down"):
            await pending

    asyncio.run(body())
