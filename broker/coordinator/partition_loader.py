"""Loading and unloading the partitions of a coordinator's internal topic, shared by the group
coordinator (``__consumer_offsets``) and the transaction coordinator (``__transaction_state``).

Theory of operation (Kafka's ``GroupCoordinator.onElection`` / ``onResignation``,
``TransactionCoordinator.onElection`` / ``onResignation``; in the newer, KIP-848 runtime
``CoordinatorLoaderImpl`` and the load part of ``CoordinatorRuntime``)
----------------------------------------------------------------------------------------
A coordinator's state lives in the partitions of its internal, compacted topic; the leader of
a partition is the coordinator of every key that hashes to it, and the partition's leader
epoch is the *coordinator epoch*. The replica manager reports every role change
(:meth:`PartitionLoader.on_role_change`):

* Election (this broker leads partition P at epoch E): unless P is already held at E, a fresh
  state for (P, E) replaces any older one (which is unloaded first) and a load task starts.
  Until the load is done the state's ``loaded`` is False, and the coordinator answers
  COORDINATOR_LOAD_IN_PROGRESS for its keys.
* Load: read the partition's log from its log start to its end (:class:`LoadEnd`), whole
  batches a chunk at a time (:func:`read_batches`), and replay them through the coordinator's
  decoder (its ``persistence.apply_records``) into a fresh "loaded" value; then, if the state
  is still the current one for P, hand the value to the coordinator (``on_loaded``) and mark
  the state loaded.
* Resignation (this broker stops leading P): the state is dropped and the coordinator told
  (``on_unloaded``: answer parked requests, forget pending markers, ...).

The *state object* is the epoch guard: a load, or any coordinator work that awaited, checks
that ``partitions[P] is state`` (:meth:`PartitionLoader.is_current`) before touching it. A
resignation or a newer election during a load replaces or removes the state, so the old load
finishes into nothing and a newer epoch's load supersedes it.

Concurrency: event loop thread only. ``on_role_change``, ``elect``, ``resign`` and ``unload``
are synchronous and run on the event loop (the replica manager calls them there); the load
runs as a task started through the coordinator's ``spawn`` (so the coordinator's shutdown
cancels it). The load awaits only while it waits for the high watermark
(:attr:`LoadEnd.HIGH_WATERMARK`); reading and replaying the log, ``on_loaded`` and marking the
state loaded happen in one step of the event loop, with no await between them.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.log.log import Log
    from broker.replication.partition import Partition
    from broker.replication.replica_manager import ReplicaManager

__all__ = [
    "LOAD_CHUNK_BYTES",
    "CoordinatorPartition",
    "LoadEnd",
    "PartitionLoader",
    "read_batches",
]

LOAD_CHUNK_BYTES = 1024 * 1024
HW_WAIT_INTERVAL_S = 0.05
HW_WAIT_ROUNDS = 600  # 30 s at the default interval


class CoordinatorPartition(Protocol):
    """What the loader needs of a coordinator's state of one partition it leads."""

    partition: int
    coordinator_epoch: int
    loaded: bool


class LoadEnd(enum.Enum):
    """Where a load stops reading."""

    HIGH_WATERMARK = "high watermark"
    """Wait (up to 30 s, while this broker stays leader) until the high watermark covers the
    log end, so what earlier leaders committed is included, then read up to the high
    watermark (the group coordinator)."""
    LOG_END = "log end"
    """Read the leader's whole log at once, as Kafka's transaction coordinator loads."""


def read_batches(log: Log, start: int, end: int) -> Iterator[bytes]:
    """The whole batches of ``[start, end)`` of ``log``, in log order, at most
    :data:`LOAD_CHUNK_BYTES` a chunk (or one batch, if larger). Stops early at a gap that
    reads nothing or a read that makes no progress. Each chunk is read when the consumer asks
    for it."""
    offset = start
    while offset < end:
        data = log.read(offset, LOAD_CHUNK_BYTES, max_offset=end, min_one_batch=True)
        if data is None or data.size == 0:
            return
        next_offset = data.last_offset + 1
        if next_offset <= offset:
            return
        yield data.read_bytes()
        offset = next_offset


S = TypeVar("S", bound=CoordinatorPartition)
L = TypeVar("L")


class PartitionLoader(Generic[S, L]):
    """The coordinator states of the partitions of ``topic`` this broker leads: created on
    election, loaded from the log, dropped on resignation (see the module docstring).

    Parameterised by what differs between coordinators: ``new_state(partition, epoch)`` makes
    an empty state; ``new_loaded()`` and ``apply(loaded, blobs)`` replay batches into a
    loaded value; ``on_loaded(state, loaded)`` installs it (before the state is marked
    loaded); ``on_unloaded(state)`` cleans up after a resignation or a newer election;
    ``spawn(coroutine, name)`` runs the load as one of the coordinator's tasks.

    ``partitions`` (partition -> state) is the coordinator's routing table; the coordinator
    reads it and may drop it whole at shutdown.

    Concurrency: event loop thread only (see the module docstring).
    """

    def __init__(
        self,
        topic: str,
        replica_manager: ReplicaManager,
        *,
        new_state: Callable[[int, int], S],
        new_loaded: Callable[[], L],
        apply: Callable[[L, Iterable[bytes]], None],
        on_loaded: Callable[[S, L], None],
        on_unloaded: Callable[[S], None],
        spawn: Callable[[Coroutine[Any, Any, None], str], None],
        load_end: LoadEnd,
        task_name: str,
        hw_wait_interval_s: float = HW_WAIT_INTERVAL_S,
    ) -> None:
        self.topic = topic
        self.replica_manager = replica_manager
        self.partitions: dict[int, S] = {}
        self._new_state = new_state
        self._new_loaded = new_loaded
        self._apply = apply
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded
        self._spawn = spawn
        self._load_end = load_end
        self._task_name = task_name
        self._hw_wait_interval_s = hw_wait_interval_s

    # --- role changes (called by the replica manager, on the event loop) -------------------

    def on_role_change(self, tp: TopicPartition, is_leader: bool, leader_epoch: int) -> None:
        """A role change of any partition; only ``topic``'s concern this loader."""
        if tp.topic != self.topic:
            return
        if is_leader:
            self.elect(tp.partition, leader_epoch)
        else:
            self.resign(tp.partition)

    def elect(self, partition: int, epoch: int) -> None:
        """This broker leads ``partition`` at ``epoch``: load it, unless already held at that
        epoch (Kafka's ``onElection``)."""
        current = self.partitions.get(partition)
        if current is not None and current.coordinator_epoch == epoch:
            return
        if current is not None:
            self.unload(partition)
        state = self._new_state(partition, epoch)
        self.partitions[partition] = state
        self._spawn(self._load(state), f"{self._task_name}-{partition}")

    def resign(self, partition: int) -> None:
        """This broker no longer leads ``partition`` (Kafka's ``onResignation``)."""
        self.unload(partition)

    def unload(self, partition: int) -> None:
        """Drop ``partition``'s state, if held, and tell the coordinator."""
        state = self.partitions.pop(partition, None)
        if state is not None:
            self._on_unloaded(state)

    def unload_all(self) -> None:
        for partition in list(self.partitions):
            self.unload(partition)

    def route(self, partition: int) -> tuple[ErrorCode, S | None]:
        """The state of ``partition`` for a request: NOT_COORDINATOR if this broker does not
        lead it, COORDINATOR_LOAD_IN_PROGRESS until it is loaded."""
        state = self.partitions.get(partition)
        if state is None:
            return ErrorCode.not_coordinator, None
        if not state.loaded:
            return ErrorCode.coordinator_load_in_progress, None
        return ErrorCode.none, state

    def loaded_states(self) -> list[S]:
        """The states of the partitions this broker leads and has loaded."""
        return [state for state in self.partitions.values() if state.loaded]

    def is_current(self, state: S) -> bool:
        """``state`` is still this broker's state of its partition: no resignation and no
        newer election since it was made."""
        return self.partitions.get(state.partition) is state

    # --- loading ----------------------------------------------------------------------------

    async def _load(self, state: S) -> None:
        loaded = await self._read(state)
        if loaded is None or not self.is_current(state):
            return  # not hosted here, or unloaded (or superseded) meanwhile
        self._on_loaded(state, loaded)
        state.loaded = True

    async def _read(self, state: S) -> L | None:
        """Replay ``state``'s partition up to :class:`LoadEnd` (None if this broker has no
        such partition)."""
        partition = self.replica_manager.partitions.get(TopicPartition(self.topic, state.partition))
        if partition is None:
            return None
        if self._load_end is LoadEnd.HIGH_WATERMARK:
            await self._await_high_watermark(partition)
            end = partition.high_watermark
        else:
            end = partition.log.log_end_offset
        loaded = self._new_loaded()
        self._apply(loaded, read_batches(partition.log, partition.log.log_start_offset, end))
        return loaded

    async def _await_high_watermark(self, partition: Partition) -> None:
        """Until the high watermark covers the log end (what earlier leaders committed), this
        broker stops leading, or 30 s pass."""
        for _ in range(HW_WAIT_ROUNDS):
            if partition.high_watermark >= partition.log.log_end_offset or not partition.is_leader:
                return
            await asyncio.sleep(self._hw_wait_interval_s)
