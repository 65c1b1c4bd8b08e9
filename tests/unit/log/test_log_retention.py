"""Truncation, log start offset, retention and delayed file deletion (broker/log/log.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.errors import OffsetOutOfRangeError
from broker.log.log import AppendResult, Log
from broker.protocol import records
from broker.topic_config import LogConfig

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
HOUR = 3_600_000


def _batch(n: int = 2, ts: int = NOW) -> bytes:
    return records.encode_batch(
        [records.SimpleRecord(b"value-%03d" % i + b"x" * 30, None, ts) for i in range(n)]
    )


def _append(log: Log, n: int = 2, ts: int = NOW, epoch: int = 0) -> AppendResult:
    buf = bytearray(_batch(n, ts))
    return log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=epoch)


def _offsets(log: Log) -> list[int]:
    out: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        assert chunk is not None
        data = chunk.read_bytes()
        for h in records.iter_batches(data):
            out.extend(range(h.base_offset, h.next_offset))
        offset = chunk.last_offset + 1
    return out


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def _open(tmp_path: Path, clock: ManualClock, **cfg: object) -> Log:
    base = LogConfig(segment_bytes=400, file_delete_delay_ms=60_000)
    return Log.open(
        tmp_path / "t-0",
        dataclasses.replace(base, **cfg),
        clock=clock,  # type: ignore[arg-type]
    )


def _files(tmp_path: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith(suffix))


# --- truncation -------------------------------------------------------------------------


def test_truncate_to_across_segments(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    for i in range(20):
        _append(log, 2, epoch=i // 5)
    assert len(log.segments) > 3
    log.truncate_to(15)  # offset 15 is inside batch 14..15: the batch goes
    assert log.log_end_offset == 14
    assert _offsets(log) == list(range(14))
    assert all(s.base_offset <= 14 for s in log.segments)
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 10)]
    assert _files(tmp_path, ".log.deleted")  # removed segments wait for deletion
    r = _append(log, 3, epoch=7)
    assert (r.first_offset, r.last_offset) == (14, 16)
    assert _offsets(log) == list(range(17))
    log.truncate_to(100)  # beyond the end: no-op
    assert log.log_end_offset == 17
    log.close()
    reopened = Log.open(tmp_path / "t-0", log.config, clock=clock)  # unclean: re-validated
    assert _offsets(reopened) == list(range(17))
    assert reopened.leader_epoch_cache.entries == [(0, 0), (1, 10), (7, 14)]
    reopened.close()


def test_truncate_to_a_segment_base_empties_the_segment(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    for _ in range(12):
        _append(log)
    base = log.segments[2].base_offset
    log.truncate_to(base)
    assert log.log_end_offset == base
    assert log.active_segment.base_offset == base
    assert log.active_segment.size == 0
    _append(log)
    assert _offsets(log) == list(range(base + 2))
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    for _ in range(10):
        _append(log, epoch=3)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (500, 500, 500)
    assert [s.base_offset for s in log.segments] == [500]
    assert log.leader_epoch_cache.entries == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10, 100)
    assert _append(log, epoch=4).first_offset == 500
    log.close()


def test_truncate_below_the_first_segment(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    for _ in range(12):
        _append(log)
    log.advance_log_start_offset(log.segments[2].base_offset)
    first_base = log.segments[0].base_offset
    assert first_base > 0
    log.truncate_to(first_base - 1)
    assert log.log_start_offset == log.log_end_offset == first_base - 1
    log.close()


# --- log start offset -------------------------------------------------------------------


def test_advance_log_start_offset(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    for _ in range(12):
        _append(log, epoch=1)
    bases = [s.base_offset for s in log.segments]
    target = bases[2] + 1
    log.advance_log_start_offset(target)
    assert log.log_start_offset == target
    # segments wholly below the new start are gone; the one holding it stays
    assert [s.base_offset for s in log.segments] == bases[2:]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 100)
    chunk = log.read(target, 100)
    assert chunk is not None and chunk.first_offset == target - 1  # the batch holding it
    assert log.leader_epoch_cache.entries == [(1, target)]
    log.advance_log_start_offset(3)  # lower: no-op
    assert log.log_start_offset == target
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start_offset(log.log_end_offset + 1)
    log.advance_log_start_offset(log.log_end_offset)
    assert log.read(log.log_end_offset, 100) is None
    log.close()


# --- retention --------------------------------------------------------------------------


def test_time_retention_deletes_old_segments_after_a_delay(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = _open(tmp_path, clock, retention_ms=10 * HOUR)
    for i in range(15):
        _append(log, ts=NOW + i * HOUR)
    bases = [s.base_offset for s in log.segments]
    max_ts = [s.max_timestamp for s in log.segments]
    assert len(bases) > 3
    clock.advance(13 * HOUR)
    keep_from = next(i for i, ts in enumerate(max_ts) if clock.time_ms() - ts <= 10 * HOUR)
    old_slice = log.read(0, 100)
    assert old_slice is not None
    deleted = log.delete_old_segments()
    assert deleted == keep_from > 0
    assert [s.base_offset for s in log.segments] == bases[keep_from:]
    assert log.log_start_offset == bases[keep_from]
    # files renamed, not yet removed; an in-flight fetch can still read them
    assert len(_files(tmp_path, ".log.deleted")) == keep_from
    assert old_slice.read_bytes()[:8] == (0).to_bytes(8, "big")
    clock.advance(59_999)
    log.delete_pending_files()
    assert len(_files(tmp_path, ".log.deleted")) == keep_from
    clock.advance(1)
    log.delete_pending_files()
    assert _files(tmp_path, ".deleted") == []
    assert _files(tmp_path, ".log") == [f"{b:020d}.log" for b in bases[keep_from:]]
    log.close()


def test_expired_active_segment_is_rolled_then_deleted(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, retention_ms=HOUR, file_delete_delay_ms=0)
    for _ in range(10):
        _append(log, ts=NOW)
    leo = log.log_end_offset
    clock.advance(2 * HOUR)
    assert log.delete_old_segments() > 0
    assert [s.base_offset for s in log.segments] == [leo]
    assert log.log_start_offset == log.log_end_offset == leo
    assert _files(tmp_path, ".log") == [f"{leo:020d}.log"]
    assert _files(tmp_path, ".deleted") == []
    assert log.delete_old_segments() == 0  # an empty active segment is never deleted
    log.close()


def test_size_retention(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, retention_bytes=1000)
    for _ in range(20):
        _append(log)
    sizes = [s.size for s in log.segments]
    total = sum(sizes)
    assert total > 1000
    deleted = log.delete_old_segments()
    # the oldest segments go while what remains stays at or above the limit
    expected, excess = 0, total - 1000
    for size in sizes:
        if excess - size < 0:
            break
        excess -= size
        expected += 1
    assert deleted == expected > 0
    assert log.size_in_bytes >= 1000
    assert log.size_in_bytes - log.segments[0].size < 1000
    log.close()


def test_retention_never_passes_the_high_watermark(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, retention_ms=HOUR)
    for _ in range(12):
        _append(log)
    bases = [s.base_offset for s in log.segments]
    log.high_watermark = bases[2]
    clock.advance(2 * HOUR)
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == bases[2]
    log.close()


def test_compact_only_topic_keeps_old_segments(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, retention_ms=HOUR, cleanup_policy=("compact",))
    for _ in range(12):
        _append(log)
    clock.advance(2 * HOUR)
    assert log.delete_old_segments() == 0
    log.close()


def test_close_removes_pending_files(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    for _ in range(12):
        _append(log)
    log.advance_log_start_offset(log.segments[-1].base_offset)
    assert _files(tmp_path, ".deleted")
    log.close()
    assert _files(tmp_path, ".deleted") == []


def test_delete_removes_the_directory(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    _append(log)
    log.delete()
    assert list(tmp_path.iterdir()) == []
