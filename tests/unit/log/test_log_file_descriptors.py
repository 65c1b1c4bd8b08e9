"""File descriptors a partition holds (broker/log/index.py, segment.py, transaction_index.py):
an active segment's indexes hold a descriptor only from their first write, so an idle
partition holds one (its ``.log``), and the index files stay exact on disk for recovery."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.log import Log
from broker.log.offset_index import OffsetIndex
from broker.log.segment import LogSegment
from broker.log.time_index import TimeIndex
from broker.log.transaction_index import AbortedTxn, TransactionIndex
from broker.protocol import records
from broker.topic_config import LogConfig

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd"),
]

NOW = 1_700_000_000_000
INDEX_BYTES = 4000
CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=100, segment_index_bytes=INDEX_BYTES)
BASE = 1000


def _open_fds() -> set[str]:
    """The targets of this process's open descriptors."""
    out: set[str] = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            continue  # the listing's own descriptor, closed meanwhile
    return out


def _fds_under(directory: Path) -> list[str]:
    """Open descriptors on files under ``directory``, by file name (sorted)."""
    prefix = str(directory) + os.sep
    return sorted(Path(t).name for t in _open_fds() if t.startswith(prefix))


def _append(log: Log, batches: int, ts: int = NOW) -> None:
    for i in range(batches):
        buf = bytearray(
            records.encode_batch(
                [records.SimpleRecord(b"v" * 40, b"k", ts + i * 10 + j) for j in range(2)]
            )
        )
        log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)


def _index_entries(log: Log) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
    return [
        (
            [s.offset_index.entry(i) for i in range(s.offset_index.entries)],
            [s.time_index.entry(i) for i in range(s.time_index.entries)],
        )
        for s in log.segments
    ]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


# --- IndexFile ------------------------------------------------------------------------------


def test_open_for_append_preallocates_without_holding_a_descriptor(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / f"{BASE:020d}.index", BASE)
    index.open_for_append(85)
    assert index.is_open and not index.holds_fd
    assert _fds_under(tmp_path) == []
    assert index.path.read_bytes() == bytes(80)  # exists, preallocated, all zeros
    assert index.append(BASE + 5, 4200)  # the first write opens the file ...
    assert index.holds_fd
    assert _fds_under(tmp_path) == [index.path.name]
    assert index.append(BASE + 9, 8000)  # ... and keeps it
    assert _fds_under(tmp_path) == [index.path.name]
    index.trim()
    index.close()
    assert not index.is_open and not index.holds_fd
    assert _fds_under(tmp_path) == []
    assert index.path.stat().st_size == 16
    again = OffsetIndex.load(index.path, BASE, log_size=10_000)
    assert [again.entry(i) for i in range(again.entries)] == [(BASE + 5, 4200), (BASE + 9, 8000)]


def test_a_closed_index_refuses_writes(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / f"{BASE:020d}.index", BASE)
    index.open_for_append(80)
    index.close()  # closed before any write: still not appendable
    with pytest.raises(ValueError, match="not open for appending"):
        index.append(BASE + 20, 9000)
    assert not index.holds_fd


def test_reopened_index_is_rewritten_exactly_and_not_held(tmp_path: Path) -> None:
    path = tmp_path / f"{BASE:020d}.timeindex"
    index = TimeIndex(path, BASE)
    index.open_for_append(120)
    index.maybe_append(100, BASE + 2)
    index.maybe_append(200, BASE + 5)
    index.close()
    loaded = TimeIndex.load(path, BASE)
    path.write_bytes(path.read_bytes()[:24] + b"\x07" * 96)  # stale bytes after the entries
    loaded.open_for_append(240)  # e.g. make_active after a clean shutdown
    assert not loaded.holds_fd
    raw = path.read_bytes()
    assert len(raw) == 240
    assert raw[24:] == bytes(216)  # stale bytes zeroed
    assert TimeIndex.load(path, BASE).entries == 2


def test_truncate_and_trim_work_by_name_before_the_first_write(tmp_path: Path) -> None:
    path = tmp_path / f"{BASE:020d}.index"
    index = OffsetIndex(path, BASE)
    index.open_for_append(80)
    for rel in (3, 7, 11):
        index.append(BASE + rel, rel * 100)
    index.close()
    loaded = OffsetIndex.load(path, BASE, log_size=10_000)
    loaded.open_for_append(80)
    loaded.truncate_to(BASE + 7)  # a truncation without any write since the reopen
    assert not loaded.holds_fd
    assert path.read_bytes() == index.path.read_bytes()[:8] + bytes(72)  # removed entries zeroed
    loaded.trim()
    assert not loaded.holds_fd
    assert path.stat().st_size == 8
    loaded.close()


def test_a_vanished_index_file_is_rewritten_on_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / f"{BASE:020d}.index"
    index = OffsetIndex(path, BASE)
    index.open_for_append(80)
    index.append(BASE + 3, 300)
    index.close()
    loaded = OffsetIndex.load(path, BASE, log_size=10_000)
    loaded.open_for_append(80)
    path.unlink()
    loaded.append(BASE + 5, 500)
    assert path.stat().st_size == 80
    assert OffsetIndex.load(path, BASE, log_size=10_000).entries == 2
    loaded.close()


# --- segments and logs ----------------------------------------------------------------------


def test_new_active_segments_hold_only_their_log_descriptor(tmp_path: Path) -> None:
    # the whole process's descriptors are counted: garbage of earlier tests (files not
    # closed yet) is collected first and not while counting, or its closing skews the count
    gc.collect()
    gc.disable()
    try:
        before = len(os.listdir("/proc/self/fd"))
        segments = [
            LogSegment.create(tmp_path, base, max_index_size=INDEX_BYTES, created_ms=NOW)
            for base in range(0, 50_000, 1000)
        ]
        opened = len(os.listdir("/proc/self/fd")) - before
    finally:
        gc.enable()
    assert opened == len(segments)
    assert _fds_under(tmp_path) == sorted(s.log_path.name for s in segments)
    for seg in segments:
        assert seg.offset_index.is_open and seg.time_index.is_open
        assert seg.offset_index.path.stat().st_size == INDEX_BYTES  # preallocated as before
        assert seg.time_index.path.stat().st_size == INDEX_BYTES // 12 * 12
    for seg in segments:
        seg.close()
    assert _fds_under(tmp_path) == []
    assert all(s.offset_index.path.stat().st_size == 0 for s in segments)  # trimmed on close


def test_idle_and_lightly_written_partitions_hold_one_descriptor(
    tmp_path: Path, clock: ManualClock
) -> None:
    logs = [Log.open(tmp_path / f"t-{p}", CONFIG, clock=clock) for p in range(20)]
    assert len(_fds_under(tmp_path)) == len(logs)
    for log in logs:
        _append(log, 1)  # below index.interval.bytes: no index entry yet
    assert all(log.active_segment.offset_index.entries == 0 for log in logs)
    assert len(_fds_under(tmp_path)) == len(logs)
    _append(logs[0], 4)  # past the interval: the first entries open both indexes
    assert logs[0].active_segment.offset_index.entries > 0
    assert len(_fds_under(tmp_path)) == len(logs) + 2
    logs[0].roll()  # the rolled segment's indexes are closed; the new one holds its .log
    assert len(_fds_under(tmp_path / "t-0")) == 2
    assert [n.endswith(".log") for n in _fds_under(tmp_path / "t-0")] == [True, True]
    for log in logs:
        log.close()
    assert _fds_under(tmp_path) == []


def test_aborted_transaction_index_holds_no_descriptor(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / f"{BASE:020d}.txnindex")
    index.append(AbortedTxn(7, BASE, BASE + 3, BASE + 4))
    index.append(AbortedTxn(8, BASE + 5, BASE + 9, BASE + 10))
    assert _fds_under(tmp_path) == []
    index.flush()
    assert TransactionIndex(index.path).entries == index.entries


@pytest.mark.parametrize("clean", [True, False])
def test_index_entries_survive_close_and_unclean_stop(
    tmp_path: Path, clock: ManualClock, clean: bool
) -> None:
    pdir = tmp_path / "t-0"
    log = Log.open(pdir, CONFIG, clock=clock)
    _append(log, 12)
    log.roll()
    _append(log, 12, ts=NOW + 10_000)
    expected = _index_entries(log)
    assert all(offsets and times for offsets, times in expected)
    if clean:
        log.close()
    else:
        log.close_handles()  # a SIGKILL: nothing trimmed, the active indexes preallocated
        assert log.active_segment.offset_index.path.stat().st_size == INDEX_BYTES
    again = Log.open(pdir, CONFIG, clock=clock, clean_shutdown=clean)
    reopened = _index_entries(again)
    if clean:  # the roll (and close) adds a final time-index entry for the max timestamp
        assert reopened == [*expected[:-1], (expected[-1][0], reopened[-1][1])]
        assert reopened[-1][1][: len(expected[-1][1])] == expected[-1][1]
    else:  # rebuilt by recovery exactly as the appends built them
        assert reopened == expected
    active = again.active_segment  # reopened (or rebuilt), not yet written: no index fd
    assert not active.offset_index.holds_fd and not active.time_index.holds_fd
    assert _fds_under(pdir) == sorted(s.log_path.name for s in again.segments)
    again.close_handles()  # a second crash before any new index entry
    third = Log.open(pdir, CONFIG, clock=clock)  # recovery point 0: everything re-read
    assert _index_entries(third)[:-1] == reopened[:-1]
    assert _index_entries(third)[-1][0] == reopened[-1][0]
    _append(third, 6, ts=NOW + 20_000)
    assert third.active_segment.offset_index.holds_fd
    assert third.active_segment.offset_index.entries > len(reopened[-1][0])
    third.close()
