"""Recovery's reused read window (``broker.log.segment._RecoveryWindow``): a recovery with a
window smaller than a batch, or ending mid-batch, finds what one with a whole-file window
finds, and the window's reads stop at the end of the file."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log import segment as segment_module
from broker.log.log import Log
from broker.log.segment import _RecoveryWindow
from broker.protocol import records
from broker.topic_config import LogConfig

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=20_000, index_interval_bytes=300, segment_index_bytes=8000)


def _fill(log: Log, batches: int) -> None:
    rng = random.Random(7)
    for i in range(batches):
        n = rng.randrange(1, 12)
        buf = bytearray(
            records.encode_batch(
                [
                    records.SimpleRecord(b"v%d" % j + b"x" * rng.randrange(40), b"k", NOW + i)
                    for j in range(n)
                ]
            )
        )
        log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)


def _state(log: Log) -> tuple[object, ...]:
    seg = log.active_segment
    return (
        log.log_end_offset,
        seg.size,
        seg.max_timestamp,
        seg.offset_of_max_timestamp,
        seg.offset_index.path.read_bytes(),
        seg.time_index.path.read_bytes(),
    )


def _recovered(
    directory: Path, window: int, tail: bytes, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, ...]:
    """Write a log of one segment (plus ``tail``), crash it, recover it with ``window``."""
    clock = ManualClock(NOW)
    log = Log.open(directory, CONFIG, clock=clock)
    _fill(log, 60)
    assert len(log.segments) == 1
    path = log.active_segment.log_path
    log.close_handles()  # a crash: nothing flushed, no clean-shutdown marker
    with open(path, "ab") as f:
        f.write(tail)
    monkeypatch.setattr(segment_module, "_RECOVER_WINDOW", window)
    reopened = Log.open(directory, CONFIG, clock=clock)
    state = _state(reopened)
    reopened.close()
    return state


@pytest.mark.parametrize("window", [61, 100, 257, 1000, 4096])
@pytest.mark.parametrize("tail", [b"", b"\x00" * 30, bytes(range(200))])
def test_small_windows_recover_what_a_whole_file_window_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int, tail: bytes
) -> None:
    reference = _recovered(tmp_path / "ref-0", 1 << 20, tail, monkeypatch)
    assert _recovered(tmp_path / "small-0", window, tail, monkeypatch) == reference


def test_window_reads_stop_at_the_end_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segment_module, "_RECOVER_WINDOW", 10)
    path = tmp_path / "f"
    data = bytes(range(256)) * 3
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        window = _RecoveryWindow(fd, len(data))
        assert len(window.view) == 0
        assert bytes(window.read(0, 4)) == data[:10]  # a window's worth
        assert bytes(window.read(5, 100)) == data[5:105]  # a batch larger than the window
        assert bytes(window.read(len(data) - 3, 3)) == data[-3:]  # up to the end
        assert bytes(window.read(len(data) - 3, 50)) == data[-3:]  # the file ends before
    finally:
        os.close(fd)


def test_the_window_is_no_larger_than_a_small_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    fd = os.open(path, os.O_RDONLY)
    try:
        window = _RecoveryWindow(fd, 3)
        assert bytes(window.read(0, 1)) == b"abc"
        assert len(window._buf) == 3
    finally:
        os.close(fd)
