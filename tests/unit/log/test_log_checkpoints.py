"""Offset checkpoint files and the leader epoch cache (broker/log/checkpoints.py,
broker/log/leader_epoch.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.log import checkpoints
from broker.log.checkpoints import OffsetCheckpointFile, read_properties, write_properties
from broker.log.errors import CorruptCheckpointError
from broker.log.leader_epoch import LeaderEpochFileCache, read_leader_epoch_checkpoint
from broker.types import TopicPartition

pytestmark = pytest.mark.unit


# --- offset checkpoints -----------------------------------------------------------------


def test_offset_checkpoint_round_trip_and_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {
        TopicPartition("my-topic", 0): 42,
        TopicPartition("a.b_c", 12): 0,
        TopicPartition("__consumer_offsets", 7): 9_000_000_000,
    }
    OffsetCheckpointFile(path).write(offsets)
    assert path.read_text() == (
        "0\n3\n__consumer_offsets 7 9000000000\na.b_c 12 0\nmy-topic 0 42\n"
    )
    assert OffsetCheckpointFile(path).read() == offsets
    OffsetCheckpointFile(path).write({})
    assert path.read_text() == "0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


def test_missing_checkpoint_reads_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nope").read() == {}


def test_an_empty_checkpoint_reads_empty_as_in_kafka(tmp_path: Path) -> None:
    """Kafka's CheckpointFile creates its files empty (cleaner-offset-checkpoint,
    leader-epoch-checkpoint, ... of a Kafka log directory a Millrace broker takes over) and
    reads an empty file as no entries."""
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(b"")
    assert OffsetCheckpointFile(path).read() == {}
    epochs = tmp_path / "leader-epoch-checkpoint"
    epochs.write_bytes(b"")
    assert read_leader_epoch_checkpoint(epochs) == []


@pytest.mark.parametrize(
    "text",
    [
        "1\n0\n",  # unknown version
        "0\n2\nt 0 5\n",  # fewer entries than declared
        "0\n1\nt 0 5\nu 1 6\n",  # more entries than declared
        "0\n1\nt x 5\n",
        "0\n1\nt 0\n",
        "0\n",
        "zero\n0\n",
    ],
)
def test_malformed_checkpoint(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(path).read()
    assert OffsetCheckpointFile(path).read_or_empty() == {}


def test_checkpoint_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cp"
    old = {TopicPartition("t", 0): 1}
    OffsetCheckpointFile(path).write(old)

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut before the rename")

    monkeypatch.setattr(checkpoints.os, "replace", crash)
    with pytest.raises(OSError):
        OffsetCheckpointFile(path).write({TopicPartition("t", 0): 2})
    monkeypatch.undo()
    assert OffsetCheckpointFile(path).read() == old  # the old content is intact
    assert (tmp_path / "cp.tmp").exists()
    OffsetCheckpointFile(path).write({TopicPartition("t", 0): 3})
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): 3}


def test_checkpoint_write_fsyncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(checkpoints.os, "fsync", spy)
    OffsetCheckpointFile(tmp_path / "cp").write({TopicPartition("t", 0): 1})
    assert len(synced) == 2  # the temp file, then the directory


def test_properties_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    write_properties(path, {"cluster.id": "abc-DEF_1", "version": "0", "broker.id": "3"})
    text = path.read_text()
    assert text.startswith("#\n#")
    assert "version=0\n" in text
    assert read_properties(path) == {"cluster.id": "abc-DEF_1", "version": "0", "broker.id": "3"}


# --- leader epoch cache -----------------------------------------------------------------


class _End:
    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def _cache(tmp_path: Path, leo: int = 100) -> tuple[LeaderEpochFileCache, _End]:
    end = _End(leo)
    return LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint", end), end


def test_assign_ignores_non_increasing_epochs(tmp_path: Path) -> None:
    cache, _ = _cache(tmp_path)
    assert cache.latest_epoch == -1
    assert cache.assign(2, 10)
    assert not cache.assign(2, 20)  # same epoch
    assert not cache.assign(1, 30)  # older epoch
    assert cache.assign(5, 40)
    assert cache.entries == [(2, 10), (5, 40)]
    assert cache.latest_epoch == 5
    # a new epoch starting below existing entries replaces them (Kafka)
    assert cache.assign(6, 40)
    assert cache.entries == [(2, 10), (6, 40)]
    assert cache.assign(7, 5)
    assert cache.entries == [(7, 5)]


def test_checkpoint_file_format_and_reload(tmp_path: Path) -> None:
    cache, end = _cache(tmp_path)
    cache.assign(0, 0)
    cache.assign(3, 120)
    assert cache.path.read_text() == "0\n2\n0 0\n3 120\n"
    reloaded = LeaderEpochFileCache.load(cache.path, end)
    assert reloaded.entries == [(0, 0), (3, 120)]
    cache.path.write_text("0\n2\n3 0\n1 5\n")  # epochs going down
    with pytest.raises(CorruptCheckpointError):
        read_leader_epoch_checkpoint(cache.path)


def test_end_offset_for(tmp_path: Path) -> None:
    cache, end = _cache(tmp_path, leo=300)
    assert cache.end_offset_for(0) == (-1, -1)  # empty cache
    cache.assign(1, 0)
    cache.assign(3, 100)
    cache.assign(6, 200)
    assert cache.end_offset_for(-1) == (-1, -1)  # undefined epoch
    assert cache.end_offset_for(6) == (6, 300)  # latest: the log end
    end.value = 310
    assert cache.end_offset_for(6) == (6, 310)
    assert cache.end_offset_for(1) == (1, 100)
    assert cache.end_offset_for(2) == (1, 100)  # unknown epoch: largest below it
    assert cache.end_offset_for(3) == (3, 200)
    assert cache.end_offset_for(5) == (3, 200)
    assert cache.end_offset_for(0) == (0, 0)  # below every epoch: start of the first
    assert cache.end_offset_for(7) == (-1, -1)  # above every epoch


def test_truncate_from_end(tmp_path: Path) -> None:
    cache, _ = _cache(tmp_path)
    for epoch, start in ((1, 0), (2, 50), (4, 80)):
        cache.assign(epoch, start)
    cache.truncate_from_end(81)
    assert cache.entries == [(1, 0), (2, 50), (4, 80)]
    cache.truncate_from_end(80)
    assert cache.entries == [(1, 0), (2, 50)]
    cache.truncate_from_end(10)
    assert cache.entries == [(1, 0)]
    assert read_leader_epoch_checkpoint(cache.path) == [(1, 0)]


def test_truncate_from_start(tmp_path: Path) -> None:
    cache, _ = _cache(tmp_path)
    for epoch, start in ((1, 0), (2, 50), (4, 80)):
        cache.assign(epoch, start)
    cache.truncate_from_start(0)
    assert cache.entries == [(1, 0), (2, 50), (4, 80)]
    cache.truncate_from_start(60)
    assert cache.entries == [(2, 60), (4, 80)]
    cache.truncate_from_start(80)  # an entry starting exactly there is kept
    assert cache.entries == [(4, 80)]
    cache.truncate_from_start(95)
    assert cache.entries == [(4, 95)]
    assert read_leader_epoch_checkpoint(cache.path) == [(4, 95)]


def test_clear(tmp_path: Path) -> None:
    cache, _ = _cache(tmp_path)
    cache.assign(1, 0)
    cache.clear()
    assert cache.entries == []
    assert cache.path.read_text() == "0\n0\n"
