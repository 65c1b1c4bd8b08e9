"""Watching broker processes for death faster than their ZooKeeper sessions expire.

Theory of operation (the design and its safety argument: ``docs/failover.md``). For each
watched broker one task holds an idle TCP connection to the broker's inter-broker listener
(completing the TLS handshake on a TLS listener; nothing is ever sent). When the peer ends
it (end-of-file, reset), the task *probes* by connecting again:

* connected: the process listens (it closed an idle connection): watch again;
* refused ``confirm_refusals`` times in a row, ``probe_interval_s`` apart: nothing listens on
  the port, the process is gone: ``on_dead(broker_id, epoch)``, once. A registration that was
  never seen listening is reported only once it is ``unseen_grace_s`` old: a Kafka broker
  registers before it listens;
* timed out or unreachable: a dead host, a partition or a slow broker: inconclusive, never
  reported; probed again every ``inconclusive_retry_s``.

After a death report the task keeps probing (every ``dead_retry_s``); a connection that then
stays open for ``back_after_s`` reports ``on_back(broker_id, epoch)`` (the report was false,
or a restarted process listens; the controller tells the two apart by the registration's
epoch). The callbacks only enqueue controller events: the controller decides.

Concurrency: event loop only. ``watch``, ``unwatch`` are synchronous; each watch owns one
task, cancelled by ``unwatch``, by a ``watch`` with another epoch or address, and by
``close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BrokerLivenessWatch", "LivenessCallback"]

log = logging.getLogger(__name__)

LivenessCallback = Callable[[int, int], None]
"""(broker id, broker epoch) -> None; called on the event loop."""


class _Probe(enum.Enum):
    UP = "up"
    REFUSED = "refused"
    INCONCLUSIVE = "inconclusive"


@dataclass(slots=True)
class _Watch:
    broker_id: int
    epoch: int
    host: str
    port: int
    reported_dead: bool
    seen_up: bool = False
    since: float = 0.0
    task: asyncio.Task[None] | None = None


class BrokerLivenessWatch:
    """One idle connection per watched broker; reports processes that died and came back."""

    def __init__(
        self,
        on_dead: LivenessCallback,
        on_back: LivenessCallback,
        *,
        ssl_context: ssl.SSLContext | None = None,
        confirm_refusals: int = 2,
        probe_interval_s: float = 0.05,
        inconclusive_retry_s: float = 0.5,
        dead_retry_s: float = 0.25,
        back_after_s: float = 1.0,
        connect_timeout_s: float = 1.0,
        unseen_grace_s: float = 10.0,
    ) -> None:
        self._on_dead = on_dead
        self._on_back = on_back
        self._ssl_context = ssl_context
        self._confirm_refusals = max(1, confirm_refusals)
        self._probe_interval_s = probe_interval_s
        self._inconclusive_retry_s = inconclusive_retry_s
        self._dead_retry_s = dead_retry_s
        self._back_after_s = back_after_s
        self._connect_timeout_s = connect_timeout_s
        self._unseen_grace_s = unseen_grace_s
        self._watches: dict[int, _Watch] = {}
        self._closed = False

    @property
    def watched(self) -> dict[int, int]:
        """broker id -> the epoch watched."""
        return {b: w.epoch for b, w in self._watches.items()}

    def watch(
        self,
        broker_id: int,
        epoch: int,
        host: str,
        port: int,
        *,
        dead: bool = False,
        grace: bool = True,
    ) -> None:
        """Watch the broker's process (registered with ``epoch`` at ``host:port``); with
        ``dead``, it is already known dead (fenced) and only its return is reported; without
        ``grace``, a registration never seen listening is reported at once (one that was
        there before this controller, rather than one just made). A no-op when the same
        broker is watched with the same epoch and address."""
        if self._closed:
            return
        current = self._watches.get(broker_id)
        if current is not None:
            if (current.epoch, current.host, current.port) == (epoch, host, port):
                return
            self.unwatch(broker_id)
        since = asyncio.get_running_loop().time() - (0.0 if grace else self._unseen_grace_s)
        w = _Watch(
            broker_id,
            epoch,
            host,
            port,
            reported_dead=dead,
            since=since,
        )
        w.task = asyncio.get_running_loop().create_task(
            self._run(w), name=f"broker-liveness broker={broker_id}"
        )
        self._watches[broker_id] = w

    def unwatch(self, broker_id: int) -> None:
        w = self._watches.pop(broker_id, None)
        if w is not None and w.task is not None:
            w.task.cancel()

    def keep_only(self, broker_ids: set[int]) -> None:
        for broker_id in set(self._watches) - broker_ids:
            self.unwatch(broker_id)

    async def close(self) -> None:
        self._closed = True
        tasks = [w.task for w in self._watches.values() if w.task is not None]
        self._watches.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, w: _Watch) -> None:
        refusals = 0
        while True:
            outcome, streams = await self._connect(w)
            if streams is not None:
                reader, writer = streams
                refusals = 0
                w.seen_up = True
                try:
                    if w.reported_dead:
                        if await self._closes_within(reader):
                            continue  # closed again before it counted as back
                        w.reported_dead = False
                        log.info("broker %d (epoch %d) answers again", w.broker_id, w.epoch)
                        self._on_back(w.broker_id, w.epoch)
                    await self._until_closed(reader)
                finally:
                    writer.transport.abort()
                log.debug("broker %d closed the controller's watch connection", w.broker_id)
                continue  # probe at once
            if outcome is _Probe.REFUSED:
                refusals += 1
                if (
                    not w.reported_dead
                    and refusals >= self._confirm_refusals
                    and self._may_report(w)
                ):
                    w.reported_dead = True
                    log.warning(
                        "broker %d (epoch %d): its port %s:%d refuses connections: the "
                        "process is gone",
                        w.broker_id,
                        w.epoch,
                        w.host,
                        w.port,
                    )
                    self._on_dead(w.broker_id, w.epoch)
                await asyncio.sleep(
                    self._dead_retry_s if w.reported_dead else self._probe_interval_s
                )
            else:
                refusals = 0
                await asyncio.sleep(self._inconclusive_retry_s)

    def _may_report(self, w: _Watch) -> bool:
        """A registration never seen listening may be a broker that registers before it
        listens (Kafka does): it is reported only after ``unseen_grace_s``."""
        if w.seen_up:
            return True
        return asyncio.get_running_loop().time() - w.since >= self._unseen_grace_s

    async def _connect(
        self, w: _Watch
    ) -> tuple[_Probe, tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]:
        ctx = self._ssl_context
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                streams = await asyncio.open_connection(
                    w.host, w.port, ssl=ctx, server_hostname=w.host if ctx is not None else None
                )
        except ConnectionRefusedError:
            return _Probe.REFUSED, None
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            log.debug("probe of broker %d at %s:%d: %r", w.broker_id, w.host, w.port, exc)
            return _Probe.INCONCLUSIVE, None
        return _Probe.UP, streams

    async def _closes_within(self, reader: asyncio.StreamReader) -> bool:
        """Wait ``back_after_s``; True if the connection ended meanwhile."""
        try:
            async with asyncio.timeout(self._back_after_s):
                await self._until_closed(reader)
        except TimeoutError:
            return False
        return True

    @staticmethod
    async def _until_closed(reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError, OSError, ssl.SSLError):
            while await reader.read(65536):
                pass
