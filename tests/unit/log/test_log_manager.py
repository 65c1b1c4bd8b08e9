"""The log manager: log dirs, start-up, placement, checkpoints, deletion, shutdown."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
    read_properties,
)
from broker.log.errors import InconsistentBrokerMetadataError, KafkaStorageError
from broker.log.log import Log
from broker.log.log_manager import LogManager
from broker.protocol import records
from broker.topic_config import LogConfig
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=500, file_delete_delay_ms=0)


def _append(log: Log, n: int = 3, ts: int = NOW) -> None:
    buf = bytearray(
        records.encode_batch([records.SimpleRecord(b"x" * 40, None, ts) for _ in range(n)])
    )
    log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def _manager(
    dirs: list[Path], clock: ManualClock, broker_id: int = 1, cluster_id: str | None = "cluster-A"
) -> LogManager:
    return LogManager(dirs, CONFIG, clock=clock, broker_id=broker_id, cluster_id=cluster_id)


def test_startup_writes_meta_properties(tmp_path: Path, clock: ManualClock) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = _manager(dirs, clock)
    manager.startup(lambda topic: CONFIG)
    for d in dirs:
        props = read_properties(d / "meta.properties")
        assert props == {"cluster.id": "cluster-A", "version": "0", "broker.id": "1"}
    manager.shutdown()
    with pytest.raises(InconsistentBrokerMetadataError):
        _manager(dirs, clock, broker_id=2).startup(lambda topic: CONFIG)
    with pytest.raises(InconsistentBrokerMetadataError):
        _manager(dirs, clock, cluster_id="other").startup(lambda topic: CONFIG)
    learner = _manager(dirs, clock, cluster_id=None)
    learner.startup(lambda topic: CONFIG)
    assert learner.cluster_id == "cluster-A"
    learner.shutdown()


def test_new_logs_go_to_the_dir_with_fewest_partitions(tmp_path: Path, clock: ManualClock) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2", tmp_path / "d3"]
    manager = _manager(dirs, clock)
    manager.startup(lambda topic: CONFIG)
    for p in range(6):
        manager.get_or_create_log(TopicPartition("t", p), CONFIG)
    assert [len(list(d.glob("t-*"))) for d in dirs] == [2, 2, 2]
    tp = TopicPartition("t", 0)
    assert manager.get_or_create_log(tp, CONFIG) is manager.get_log(tp)
    assert manager.get_log(TopicPartition("t", 99)) is None
    manager.delete_log(TopicPartition("t", 0))
    manager.delete_log(TopicPartition("t", 3))
    created = manager.get_or_create_log(TopicPartition("u", 0), CONFIG)
    assert created.dir.parent == dirs[0]
    manager.shutdown()


def test_shutdown_and_clean_startup(tmp_path: Path, clock: ManualClock) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = _manager(dirs, clock)
    manager.startup(lambda topic: CONFIG)
    ends: dict[TopicPartition, int] = {}
    for p in range(4):
        log = manager.get_or_create_log(TopicPartition("orders-eu", p), CONFIG)
        for _ in range(p + 3):
            _append(log)
        ends[log.topic_partition] = log.log_end_offset
    manager.get_log(TopicPartition("orders-eu", 1)).advance_log_start_offset(6)  # type: ignore[union-attr]
    manager.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
    recovery = {
        **OffsetCheckpointFile(dirs[0] / RECOVERY_POINT_CHECKPOINT).read(),
        **OffsetCheckpointFile(dirs[1] / RECOVERY_POINT_CHECKPOINT).read(),
    }
    assert recovery == ends
    starts = {
        **OffsetCheckpointFile(dirs[0] / LOG_START_OFFSET_CHECKPOINT).read(),
        **OffsetCheckpointFile(dirs[1] / LOG_START_OFFSET_CHECKPOINT).read(),
    }
    assert starts[TopicPartition("orders-eu", 1)] == 6

    again = _manager(dirs, clock)
    again.startup(lambda topic: CONFIG)
    for d in dirs:
        assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # removed once loaded
    logs = again.all_logs()
    assert {tp: log.log_end_offset for tp, log in logs.items()} == ends
    assert logs[TopicPartition("orders-eu", 1)].log_start_offset == 6
    assert all(log.recovery_point == log.log_end_offset for log in logs.values())
    again.shutdown()


def test_unclean_startup_recovers_and_checkpoints(tmp_path: Path, clock: ManualClock) -> None:
    manager = _manager([tmp_path / "d"], clock)
    manager.startup(lambda topic: CONFIG)
    log = manager.get_or_create_log(TopicPartition("t", 0), CONFIG)
    for _ in range(10):
        _append(log)
    manager.checkpoint()
    assert OffsetCheckpointFile(tmp_path / "d" / RECOVERY_POINT_CHECKPOINT).read() == {
        TopicPartition("t", 0): 0
    }
    with open(log.active_segment.log_path, "ab") as f:
        f.write(b"\x00garbage after a crash")
    log.close_handles()  # crash: no marker, no close
    again = _manager([tmp_path / "d"], clock)
    again.startup(lambda topic: CONFIG)
    recovered = again.get_log(TopicPartition("t", 0))
    assert recovered is not None and recovered.log_end_offset == 30
    assert OffsetCheckpointFile(tmp_path / "d" / RECOVERY_POINT_CHECKPOINT).read() == {
        TopicPartition("t", 0): 30
    }
    again.shutdown()


def test_startup_skips_unrelated_and_finishes_deletions(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "lost+found").mkdir()
    (d / "README").write_text("hello")
    (d / "t-0.0123456789abcdef0123456789abcdef-delete").mkdir()
    (d / "t-0.0123456789abcdef0123456789abcdef-delete" / "00000000000000000000.log").write_bytes(
        b"x"
    )
    (d / "t-1.0123456789abcdef0123456789abcdef-future").mkdir()
    (d / "recovery-point-offset-checkpoint").write_text("garbage")
    manager = _manager([d], clock)
    manager.startup(lambda topic: CONFIG)
    assert manager.all_logs() == {}
    assert not list(d.glob("*-delete"))
    assert (d / "lost+found").is_dir() and (d / "README").exists()
    manager.shutdown()


def test_duplicate_partition_across_dirs_is_refused(tmp_path: Path, clock: ManualClock) -> None:
    (tmp_path / "d1" / "t-0").mkdir(parents=True)
    (tmp_path / "d2" / "t-0").mkdir(parents=True)
    with pytest.raises(KafkaStorageError):
        _manager([tmp_path / "d1", tmp_path / "d2"], clock).startup(lambda topic: CONFIG)


def test_delete_log(tmp_path: Path, clock: ManualClock) -> None:
    manager = _manager([tmp_path / "d"], clock)
    manager.startup(lambda topic: CONFIG)
    log = manager.get_or_create_log(TopicPartition("t", 0), CONFIG)
    _append(log)
    manager.checkpoint()
    manager.delete_log(TopicPartition("t", 0))
    assert manager.get_log(TopicPartition("t", 0)) is None
    assert [p.name for p in (tmp_path / "d").iterdir() if p.is_dir()] == []
    assert OffsetCheckpointFile(tmp_path / "d" / RECOVERY_POINT_CHECKPOINT).read() == {}
    manager.shutdown()


def test_periodic_tasks(tmp_path: Path, clock: ManualClock) -> None:
    config = LogConfig(segment_bytes=500, file_delete_delay_ms=0, retention_ms=1000)
    manager = _manager([tmp_path / "d"], clock)
    manager.startup(lambda topic: config)
    log = manager.get_or_create_log(TopicPartition("t", 0), config)
    for _ in range(10):
        _append(log)
    assert len(log.segments) > 2
    assert log.pending_roll_flush is not None
    manager.flush_dirty()
    assert log.pending_roll_flush is None
    assert log.recovery_point == log.active_segment.base_offset
    clock.advance(5000)
    assert manager.cleanup() > 0
    assert log.log_start_offset == log.log_end_offset
    manager.shutdown()


def test_deleted_log_keeps_its_files_open_for_the_delete_delay(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Found by the protocol fuzzer (issue 17): a fetch response built from a segment of a
    topic deleted before the response was written failed with "I/O operation on closed
    file" and killed the connection's writer. The files now stay open (the directory is gone
    at once) until file.delete.delay.ms has passed."""
    config = LogConfig(segment_bytes=500, file_delete_delay_ms=60_000)
    manager = _manager([tmp_path / "d"], clock)
    manager.startup(lambda topic: config)
    log = manager.get_or_create_log(TopicPartition("t", 0), config)
    _append(log)
    fetched = log.read(0, 1 << 20)
    assert fetched is not None
    manager.delete_log(TopicPartition("t", 0))
    assert [p.name for p in (tmp_path / "d").iterdir() if p.is_dir()] == []
    assert log.closed
    assert not fetched.file.closed  # still readable with sendfile or pread
    region = os.pread(fetched.file.fileno(), fetched.size, fetched.position)
    assert len(region) == fetched.size == len(fetched.read_bytes())
    clock.advance(60_001)
    manager.cleanup()
    assert fetched.file.closed
    with pytest.raises(ValueError):
        fetched.file.fileno()
    manager.shutdown()
