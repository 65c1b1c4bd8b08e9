"""Short-circuit reads (:mod:`spark_connector.kafka.local_files`): the located bytes of a
segment file, read only when the file is the one the broker located; None (fetch instead)
for anything it cannot vouch for, and off for good where it cannot work. The locators are
made by the broker's own encoder (:func:`broker.api.local_fetch.locator`), so the two sides
of the format are checked against each other."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from broker.api import local_fetch
from broker.log.file_records import FetchSlice
from broker.protocol.records import SimpleRecord, encode_batch
from broker.replication.results import FetchResult
from broker.types import TopicPartition
from spark_connector.kafka import local_files
from spark_connector.kafka.local_files import LocalFiles

pytestmark = pytest.mark.unit


def _segment(path: Path, bases: list[int]) -> list[tuple[int, int, int]]:
    """A segment file of one 3-record batch at each base offset; ``(base, position, size)``."""
    out = []
    data = bytearray()
    for base in bases:
        raw = encode_batch(
            [SimpleRecord(key=b"k", value=b"v%d" % i, timestamp=1) for i in range(3)],
            base_offset=base,
        )
        out.append((base, len(data), len(raw)))
        data += raw
    path.write_bytes(bytes(data))
    return out


def _locator(file: Any, position: int, size: int, first: int) -> bytes:
    result = FetchResult(TopicPartition("t", 0), slice=FetchSlice(file, position, size, first, 0))
    region = local_fetch.locator(result)
    assert region is not None
    return bytes(region.data)  # type: ignore[attr-defined]


def test_reads_the_located_bytes_and_keeps_the_file_open(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    batches = _segment(path, [0, 3, 6, 9])
    raw = path.read_bytes()
    files = LocalFiles()
    with open(path, "rb") as f:
        for base, pos, size in batches:
            assert files.read(_locator(f, pos, size, base)) == raw[pos : pos + size]
        _b, pos, _s = batches[1]
        assert files.read(_locator(f, pos, len(raw) - pos, 3)) == raw[pos:]
    assert files.reads == 5 and files.usable
    assert len(files._files) == 1
    files.close()
    assert files._files == {}


def test_a_replaced_or_deleted_segment_is_not_read_through_its_path(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    (base, pos, size), *_ = _segment(path, [0, 3])
    files = LocalFiles()
    with open(path, "rb") as old:
        old_locator = _locator(old, pos, size, base)
        assert files.read(old_locator) is not None  # opened and kept
        # the cleaner's swap: a new file renamed over the path
        new = tmp_path / "new.log"
        (nbase, npos, nsize), *_ = _segment(new, [0, 5])
        os.replace(new, path)
        # the old file is still what the kept descriptor reads: the old locator is served
        assert files.read(old_locator) == old.read()[pos : pos + size]
        with open(path, "rb") as replaced:
            new_locator = _locator(replaced, npos, nsize, nbase)
        assert files.read(new_locator) == path.read_bytes()[npos : npos + nsize]
        # now the path's file is kept: the old inode is not opened through the path
        assert files.read(old_locator) is None
        assert files.usable
        path.unlink()
        files.close()
        assert files.read(new_locator) is None  # deleted, nothing kept: fetch instead


def test_short_reads_and_wrong_first_offsets_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    (base, pos, size), *_ = _segment(path, [0, 3])
    files = LocalFiles()
    with open(path, "rb") as f:
        assert files.read(_locator(f, pos, size + 10_000, base)) is None  # past the end
        assert files.read(_locator(f, pos, size, base + 1)) is None  # not that batch
        assert files.usable
        assert files.read(_locator(f, pos, size, base)) is not None  # a hit resets the misses
        for _ in range(local_files.MAX_MISSES - 1):
            assert files.read(_locator(f, pos, size, 99)) is None
        assert files.usable
        assert files.read(_locator(f, pos, size, 99)) is None
    assert not files.usable  # three misses in a row: this machine does not see the files


def test_another_machines_locator_turns_short_circuit_reads_off(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    (base, pos, size), *_ = _segment(path, [0])
    with open(path, "rb") as f:
        locator = _locator(f, pos, size, base)
    elsewhere = LocalFiles(boot_id=b"\x01" * 16)
    assert elsewhere.usable
    assert elsewhere.read(locator) is None
    assert not elsewhere.usable
    assert not LocalFiles(boot_id=bytes(16)).usable  # a kernel that does not tell
    garbled = LocalFiles()
    assert garbled.read(locator[:20]) is None and not garbled.usable
    newer = LocalFiles()
    assert newer.read(b"\x02" + locator[1:]) is None and not newer.usable


def test_no_permission_turns_short_circuit_reads_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "00000000000000000000.log"
    (base, pos, size), *_ = _segment(path, [0])
    with open(path, "rb") as f:
        locator = _locator(f, pos, size, base)

    def refuse(*_a: Any, **_k: Any) -> int:
        raise PermissionError(13, "Permission denied")

    files = LocalFiles()
    monkeypatch.setattr(local_files.os, "open", refuse)
    assert files.read(locator) is None
    assert not files.usable


def test_at_most_max_open_files_are_kept(tmp_path: Path) -> None:
    files = LocalFiles()
    handles = []
    for i in range(local_files.MAX_OPEN + 3):
        path = tmp_path / f"{i:020d}.log"
        (base, pos, size), *_ = _segment(path, [i * 10])
        handles.append((open(path, "rb"), pos, size, base))  # noqa: SIM115
    try:
        for f, pos, size, base in handles:
            assert files.read(_locator(f, pos, size, base)) is not None
        assert len(files._files) == local_files.MAX_OPEN
        kept = [fd for fd, _d, _i in files._files.values()]
        files.close()
        for fd in kept:
            with pytest.raises(OSError):
                os.fstat(fd)
    finally:
        for f, *_ in handles:
            f.close()


def test_the_locator_of_a_closed_file_is_refused_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    (base, pos, size), *_ = _segment(path, [0])
    f = open(path, "rb")  # noqa: SIM115
    f.close()
    files = LocalFiles()
    assert files.read(_locator(f, pos, size, base)) is None
    assert files.usable
