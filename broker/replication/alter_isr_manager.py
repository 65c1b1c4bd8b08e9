"""Writing the ISR changes this broker proposes as a partition leader (Kafka's
``AlterIsrManager``; ``ZkIsrManager`` in ZooKeeper mode).

The replica manager proposes a new ISR when a follower has caught up (on its fetch) or has
not caught up for ``replica.lag.time.max.ms`` (its periodic check). A proposal becomes the
partition's ``pending_isr`` and is queued; one writer task takes the proposals in order and
writes each through the ``alter_isr`` callback (a conditional update of the partition-state
znode at the partition's ``zk_version``, plus an ISR-change notification for the
controller). Only a written ISR is used: the partition commits it with the znode's new
version and the high watermark is recomputed. A proposal that is stale when its turn comes
(the partition is gone, no longer led here at that leader epoch, or a newer proposal
replaced it) is dropped; a write the znode's version rejects clears ``pending_isr``, and the
controller's next LeaderAndIsr tells what happened. Without a callback (unit tests) a
proposal is committed at once.

It sees the replica manager only as an :class:`IsrHost`: the partitions it leads (read, never
edited), the broker and controller epochs it writes with, and the two things to do once an
ISR is committed (count the change, wake the waiters on the high watermark).

Concurrency: event loop thread only; the replica manager starts and cancels the writer task
(:meth:`AlterIsrManager.run`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.replication.partition import Partition

__all__ = ["AlterIsr", "AlterIsrManager", "IsrHost"]

log = logging.getLogger(__name__)

AlterIsr = Callable[[TopicPartition, int, int, tuple[int, ...], int, int], Awaitable[int | None]]
"""(tp, leader, leader_epoch, isr, zk_version, controller_epoch) -> new znode version, or None
when the znode changed under us (the controller's next LeaderAndIsr tells what happened)."""


class IsrHost(Protocol):
    """What the ISR writer needs of the replica manager."""

    @property
    def partitions(self) -> Mapping[TopicPartition, Partition]:
        """The hosted partitions (read only: a proposal for one that left is dropped)."""
        ...

    @property
    def broker_id(self) -> int: ...

    @property
    def controller_epoch(self) -> int:
        """The newest controller epoch seen (each write is fenced by it)."""
        ...

    def count_isr_change(self, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        """Count a written ISR change as a shrink or an expand."""

    def notify_high_watermark(self, tp: TopicPartition) -> int:
        """Wake what waits on ``tp``'s high watermark (a new ISR may move it)."""
        ...


class AlterIsrManager:
    """Queues the ISR changes of the partitions this broker leads and writes them one at a
    time, in order (see the module docstring). ``host`` is the replica manager;
    ``alter_isr`` is the callback (wired by the broker; None commits every proposal at once).

    Concurrency: event loop thread only; :meth:`run` is the one writer task.
    """

    def __init__(self, host: IsrHost, alter_isr: AlterIsr | None) -> None:
        self.host = host
        self.alter_isr = alter_isr
        self._queue: asyncio.Queue[tuple[TopicPartition, int, tuple[int, ...]]] = asyncio.Queue()

    def propose(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """Propose ``isr`` for a partition this broker leads."""
        if self.alter_isr is None:
            self.host.count_isr_change(partition.isr, isr)
            partition.commit_isr(isr, partition.zk_version)
            self.host.notify_high_watermark(partition.tp)
            return
        partition.pending_isr = isr
        self._queue.put_nowait((partition.tp, partition.leader_epoch, isr))

    async def run(self) -> None:
        """Write the queued proposals, one at a time, until cancelled."""
        host = self.host
        while True:
            tp, epoch, isr = await self._queue.get()
            partition = host.partitions.get(tp)
            if (
                partition is None
                or not partition.is_leader
                or partition.leader_epoch != epoch
                or partition.pending_isr != isr
                or self.alter_isr is None
            ):
                continue
            try:
                version = await self.alter_isr(
                    tp, host.broker_id, epoch, isr, partition.zk_version, host.controller_epoch
                )
            except Exception:
                log.exception("%s: writing ISR %s failed", tp, list(isr))
                version = None
            partition = host.partitions.get(tp)
            if partition is None or partition.leader_epoch != epoch or not partition.is_leader:
                continue
            if version is None:
                log.info("%s: ISR update to %s was rejected (stale state)", tp, list(isr))
                partition.pending_isr = None
                continue
            log.info("%s: ISR %s -> %s", tp, list(partition.isr), list(isr))
            host.count_isr_change(partition.isr, isr)
            partition.commit_isr(isr, version)
            host.notify_high_watermark(tp)
