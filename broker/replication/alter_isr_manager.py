"""Writing the ISR changes this broker proposes as a partition leader (Kafka's
``AlterIsrManager``; ``ZkIsrManager`` in ZooKeeper mode).

The replica manager proposes a new ISR when a follower has caught up (on its fetch) or has
not caught up for ``replica.lag.time.max.ms`` (its periodic check). A proposal becomes the
partition's ``pending_isr`` and is queued; one writer task takes every proposal queued by
then (up to :data:`MAX_BATCH`) and writes them together through the ``alter_isr`` callback:
conditional updates of the partition-state znodes, each at its partition's ``zk_version``,
pipelined on the ZooKeeper connection, then one ISR-change notification naming the written
partitions for the controller (as Kafka batches ISR changes: its AlterPartition request
carries many partitions, and in ZooKeeper mode one ``isr_change`` znode lists many). A
partition has at most one proposal in flight: the next is proposed after the write
answers. Only a written ISR is used: the partition commits it with the znode's new version
and the high watermark is recomputed. A proposal that is stale when its batch is written
(the partition is gone, no longer led here at that leader epoch, or a newer proposal
replaced it) is dropped; a write the znode's version rejects clears ``pending_isr``, and the
controller's next LeaderAndIsr tells what happened. Without a callback (unit tests) a
proposal is committed at once.

Why batches: at 10,000 partitions a leader whose followers were slow to start proposes a
shrink for each of its thousands of partitions in one check; written one at a time (two
ZooKeeper round trips each) they took minutes, during which the controller, the followers'
expansions and its metadata lagged.

It sees the replica manager only as an :class:`IsrHost`: the partitions it leads (read, never
edited), the broker and controller epochs it writes with, and the two things to do once an
ISR is committed (count the change, wake the waiters on the high watermark).

Concurrency: event loop thread only; the replica manager starts and cancels the writer task
(:meth:`AlterIsrManager.run`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.replication.partition import Partition

__all__ = ["MAX_BATCH", "AlterIsr", "AlterIsrManager", "IsrHost", "IsrWrite"]

log = logging.getLogger(__name__)

MAX_BATCH = 1000
"""Proposals written together at most (a ZooKeeper request pipeline and one notification)."""


@dataclass(frozen=True, slots=True)
class IsrWrite:
    """One partition's ISR to write: its state znode must still be at ``zk_version``."""

    tp: TopicPartition
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int


AlterIsr = Callable[[Sequence[IsrWrite], int], Awaitable[Sequence[int | None]]]
"""(writes, controller_epoch) -> per write, in order, the znode's new version, or None when
the znode changed under us (the controller's next LeaderAndIsr tells what happened)."""


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
        """Write the queued proposals, a batch at a time, until cancelled."""
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._write(self._fresh(batch))

    def _fresh(self, batch: list[tuple[TopicPartition, int, tuple[int, ...]]]) -> list[IsrWrite]:
        """The proposals of ``batch`` still worth writing: the partition is led here at the
        proposal's epoch and it is still the pending one (the last, if queued twice)."""
        host = self.host
        writes: dict[TopicPartition, IsrWrite] = {}
        for tp, epoch, isr in batch:
            partition = host.partitions.get(tp)
            if (
                partition is None
                or not partition.is_leader
                or partition.leader_epoch != epoch
                or partition.pending_isr != isr
            ):
                continue
            writes[tp] = IsrWrite(tp, host.broker_id, epoch, isr, partition.zk_version)
        return list(writes.values())

    async def _write(self, writes: list[IsrWrite]) -> None:
        if not writes or self.alter_isr is None:
            return
        try:
            versions = list(await self.alter_isr(writes, self.host.controller_epoch))
        except Exception:
            log.exception("writing the ISRs of %d partitions failed", len(writes))
            versions = [None] * len(writes)
        for write, version in zip(writes, versions, strict=True):
            self._commit(write, version)

    def _commit(self, write: IsrWrite, version: int | None) -> None:
        host = self.host
        tp = write.tp
        partition = host.partitions.get(tp)
        if (
            partition is None
            or partition.leader_epoch != write.leader_epoch
            or not partition.is_leader
        ):
            return
        if version is None:
            log.info("%s: ISR update to %s was rejected (stale state)", tp, list(write.isr))
            partition.pending_isr = None
            return
        log.info("%s: ISR %s -> %s", tp, list(partition.isr), list(write.isr))
        host.count_isr_change(partition.isr, write.isr)
        partition.commit_isr(write.isr, version)
        host.notify_high_watermark(tp)
