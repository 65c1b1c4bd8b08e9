"""The controller's watch of broker processes (broker/controller/liveness.py), against real
sockets on 127.0.0.1: a listener that closes and stops listening is reported dead once, a
listener that comes back is reported back, and a peer that keeps its connection open (a
paused process) or cannot be reached is never reported."""

from __future__ import annotations

import asyncio
import socket

import pytest

from broker.controller.liveness import BrokerLivenessWatch
from tests.harness.waiting import wait_for_async

pytestmark = pytest.mark.unit


class Listener:
    """A TCP listener on a fixed port whose connections can all be dropped."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        async def accept(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.writers.append(w)

        self.server = await asyncio.start_server(accept, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def die(self) -> None:
        """As the kernel does for a killed process: close the listener and every socket."""
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.transport.abort()
        self.writers.clear()
        await self.server.wait_closed()


class Reports:
    def __init__(self) -> None:
        self.dead: list[tuple[int, int]] = []
        self.back: list[tuple[int, int]] = []
        self.changed = asyncio.Event()

    def on_dead(self, broker_id: int, epoch: int) -> None:
        self.dead.append((broker_id, epoch))
        self.changed.set()

    def on_back(self, broker_id: int, epoch: int) -> None:
        self.back.append((broker_id, epoch))
        self.changed.set()

    async def wait(self, timeout_s: float = 10.0) -> None:
        await asyncio.wait_for(self.changed.wait(), timeout_s)
        self.changed.clear()


def watch_for(reports: Reports) -> BrokerLivenessWatch:
    return BrokerLivenessWatch(reports.on_dead, reports.on_back, back_after_s=0.2)


async def _wait_connected(listener: Listener) -> None:
    await wait_for_async(lambda: listener.writers, 30, "the watch connected")


def test_a_process_that_dies_is_reported_once_and_its_return_too() -> None:
    async def scenario() -> None:
        reports = Reports()
        listener = Listener()
        await listener.start()
        watch = watch_for(reports)
        watch.watch(7, 42, "127.0.0.1", listener.port)
        try:
            await _wait_connected(listener)
            await listener.die()
            await reports.wait()
            assert reports.dead == [(7, 42)] and reports.back == []
            await asyncio.sleep(0.5)  # still refused: not reported again
            assert reports.dead == [(7, 42)]
            back = Listener(listener.port)
            await back.start()
            await reports.wait()
            assert reports.back == [(7, 42)]
            await back.die()
        finally:
            await watch.close()

    asyncio.run(scenario())


def test_a_connection_that_stays_open_is_never_reported() -> None:
    """A paused process keeps its sockets (and the kernel accepts for its listener)."""

    async def scenario() -> None:
        reports = Reports()
        listener = Listener()
        await listener.start()
        watch = watch_for(reports)
        watch.watch(1, 1, "127.0.0.1", listener.port)
        try:
            await _wait_connected(listener)
            await asyncio.sleep(0.5)
            assert reports.dead == [] and reports.back == []
        finally:
            await watch.close()
            await listener.die()

    asyncio.run(scenario())


def test_a_closed_idle_connection_of_a_live_process_is_not_a_death() -> None:
    async def scenario() -> None:
        reports = Reports()
        listener = Listener()
        await listener.start()
        watch = watch_for(reports)
        watch.watch(1, 1, "127.0.0.1", listener.port)
        try:
            await _wait_connected(listener)
            first = listener.writers.pop()
            first.transport.abort()  # the broker closes an idle connection; it still listens
            await _wait_connected(listener)  # the watch connected again
            assert reports.dead == []
        finally:
            await watch.close()
            await listener.die()

    asyncio.run(scenario())


def test_an_unanswered_connect_is_inconclusive() -> None:
    """A connect that neither succeeds nor is refused (a dead host, dropped packets, a
    listener too busy to accept) is never taken for a death."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(0)  # never accepts: once its queue is full, SYNs are dropped
        port = busy.getsockname()[1]
        fillers = []
        for _ in range(4):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(("127.0.0.1", port))
            fillers.append(f)

        async def scenario() -> None:
            reports = Reports()
            watch = BrokerLivenessWatch(
                reports.on_dead, reports.on_back, connect_timeout_s=0.2, inconclusive_retry_s=0.1
            )
            watch.watch(1, 1, "127.0.0.1", port)
            try:
                await asyncio.sleep(1.0)
                assert reports.dead == []
            finally:
                await watch.close()

        try:
            asyncio.run(scenario())
        finally:
            for f in fillers:
                f.close()


def test_unwatch_and_a_new_epoch_replace_the_watch() -> None:
    async def scenario() -> None:
        reports = Reports()
        listener = Listener()
        await listener.start()
        watch = watch_for(reports)
        try:
            watch.watch(3, 1, "127.0.0.1", listener.port)
            watch.watch(3, 1, "127.0.0.1", listener.port)  # the same: a no-op
            assert watch.watched == {3: 1}
            watch.watch(3, 2, "127.0.0.1", listener.port)  # a restart: the new epoch
            assert watch.watched == {3: 2}
            watch.keep_only(set())
            assert watch.watched == {}
            await listener.die()
            await asyncio.sleep(0.3)
            assert reports.dead == []
        finally:
            await watch.close()

    asyncio.run(scenario())


def test_a_registration_never_seen_listening_gets_a_grace_period() -> None:
    """A Kafka broker registers before it listens: its refusals count only once the watch
    is ``unseen_grace_s`` old (a broker that died before ever listening)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def scenario() -> None:
        reports = Reports()
        watch = BrokerLivenessWatch(
            reports.on_dead, reports.on_back, back_after_s=0.2, unseen_grace_s=1.0
        )
        watch.watch(5, 9, "127.0.0.1", port)
        try:
            await asyncio.sleep(0.5)
            assert reports.dead == []  # within the grace period
            listener = Listener(port)
            await listener.start()  # it listens at last
            await _wait_connected(listener)
            await asyncio.sleep(0.7)
            assert reports.dead == []
            await listener.die()
            await reports.wait()  # seen listening: reported at once
            assert reports.dead == [(5, 9)]
            watch.watch(6, 1, "127.0.0.1", port)  # never listens
            await reports.wait()
            assert reports.dead == [(5, 9), (6, 1)]
            # a registration found at fail-over (it may be the dead controller's): no grace
            started = asyncio.get_running_loop().time()
            watch.watch(7, 1, "127.0.0.1", port, grace=False)
            await reports.wait()
            assert reports.dead[-1] == (7, 1)
            assert asyncio.get_running_loop().time() - started < 0.9
        finally:
            await watch.close()

    asyncio.run(scenario())
