"""Offset and time indexes (broker/log/offset_index.py, broker/log/time_index.py)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker.log.errors import CorruptIndexError
from broker.log.offset_index import OffsetIndex
from broker.log.time_index import TimeIndex

pytestmark = pytest.mark.unit

BASE = 1000


def _offset_index(tmp_path: Path, max_bytes: int = 80) -> OffsetIndex:
    index = OffsetIndex(tmp_path / f"{BASE:020d}.index", BASE)
    index.open_for_append(max_bytes)
    return index


def _time_index(tmp_path: Path, max_bytes: int = 120) -> TimeIndex:
    index = TimeIndex(tmp_path / f"{BASE:020d}.timeindex", BASE)
    index.open_for_append(max_bytes)
    return index


# --- offset index -----------------------------------------------------------------------


def test_offset_index_is_preallocated_and_written_big_endian(tmp_path: Path) -> None:
    index = _offset_index(tmp_path, max_bytes=85)  # rounded down to 10 entries
    assert index.path.stat().st_size == 80
    assert index.max_entries == 10
    index.append(1005, 4200)
    index.append(1010, 9000)
    raw = index.path.read_bytes()
    assert raw[:16] == struct.pack(">ii", 5, 4200) + struct.pack(">ii", 10, 9000)
    assert raw[16:] == bytes(64)


def test_offset_index_lookup(tmp_path: Path) -> None:
    index = _offset_index(tmp_path)
    for rel, pos in ((3, 100), (7, 250), (20, 900)):
        index.append(BASE + rel, pos)
    assert index.lookup(BASE) == (BASE, 0)  # below the first entry: start of the segment
    assert index.lookup(BASE + 2) == (BASE, 0)
    assert index.lookup(BASE + 3) == (BASE + 3, 100)
    assert index.lookup(BASE + 6) == (BASE + 3, 100)
    assert index.lookup(BASE + 7) == (BASE + 7, 250)
    assert index.lookup(BASE + 19) == (BASE + 7, 250)
    assert index.lookup(BASE + 10_000) == (BASE + 20, 900)
    assert index.last_offset == BASE + 20


def test_offset_index_rejects_non_increasing_offsets(tmp_path: Path) -> None:
    index = _offset_index(tmp_path)
    index.append(BASE + 5, 10)
    with pytest.raises(ValueError):
        index.append(BASE + 5, 20)
    with pytest.raises(ValueError):
        index.append(BASE + 4, 20)


def test_offset_index_full(tmp_path: Path) -> None:
    index = _offset_index(tmp_path, max_bytes=16)
    assert index.append(BASE + 1, 10)
    assert not index.is_full
    assert index.append(BASE + 2, 20)
    assert index.is_full
    assert not index.append(BASE + 3, 30)
    assert index.entries == 2


def test_offset_index_trim_and_reload(tmp_path: Path) -> None:
    index = _offset_index(tmp_path)
    index.append(BASE + 1, 10)
    index.append(BASE + 4, 50)
    index.trim()
    index.close()
    assert index.path.stat().st_size == 16
    loaded = OffsetIndex.load(index.path, BASE, log_size=100)
    assert loaded.entries == 2
    assert loaded.lookup(BASE + 3) == (BASE + 1, 10)


def test_untrimmed_index_real_entry_count_is_found(tmp_path: Path) -> None:
    index = _offset_index(tmp_path, max_bytes=800)
    index.append(BASE + 1, 10)
    index.append(BASE + 256, 256)  # entry whose last bytes are zeros
    index.close()  # no trim: a crash
    assert index.path.stat().st_size == 800
    loaded = OffsetIndex.load(index.path, BASE, log_size=1000)
    assert loaded.entries == 2
    assert loaded.entry(1) == (BASE + 256, 256)


def test_offset_index_truncate_to(tmp_path: Path) -> None:
    index = _offset_index(tmp_path)
    for i in range(1, 6):
        index.append(BASE + i * 10, i * 100)
    index.truncate_to(BASE + 30)
    assert index.entries == 2
    assert index.last_offset == BASE + 20
    index.close()
    # the removed entries are zeroed on disk, so a crash cannot resurrect them
    assert OffsetIndex.load(index.path, BASE, log_size=10_000).entries == 2


@pytest.mark.parametrize(
    "entries, size, log_size",
    [
        ([(5, 100), (3, 200)], None, 1000),  # offsets go down
        ([(5, 100), (6, 50)], None, 1000),  # positions go down
        ([(5, 100), (6, 2000)], None, 1000),  # position past the log
        ([(5, 100)], 12, 1000),  # size not a multiple of 8
        ([(-5, 100)], None, 1000),  # negative relative offset
    ],
)
def test_corrupt_offset_index_is_detected(
    tmp_path: Path, entries: list[tuple[int, int]], size: int | None, log_size: int
) -> None:
    path = tmp_path / "x.index"
    data = b"".join(struct.pack(">ii", r, p) for r, p in entries)
    if size is not None:
        data = data[:size] if size < len(data) else data + bytes(size - len(data))
    path.write_bytes(data)
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(path, BASE, log_size=log_size)


# --- time index -------------------------------------------------------------------------


def test_time_index_appends_only_growing_timestamps(tmp_path: Path) -> None:
    index = _time_index(tmp_path)
    assert index.maybe_append(500, BASE + 3)
    assert not index.maybe_append(500, BASE + 6)  # same timestamp
    assert not index.maybe_append(400, BASE + 7)  # older
    assert index.maybe_append(900, BASE + 9)
    assert index.entries == 2
    raw = index.path.read_bytes()
    assert raw[:24] == struct.pack(">qi", 500, 3) + struct.pack(">qi", 900, 9)
    with pytest.raises(ValueError):
        index.maybe_append(1000, BASE + 1)  # offsets may not go back


def test_time_index_reserves_its_last_slot_for_the_roll_entry(tmp_path: Path) -> None:
    index = _time_index(tmp_path, max_bytes=36)  # 3 entries
    assert index.maybe_append(1, BASE + 1)
    assert index.maybe_append(2, BASE + 2)
    assert index.is_full
    assert not index.maybe_append(3, BASE + 3)
    assert index.maybe_append(3, BASE + 3, skip_full_check=True)
    assert index.entries == 3


def test_time_index_lookup(tmp_path: Path) -> None:
    index = _time_index(tmp_path)
    index.maybe_append(100, BASE + 2)
    index.maybe_append(200, BASE + 5)
    assert index.lookup(50) == (-1, BASE)
    assert index.lookup(100) == (100, BASE + 2)
    assert index.lookup(199) == (100, BASE + 2)
    assert index.lookup(10_000) == (200, BASE + 5)
    assert index.lookup_before(100) == BASE  # strictly before: nothing
    assert index.lookup_before(101) == BASE + 2
    assert index.lookup_before(201) == BASE + 5


def test_time_index_untrimmed_reload_and_truncate(tmp_path: Path) -> None:
    index = _time_index(tmp_path, max_bytes=1200)
    for i in range(1, 5):
        index.maybe_append(i * 1000, BASE + i * 10)
    index.close()
    loaded = TimeIndex.load(index.path, BASE)
    assert loaded.entries == 4
    assert loaded.last_entry == (4000, BASE + 40)
    loaded.open_for_append(1200)
    loaded.truncate_to(BASE + 30)
    assert loaded.last_entry == (2000, BASE + 20)
    loaded.trim()
    loaded.close()
    assert index.path.stat().st_size == 24


def test_corrupt_time_index_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack(">qi", 500, 3) + struct.pack(">qi", 400, 4))
    with pytest.raises(CorruptIndexError):
        TimeIndex.load(path, BASE)
    path.write_bytes(bytes(13))
    with pytest.raises(CorruptIndexError):
        TimeIndex.load(path, BASE)
