"""Transactions in the partition log (KIP-98): markers appended for the coordinator end
transactions, aborted ones go to the segment's ``.txnindex``, the last stable offset bounds
read_committed reads, followers rebuild the same state, and recovery and truncation keep
the index and the producer state consistent with the ``.log``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.log import AppendOrigin, AppendResult, Log
from broker.log.producer_state import InvalidProducerEpochError, InvalidTxnStateError
from broker.log.transaction_index import AbortedTxn
from broker.protocol import records
from broker.protocol.control_records import ControlType, encode_marker_batch
from broker.protocol.records import InvalidRecordError
from broker.topic_config import LogConfig

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000


def _txn_batch(pid: int, seq: int, n: int = 2, *, epoch: int = 0) -> bytes:
    recs = [records.SimpleRecord(b"v%d" % i, b"k", NOW) for i in range(n)]
    return records.encode_batch(
        recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
    )


def _plain(n: int = 1) -> bytes:
    return records.encode_batch([records.SimpleRecord(b"p", b"k", NOW) for _ in range(n)])


def _marker(pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 1) -> bytes:
    return encode_marker_batch(
        ControlType.COMMIT if commit else ControlType.ABORT,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=NOW,
    )


def _append(log: Log, raw: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
    buf = bytearray(raw)
    return log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0, origin=origin)


def _open(path: Path, **cfg: object) -> Log:
    config = dataclasses.replace(LogConfig(), **cfg)  # type: ignore[arg-type]
    return Log.open(path / "t-0", config, clock=ManualClock(NOW))


def _setup(log: Log) -> None:
    """0-1: txn of 10 | 2: plain | 3-4: txn of 11 | 5: abort 10 | 6-7: txn of 10 (epoch 0
    again, a new transaction) | 8: commit 11."""
    _append(log, _txn_batch(10, 0))
    _append(log, _plain())
    _append(log, _txn_batch(11, 0))
    _append(log, _marker(10, False), AppendOrigin.COORDINATOR)
    _append(log, _txn_batch(10, 2))
    _append(log, _marker(11, True), AppendOrigin.COORDINATOR)


def test_markers_end_transactions_and_move_the_last_stable_offset(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _append(log, _txn_batch(10, 0))
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset(log.log_end_offset) == 0  # the open transaction
    _append(log, _plain())
    _append(log, _marker(10, False), AppendOrigin.COORDINATOR)
    assert log.last_stable_offset(3) == 0  # the marker is not replicated yet (HW 3)
    log.high_watermark = 4
    assert log.last_stable_offset(4) == 4
    assert log.active_segment.txn_index.entries == [AbortedTxn(10, 0, 3, 4)]


def test_aborted_transactions_of_a_range(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _setup(log)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset(9) == 6  # producer 10's second transaction is open
    assert log.collect_aborted_transactions(0, 9) == [(10, 0)]
    assert log.collect_aborted_transactions(6, 9) == []
    assert log.active_segment.txn_index.entries == [AbortedTxn(10, 0, 5, 3)]  # 11 still open


def test_only_coordinators_write_markers_and_stale_ones_are_refused(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _append(log, _txn_batch(10, 0, epoch=2))
    with pytest.raises(InvalidRecordError):
        _append(log, _marker(10, True, epoch=2))
    with pytest.raises(InvalidProducerEpochError):
        _append(log, _marker(10, True, epoch=1), AppendOrigin.COORDINATOR)
    _append(log, _marker(10, True, epoch=2, coordinator_epoch=5), AppendOrigin.COORDINATOR)
    _append(log, _txn_batch(10, 2, epoch=2))
    from broker.log.producer_state import TransactionCoordinatorFencedError

    with pytest.raises(TransactionCoordinatorFencedError):
        _append(log, _marker(10, False, epoch=2, coordinator_epoch=4), AppendOrigin.COORDINATOR)


def test_a_plain_write_inside_an_open_transaction_is_refused(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _append(log, _txn_batch(10, 0))
    idempotent = records.encode_batch(
        [records.SimpleRecord(b"x", b"k", NOW)], producer_id=10, producer_epoch=0, base_sequence=2
    )
    with pytest.raises(InvalidTxnStateError):
        _append(log, idempotent)


def test_coordinator_writes_skip_sequence_checks(tmp_path: Path) -> None:
    log = _open(tmp_path)
    for _ in range(3):  # a group coordinator's TxnOffsetCommits all start at sequence 0
        result = _append(log, _txn_batch(20, 0, n=1), AppendOrigin.COORDINATOR)
        assert not result.duplicate
    assert log.log_end_offset == 3


def test_a_follower_rebuilds_the_same_state(tmp_path: Path) -> None:
    leader = _open(tmp_path / "leader")
    _setup(leader)
    data = leader.read(0, 1 << 20)
    assert data is not None
    raw = data.read_bytes()
    follower = _open(tmp_path / "follower")
    follower.append_as_follower(raw, list(records.iter_batches(raw)))
    follower.high_watermark = follower.log_end_offset
    assert follower.active_segment.txn_index.entries == leader.active_segment.txn_index.entries
    assert follower.last_stable_offset(9) == 6
    assert follower.producer_state.ongoing_transactions() == {6: 10}


def test_recovery_rebuilds_the_txn_index_and_open_transactions(tmp_path: Path) -> None:
    log = _open(tmp_path, segment_bytes=200)  # several segments
    _setup(log)
    assert len(log.segments) > 1
    entries = [e for s in log.segments for e in s.txn_index.entries]
    log.close_handles()  # a crash: no clean-shutdown marker, no final snapshot
    for path in (tmp_path / "t-0").glob("*.txnindex"):
        path.unlink()
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.unlink()
    again = Log.open(
        tmp_path / "t-0",
        dataclasses.replace(LogConfig(), segment_bytes=200),
        clock=ManualClock(NOW),
        recovery_point=0,
    )
    assert [e for s in again.segments for e in s.txn_index.entries] == entries
    again.high_watermark = again.log_end_offset
    assert again.last_stable_offset(again.log_end_offset) == 6
    assert again.collect_aborted_transactions(0, again.log_end_offset) == [(10, 0)]


def test_truncation_reopens_a_transaction_its_marker_was_cut_from(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _setup(log)
    log.truncate_to(5)  # drops the abort marker of producer 10 (and what follows)
    assert log.active_segment.txn_index.entries == []
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset(5) == 0
    assert log.producer_state.ongoing_transactions() == {0: 10, 3: 11}
