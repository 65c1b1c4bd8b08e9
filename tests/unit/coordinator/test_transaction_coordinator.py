"""The transaction coordinator with stand-ins for its neighbours: a replica manager that keeps
what is appended to ``__transaction_state`` (and can fail), a broker pool that answers
WriteTxnMarkers like partition leaders (and can refuse), a metadata cache and a manual clock.

Covers: routing (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), InitProducerId (new id,
epoch bump, fencing an open transaction), AddPartitions/AddOffsets, EndTxn (markers to every
partition, then CompleteCommit written; a retry after success succeeds), marker retries and
dropped partitions of deleted topics, a new coordinator loading the log and finishing a
transaction left in PrepareCommit, the timeout abort and transactional-id expiration."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.transaction import persistence
from broker.coordinator.transaction.coordinator import TransactionCoordinator
from broker.coordinator.transaction.markers import TransactionMarkerChannel
from broker.coordinator.transaction.state import TxnState
from broker.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC, partition_for
from broker.coordinator.transaction.transaction_state_manager import TxnPartition
from broker.metadata.cache import BrokerInfo, MetadataCache, PartitionInfo
from broker.protocol import records
from broker.protocol.errors import ErrorCode
from broker.replication.replica_manager import ProduceResult
from broker.types import BrokerId, TopicPartition
from tests.harness.waiting import wait_for_async

pytestmark = pytest.mark.unit

TXN_PARTITIONS = 5
T0 = 1_700_000_000_000
A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


class FakeSlice:
    def __init__(self, data: bytes, last_offset: int) -> None:
        self._data = data
        self.size = len(data)
        self.last_offset = last_offset

    def read_bytes(self) -> bytes:
        return self._data


class FakeLog:
    """An in-memory log of whole batches (what the coordinator reads when it loads)."""

    def __init__(self) -> None:
        self.blobs: list[tuple[int, bytes]] = []  # (base offset, batch bytes)
        self.log_start_offset = 0

    @property
    def log_end_offset(self) -> int:
        if not self.blobs:
            return 0
        base, blob = self.blobs[-1]
        (header,) = list(records.iter_batches(blob))
        return base + header.record_count

    def append(self, blob: bytes) -> None:
        self.blobs.append((self.log_end_offset, blob))

    def read(self, offset: int, _max: int, *, max_offset: int, min_one_batch: bool) -> Any:
        for base, blob in self.blobs:
            (header,) = list(records.iter_batches(blob))
            if base + header.record_count > offset and base < max_offset:
                return FakeSlice(blob, base + header.record_count - 1)
        return None


class FakePartition:
    def __init__(self) -> None:
        self.log = FakeLog()


class RecordingReplicaManager:
    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, FakePartition] = {}
        self.error = ErrorCode.none

    async def append_records(
        self, entries: dict[TopicPartition, bytes], *, required_acks: int, timeout_ms: int
    ) -> dict[TopicPartition, ProduceResult]:
        assert required_acks == -1, "transaction state must wait for the ISR"
        out = {}
        for tp, blob in entries.items():
            if self.error is ErrorCode.none:
                self.partitions.setdefault(tp, FakePartition()).log.append(blob)
            out[tp] = ProduceResult(self.error)
        return out

    def states(self, partition: int) -> list[tuple[str, TxnState | None]]:
        """(transactional id, state or None for a tombstone) of every record written."""
        from broker.coordinator.transaction.transaction_log import decode_key, decode_value

        out = []
        part = self.partitions.get(TopicPartition(TRANSACTION_STATE_TOPIC, partition))
        for _base, blob in part.log.blobs if part else []:
            for header in records.iter_batches(blob):
                for rec in records.decode_records(blob, header):
                    assert rec.key is not None
                    value = decode_value(rec.value)
                    out.append((decode_key(rec.key), None if value is None else value.state))
        return out


class FakeLeaders:
    """Answers WriteTxnMarkers for every partition with ``codes`` (default NONE)."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, Any]] = []
        self.codes: dict[TopicPartition, list[ErrorCode]] = {}

    async def request(self, target: int, api_key: int, version: int, body: Any) -> Any:
        from kio.schema.write_txn_markers.v1.response import (
            WritableTxnMarkerPartitionResult,
            WritableTxnMarkerResult,
            WritableTxnMarkerTopicResult,
            WriteTxnMarkersResponse,
        )

        assert (api_key, version) == (27, 1)
        self.requests.append((target, body))
        markers = []
        for m in body.markers:
            topics = []
            for t in m.topics:
                parts = []
                for p in t.partition_indexes:
                    queue = self.codes.get(TopicPartition(str(t.name), int(p)), [])
                    code = queue.pop(0) if queue else ErrorCode.none
                    parts.append(
                        WritableTxnMarkerPartitionResult(partition_index=p, error_code=code)
                    )
                topics.append(WritableTxnMarkerTopicResult(name=t.name, partitions=tuple(parts)))
            markers.append(WritableTxnMarkerResult(producer_id=m.producer_id, topics=tuple(topics)))
        return WriteTxnMarkersResponse(markers=tuple(markers))

    def written(self) -> list[tuple[TopicPartition, bool, int]]:
        return [
            (TopicPartition(str(t.name), int(p)), bool(m.transaction_result), int(m.producer_epoch))
            for _target, body in self.requests
            for m in body.markers
            for t in m.topics
            for p in t.partition_indexes
        ]


class Ids:
    def __init__(self) -> None:
        self.next = 5000

    async def next_id(self) -> int:
        self.next += 1
        return self.next


def _metadata() -> MetadataCache:
    md = MetadataCache("cluster")
    md.set_brokers([BrokerInfo(BrokerId(1), "127.0.0.1", 9092)])
    parts = [PartitionInfo(p, 1, 0, (1,), (1,)) for p in range(2)]
    md.update_partitions("a", None, parts)
    md.update_partitions(
        "__consumer_offsets", None, [PartitionInfo(p, 1, 0, (1,), (1,)) for p in range(50)]
    )
    return md


Setup = tuple[TransactionCoordinator, RecordingReplicaManager, FakeLeaders, ManualClock]


@pytest.fixture
def setup() -> Setup:
    clock = ManualClock(T0)
    config = BrokerConfig({"transaction.state.log.num.partitions": str(TXN_PARTITIONS)})
    rm = RecordingReplicaManager()
    leaders = FakeLeaders()
    md = _metadata()
    markers = TransactionMarkerChannel(md, leaders, retry_backoff_s=0.001)  # type: ignore[arg-type]
    coordinator = TransactionCoordinator(
        config,
        clock,
        1,
        md,
        rm,
        Ids(),
        None,
        markers,  # type: ignore[arg-type]
    )
    return coordinator, rm, leaders, clock


def _own(coordinator: TransactionCoordinator, txn_id: str, *, loaded: bool = True) -> int:
    p = partition_for(txn_id, TXN_PARTITIONS)
    coordinator._partitions[p] = TxnPartition(p, 3, loaded=loaded)
    return p


async def _settle(predicate: Callable[[], bool], what: str) -> None:
    await wait_for_async(predicate, 30, what)


def test_routing(setup: Setup) -> None:
    coordinator, *_ = setup

    async def run() -> None:
        assert await coordinator.init_producer_id("t", 60_000) == (
            ErrorCode.not_coordinator,
            -1,
            -1,
        )
        _own(coordinator, "t", loaded=False)
        code, _, _ = await coordinator.init_producer_id("t", 60_000)
        assert code is ErrorCode.coordinator_load_in_progress
        assert (await coordinator.init_producer_id("", 60_000))[0] is ErrorCode.invalid_request
        _own(coordinator, "t")
        code, _, _ = await coordinator.init_producer_id("t", 900_001)
        assert code is ErrorCode.invalid_transaction_timeout
        code, pid, epoch = await coordinator.init_producer_id(None, 0)
        assert code is ErrorCode.none and pid > 0 and epoch == 0

    asyncio.run(run())


def test_commit_writes_markers_then_complete(setup: Setup) -> None:
    coordinator, rm, leaders, _clock = setup

    async def run() -> None:
        coordinator.markers.start()
        p = _own(coordinator, "t")
        code, pid, epoch = await coordinator.init_producer_id("t", 60_000)
        assert (code, epoch) == (ErrorCode.none, 0)
        assert await coordinator.add_partitions("t", pid, epoch, [A0, A1]) is ErrorCode.none
        assert await coordinator.add_offsets("t", pid, epoch, "grp") is ErrorCode.none
        meta = coordinator._partitions[p].transactions["t"]
        offsets_tp = coordinator.offsets_partition("grp")
        assert meta.partitions == {A0, A1, offsets_tp}
        assert await coordinator.end_txn("t", pid, epoch, commit=True) is ErrorCode.none
        await _settle(lambda: meta.state is TxnState.COMPLETE_COMMIT, "CompleteCommit")
        assert sorted(leaders.written()) == sorted(
            [(A0, True, 0), (A1, True, 0), (offsets_tp, True, 0)]
        )
        assert [s for _id, s in rm.states(p)] == [
            TxnState.EMPTY,
            TxnState.ONGOING,
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.COMPLETE_COMMIT,
        ]
        # a retry of the EndTxn after success succeeds; the other outcome is refused
        assert await coordinator.end_txn("t", pid, epoch, commit=True) is ErrorCode.none
        assert (
            await coordinator.end_txn("t", pid, epoch, commit=False) is ErrorCode.invalid_txn_state
        )
        await coordinator.markers.close()

    asyncio.run(run())


def test_markers_are_retried_and_dropped_for_deleted_topics(setup: Setup) -> None:
    coordinator, _rm, leaders, _clock = setup

    async def run() -> None:
        coordinator.markers.start()
        p = _own(coordinator, "t")
        _code, pid, epoch = await coordinator.init_producer_id("t", 60_000)
        gone = TopicPartition("gone", 0)
        coordinator.metadata.update_partitions("gone", None, [PartitionInfo(0, 1, 0, (1,), (1,))])
        await coordinator.add_partitions("t", pid, epoch, [A0, gone])
        leaders.codes[A0] = [ErrorCode.not_leader_or_follower, ErrorCode.not_enough_replicas]
        coordinator.metadata.remove_topic("gone")
        assert await coordinator.end_txn("t", pid, epoch, commit=False) is ErrorCode.none
        meta = coordinator._partitions[p].transactions["t"]
        await _settle(lambda: meta.state is TxnState.COMPLETE_ABORT, "CompleteAbort")
        assert [tp for tp, _c, _e in leaders.written()] == [A0, A0, A0]  # two refusals, then ok
        await coordinator.markers.close()

    asyncio.run(run())


def test_init_during_an_open_transaction_fences_and_aborts(setup: Setup) -> None:
    coordinator, _rm, leaders, _clock = setup

    async def run() -> None:
        coordinator.markers.start()
        p = _own(coordinator, "t")
        _code, pid, epoch = await coordinator.init_producer_id("t", 60_000)
        await coordinator.add_partitions("t", pid, epoch, [A0])
        code, _, _ = await coordinator.init_producer_id("t", 60_000)
        assert code is ErrorCode.concurrent_transactions  # the client retries
        meta = coordinator._partitions[p].transactions["t"]
        await _settle(lambda: meta.state is TxnState.COMPLETE_ABORT, "the fenced abort")
        assert leaders.written() == [(A0, False, 1)]  # abort marker with the bumped epoch
        code, pid2, epoch2 = await coordinator.init_producer_id("t", 60_000)
        assert (code, pid2, epoch2) == (ErrorCode.none, pid, 2)
        # the zombie (epoch 0) is fenced
        assert await coordinator.add_partitions("t", pid, 0, [A1]) is ErrorCode.producer_fenced
        await coordinator.markers.close()

    asyncio.run(run())


def test_failed_state_write_leaves_nothing_pending(setup: Setup) -> None:
    coordinator, rm, _leaders, _clock = setup

    async def run() -> None:
        p = _own(coordinator, "t")
        _code, pid, epoch = await coordinator.init_producer_id("t", 60_000)
        rm.error = ErrorCode.not_enough_replicas
        code = await coordinator.add_partitions("t", pid, epoch, [A0])
        assert code is ErrorCode.coordinator_not_available
        meta = coordinator._partitions[p].transactions["t"]
        assert meta.pending is None and meta.state is TxnState.EMPTY
        rm.error = ErrorCode.none
        assert await coordinator.add_partitions("t", pid, epoch, [A0]) is ErrorCode.none

    asyncio.run(run())


def test_a_new_coordinator_loads_and_finishes_prepared_transactions(setup: Setup) -> None:
    coordinator, rm, leaders, clock = setup

    async def run() -> None:
        p = _own(coordinator, "t")
        _code, pid, epoch = await coordinator.init_producer_id("t", 60_000)
        await coordinator.add_partitions("t", pid, epoch, [A0])
        # the commit's PrepareCommit is written, then this coordinator dies (no markers)
        assert await coordinator.end_txn("t", pid, epoch, commit=True) is ErrorCode.none
        _own(coordinator, "other")  # an Ongoing transaction of another id, same log
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, p)
        log = rm.partitions[tp].log
        coordinator._partitions.clear()
        coordinator.markers._pending.clear()

        coordinator.markers.start()
        coordinator.on_role_change(tp, True, 4)
        await _settle(lambda: coordinator._partitions[p].loaded, "load")
        state = coordinator._partitions[p]
        assert state.coordinator_epoch == 4
        meta = state.transactions["t"]
        await _settle(lambda: meta.state is TxnState.COMPLETE_COMMIT, "completed after load")
        assert leaders.written() == [(A0, True, 0)]
        assert rm.states(p)[-1] == ("t", TxnState.COMPLETE_COMMIT)
        assert log.log_end_offset == len(rm.states(p))
        clock.advance(1)
        await coordinator.markers.close()

    asyncio.run(run())


def test_timed_out_transactions_are_aborted_and_idle_ids_expire(setup: Setup) -> None:
    coordinator, rm, leaders, clock = setup

    async def run() -> None:
        coordinator.markers.start()
        p = _own(coordinator, "t")
        _code, pid, epoch = await coordinator.init_producer_id("t", 1000)
        await coordinator.add_partitions("t", pid, epoch, [A0])
        clock.advance(1000)
        assert await coordinator.abort_timed_out_transactions() == 0
        clock.advance(1)
        assert await coordinator.abort_timed_out_transactions() == 1
        meta = coordinator._partitions[p].transactions["t"]
        await _settle(lambda: meta.state is TxnState.COMPLETE_ABORT, "timeout abort")
        assert leaders.written() == [(A0, False, epoch + 1)]
        assert meta.producer_epoch == epoch + 1
        assert await coordinator.expire_transactional_ids() == 0
        clock.advance(int(coordinator.expiration_ms))
        assert await coordinator.expire_transactional_ids() == 1
        assert "t" not in coordinator._partitions[p].transactions
        assert rm.states(p)[-1] == ("t", None)  # a tombstone
        assert coordinator.describe("t")[0] is ErrorCode.transactional_id_not_found
        await coordinator.markers.close()

    asyncio.run(run())


def test_describe_and_list(setup: Setup) -> None:
    coordinator, _rm, _leaders, clock = setup

    async def run() -> None:
        _own(coordinator, "t")
        _code, pid, epoch = await coordinator.init_producer_id("t", 60_000)
        await coordinator.add_partitions("t", pid, epoch, [A1, A0])
        code, desc = coordinator.describe("t")
        assert code is ErrorCode.none and desc is not None
        assert (desc.state, desc.producer_id, desc.partitions) == ("Ongoing", pid, (A0, A1))
        assert desc.start_ms == T0
        assert coordinator.list_transactions() == (ErrorCode.none, [("t", pid, "Ongoing")], [])
        assert coordinator.list_transactions(["Empty", "Bogus"]) == (ErrorCode.none, [], ["Bogus"])
        clock.advance(10)
        assert coordinator.list_transactions(duration_ms=10)[1] == []
        assert coordinator.list_transactions(duration_ms=9)[1] == [("t", pid, "Ongoing")]

    asyncio.run(run())


def test_verify_partitions(setup: Setup) -> None:
    coordinator, *_ = setup

    async def run() -> None:
        _own(coordinator, "t")
        _code, pid, epoch = await coordinator.init_producer_id("t", 60_000)
        await coordinator.add_partitions("t", pid, epoch, [A0])
        assert coordinator.verify_partitions("t", pid, epoch, [A0, A1]) == {
            A0: ErrorCode.none,
            A1: ErrorCode.transaction_abortable,
        }

    asyncio.run(run())


def test_persistence_round_trip() -> None:
    blob = persistence.tombstone_batch(["x", "y"], T0)
    loaded = persistence.LoadedTransactions()
    persistence.apply_records(loaded, [blob])
    assert loaded.values == {} and loaded.records == 2


# --- KIP-939: two-phase commit ------------------------------------------------------------------


def test_keep_prepared_keeps_the_transaction_fences_its_writer_and_never_times_out(
    setup: Setup,
) -> None:
    """InitProducerId v6 (Enable2Pc, KeepPreparedTxn) on an open transaction: it stays open
    under a bumped epoch (the writer's epoch is fenced), the response names the pair it was
    written with, the timer never aborts it, and the new epoch commits it with markers of the
    new epoch."""
    coordinator, rm, leaders, clock = setup

    async def run() -> None:
        coordinator.markers.start()
        p = _own(coordinator, "t")
        _code, pid, epoch = await coordinator.init_producer_id("t", 1000)
        await coordinator.add_partitions("t", pid, epoch, [A0, A1])
        kept = await coordinator.init_producer("t", 1000, enable_two_phase=True, keep_prepared=True)
        assert kept.error is ErrorCode.none
        assert (kept.producer_id, kept.producer_epoch) == (pid, epoch + 1)
        assert (kept.ongoing_producer_id, kept.ongoing_producer_epoch) == (pid, epoch)
        meta = coordinator._partitions[p].transactions["t"]
        assert meta.state is TxnState.ONGOING and meta.partitions == {A0, A1}
        assert meta.two_phase
        # the writer is fenced; the transaction outlives any timeout
        assert await coordinator.add_partitions("t", pid, epoch, [A0]) is ErrorCode.producer_fenced
        clock.advance(30 * 86_400_000)
        assert await coordinator.abort_timed_out_transactions() == 0
        # a second take-over still names the pair the transaction was written with
        again = await coordinator.init_producer("t", 0, enable_two_phase=True, keep_prepared=True)
        assert (again.producer_epoch, again.ongoing_producer_epoch) == (epoch + 2, epoch)
        # the old owner cannot end it; the new one commits it
        assert await coordinator.end_txn("t", pid, epoch + 1, commit=True) is (
            ErrorCode.producer_fenced
        )
        assert await coordinator.end_txn("t", pid, epoch + 2, commit=True) is ErrorCode.none
        await _settle(lambda: meta.state is TxnState.COMPLETE_COMMIT, "CompleteCommit")
        assert sorted(leaders.written()) == [(A0, True, epoch + 2), (A1, True, epoch + 2)]
        assert (meta.ongoing_producer_id, meta.ongoing_producer_epoch) == (-1, -1)
        # the kept pair was persisted: a new coordinator loading the log sees it
        values = [persistence.metadata_from_value("t", v) for v in _values(rm, p)]
        kept_states = [(m.state, m.ongoing_producer_epoch, m.two_phase) for m in values]
        assert (TxnState.ONGOING, epoch, True) in kept_states
        await coordinator.markers.close()

    asyncio.run(run())


def _values(rm: RecordingReplicaManager, p: int) -> list[Any]:
    from broker.coordinator.transaction.transaction_log import decode_value

    out = []
    log = rm.partitions[TopicPartition(TRANSACTION_STATE_TOPIC, p)].log
    for _base, blob in log.blobs:
        for header in records.iter_batches(blob):
            for rec in records.decode_records(blob, header):
                value = decode_value(rec.value)
                if value is not None:
                    out.append(value)
    return out


def test_keep_prepared_on_a_settled_id_is_a_plain_bump_and_bad_combinations_are_refused(
    setup: Setup,
) -> None:
    coordinator, *_ = setup

    async def run() -> None:
        _own(coordinator, "t")
        _code, pid, epoch = await coordinator.init_producer_id("t", 60_000)
        plain = await coordinator.init_producer("t", 60_000, keep_prepared=True)
        assert (plain.error, plain.producer_epoch) == (ErrorCode.none, epoch + 1)
        assert (plain.ongoing_producer_id, plain.ongoing_producer_epoch) == (-1, -1)
        # keepPreparedTxn with an expected producer id and epoch: INVALID_REQUEST (KIP-939)
        bad = await coordinator.init_producer("t", 60_000, (pid, epoch + 1), keep_prepared=True)
        assert bad.error is ErrorCode.invalid_request
        # no transactional id: neither flag makes sense
        none = await coordinator.init_producer(None, 0, enable_two_phase=True)
        assert none.error is ErrorCode.invalid_request
        # two-phase commit switched off on the broker: refused as Kafka refuses it
        coordinator.two_phase_enabled = False
        off = await coordinator.init_producer("t", 60_000, enable_two_phase=True)
        assert off.error is ErrorCode.transactional_id_authorization_failed
        # without keepPreparedTxn an open two-phase transaction is aborted, as in Kafka
        coordinator.two_phase_enabled = True
        ok = await coordinator.init_producer("t", 60_000, enable_two_phase=True)
        await coordinator.add_partitions("t", ok.producer_id, ok.producer_epoch, [A0])
        fenced = await coordinator.init_producer("t", 60_000)
        assert fenced.error is ErrorCode.concurrent_transactions

    asyncio.run(run())


def test_kept_pair_round_trips_through_the_log_format() -> None:
    from broker.coordinator.transaction.transaction_log import (
        TransactionLogValue,
        decode_value,
        encode_value,
    )

    value = TransactionLogValue(
        producer_id=7,
        producer_epoch=3,
        timeout_ms=2**31 - 1,
        state=TxnState.ONGOING,
        partitions=frozenset({A0}),
        last_update_ms=T0,
        start_ms=T0,
        ongoing_producer_id=7,
        ongoing_producer_epoch=2,
    )
    raw = encode_value(value)
    assert raw[:2] == b"\x00\x01"  # the flexible version carries the tagged fields
    assert decode_value(raw) == value
    plain = TransactionLogValue(7, 3, 60_000, TxnState.ONGOING, frozenset({A0}), T0, T0)
    assert encode_value(plain)[:2] == b"\x00\x00"  # as Kafka 3.9 writes it
