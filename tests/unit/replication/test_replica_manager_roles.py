"""The replica manager's replication paths (broker/replication/replica_manager.py):
LeaderAndIsr and StopReplica handling with controller-epoch and leader-epoch fencing, replica
fetches moving the high watermark, acks=all produce and min.insync.replicas.

Real logs in ``tmp_path`` and a ManualClock; the follower fetchers are replaced by a
recording fake so no network task is started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.log.log_manager import LogManager
from broker.protocol import records
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.alter_isr_manager import IsrWrite
from broker.replication.fetcher import FetcherConfig, FetchState, LeaderFetcher
from broker.replication.replica_manager import (
    FetchRequestPartition,
    FetchResult,
    PartitionStateSpec,
    ReplicaManager,
)
from broker.topic_config import LogConfig
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
TP = TopicPartition("orders", 0)
TP2 = TopicPartition("orders", 1)
LAG_MS = 10_000
LEADER_ADDRESSES = {2: ("127.0.0.1", 19092), 3: ("127.0.0.1", 19093)}

T = TypeVar("T")


class RecordingFetchers:
    """Stands in for ReplicaFetcherManager: remembers which leader each partition follows."""

    def __init__(self) -> None:
        self.following: dict[TopicPartition, tuple[int, tuple[str, int], int]] = {}
        self.removed: list[TopicPartition] = []

    def add_partition(
        self, tp: TopicPartition, leader_id: int, address: tuple[str, int], leader_epoch: int
    ) -> None:
        self.following[tp] = (leader_id, address, leader_epoch)

    def remove_partition(self, tp: TopicPartition) -> None:
        self.removed.append(tp)
        self.following.pop(tp, None)

    def fetching(self) -> dict[TopicPartition, int]:
        return {tp: leader for tp, (leader, _, _) in self.following.items()}

    def remove_idle_fetchers(self) -> int:
        self.idle_cleanups = getattr(self, "idle_cleanups", 0) + 1
        return 0

    async def shutdown(self) -> None:
        self.following.clear()


class Broker:
    """Broker 1's replica manager over one log dir."""

    def __init__(self, tmp_path: Path, log_config: LogConfig | None = None) -> None:
        self.clock = ManualClock(NOW)
        self.log_config = log_config or LogConfig()
        log_dir = tmp_path / "logs"
        self.config = BrokerConfig(
            {
                "broker.id": "1",
                "log.dirs": str(log_dir),
                "replica.lag.time.max.ms": str(LAG_MS),
            }
        )
        self.log_manager = LogManager([log_dir], self.log_config, clock=self.clock, broker_id=1)
        self.log_manager.startup(lambda _topic: self.log_config)
        self.rm = ReplicaManager(self.config, self.log_manager, clock=self.clock, broker_id=1)
        self.fetchers = RecordingFetchers()
        self.rm.fetchers = self.fetchers  # type: ignore[assignment]

    def apply(
        self, controller_epoch: int, *specs: PartitionStateSpec
    ) -> dict[TopicPartition, ErrorCode]:
        return self.rm.become_leader_or_follower(
            controller_epoch, specs, LEADER_ADDRESSES, lambda _topic: self.log_config
        )


def _spec(
    leader: int,
    epoch: int,
    isr: tuple[int, ...] = (1, 2),
    replicas: tuple[int, ...] = (1, 2),
    tp: TopicPartition = TP,
    zk_version: int = 0,
) -> PartitionStateSpec:
    return PartitionStateSpec(tp, leader, epoch, isr, replicas, zk_version)


def _records(n: int) -> bytes:
    return records.encode_batch(
        [records.SimpleRecord(b"value-%d" % i, b"k", NOW) for i in range(n)]
    )


def _run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro_fn()

    return asyncio.run(main())


async def _produce(
    rm: ReplicaManager, n: int, acks: int, tp: TopicPartition = TP, timeout_ms: int = 5_000
) -> tuple[ErrorCode, int]:
    result = (
        await rm.append_records({tp: _records(n)}, required_acks=acks, timeout_ms=timeout_ms)
    )[tp]
    return result.error, result.base_offset


async def _fetch(
    rm: ReplicaManager,
    offset: int,
    *,
    replica_id: int = -1,
    tp: TopicPartition = TP,
    leader_epoch: int = -1,
    last_epoch: int = -1,
    max_wait_ms: int = 0,
) -> FetchResult:
    """One partition's fetch (``leader_epoch``, ``last_epoch``: the request's current
    leader epoch and last fetched epoch, -1 unset)."""
    [result] = await rm.fetch(
        [FetchRequestPartition(tp, offset, 1 << 20, leader_epoch, last_epoch)],
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        replica_id=replica_id,
    )
    return result


def _last_offset(result: FetchResult) -> int | None:
    return None if result.slice is None else result.slice.last_offset


# --- LeaderAndIsr -----------------------------------------------------------------------------


def test_become_leader(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    assert b.apply(1, _spec(leader=1, epoch=3)) == {TP: ErrorCode.none}
    p = b.rm.partitions[TP]
    assert p.is_leader and p.leader_epoch == 3 and p.isr == (1, 2)
    assert p.log.leader_epoch_cache.latest_entry == (3, 0)
    assert b.fetchers.fetching() == {}
    assert b.rm.leaders_and_followers() == ([TP], [])


def test_become_follower_registers_with_the_fetchers(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    assert b.apply(1, _spec(leader=2, epoch=3)) == {TP: ErrorCode.none}
    p = b.rm.partitions[TP]
    assert not p.is_leader and p.leader_id == 2 and p.leader_epoch == 3
    assert b.fetchers.following == {TP: (2, LEADER_ADDRESSES[2], 3)}
    assert b.rm.leaders_and_followers() == ([], [TP])
    # a follower does not serve produce or consumer fetches
    error, _ = _run(lambda: _produce(b.rm, 1, acks=1))
    assert error == ErrorCode.not_leader_or_follower
    assert _run(lambda: _fetch(b.rm, 0)).error == ErrorCode.not_leader_or_follower


def test_follower_to_leader_and_back(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=2, epoch=1))
    assert b.apply(1, _spec(leader=1, epoch=2)) == {TP: ErrorCode.none}
    assert b.rm.partitions[TP].is_leader
    assert TP not in b.fetchers.following  # no longer fetching from broker 2
    error, offset = _run(lambda: _produce(b.rm, 2, acks=1))
    assert (error, offset) == (ErrorCode.none, 0)
    assert b.apply(1, _spec(leader=3, epoch=3, replicas=(1, 2, 3))) == {TP: ErrorCode.none}
    assert b.fetchers.following == {TP: (3, LEADER_ADDRESSES[3], 3)}
    assert not b.rm.partitions[TP].is_leader


def test_request_from_an_older_controller_epoch_changes_nothing(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(5, _spec(leader=1, epoch=2))
    results = b.apply(4, _spec(leader=2, epoch=3), _spec(leader=2, epoch=0, tp=TP2))
    assert results == {
        TP: ErrorCode.stale_controller_epoch,
        TP2: ErrorCode.stale_controller_epoch,
    }
    p = b.rm.partitions[TP]
    assert p.is_leader and p.leader_epoch == 2
    assert TP2 not in b.rm.partitions
    assert b.log_manager.get_log(TP2) is None
    assert b.fetchers.following == {}
    assert b.rm.controller_epoch == 5
    # StopReplica from the stale controller is ignored too
    assert b.rm.stop_replicas(4, [(TP, True)]) == {TP: ErrorCode.stale_controller_epoch}
    assert TP in b.rm.partitions and p.log.dir.exists()


def test_partition_state_with_an_older_leader_epoch_is_ignored(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=5), _spec(leader=1, epoch=5, tp=TP2))
    results = b.apply(1, _spec(leader=2, epoch=4), _spec(leader=2, epoch=6, tp=TP2))
    assert results[TP] == ErrorCode.stale_controller_epoch  # what Kafka answers
    assert results[TP2] == ErrorCode.none  # the rest of the request still applies
    p = b.rm.partitions[TP]
    assert p.is_leader and p.leader_epoch == 5
    assert b.fetchers.fetching() == {TP2: 2}


def test_partition_not_assigned_here_is_refused(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    results = b.apply(1, _spec(leader=2, epoch=0, isr=(2, 3), replicas=(2, 3)))
    assert results == {TP: ErrorCode.unknown_topic_or_partition}
    assert TP not in b.rm.partitions


# --- replica fetches and the high watermark ------------------------------------------------------


def test_replica_fetch_reads_past_the_hw_and_moves_it(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=0))
    p = b.rm.partitions[TP]

    async def scenario() -> None:
        assert await _produce(b.rm, 3, acks=1) == (ErrorCode.none, 0)
        assert await _produce(b.rm, 2, acks=1) == (ErrorCode.none, 3)
        assert p.high_watermark == 0  # follower 2 is in the ISR and has nothing yet

        consumer = await _fetch(b.rm, 0)
        assert consumer.error == ErrorCode.none
        assert consumer.slice is None and consumer.high_watermark == 0

        follower = await _fetch(b.rm, 0, replica_id=2)
        assert follower.error == ErrorCode.none
        assert _last_offset(follower) == 4  # up to the log end, beyond the HW
        assert follower.high_watermark == 0

        follower = await _fetch(b.rm, 3, replica_id=2)  # has 0..2 now
        assert p.replica_leos[2] == 3
        assert follower.high_watermark == 3
        assert _last_offset(follower) == 4

        consumer = await _fetch(b.rm, 0)
        assert consumer.high_watermark == 3
        assert _last_offset(consumer) == 2  # whole batches below the HW only

        await _fetch(b.rm, 5, replica_id=2)
        assert p.high_watermark == 5
        consumer = await _fetch(b.rm, 3)
        assert _last_offset(consumer) == 4

    _run(scenario)


def test_fetch_from_a_broker_that_is_not_a_replica_does_not_move_the_hw(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=0))

    async def scenario() -> None:
        await _produce(b.rm, 3, acks=1)
        await _fetch(b.rm, 3, replica_id=9)
        assert b.rm.partitions[TP].high_watermark == 0

    _run(scenario)


def test_caught_up_follower_is_added_back_to_the_isr(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=0, isr=(1,)))
    p = b.rm.partitions[TP]

    async def scenario() -> None:
        await _produce(b.rm, 4, acks=1)
        assert p.high_watermark == 4
        await _fetch(b.rm, 2, replica_id=2)
        assert p.isr == (1,)
        await _fetch(b.rm, 4, replica_id=2)
        assert p.isr == (1, 2)  # no alter_isr callback: committed at once

    _run(scenario)


def test_isr_changes_go_through_alter_isr_one_in_flight_per_partition(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    calls: list[tuple[TopicPartition, int, int, tuple[int, ...], int, int]] = []

    async def scenario() -> None:
        gate = asyncio.Event()

        async def alter_isr(writes: Sequence[IsrWrite], controller_epoch: int) -> list[int]:
            calls.extend(
                (w.tp, w.leader, w.leader_epoch, w.isr, w.zk_version, controller_epoch)
                for w in writes
            )
            await gate.wait()
            return [w.zk_version + 1 for w in writes]

        b.rm.alter_isr_manager.alter_isr = alter_isr
        b.apply(7, _spec(leader=1, epoch=2, isr=(1,), replicas=(1, 2, 3), zk_version=4))
        p = b.rm.partitions[TP]
        b.rm.start()
        try:
            await _produce(b.rm, 2, acks=1)
            await _fetch(b.rm, 2, replica_id=2)
            assert p.pending_isr == (1, 2)
            assert p.isr == (1,)  # not used before it is written
            await _fetch(b.rm, 2, replica_id=3)  # caught up too, but a change is in flight
            for _ in range(5):
                await asyncio.sleep(0)
            assert calls == [(TP, 1, 2, (1, 2), 4, 7)]
            gate.set()
            for _ in range(20):
                await asyncio.sleep(0)
                if p.pending_isr is None and p.isr == (1, 2):
                    break
            assert (p.isr, p.zk_version, p.pending_isr) == ((1, 2), 5, None)
            await _fetch(b.rm, 2, replica_id=3)  # the next fetch proposes the next change
            for _ in range(20):
                await asyncio.sleep(0)
                if p.isr == (1, 2, 3):
                    break
            assert p.isr == (1, 2, 3)
            assert calls[-1] == (TP, 1, 2, (1, 2, 3), 5, 7)
        finally:
            await b.rm.shutdown()

    _run(scenario)


def test_the_isr_changes_of_many_partitions_are_written_in_one_batch(tmp_path: Path) -> None:
    """A shrink check that finds many partitions behind writes them together (one pipelined
    ZooKeeper batch and one notification), each at its own znode version; a write the znode
    rejects leaves only its own partition as it was."""
    b = Broker(tmp_path)
    tps = [TopicPartition("orders", i) for i in range(50)]
    batches: list[list[IsrWrite]] = []

    async def alter_isr(writes: Sequence[IsrWrite], controller_epoch: int) -> list[int | None]:
        batches.append(list(writes))
        return [None if w.tp == tps[7] else w.zk_version + 1 for w in writes]

    async def scenario() -> None:
        b.rm.alter_isr_manager.alter_isr = alter_isr
        b.apply(
            7,
            *(
                _spec(leader=1, epoch=2, isr=(1, 2), replicas=(1, 2), tp=tp, zk_version=i)
                for i, tp in enumerate(tps)
            ),
        )
        b.rm.start()
        try:
            b.clock.advance(LAG_MS + 1)  # follower 2 never fetched
            b.rm.maybe_shrink_isrs()
            for _ in range(20):
                await asyncio.sleep(0)
                if batches and all(b.rm.partitions[tp].pending_isr is None for tp in tps):
                    break
        finally:
            await b.rm.shutdown()

    _run(scenario)
    assert len(batches) == 1
    assert [(w.tp, w.isr, w.zk_version) for w in batches[0]] == [
        (tp, (1,), i) for i, tp in enumerate(tps)
    ]
    for i, tp in enumerate(tps):
        p = b.rm.partitions[tp]
        assert p.pending_isr is None
        assert (p.isr, p.zk_version) == (((1, 2), 7) if i == 7 else ((1,), i + 1))


# --- acks=all produce -------------------------------------------------------------------------


def test_acks_all_produce_waits_for_the_follower(tmp_path: Path) -> None:
    b = Broker(tmp_path, LogConfig(min_insync_replicas=2))
    b.apply(1, _spec(leader=1, epoch=0))

    async def scenario() -> None:
        produce = asyncio.create_task(_produce(b.rm, 3, acks=-1))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not produce.done()
        assert b.rm.partitions[TP].log.log_end_offset == 3  # written, not yet acknowledged
        await _fetch(b.rm, 2, replica_id=2)  # the follower has 0..1: not enough
        for _ in range(5):
            await asyncio.sleep(0)
        assert not produce.done()
        await _fetch(b.rm, 3, replica_id=2)
        assert await asyncio.wait_for(produce, 2) == (ErrorCode.none, 0)

    _run(scenario)


def test_acks_all_times_out_without_the_follower(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=0))

    async def scenario() -> tuple[ErrorCode, int]:
        produce = asyncio.create_task(_produce(b.rm, 1, acks=-1, timeout_ms=50))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not produce.done()  # waiting for the follower
        b.clock.advance(50)  # the request timeout passes (by the broker's clock)
        b.rm.purgatory.expire()
        return await produce

    error, _ = asyncio.run(scenario())
    assert error == ErrorCode.request_timed_out


def test_acks_all_below_min_insync_replicas_is_refused(tmp_path: Path) -> None:
    b = Broker(tmp_path, LogConfig(min_insync_replicas=2))
    b.apply(1, _spec(leader=1, epoch=0, isr=(1,)))
    error, _ = _run(lambda: _produce(b.rm, 2, acks=-1))
    assert error == ErrorCode.not_enough_replicas
    assert b.rm.partitions[TP].log.log_end_offset == 0
    error, _ = _run(lambda: _produce(b.rm, 2, acks=1))
    assert error == ErrorCode.none


def test_isr_shrinking_below_min_insync_while_waiting(tmp_path: Path) -> None:
    b = Broker(tmp_path, LogConfig(min_insync_replicas=2))
    b.apply(1, _spec(leader=1, epoch=0))
    p = b.rm.partitions[TP]

    async def scenario() -> None:
        produce = asyncio.create_task(_produce(b.rm, 2, acks=-1))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not produce.done()
        b.rm.maybe_shrink_isrs()
        assert p.isr == (1, 2)  # within replica.lag.time.max.ms
        b.clock.advance(LAG_MS + 1)
        b.rm.maybe_shrink_isrs()  # follower 2 never fetched: out of the ISR
        assert p.isr == (1,)
        error, _ = await asyncio.wait_for(produce, 2)
        assert error == ErrorCode.not_enough_replicas_after_append
        assert p.log.log_end_offset == 2  # the records were written (and are committed)
        assert p.high_watermark == 2

    _run(scenario)


def test_acks_all_answers_not_leader_when_leadership_moves_while_waiting(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=0))

    async def scenario() -> None:
        produce = asyncio.create_task(_produce(b.rm, 1, acks=-1))
        for _ in range(5):
            await asyncio.sleep(0)
        b.apply(1, _spec(leader=2, epoch=1))
        error, _ = await asyncio.wait_for(produce, 2)
        assert error == ErrorCode.not_leader_or_follower

    _run(scenario)


# --- StopReplica ------------------------------------------------------------------------------


def test_stop_replica_with_delete_removes_the_log_directory(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=2, epoch=0))
    b.apply(1, _spec(leader=1, epoch=0, tp=TP2))
    _run(lambda: _produce(b.rm, 2, acks=1, tp=TP2))
    follower_dir = b.rm.partitions[TP].log.dir
    leader_dir = b.rm.partitions[TP2].log.dir
    assert follower_dir.is_dir() and leader_dir.is_dir()

    assert b.rm.stop_replicas(1, [(TP, True), (TP2, True)]) == {
        TP: ErrorCode.none,
        TP2: ErrorCode.none,
    }
    assert not follower_dir.exists() and not leader_dir.exists()
    assert not any(d.name.startswith("orders-") for d in (tmp_path / "logs").iterdir())
    assert b.rm.partitions == {}
    assert b.log_manager.get_log(TP) is None and b.log_manager.get_log(TP2) is None
    assert b.fetchers.following == {}


def test_a_partition_the_cluster_knows_but_this_broker_does_not_host_is_not_led_here(
    tmp_path: Path,
) -> None:
    """Kafka's ``ReplicaManager.getPartitionOrError``: a partition this broker does not host
    answers NOT_LEADER_OR_FOLLOWER when the metadata lists it (reassigned away, or its
    LeaderAndIsr not here yet: the client refreshes its metadata and goes to the leader),
    and UNKNOWN_TOPIC_OR_PARTITION when it does not; produce, fetch, offsets alike."""
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=0))
    _run(lambda: _produce(b.rm, 2, acks=1))
    assert b.rm.stop_replicas(1, [(TP, True)]) == {TP: ErrorCode.none}  # reassigned away
    listed = {TP}
    b.rm.known_partition = lambda tp: tp in listed

    assert _run(lambda: _produce(b.rm, 1, acks=1)) == (ErrorCode.not_leader_or_follower, -1)
    assert _run(lambda: _fetch(b.rm, 0)).error == ErrorCode.not_leader_or_follower
    with pytest.raises(KafkaError) as raised:
        b.rm.list_offset(TP, -1)
    assert raised.value.code == ErrorCode.not_leader_or_follower

    listed.clear()  # the topic deleted: no longer in the metadata either
    assert _run(lambda: _produce(b.rm, 1, acks=1)) == (ErrorCode.unknown_topic_or_partition, -1)
    assert _run(lambda: _fetch(b.rm, 0)).error == ErrorCode.unknown_topic_or_partition
    with pytest.raises(KafkaError) as raised:
        b.rm.list_offset(TP, -1)
    assert raised.value.code == ErrorCode.unknown_topic_or_partition


def test_stop_replica_without_delete_keeps_the_log(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=2, epoch=0))
    directory = b.rm.partitions[TP].log.dir
    assert b.rm.stop_replicas(1, [(TP, False)]) == {TP: ErrorCode.none}
    assert TP not in b.rm.partitions
    assert TP not in b.fetchers.following
    assert directory.is_dir()
    assert b.log_manager.get_log(TP) is not None


def test_a_fetch_waiting_at_the_log_end_answers_on_the_next_turn_after_an_append(
    tmp_path: Path,
) -> None:
    """acks=1 with a consumer long-polling at the log end: the append wakes the fetch, which
    has its records one loop turn later, long before its 60 s deadline (end-to-end latency);
    the produce itself answers without waiting for it."""
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=1, isr=(1,), replicas=(1,)))

    async def scenario() -> int | None:
        waiting = asyncio.create_task(
            b.rm.fetch(
                [FetchRequestPartition(TP, 0, 1 << 20)],
                max_wait_ms=60_000,
                min_bytes=1,
                max_bytes=1 << 20,
            )
        )
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done()
        produce = _produce(b.rm, 5, acks=1)
        with pytest.raises(StopIteration):  # acks=1: answered without suspending
            produce.send(None)
        assert not waiting.done()
        await asyncio.sleep(0)  # the woken fetch's turn
        assert waiting.done()
        [result] = waiting.result()
        return _last_offset(result)

    assert _run(scenario) == 4


def test_a_fetch_waiting_for_min_bytes_holds_no_inline_bytes(tmp_path: Path) -> None:
    """A fetch whose min_bytes the log has not reached waits keeping its last read, but not
    the bytes a small read carries inline (a client parking such fetches must not hold broker
    memory); at its deadline it answers that read, with the records sent from the file."""
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=1, isr=(1,), replicas=(1,)))

    async def scenario() -> FetchResult:
        await _produce(b.rm, 5, acks=1)
        waiting = asyncio.create_task(
            b.rm.fetch(
                [FetchRequestPartition(TP, 0, 1 << 20)],
                max_wait_ms=100,
                min_bytes=1 << 20,
                max_bytes=1 << 20,
            )
        )
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done()
        await _produce(b.rm, 2, acks=1)  # wakes it; still short of min_bytes
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done()
        b.clock.advance(101)
        b.rm.purgatory.expire()
        [result] = await waiting
        return result

    result = _run(scenario)
    assert result.slice is not None and result.slice.data is None
    assert _last_offset(result) == 6
    data = result.slice.read_bytes()
    assert [h.last_offset for h in records.iter_batches(data)] == [4, 6]


def test_a_retried_duplicate_while_the_isr_is_short_is_not_called_unwritten(
    tmp_path: Path,
) -> None:
    """An idempotent producer's retry of a batch the leader already holds, arriving while
    the ISR is below min.insync.replicas, is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND
    ("possibly persisted"), not NOT_ENOUGH_REPLICAS ("not written": librdkafka may then send
    the records again under a bumped epoch, a duplicate the fault harness found); once the
    ISR is whole again the retry gets the original offsets. A new batch is still refused."""
    b = Broker(tmp_path, LogConfig(min_insync_replicas=2))
    b.apply(1, _spec(leader=1, epoch=0, isr=(1, 2)))
    p = b.rm.partitions[TP]

    def batch(seq: int) -> bytes:
        return records.encode_batch(
            [records.SimpleRecord(b"v%d" % seq, b"k", NOW)],
            producer_id=7,
            producer_epoch=0,
            base_sequence=seq,
        )

    async def produce(data: bytes) -> tuple[ErrorCode, int]:
        result = (await b.rm.append_records({TP: data}, required_acks=-1, timeout_ms=5000))[TP]
        return result.error, result.base_offset

    async def scenario() -> None:
        first = asyncio.create_task(produce(batch(0)))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not first.done()  # written, waiting for follower 2
        await _fetch(b.rm, 1, replica_id=2)  # follower 2 has it: committed
        assert await asyncio.wait_for(first, 2) == (ErrorCode.none, 0)
        p.isr = (1,)  # the ISR shrinks (as AlterIsr would)
        assert await produce(batch(0)) == (ErrorCode.not_enough_replicas_after_append, -1)
        assert (await produce(batch(1)))[0] == ErrorCode.not_enough_replicas
        assert p.log.log_end_offset == 1  # nothing written twice
        p.isr = (1, 2)
        assert await produce(batch(0)) == (ErrorCode.none, 0)  # the original offset

    _run(scenario)


def test_a_fetch_with_a_diverging_last_epoch_gets_the_leaders_end_of_it(tmp_path: Path) -> None:
    """Truncation on fetch (KIP-595, what Kafka followers rely on from IBP 2.7): the leader
    checks the epoch of the fetcher's last record against its own epoch cache."""
    b = Broker(tmp_path)
    b.apply(1, _spec(leader=1, epoch=2))
    p = b.rm.partitions[TP]

    async def fetch(offset: int, last_epoch: int) -> FetchResult:
        return await _fetch(
            b.rm, offset, replica_id=2, leader_epoch=2, last_epoch=last_epoch, max_wait_ms=500
        )

    async def scenario() -> None:
        assert await _produce(b.rm, 3, acks=1) == (ErrorCode.none, 0)  # epoch 2: 0..2
        ok = await fetch(0, -1)
        assert ok.diverging_epoch is None and _last_offset(ok) == 2
        same = await fetch(2, 2)  # the follower has 0..1 of epoch 2
        assert same.diverging_epoch is None and _last_offset(same) == 2
        # the follower has records of epoch 1 up to offset 5: the leader's epoch 1 (it has
        # none; its largest epoch <= 1 is unknown below epoch 2) ends at 0
        diverged = await fetch(5, 1)
        assert diverged.diverging_epoch == (1, 0) and diverged.slice is None
        assert diverged.error == ErrorCode.none
        assert p.replica_leos.get(2, 0) != 5  # a diverging fetch does not move the follower
        beyond = await fetch(9, 2)  # past the end of the leader's epoch 2
        assert beyond.diverging_epoch == (2, 3)
        unknown = await fetch(0, 7)  # an epoch the leader cannot place
        assert unknown.error == ErrorCode.offset_out_of_range

    _run(scenario)


def test_an_epoch_led_without_appending_is_dropped_when_the_new_leader_says_so(
    tmp_path: Path,
) -> None:
    """A broker that became leader (its epoch assigned at its log end) and lost leadership
    before anything was appended keeps an epoch the new leader never had. Named as its last
    fetched epoch, the new leader answers a divergence at the log end it already has; the
    truncation there must drop that epoch (Kafka's ``UnifiedLog.truncateTo``), or every later
    fetch diverges again and the follower never rejoins the ISR (found by ``make fault``,
    pause-broker, 2026-11-29: a follower looped on the divergence for minutes)."""
    stale = Broker(tmp_path / "stale")
    new = Broker(tmp_path / "new")
    for b in (stale, new):
        b.apply(1, _spec(leader=1, epoch=1))
        assert asyncio.run(_produce(b.rm, 3, acks=1)) == (ErrorCode.none, 0)  # epoch 1: 0..2
    stale.apply(1, _spec(leader=1, epoch=9))  # led epoch 9, appended nothing
    stale.apply(1, _spec(leader=2, epoch=10))  # follows the new leader now
    new.apply(1, _spec(leader=1, epoch=10))
    assert stale.rm.follower_fetch_position(TP) == (3, 0, 9)

    async def fetch_from_new() -> FetchResult:
        leo, _start, last_epoch = stale.rm.follower_fetch_position(TP) or (0, 0, -1)
        return await _fetch(new.rm, leo, replica_id=2, leader_epoch=10, last_epoch=last_epoch)

    assert _run(fetch_from_new).diverging_epoch == (1, 3)
    # the follower's truncation, answered from the new leader's epoch cache
    fetcher = LeaderFetcher(2, "127.0.0.1", 19092, stale.rm, FetcherConfig(broker_id=1))
    state = FetchState(10, needs_truncation=True)
    epoch, end = new.rm.partitions[TP].log.leader_epoch_cache.end_offset_for(9)
    assert (epoch, end) == (1, 3)
    fetcher._apply_truncation(TP, state, 9, epoch, end)
    assert not state.needs_truncation
    assert stale.rm.follower_fetch_position(TP) == (3, 0, 1)  # no record lost, epoch 9 gone
    assert stale.rm.partitions[TP].log.leader_epoch_cache.entries == [(1, 0)]
    again = _run(fetch_from_new)
    assert again.diverging_epoch is None and again.error == ErrorCode.none


def test_a_fetch_waiting_on_many_partitions_answers_the_one_appended_to(tmp_path: Path) -> None:
    """A long-poll fetch of many idle partitions (a follower's session) wakes on an append to
    one of them and answers its records; the others answer empty (only the notified partition
    is read again, the others' last read still holds)."""
    b = Broker(tmp_path)
    tps = [TopicPartition("orders", i) for i in range(20)]
    b.apply(1, *(_spec(leader=1, epoch=1, isr=(1,), replicas=(1,), tp=tp) for tp in tps))

    async def scenario() -> list[FetchResult]:
        waiting = asyncio.create_task(
            b.rm.fetch(
                [FetchRequestPartition(tp, 0, 1 << 20) for tp in tps],
                max_wait_ms=60_000,
                min_bytes=1,
                max_bytes=1 << 20,
            )
        )
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done()
        await _produce(b.rm, 3, acks=1, tp=tps[13])
        for _ in range(3):
            await asyncio.sleep(0)
        assert waiting.done()
        return waiting.result()

    results = _run(scenario)
    assert [r.tp for r in results] == tps
    assert [_last_offset(r) for r in results] == [2 if i == 13 else None for i in range(20)]
    assert [r.high_watermark for r in results] == [3 if i == 13 else 0 for i in range(20)]
