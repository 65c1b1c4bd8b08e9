"""The shared partition loader of the coordinators (``broker/coordinator/partition_loader.py``)
with an in-memory log: what a load reads (up to the high watermark once it covers the log
end, or the whole log), elections and resignations (a resignation during a load drops its
result, a newer epoch's load supersedes an older one, the same epoch is not reloaded), and
the chunked reading of whole batches."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from broker.coordinator import partition_loader
from broker.coordinator.partition_loader import LoadEnd, PartitionLoader, read_batches
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

TOPIC = "__internal"


@dataclass(frozen=True)
class Chunk:
    """What ``Log.read`` returns: ``size`` bytes of whole batches ending at ``last_offset``."""

    data: bytes
    last_offset: int

    @property
    def size(self) -> int:
        return len(self.data)

    def read_bytes(self) -> bytes:
        return self.data


class FakeLog:
    """One-record "batches" ``b"<offset>"``; a read returns whole batches from ``offset``
    (below ``max_offset``), at most ``per_read`` of them."""

    def __init__(self, count: int, *, start: int = 0, per_read: int = 1) -> None:
        self.log_start_offset = start
        self.log_end_offset = count
        self.per_read = per_read
        self.reads: list[int] = []

    def read(self, offset: int, _max: int, *, max_offset: int, min_one_batch: bool) -> Any:
        self.reads.append(offset)
        last = min(offset + self.per_read, max_offset, self.log_end_offset) - 1
        if last < offset:
            return None
        return Chunk(b"".join(b"<%d>" % o for o in range(offset, last + 1)), last)


class FakePartition:
    def __init__(self, log: FakeLog, high_watermark: int, *, is_leader: bool = True) -> None:
        self.log = log
        self.high_watermark = high_watermark
        self.is_leader = is_leader


class FakeReplicaManager:
    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, FakePartition] = {}


@dataclass
class State:
    partition: int
    coordinator_epoch: int
    loaded: bool = False
    records: list[bytes] = field(default_factory=list)


class Harness:
    """A loader over a fake replica manager that records what it tells the coordinator."""

    def __init__(self, load_end: LoadEnd) -> None:
        self.rm = FakeReplicaManager()
        self.tasks: list[asyncio.Task[None]] = []
        self.loaded: list[tuple[State, list[bytes]]] = []
        self.unloaded: list[State] = []
        self.loader: PartitionLoader[State, list[bytes]] = PartitionLoader(
            TOPIC,
            self.rm,  # type: ignore[arg-type]
            new_state=State,
            new_loaded=list,
            apply=self.apply,
            on_loaded=self.on_loaded,
            on_unloaded=self.unloaded.append,
            spawn=self.spawn,
            load_end=load_end,
            task_name="load-test",
            hw_wait_interval_s=0.001,
        )

    @staticmethod
    def apply(loaded: list[bytes], blobs: Iterable[bytes]) -> None:
        loaded.extend(blobs)

    def on_loaded(self, state: State, loaded: list[bytes]) -> None:
        assert not state.loaded, "marked loaded only after on_loaded"
        state.records = loaded
        self.loaded.append((state, loaded))

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro, name=name))

    def host(self, partition: int, log: FakeLog, high_watermark: int) -> FakePartition:
        p = FakePartition(log, high_watermark)
        self.rm.partitions[TopicPartition(TOPIC, partition)] = p
        return p

    async def settle(self) -> None:
        await asyncio.gather(*self.tasks)


def test_a_load_waits_for_the_high_watermark_to_cover_the_log_end_then_reads_to_it() -> None:
    async def run() -> None:
        h = Harness(LoadEnd.HIGH_WATERMARK)
        p = h.host(0, FakeLog(3), high_watermark=1)
        h.loader.on_role_change(TopicPartition(TOPIC, 0), True, 5)
        state = h.loader.partitions[0]
        assert (state.partition, state.coordinator_epoch, state.loaded) == (0, 5, False)
        assert [t.get_name() for t in h.tasks] == ["load-test-0"]
        await asyncio.sleep(0.01)
        assert not state.loaded and p.log.reads == []  # still waiting for the followers
        p.high_watermark = 3
        await h.settle()
        assert state.loaded and state.records == [b"<0>", b"<1>", b"<2>"]

    asyncio.run(run())


def test_a_leader_that_stops_leading_while_waiting_reads_only_to_the_high_watermark() -> None:
    async def run() -> None:
        h = Harness(LoadEnd.HIGH_WATERMARK)
        p = h.host(0, FakeLog(4, start=1), high_watermark=3)
        h.loader.elect(0, 1)
        await asyncio.sleep(0.01)
        p.is_leader = False
        await asyncio.wait_for(h.settle(), timeout=0.3)  # not the whole wait (600 rounds)
        assert h.loader.partitions[0].records == [b"<1>", b"<2>"]

    asyncio.run(run())


def test_the_log_end_policy_replays_the_whole_log_at_once() -> None:
    async def run() -> None:
        h = Harness(LoadEnd.LOG_END)
        h.host(2, FakeLog(3), high_watermark=0)  # not yet replicated: read anyway
        h.loader.on_role_change(TopicPartition(TOPIC, 2), True, 0)
        await h.settle()
        state = h.loader.partitions[2]
        assert state.loaded and state.records == [b"<0>", b"<1>", b"<2>"]

    asyncio.run(run())


def test_a_resignation_during_a_load_drops_the_state_and_the_loads_result() -> None:
    async def run() -> None:
        h = Harness(LoadEnd.HIGH_WATERMARK)
        p = h.host(0, FakeLog(2), high_watermark=0)
        h.loader.elect(0, 3)
        state = h.loader.partitions[0]
        await asyncio.sleep(0.01)
        h.loader.on_role_change(TopicPartition(TOPIC, 0), False, 3)
        assert h.loader.partitions == {} and h.unloaded == [state]
        assert not h.loader.is_current(state)
        p.high_watermark = 2
        await h.settle()
        assert h.loaded == [] and not state.loaded and h.loader.partitions == {}

    asyncio.run(run())


def test_a_newer_epochs_load_supersedes_an_older_one() -> None:
    async def run() -> None:
        h = Harness(LoadEnd.HIGH_WATERMARK)
        p = h.host(0, FakeLog(2), high_watermark=0)
        h.loader.elect(0, 1)
        old = h.loader.partitions[0]
        await asyncio.sleep(0.01)
        h.loader.elect(0, 2)
        new = h.loader.partitions[0]
        assert new is not old and new.coordinator_epoch == 2
        assert h.unloaded == [old] and len(h.tasks) == 2
        p.high_watermark = 2
        await h.settle()
        assert [s for s, _ in h.loaded] == [new]
        assert new.loaded and not old.loaded

    asyncio.run(run())


def test_the_same_epoch_is_not_reloaded_and_other_topics_are_ignored() -> None:
    async def run() -> None:
        h = Harness(LoadEnd.LOG_END)
        h.host(0, FakeLog(1), high_watermark=1)
        h.loader.elect(0, 7)
        state = h.loader.partitions[0]
        h.loader.on_role_change(TopicPartition(TOPIC, 0), True, 7)
        h.loader.on_role_change(TopicPartition("other", 0), False, 7)
        h.loader.on_role_change(TopicPartition("other", 1), True, 7)
        h.loader.resign(4)  # not held: nothing to do
        await h.settle()
        assert len(h.tasks) == 1 and h.unloaded == []
        assert h.loader.partitions == {0: state} and state.loaded

    asyncio.run(run())


def test_requests_are_routed_by_whether_the_partition_is_held_and_loaded() -> None:
    async def run() -> None:
        h = Harness(LoadEnd.LOG_END)
        h.loader.elect(1, 0)  # no such partition on this broker: it stays loading
        await h.settle()
        state = h.loader.partitions[1]
        assert not state.loaded and h.loaded == []
        assert h.loader.route(1) == (ErrorCode.coordinator_load_in_progress, None)
        assert h.loader.route(2) == (ErrorCode.not_coordinator, None)
        h.host(0, FakeLog(0), high_watermark=0)
        h.loader.elect(0, 0)
        await h.settle()
        loaded = h.loader.partitions[0]
        assert loaded.loaded  # an empty log loads at once
        assert h.loader.route(0) == (ErrorCode.none, loaded)
        assert h.loader.loaded_states() == [loaded]
        h.loader.unload_all()
        assert h.loader.partitions == {} and {s.partition for s in h.unloaded} == {0, 1}

    asyncio.run(run())


def test_read_batches_reads_chunks_of_whole_batches_from_start_to_end() -> None:
    log = FakeLog(10, per_read=3)
    assert list(read_batches(log, 2, 8)) == [b"<2><3><4>", b"<5><6><7>"]  # type: ignore[arg-type]
    assert log.reads == [2, 5]
    assert list(read_batches(log, 5, 5)) == []  # type: ignore[arg-type]


def test_read_batches_stops_at_a_read_that_returns_nothing_or_makes_no_progress() -> None:
    class Stuck(FakeLog):
        def read(self, offset: int, _max: int, *, max_offset: int, min_one_batch: bool) -> Any:
            self.reads.append(offset)
            return Chunk(b"x", offset - 1)

    assert list(read_batches(FakeLog(2), 0, 5)) == [b"<0>", b"<1>"]  # type: ignore[arg-type]
    stuck = Stuck(5)
    assert list(read_batches(stuck, 3, 5)) == [] and stuck.reads == [3]  # type: ignore[arg-type]


def test_read_batches_asks_for_chunks_of_at_most_the_load_chunk_size() -> None:
    sizes: list[int] = []

    class Sized(FakeLog):
        def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> Any:
            assert min_one_batch and max_offset == 2
            sizes.append(max_bytes)
            return super().read(offset, max_bytes, max_offset=max_offset, min_one_batch=True)

    assert len(list(read_batches(Sized(5), 0, 2))) == 2  # type: ignore[arg-type]
    assert sizes == [partition_loader.LOAD_CHUNK_BYTES] * 2
