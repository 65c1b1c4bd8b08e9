"""Flushing, the recovery point, and what survives a crash (broker/log/log.py, segment.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log import segment as segment_module
from broker.log.log import AppendResult, Log
from broker.log.segment import LogSegment
from broker.protocol import records
from broker.topic_config import LogConfig

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=400)


def _append(log: Log, n: int = 2, *, pid: int = -1, seq: int = -1) -> AppendResult:
    buf = bytearray(
        records.encode_batch(
            [records.SimpleRecord(b"x" * 30, None, NOW) for _ in range(n)],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
        )
    )
    return log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def test_flush_fsyncs_only_changed_segments(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    for _ in range(10):
        _append(log)
    assert len(log.segments) > 2
    synced: list[int] = []
    real = segment_module._fdatasync

    def spy(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(segment_module, "_fdatasync", spy)
    log.flush()
    assert sorted(synced) == sorted(s.fd for s in log.segments)
    assert log.recovery_point == log.log_end_offset
    assert not any(s.needs_flush for s in log.segments)
    synced.clear()
    log.flush()
    assert synced == []  # nothing changed
    log.update_config(LogConfig(segment_bytes=1 << 20))  # no roll on the next append
    _append(log)
    log.flush()
    assert synced == [log.active_segment.fd]
    log.close()


def test_roll_schedules_a_flush_of_the_old_segment(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    for _ in range(3):
        _append(log)
    log.roll()
    assert log.pending_roll_flush == log.log_end_offset
    log.flush(log.pending_roll_flush)
    assert log.pending_roll_flush is None
    assert log.recovery_point == log.active_segment.base_offset
    # the rolled segment's indexes were trimmed and are no longer held open
    old = log.segments[0]
    assert not old.offset_index.is_open and not old.time_index.is_open
    log.close()


def test_append_during_a_threaded_flush_stays_dirty(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    _append(log)
    real = segment_module._fdatasync
    appended: list[AppendResult] = []

    def fsync_while_the_loop_appends(fd: int) -> None:
        real(fd)
        if not appended:
            appended.append(_append(log))  # what the event loop might do meanwhile

    monkeypatch.setattr(segment_module, "_fdatasync", fsync_while_the_loop_appends)
    log.flush(up_to=2)
    assert log.recovery_point == 2
    assert log.active_segment.needs_flush  # the concurrent append is not marked durable
    log.close()


def test_truncation_during_a_flush_keeps_the_recovery_point(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    for _ in range(5):
        _append(log)
    real = LogSegment.flush
    done: list[bool] = []

    def flush_then_truncate(self: LogSegment) -> None:
        real(self)
        if not done:
            done.append(True)
            log.truncate_to(4)

    monkeypatch.setattr(LogSegment, "flush", flush_then_truncate)
    log.flush()
    assert log.log_end_offset == 4
    assert log.recovery_point <= 4
    log.close()


def test_producer_state_survives_a_crash(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    for i in range(6):
        _append(log, pid=7, seq=2 * i)
    assert list((tmp_path / "t-0").glob("*.snapshot"))  # taken on roll
    original = _append(log, pid=7, seq=12)
    log.close_handles()  # crash
    reopened = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    retry = _append(reopened, pid=7, seq=12)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (original.first_offset, original.last_offset)
    reopened.close()


def test_new_segment_files_and_directory_are_synced(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    for _ in range(5):
        _append(log)
    synced_dirs: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else ""
        if os.path.isdir(target):
            synced_dirs.append(target)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    log.flush()
    if os.path.exists("/proc/self/fd"):
        assert str(tmp_path / "t-0") in synced_dirs  # the rolled segments' names are durable
    log.close()


def test_a_new_logs_directories_are_synced_at_its_first_flush_not_at_creation(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating a log costs no fsync of directories (10,000 partitions made 30,000 of them);
    its first flush makes its directory and its entry in the log dir durable, as Kafka's
    LocalLog.flush does for new segments. An existing log opened again syncs nothing new."""
    synced_dirs: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.isdir(target):
            synced_dirs.append(target)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    log = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    assert synced_dirs == []
    _append(log)  # (its leader-epoch checkpoint is written durably, as in Kafka)
    log.flush()
    assert set(synced_dirs) == {str(tmp_path), str(tmp_path / "t-0")}
    synced_dirs.clear()
    log.flush()
    assert synced_dirs == []
    log.close()
    again = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    again.flush()
    assert str(tmp_path) not in synced_dirs
    again.close()
