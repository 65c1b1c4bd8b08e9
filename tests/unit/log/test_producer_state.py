"""Unit tests for broker.log.producer_state (idempotent producer state and snapshots)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from broker.clock import ManualClock
from broker.log.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    SNAPSHOTS_TO_RETAIN,
    BatchMetadata,
    CompletedTxn,
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerEntry,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    decode_snapshot,
    encode_snapshot,
    snapshot_path,
)
from broker.protocol.errors import ErrorCode, error_code_for
from broker.protocol.records import BatchHeader, SimpleRecord, encode_batch, read_header

pytestmark = pytest.mark.unit

PID = 1000
T0 = 1_700_000_000_000
MAX_SEQ = 2**31 - 1


def batch(
    seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    base_offset: int = 0,
    ts: int = T0,
    transactional: bool = False,
    control: bool = False,
) -> BatchHeader:
    records = [SimpleRecord(value=b"v", key=b"k", timestamp=ts) for _ in range(count)]
    raw = encode_batch(
        records,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=transactional,
        control=control,
    )
    return read_header(raw)


class FakeLog:
    """A list of batch headers standing in for the partition log."""

    def __init__(self) -> None:
        self.batches: list[BatchHeader] = []
        self.next_offset = 0

    def append(
        self,
        seq: int,
        count: int = 1,
        *,
        pid: int = PID,
        epoch: int = 0,
        ts: int = T0,
        transactional: bool = False,
        control: bool = False,
    ) -> BatchHeader:
        h = batch(
            seq,
            count,
            pid=pid,
            epoch=epoch,
            base_offset=self.next_offset,
            ts=ts,
            transactional=transactional,
            control=control,
        )
        self.batches.append(h)
        self.next_offset = h.next_offset
        return h

    def batches_from(self, offset: int) -> Iterator[BatchHeader]:
        return (h for h in self.batches if h.base_offset >= offset)

    def truncate_to(self, offset: int) -> None:
        self.batches = [h for h in self.batches if h.base_offset < offset]
        self.next_offset = offset


def append(
    psm: ProducerStateManager,
    log: FakeLog,
    seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    transactional: bool = False,
) -> BatchHeader:
    """Leader append: check, then append and update with the final offsets."""
    assert (
        psm.check_batch(batch(seq, count, pid=pid, epoch=epoch, transactional=transactional))
        is None
    )
    h = log.append(seq, count, pid=pid, epoch=epoch, transactional=transactional)
    psm.update(h, h.max_timestamp)
    return h


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def psm(tmp_path: Path, clock: ManualClock) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, clock=clock)


# --- sequence and epoch validation ----------------------------------------------------------


def test_in_order_batches_are_accepted(psm: ProducerStateManager) -> None:
    log = FakeLog()
    append(psm, log, 0, 3)
    append(psm, log, 3, 2)
    append(psm, log, 5, 1)
    entry = psm.last_entry(PID)
    assert entry is not None
    assert entry.producer_epoch == 0
    assert entry.last_seq == 5
    assert entry.last_offset == 5
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [(0, 2), (3, 4), (5, 5)]


def test_unknown_producer_accepted_with_any_sequence(psm: ProducerStateManager) -> None:
    assert psm.check_batch(batch(12345, pid=77, epoch=3)) is None


def test_duplicates_of_last_five_return_original_offsets(psm: ProducerStateManager) -> None:
    log = FakeLog()
    log.append(0, 1, pid=999)  # another producer shifts offsets
    psm.update(log.batches[0], T0)
    originals = [append(psm, log, seq * 2, 2) for seq in range(7)]
    retained = originals[-NUM_BATCHES_TO_RETAIN:]
    for orig in retained:
        retry = batch(orig.base_sequence, 2, base_offset=0)
        meta = psm.check_batch(retry)
        assert meta == BatchMetadata(
            orig.base_sequence, orig.base_sequence + 1, orig.base_offset, orig.last_offset, T0
        )
    entry = psm.last_entry(PID)
    assert entry is not None and len(entry.batches) == NUM_BATCHES_TO_RETAIN


def test_duplicate_older_than_five_is_out_of_order(psm: ProducerStateManager) -> None:
    log = FakeLog()
    for seq in range(NUM_BATCHES_TO_RETAIN + 1):
        append(psm, log, seq)
    with pytest.raises(OutOfOrderSequenceError) as exc_info:
        psm.check_batch(batch(0))
    assert error_code_for(exc_info.value) == ErrorCode.out_of_order_sequence_number


def test_same_first_seq_different_length_is_out_of_order(psm: ProducerStateManager) -> None:
    log = FakeLog()
    append(psm, log, 0, 2)
    append(psm, log, 2, 2)
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_batch(batch(0, 3))


def test_gap_is_out_of_order(psm: ProducerStateManager) -> None:
    log = FakeLog()
    append(psm, log, 0, 3)
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_batch(batch(4))
    assert psm.check_batch(batch(3)) is None


def test_check_batch_does_not_mutate(psm: ProducerStateManager) -> None:
    log = FakeLog()
    append(psm, log, 0)
    before = psm.last_entry(PID)
    assert before is not None
    snapshot_before = (before.producer_epoch, list(before.batches), before.last_timestamp)
    psm.check_batch(batch(1, epoch=0))
    psm.check_batch(batch(0, epoch=1))
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_batch(batch(9))
    after = psm.last_entry(PID)
    assert after is not None
    assert (after.producer_epoch, list(after.batches), after.last_timestamp) == snapshot_before


def test_epoch_bump_with_sequence_zero_accepted(psm: ProducerStateManager) -> None:
    log = FakeLog()
    append(psm, log, 0, 5)
    append(psm, log, 0, 2, epoch=1)
    entry = psm.last_entry(PID)
    assert entry is not None
    assert entry.producer_epoch == 1
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [(0, 1)]
    # the retry of the old epoch's batch is now fenced, not a duplicate
    with pytest.raises(InvalidProducerEpochError):
        psm.check_batch(batch(0, 5, epoch=0))


def test_epoch_bump_with_nonzero_sequence_rejected(psm: ProducerStateManager) -> None:
    log = FakeLog()
    append(psm, log, 0, 5)
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_batch(batch(5, epoch=1))


def test_old_epoch_is_fenced(psm: ProducerStateManager) -> None:
    log = FakeLog()
    append(psm, log, 0, epoch=4)
    with pytest.raises(InvalidProducerEpochError) as exc_info:
        psm.check_batch(batch(1, epoch=3))
    assert exc_info.value.code == ErrorCode.invalid_producer_epoch


def test_sequence_wraps_around(psm: ProducerStateManager) -> None:
    log = FakeLog()
    psm.update(log.append(MAX_SEQ - 2, 3), T0)  # unknown producer: any start accepted
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == MAX_SEQ
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_batch(batch(1))
    append(psm, log, 0, 2)
    assert psm.check_batch(batch(2)) is None


def test_batch_spanning_the_wrap(psm: ProducerStateManager) -> None:
    log = FakeLog()
    psm.update(log.append(MAX_SEQ - 5, 4), T0)  # MAX_SEQ-5 .. MAX_SEQ-2
    wrapped = batch(MAX_SEQ - 1, 4)  # MAX_SEQ-1, MAX_SEQ, 0, 1
    assert psm.check_batch(wrapped) is None
    h = log.append(MAX_SEQ - 1, 4)
    psm.update(h, T0)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 1
    assert psm.check_batch(batch(2)) is None
    meta = psm.check_batch(batch(MAX_SEQ - 1, 4))
    assert meta == BatchMetadata(MAX_SEQ - 1, 1, h.base_offset, h.last_offset, T0)


def test_non_idempotent_batches_are_ignored(psm: ProducerStateManager) -> None:
    plain = batch(-1, 3, pid=-1, epoch=-1)
    assert psm.check_batch(plain) is None
    psm.update(plain, T0)
    assert psm.active_producers() == {}


def test_transactional_batch_and_marker(psm: ProducerStateManager) -> None:
    log = FakeLog()
    first = append(psm, log, 0, 2, transactional=True)
    append(psm, log, 2, 1, transactional=True)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.current_txn_first_offset == first.base_offset
    marker = log.append(-1, control=True)
    psm.update(marker, T0, coordinator_epoch=7)
    assert entry.current_txn_first_offset == -1
    assert entry.coordinator_epoch == 7
    assert entry.last_seq == 2  # markers carry no sequence
    assert psm.check_batch(batch(3)) is None


# --- snapshots, load, truncate ----------------------------------------------------------------


def test_snapshot_format_matches_kafka_layout() -> None:
    entry = ProducerEntry(PID, 3, 5, T0, -1)
    entry.batches.append(BatchMetadata(10, 14, 100, 104, T0))
    data = encode_snapshot([entry])
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert (version, count) == (1, 1)
    assert crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (PID, 3, 14, 104, 4, T0, 5, -1)
    assert len(data) == 10 + 46
    (decoded,) = decode_snapshot(data)
    assert list(decoded.batches) == list(entry.batches)
    assert (decoded.producer_epoch, decoded.coordinator_epoch, decoded.last_timestamp) == (3, 5, T0)


def test_decode_rejects_corruption() -> None:
    entry = ProducerEntry(PID, 0, -1, T0)
    entry.batches.append(BatchMetadata(0, 0, 0, 0, T0))
    data = encode_snapshot([entry])
    flipped = bytearray(data)
    flipped[20] ^= 0xFF
    for bad in (data[:-1], data[:5], bytes(flipped), b"\x00\x02" + data[2:], data + b"\x00"):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(bad)


def test_snapshot_round_trip(tmp_path: Path, clock: ManualClock) -> None:
    psm = ProducerStateManager(tmp_path, clock=clock)
    log = FakeLog()
    append(psm, log, 0, 3)
    append(psm, log, 3, 2)
    append(psm, log, 0, 1, pid=2000, epoch=2)
    psm.take_snapshot(log.next_offset)
    path = snapshot_path(tmp_path, log.next_offset)
    assert path.name == "00000000000000000006.snapshot"
    assert path.exists()
    assert not list(tmp_path.glob("*.tmp"))

    fresh = ProducerStateManager(tmp_path, clock=clock)
    assert fresh.latest_snapshot_offset == 6
    fresh.load(0, log.next_offset, log.batches_from)
    a = fresh.last_entry(PID)
    b = fresh.last_entry(2000)
    assert a is not None and b is not None
    assert list(a.batches) == [BatchMetadata(3, 4, 3, 4, T0)]
    assert (b.producer_epoch, b.last_seq, b.last_offset) == (2, 0, 5)
    # the restored state validates exactly like the original
    assert fresh.check_batch(batch(5)) is None
    assert fresh.check_batch(batch(3, 2)) == BatchMetadata(3, 4, 3, 4, T0)
    with pytest.raises(OutOfOrderSequenceError):
        fresh.check_batch(batch(6))


def test_take_snapshot_keeps_newest(tmp_path: Path, clock: ManualClock) -> None:
    psm = ProducerStateManager(tmp_path, clock=clock)
    log = FakeLog()
    for i in range(4):
        append(psm, log, i)
        psm.take_snapshot(log.next_offset)
    assert SNAPSHOTS_TO_RETAIN == 2
    assert psm.snapshot_offsets == [3, 4]
    assert sorted(p.name for p in tmp_path.glob("*.snapshot")) == [
        "00000000000000000003.snapshot",
        "00000000000000000004.snapshot",
    ]


def test_load_replays_after_snapshot(tmp_path: Path, clock: ManualClock) -> None:
    psm = ProducerStateManager(tmp_path, clock=clock)
    log = FakeLog()
    append(psm, log, 0, 2)
    psm.take_snapshot(log.next_offset)
    append(psm, log, 2, 2)
    append(psm, log, 0, 1, pid=3000)
    append(psm, log, 4, 1)

    fresh = ProducerStateManager(tmp_path, clock=clock)
    fresh.load(0, log.next_offset, log.batches_from)
    entry = fresh.last_entry(PID)
    assert entry is not None
    assert [(b.first_seq, b.last_seq, b.first_offset) for b in entry.batches] == [
        (0, 1, 0),
        (2, 3, 2),
        (4, 4, 5),
    ]
    assert fresh.last_entry(3000) is not None
    assert fresh.check_batch(batch(5)) is None


def test_load_without_snapshot_replays_from_log_start(tmp_path: Path, clock: ManualClock) -> None:
    log = FakeLog()
    log.append(0, 2)
    log.append(0, 1, pid=4000)
    log.append(2, 2)
    psm = ProducerStateManager(tmp_path, clock=clock)
    psm.load(2, log.next_offset, log.batches_from)
    # producer 4000's only batch (offset 2) is at the log start: kept; PID re-learned from 3
    assert psm.last_entry(4000) is not None
    entry = psm.last_entry(PID)
    assert entry is not None and [(b.first_seq, b.last_seq) for b in entry.batches] == [(2, 3)]

    psm.load(3, log.next_offset, log.batches_from)
    assert psm.last_entry(4000) is None  # its last offset 2 is below the log start


def test_corrupt_snapshot_is_ignored_and_state_replayed(tmp_path: Path, clock: ManualClock) -> None:
    psm = ProducerStateManager(tmp_path, clock=clock)
    log = FakeLog()
    append(psm, log, 0, 2)
    psm.take_snapshot(log.next_offset)  # 2
    append(psm, log, 2, 2)
    psm.take_snapshot(log.next_offset)  # 4
    append(psm, log, 4, 1)
    corrupt = snapshot_path(tmp_path, 4)
    data = bytearray(corrupt.read_bytes())
    data[-3] ^= 0x55
    corrupt.write_bytes(bytes(data))

    fresh = ProducerStateManager(tmp_path, clock=clock)
    fresh.load(0, log.next_offset, log.batches_from)
    assert not corrupt.exists()
    assert fresh.snapshot_offsets == [2]
    entry = fresh.last_entry(PID)
    assert entry is not None
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [(0, 1), (2, 3), (4, 4)]
    assert fresh.check_batch(batch(5)) is None


def test_truncated_snapshot_falls_back_to_log_start(tmp_path: Path, clock: ManualClock) -> None:
    psm = ProducerStateManager(tmp_path, clock=clock)
    log = FakeLog()
    append(psm, log, 0, 3)
    psm.take_snapshot(log.next_offset)
    path = snapshot_path(tmp_path, 3)
    path.write_bytes(path.read_bytes()[:-7])
    (tmp_path / "00000000000000000003.snapshot.tmp").write_bytes(b"junk")

    fresh = ProducerStateManager(tmp_path, clock=clock)
    assert not (tmp_path / "00000000000000000003.snapshot.tmp").exists()
    fresh.load(0, log.next_offset, log.batches_from)
    assert fresh.latest_snapshot_offset is None
    entry = fresh.last_entry(PID)
    assert entry is not None and entry.last_seq == 2


def test_load_deletes_snapshots_beyond_log_end(tmp_path: Path, clock: ManualClock) -> None:
    psm = ProducerStateManager(tmp_path, clock=clock)
    log = FakeLog()
    append(psm, log, 0, 2)
    psm.take_snapshot(2)
    append(psm, log, 2, 2)
    psm.take_snapshot(4)
    log.truncate_to(2)  # e.g. an unclean shutdown lost the tail
    fresh = ProducerStateManager(tmp_path, clock=clock)
    fresh.load(0, 2, log.batches_from)
    assert fresh.snapshot_offsets == [2]
    assert not snapshot_path(tmp_path, 4).exists()
    entry = fresh.last_entry(PID)
    assert entry is not None and entry.last_seq == 1


def test_truncate_reloads_state(tmp_path: Path, clock: ManualClock) -> None:
    psm = ProducerStateManager(tmp_path, clock=clock)
    log = FakeLog()
    append(psm, log, 0, 2)
    psm.take_snapshot(log.next_offset)  # 2
    append(psm, log, 2, 2)
    append(psm, log, 0, 1, pid=5000)
    psm.take_snapshot(log.next_offset)  # 5
    append(psm, log, 4, 2)

    log.truncate_to(4)  # the follower drops offsets >= 4: PID keeps 0..3, 5000 is gone
    psm.truncate(0, 4, log.batches_from)
    assert psm.snapshot_offsets == [2]
    assert psm.last_entry(5000) is None
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 3 and entry.last_offset == 3
    # the producer's retry of the truncated batch is now appended again, in order
    assert psm.check_batch(batch(4, 2)) is None

    psm.truncate(0, 0, log.batches_from)
    assert psm.active_producers() == {}
    assert psm.latest_snapshot_offset is None


# --- expiry -------------------------------------------------------------------------------------


def test_remove_expired_producers(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    psm = ProducerStateManager(tmp_path, clock=clock, producer_id_expiration_ms=60_000)
    log = FakeLog()
    h = log.append(0, 1, pid=1)
    psm.update(h, clock.time_ms())
    clock.advance(30_000)
    psm.update(log.append(0, 1, pid=2), clock.time_ms())
    clock.advance(29_999)
    psm.remove_expired()
    assert set(psm.active_producers()) == {1, 2}
    clock.advance(1)
    psm.remove_expired()
    assert set(psm.active_producers()) == {2}
    clock.advance(30_000)
    psm.remove_expired()
    assert psm.active_producers() == {}
    # an expired producer is unknown again: any sequence is accepted
    assert psm.check_batch(batch(42, pid=1)) is None


def test_producer_in_transaction_does_not_expire(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    psm = ProducerStateManager(tmp_path, clock=clock, producer_id_expiration_ms=1_000)
    log = FakeLog()
    psm.update(log.append(0, 1, transactional=True), clock.time_ms())
    clock.advance(10_000)
    psm.remove_expired()
    assert psm.last_entry(PID) is not None
    psm.update(log.append(-1, control=True), clock.time_ms() - 5_000)
    psm.remove_expired()
    assert psm.last_entry(PID) is None


def test_load_drops_expired_producers(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = FakeLog()
    log.append(0, 1, pid=1, ts=T0 - 2_000)
    log.append(0, 1, pid=2, ts=T0)
    psm = ProducerStateManager(tmp_path, clock=clock, producer_id_expiration_ms=1_000)
    psm.load(0, log.next_offset, log.batches_from)
    assert set(psm.active_producers()) == {2}


# --- transactions: ongoing, completed, first unstable offset -----------------------------------


def _marker(log: FakeLog, *, pid: int = PID, epoch: int = 0) -> BatchHeader:
    return log.append(-1, pid=pid, epoch=epoch, transactional=True, control=True)


def test_transactions_open_complete_and_the_first_unstable_offset(
    psm: ProducerStateManager,
) -> None:
    log = FakeLog()
    assert psm.first_unstable_offset is None
    append(psm, log, 0, 2, pid=1, transactional=True)  # txn A at 0
    append(psm, log, 0, 1, pid=2, transactional=True)  # txn B at 2
    append(psm, log, 2, 1, pid=1, transactional=True)  # still A
    assert psm.ongoing_transactions() == {0: 1, 2: 2}
    assert psm.first_unstable_offset == 0
    end_a = _marker(log, pid=1)  # offset 4
    completed = psm.update(end_a, T0, coordinator_epoch=3, aborted=True)
    assert completed == CompletedTxn(1, 0, 4, True)
    assert psm.last_stable_offset_for(completed) == 2  # B is still open
    psm.complete_txn(completed)
    assert psm.ongoing_transactions() == {2: 2}
    assert psm.first_unstable_offset == 0  # A's marker is not replicated yet
    psm.on_high_watermark(5)
    assert psm.first_unstable_offset == 2
    end_b = _marker(log, pid=2)  # offset 5
    done_b = psm.update(end_b, T0, coordinator_epoch=3)
    assert done_b == CompletedTxn(2, 2, 5, False)
    assert psm.last_stable_offset_for(done_b) == 6
    psm.complete_txn(done_b)
    psm.on_high_watermark(6)
    assert psm.first_unstable_offset is None


def test_marker_without_data_completes_at_its_own_offset(psm: ProducerStateManager) -> None:
    log = FakeLog()
    append(psm, log, 0, 1, pid=7)  # idempotent only
    marker = _marker(log, pid=7)
    assert psm.update(marker, T0, aborted=True) == CompletedTxn(7, 1, 1, True)


def test_non_transactional_write_inside_a_transaction_is_refused(
    psm: ProducerStateManager,
) -> None:
    log = FakeLog()
    append(psm, log, 0, 1, transactional=True)
    with pytest.raises(InvalidTxnStateError):
        psm.check_batch(batch(1))
    assert psm.check_batch(batch(1, transactional=True)) is None


def test_markers_from_stale_epochs_are_refused(psm: ProducerStateManager) -> None:
    log = FakeLog()
    append(psm, log, 0, 1, epoch=2, transactional=True)
    psm.update(_marker(log, epoch=2), T0, coordinator_epoch=5)
    with pytest.raises(InvalidProducerEpochError):
        psm.check_marker(batch(-1, epoch=1, transactional=True, control=True), 5)
    with pytest.raises(TransactionCoordinatorFencedError):
        psm.check_marker(batch(-1, epoch=2, transactional=True, control=True), 4)
    psm.check_marker(batch(-1, epoch=3, transactional=True, control=True), 6)


def test_open_transactions_survive_snapshot_and_replay(tmp_path: Path, clock: ManualClock) -> None:
    psm = ProducerStateManager(tmp_path, clock=clock)
    log = FakeLog()
    append(psm, log, 0, 1, pid=1, transactional=True)  # 0: A
    append(psm, log, 0, 1, pid=2, transactional=True)  # 1: B
    psm.take_snapshot(log.next_offset)  # both open in the snapshot
    end_a = _marker(log, pid=1)  # 2: abort A
    psm.update(end_a, T0, aborted=True)
    append(psm, log, 0, 1, pid=3, transactional=True)  # 3: C

    markers = {end_a.base_offset: (True, 9)}
    again = ProducerStateManager(tmp_path, clock=clock)
    seen: list[CompletedTxn] = []
    again.load(
        0,
        log.next_offset,
        log.batches_from,
        lambda h: markers[h.base_offset],
        replay_before=2,
        on_completed=seen.append,
    )
    assert again.ongoing_transactions() == {1: 2, 3: 3}
    assert again.first_unstable_offset == 1
    assert seen == [CompletedTxn(1, 0, 2, True)]
    entry = again.last_entry(1)
    assert entry is not None and entry.coordinator_epoch == 9
