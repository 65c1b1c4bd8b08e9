"""Log directory failure in the log layer (KIP-112): broker/log/log_dir_failure.py, the
``storage_operation`` guard of broker/log/local_log.py and the log manager's bookkeeping of
offline directories.

Real logs in ``tmp_path``; I/O errors are injected by tests/fakes/failing_disk.py (ENOSPC
on every write and sync under one directory, or a disk that fills up after N bytes).
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker.log.errors import KafkaStorageError, LogDirOfflineError
from broker.log.log import Log
from broker.log.log_dir_failure import LogDirFailureChannel
from broker.log.log_manager import LogManager
from broker.protocol import records
from broker.protocol.errors import ErrorCode, error_code_for
from broker.topic_config import LogConfig
from broker.types import TopicPartition
from tests.fakes.failing_disk import FailingDisk

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
CONFIG = LogConfig(file_delete_delay_ms=0)
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def _batch(n: int = 3, tag: bytes = b"x") -> bytearray:
    return bytearray(
        records.encode_batch([records.SimpleRecord(tag * 40, None, NOW) for _ in range(n)])
    )


def _append(log: Log, n: int = 3, tag: bytes = b"x") -> int:
    buf = _batch(n, tag)
    return log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0).first_offset


def _values(log: Log) -> list[bytes]:
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data is not None
        raw = data.read_bytes()
        for header in records.iter_batches(raw):
            out.extend(r.value or b"" for r in records.decode_records(raw, header))
        offset = data.last_offset + 1
    return out


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def _manager(dirs: list[Path], clock: ManualClock) -> LogManager:
    manager = LogManager(dirs, CONFIG, clock=clock, broker_id=1, cluster_id="c")
    manager.startup(lambda _topic: CONFIG)
    return manager


# --- the channel -------------------------------------------------------------------------


def test_channel_reports_each_dir_once_and_replays_to_late_listeners(tmp_path: Path) -> None:
    channel = LogDirFailureChannel()
    early: list[Path] = []
    channel.add_listener(early.append)
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    assert channel.status(d1) is channel.status(d1)  # one shared status per dir
    assert channel.mark_offline(d1, "error while appending", OSError(errno.EIO, "EIO"))
    assert not channel.mark_offline(d1, "again")
    assert channel.is_offline(d1) and not channel.is_offline(d2)
    assert early == [d1]
    assert "EIO" in (channel.status(d1).reason or "")
    late: list[Path] = []
    channel.add_listener(late.append)  # told about d1 at once
    channel.mark_offline(d2, "error while flushing")
    assert late == [d1, d2] and early == [d1, d2]
    assert channel.offline_dirs == [d1, d2]


def test_storage_errors_map_to_kafka_storage_error() -> None:
    assert error_code_for(LogDirOfflineError("x")) == ErrorCode.kafka_storage_error
    assert error_code_for(OSError(errno.ENOSPC, "full")) == ErrorCode.kafka_storage_error


# --- one log -----------------------------------------------------------------------------


def test_a_failed_append_takes_the_dir_offline_and_nothing_more_is_written(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = LogDirFailureChannel()
    log_dir = tmp_path / "d"
    log = Log.open(log_dir / "a-0", CONFIG, clock=clock, dir_status=channel.status(log_dir))
    _append(log, tag=b"1")
    size = log.active_segment.log_path.stat().st_size
    disk = FailingDisk(log_dir, monkeypatch)
    disk.armed = True
    with pytest.raises(LogDirOfflineError, match="appending to a-0"):
        _append(log, tag=b"2")
    assert channel.offline_dirs == [log_dir] and log.offline
    assert log.log_end_offset == 3  # the failed batch is not part of the log
    disk.armed = False  # the disk "works" again, but the directory stays offline
    for attempt in (
        lambda: _append(log, tag=b"3"),
        lambda: log.read(0, 1 << 20),
        log.roll,
        lambda: log.truncate_to(0),
        log.flush,
        log.delete_old_segments,
    ):
        with pytest.raises(LogDirOfflineError, match="offline log directory"):
            attempt()
    assert log.active_segment.log_path.stat().st_size == size  # nothing more reached disk
    assert disk.failures == 1


def test_a_log_without_a_channel_goes_offline_by_itself(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "d" / "a-0", CONFIG, clock=clock)
    _append(log)
    FailingDisk(tmp_path / "d", monkeypatch).armed = True
    with pytest.raises(LogDirOfflineError, match="flushing a-0"):
        log.flush()
    assert log.offline and log.dir_status.reason is not None


def test_a_torn_write_on_a_full_disk_is_recovered_at_the_next_start(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills in the middle of a batch (a short write): the append fails, and the
    half-written batch is truncated by recovery when the directory is loaded again."""
    channel = LogDirFailureChannel()
    log_dir = tmp_path / "d"
    log = Log.open(log_dir / "a-0", CONFIG, clock=clock, dir_status=channel.status(log_dir))
    for i in range(4):
        _append(log, tag=b"%d" % i)
    disk = FailingDisk(log_dir, monkeypatch)
    disk.fill_after(50)  # less than one batch
    with pytest.raises(LogDirOfflineError):
        _append(log, tag=b"9")
    torn = log.active_segment.log_path.stat().st_size
    assert torn == log.active_segment.size + 50, "setup: half a batch on disk"
    log.close_handles()
    disk.armed = False
    again = Log.open(log_dir / "a-0", CONFIG, clock=clock)  # unclean: recovers from 0
    assert again.log_end_offset == 12
    assert again.active_segment.log_path.stat().st_size == torn - 50
    assert _values(again) == [bytes([d]) * 40 for d in b"0123" for _ in range(3)]
    assert _append(again, tag=b"5") == 12
    again.close()


# --- the log manager ---------------------------------------------------------------------


def test_a_failed_dir_goes_offline_and_the_others_keep_working(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    manager = _manager([d1, d2], clock)
    told: list[Path] = []
    manager.failure_channel.add_listener(told.append)
    logs = {tp: manager.get_or_create_log(tp, CONFIG) for tp in (A0, B0, A1)}
    assert [manager.log_dir_of(tp) for tp in (A0, B0, A1)] == [d1, d2, d1]
    for log in logs.values():
        _append(log)
    manager.checkpoint()
    before = (d1 / RECOVERY_POINT_CHECKPOINT).read_bytes()

    disk = FailingDisk(d1, monkeypatch)
    disk.armed = True
    with pytest.raises(LogDirOfflineError):
        _append(logs[A0])
    assert told == [d1] and manager.offline_log_dirs == [d1] and manager.live_log_dirs == [d2]
    # A1 lives in the same directory: refused at once, without touching the disk
    failures = disk.failures
    with pytest.raises(LogDirOfflineError):
        _append(logs[A1])
    assert disk.failures == failures

    assert manager.handle_log_dir_failure(d1) == [A0, A1]
    assert set(manager.all_logs()) == {B0} and manager.get_log(A0) is None
    assert logs[A0].closed and logs[A1].closed
    _append(logs[B0])  # the other directory is fine
    # new partitions go to the online directory; an old one whose log may be in the
    # offline directory is not re-created empty
    assert manager.get_or_create_log(TopicPartition("c", 0), CONFIG).dir.parent == d2
    with pytest.raises(LogDirOfflineError, match="are offline"):
        manager.get_or_create_log(A0, CONFIG, is_new=False)
    # periodic tasks skip the offline directory and do not fail
    disk.armed = False
    manager.checkpoint()
    manager.flush_dirty()
    manager.cleanup()
    assert (d1 / RECOVERY_POINT_CHECKPOINT).read_bytes() == before
    assert set(OffsetCheckpointFile(d2 / RECOVERY_POINT_CHECKPOINT).read()) == {
        B0,
        TopicPartition("c", 0),
    }
    manager.shutdown()
    assert (d2 / CLEAN_SHUTDOWN_FILE).exists()
    assert not (d1 / CLEAN_SHUTDOWN_FILE).exists()  # recovered at the next start

    # the directory works again after a restart: its logs are loaded and recovered
    again = _manager([d1, d2], clock)
    assert again.offline_log_dirs == []
    assert {tp: log.log_end_offset for tp, log in again.all_logs().items()} == {
        A0: 3,
        A1: 3,
        B0: 6,
        TopicPartition("c", 0): 0,
    }
    again.shutdown()


def test_a_checkpoint_or_flush_failure_in_a_worker_thread_takes_the_dir_offline(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    manager = _manager([d1, d2], clock)
    _append(manager.get_or_create_log(A0, CONFIG))
    _append(manager.get_or_create_log(B0, CONFIG))
    disk = FailingDisk(d2, monkeypatch)
    disk.armed = True
    errors: list[BaseException] = []

    def periodic() -> None:
        try:
            clock.advance(CONFIG.flush_ms)
            manager.flush_dirty()
            manager.checkpoint()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    worker = threading.Thread(target=periodic)
    worker.start()
    worker.join()
    assert errors == []
    assert manager.offline_log_dirs == [d2]
    assert manager.failure_channel.status(d2).reason is not None
    manager.handle_log_dir_failure(d2)
    disk.armed = False
    manager.shutdown()


def test_startup_takes_an_unusable_dir_offline_and_fails_only_if_all_are(
    tmp_path: Path, clock: ManualClock
) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    bad.write_text("not a directory")  # mkdir fails with an OSError
    manager = LogManager([bad, good], CONFIG, clock=clock, broker_id=1, cluster_id="c")
    manager.startup(lambda _topic: CONFIG)
    assert manager.offline_log_dirs == [bad] and manager.live_log_dirs == [good]
    assert manager.get_or_create_log(A0, CONFIG).dir.parent == good
    manager.shutdown()

    worse = tmp_path / "worse"
    worse.write_text("not a directory either")
    doomed = LogManager([bad, worse], CONFIG, clock=clock, broker_id=1, cluster_id="c")
    with pytest.raises(KafkaStorageError, match="none of the log dirs"):
        doomed.startup(lambda _topic: CONFIG)
