"""Unit tests for broker.cli.dump_log (DumpLogSegments-style output of segments and indexes)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker.cli.dump_log import (
    DumpOptions,
    DumpProblems,
    dump_file,
    dump_offset_index,
    dump_segment,
    dump_time_index,
    dump_txn_index,
    read_offset_index,
    read_time_index,
)
from broker.cli.main import main as millrace_main
from broker.log.producer_state import BatchMetadata, ProducerEntry, encode_snapshot
from broker.protocol import compression
from broker.protocol.records import CONTROL_MASK, SimpleRecord, encode_batch

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def _batch_a() -> bytes:
    """10 keyed records with a header, idempotent producer 1000, offsets 0..9."""
    return encode_batch(
        [SimpleRecord(b"hello", b"k", T0 + i, (("h", b"v"),)) for i in range(10)],
        base_offset=0,
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
        partition_leader_epoch=0,
    )


def _batch_b() -> bytes:
    """One keyless gzip record at offset 10."""
    return encode_batch(
        [SimpleRecord(b"x" * 50, None, T0 + 100)], base_offset=10, compression_type=compression.GZIP
    )


def _write_segment(directory: Path, data: bytes, base: int = 0) -> Path:
    path = directory / f"{base:020d}.log"
    path.write_bytes(data)
    return path


def test_batch_lines_match_kafka_format(tmp_path: Path) -> None:
    a, b = _batch_a(), _batch_b()
    seg = _write_segment(tmp_path, a + b)
    lines = list(dump_segment(seg))
    assert lines[0] == "Log starting offset: 0"
    assert len(lines) == 3
    first = lines[1]
    assert first.startswith(
        "baseOffset: 0 lastOffset: 9 count: 10 baseSequence: 0 lastSequence: 9 "
        "producerId: 1000 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false "
        "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 "
        f"CreateTime: {T0 + 9} size: {len(a)} magic: 2 compresscodec: none crc: "
    )
    assert first.endswith(" isvalid: true")
    crc = struct.unpack_from(">I", a, 17)[0]
    assert f" crc: {crc} " in first
    second = lines[2]
    assert second.startswith("baseOffset: 10 lastOffset: 10 count: 1 baseSequence: -1 ")
    assert f" position: {len(a)} " in second
    assert " compresscodec: gzip " in second
    assert "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: -1" in second


def test_print_data_log_prints_records(tmp_path: Path) -> None:
    seg = _write_segment(tmp_path, _batch_a() + _batch_b())
    lines = list(dump_segment(seg, print_data=True))
    records = [line for line in lines if line.startswith("| ")]
    assert len(records) == 11
    assert records[0] == (
        f"| offset: 0 CreateTime: {T0} keySize: 1 valueSize: 5 sequence: 0 headerKeys: [h] "
        "key: k payload: hello"
    )
    assert records[9].startswith(f"| offset: 9 CreateTime: {T0 + 9} ")
    assert " sequence: 9 " in records[9]
    # keyless record in a compressed batch: no "key:" part, sequence -1
    assert records[10] == (
        f"| offset: 10 CreateTime: {T0 + 100} keySize: -1 valueSize: 50 sequence: -1 "
        f"headerKeys: [] payload: {'x' * 50}"
    )


def test_deep_iteration_without_payloads(tmp_path: Path) -> None:
    seg = _write_segment(tmp_path, _batch_a())
    records = [line for line in dump_segment(seg, deep_iteration=True) if line.startswith("|")]
    assert len(records) == 10
    assert all("payload:" not in r and "key:" not in r for r in records)


def test_base_offset_from_file_name(tmp_path: Path) -> None:
    data = encode_batch([SimpleRecord(b"v", None, T0)], base_offset=42)
    seg = _write_segment(tmp_path, data, base=42)
    lines = list(dump_segment(seg))
    assert lines[0] == "Log starting offset: 42"
    assert lines[1].startswith("baseOffset: 42 lastOffset: 42 ")


def test_torn_tail_is_reported_not_raised(tmp_path: Path) -> None:
    a, b = _batch_a(), _batch_b()
    torn = b[:-7]
    seg = _write_segment(tmp_path, a + torn)
    lines = list(dump_segment(seg, print_data=True))
    assert sum(1 for line in lines if line.startswith("baseOffset:")) == 1
    assert lines[-1] == f"Found {len(torn)} invalid bytes at the end of {seg.name}"


def test_short_garbage_tail(tmp_path: Path) -> None:
    seg = _write_segment(tmp_path, _batch_a() + b"\x00" * 20)
    lines = list(dump_segment(seg))
    assert lines[-1] == f"Found 20 invalid bytes at the end of {seg.name}"


def test_crc_failure_is_isvalid_false(tmp_path: Path) -> None:
    a = bytearray(_batch_a())
    # flip a byte inside a record value ("hello" of the first record)
    pos = a.index(b"hello")
    a[pos] ^= 0x20
    seg = _write_segment(tmp_path, bytes(a) + _batch_b())
    lines = list(dump_segment(seg, print_data=True))
    batch_lines = [line for line in lines if line.startswith("baseOffset:")]
    assert batch_lines[0].endswith("isvalid: false")
    assert batch_lines[1].endswith("isvalid: true")
    assert "payload: Hello" in lines[2]


def test_undecodable_records_do_not_crash(tmp_path: Path) -> None:
    data = bytearray(_batch_a())
    # claim more records than the batch holds: the record walk runs off the end
    struct.pack_into(">i", data, 57, 50)
    seg = _write_segment(tmp_path, bytes(data))
    lines = list(dump_segment(seg, print_data=True))
    assert any(line.startswith("| cannot decode the records of this batch") for line in lines)


def test_empty_segment(tmp_path: Path) -> None:
    seg = _write_segment(tmp_path, b"")
    assert list(dump_segment(seg)) == ["Log starting offset: 0"]


def test_max_batches_stops_early_without_invalid_bytes(tmp_path: Path) -> None:
    blob = b"".join(
        encode_batch([SimpleRecord(b"v", None, T0 + i)], base_offset=i) for i in range(8)
    )
    seg = _write_segment(tmp_path, blob)
    lines = list(dump_segment(seg, max_batches=5))
    assert sum(1 for line in lines if line.startswith("baseOffset:")) == 5
    assert not any(line.startswith("Found") for line in lines)


def test_control_batch_shows_end_txn_marker(tmp_path: Path) -> None:
    key = struct.pack(">hh", 0, 1)  # version 0, COMMIT
    value = struct.pack(">hi", 0, 7)  # version 0, coordinator epoch 7
    data = encode_batch(
        [SimpleRecord(value, key, T0)],
        base_offset=5,
        producer_id=3,
        producer_epoch=1,
        transactional=True,
        control=True,
    )
    assert data[22] & CONTROL_MASK
    seg = _write_segment(tmp_path, data, base=5)
    lines = list(dump_segment(seg, print_data=True))
    assert "isTransactional: true isControl: true" in lines[1]
    assert lines[2].endswith(" endTxnMarker: COMMIT coordinatorEpoch: 7")


def test_log_append_time_batch(tmp_path: Path) -> None:
    data = encode_batch([SimpleRecord(b"v", None, T0)], log_append_time=True)
    seg = _write_segment(tmp_path, data)
    lines = list(dump_segment(seg, print_data=True))
    assert f" LogAppendTime: {T0} " in lines[1]
    assert lines[2].startswith(f"| offset: 0 LogAppendTime: {T0} ")


def test_non_consecutive_offsets_reported(tmp_path: Path) -> None:
    data = encode_batch([SimpleRecord(b"a", None, T0)], base_offset=0) + encode_batch(
        [SimpleRecord(b"b", None, T0)], base_offset=5
    )
    seg = _write_segment(tmp_path, data)
    problems = DumpProblems()
    list(dump_segment(seg, deep_iteration=True, problems=problems))
    assert problems.non_consecutive == {str(seg): [(0, 5)]}
    assert "  0 is followed by 5" in list(problems.lines())


def _cleaned_segment(tmp_path: Path) -> tuple[Path, int]:
    """A segment as the log cleaner leaves it (built with the cleaner's own rewrites): offsets
    0..9 an idempotent producer's last batch, emptied; 10..14 a batch of which the records at
    11 and 13 stay, 13 a tombstone, stamped with a delete horizon; 15..16 kept whole."""
    from broker.protocol.batch_rewrite import empty_batch, rebuild_batch, records_of
    from broker.protocol.records import read_header

    superseded = encode_batch(
        [SimpleRecord(b"old", b"k%d" % i, T0 + i) for i in range(10)],
        base_offset=0,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        partition_leader_epoch=0,
    )
    mixed = encode_batch(
        [SimpleRecord(None if i == 3 else b"v%d" % i, b"m%d" % i, T0 + 10 + i) for i in range(5)],
        base_offset=10,
        partition_leader_epoch=0,
    )
    whole = encode_batch(
        [SimpleRecord(b"w", b"w%d" % i, T0 + 20 + i) for i in range(2)],
        base_offset=15,
        partition_leader_epoch=0,
    )
    horizon = T0 + 86_400_000
    header = read_header(mixed)
    payload, records = records_of(mixed, header, 1 << 20)
    rewritten = rebuild_batch(header, payload, [records[1], records[3]], delete_horizon=horizon)
    return _write_segment(
        tmp_path, empty_batch(read_header(superseded)) + rewritten + whole
    ), horizon


def test_cleaned_segment_as_kafka_prints_it(tmp_path: Path) -> None:
    seg, horizon = _cleaned_segment(tmp_path)
    problems = DumpProblems()
    lines = list(dump_segment(seg, print_data=True, problems=problems))
    batches = [line for line in lines if line.startswith("baseOffset:")]
    records = [line for line in lines if line.startswith("| ")]
    # the emptied batch keeps its offsets and producer fields, holds no record
    assert batches[0].startswith(
        "baseOffset: 0 lastOffset: 9 count: 0 baseSequence: 0 lastSequence: 9 "
        "producerId: 7 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false "
        "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 "
        f"CreateTime: {T0 + 9} size: 61 "
    )
    assert lines[2] == batches[1], "an empty batch has no record line"
    assert batches[1].startswith(
        f"baseOffset: 10 lastOffset: 14 count: 2 baseSequence: -1 lastSequence: -1 "
        f"producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false "
        f"isControl: false deleteHorizonMs: OptionalLong[{horizon}] position: 61 "
        f"CreateTime: {T0 + 13} "
    )
    assert all(b.endswith(" isvalid: true") for b in batches)
    # records keep their offsets and timestamps under the horizon; a tombstone has no payload
    assert records[:2] == [
        f"| offset: 11 CreateTime: {T0 + 11} keySize: 2 valueSize: 2 sequence: -1 "
        "headerKeys: [] key: m1 payload: v1",
        f"| offset: 13 CreateTime: {T0 + 13} keySize: 2 valueSize: -1 sequence: -1 "
        "headerKeys: [] key: m3",
    ]
    # gaps are found record by record (none for the empty batch), reported the last first
    assert problems.non_consecutive == {str(seg): [(11, 13), (13, 15)]}
    assert list(problems.lines()) == [
        f"Non-consecutive offsets in {seg}",
        "  13 is followed by 15",
        "  11 is followed by 13",
    ]


def test_gaps_are_not_checked_without_deep_iteration(tmp_path: Path) -> None:
    seg, _horizon = _cleaned_segment(tmp_path)
    problems = DumpProblems()
    list(dump_segment(seg, problems=problems))
    assert not problems


# --- indexes --------------------------------------------------------------------------------


def _segment_with_index(tmp_path: Path, base: int = 100) -> tuple[Path, list[bytes]]:
    batches = [
        encode_batch(
            [SimpleRecord(b"v%d" % j, None, T0 + 10 * i + j) for j in range(3)],
            base_offset=base + 3 * i,
        )
        for i in range(4)
    ]
    seg = _write_segment(tmp_path, b"".join(batches), base=base)
    return seg, batches


def test_offset_index_entries_and_zero_padding(tmp_path: Path) -> None:
    seg, batches = _segment_with_index(tmp_path)
    pos2 = len(batches[0]) + len(batches[1])
    index = tmp_path / f"{100:020d}.index"
    # entries point at batch 0 and batch 2 (last offsets 102 and 108); preallocated tail
    index.write_bytes(struct.pack(">ii", 2, 0) + struct.pack(">ii", 8, pos2) + b"\0" * 64)
    assert read_offset_index(index) == [(102, 0), (108, pos2)]
    problems = DumpProblems()
    lines = list(dump_offset_index(index, problems=problems))
    assert lines == ["offset: 102 position: 0", f"offset: 108 position: {pos2}"]
    assert not problems
    verify = list(dump_offset_index(index, verify_only=True, problems=problems))
    assert verify == []
    assert seg.exists()


def test_offset_index_mismatch_reported(tmp_path: Path) -> None:
    _seg, batches = _segment_with_index(tmp_path)
    index = tmp_path / f"{100:020d}.index"
    # offset 104 at the position of batch 2 (whose last offset is 108)
    index.write_bytes(struct.pack(">ii", 4, len(batches[0]) + len(batches[1])))
    problems = DumpProblems()
    list(dump_offset_index(index, problems=problems))
    assert problems.index_mismatches == {str(index): [(104, 108)]}
    out = list(problems.lines())
    assert out[0] == f"Mismatches in :{index}"
    assert out[1] == "  Index offset: 104, log offset: 108"


def test_empty_offset_index(tmp_path: Path) -> None:
    index = tmp_path / f"{0:020d}.index"
    index.write_bytes(b"\0" * 80)  # the first entry is (0, 0), the rest padding
    assert read_offset_index(index) == [(0, 0)]
    empty = tmp_path / f"{1:020d}.index"
    empty.write_bytes(b"")
    assert list(dump_offset_index(empty)) == [f"{empty} is empty."]


def test_offset_index_sanity_check(tmp_path: Path) -> None:
    _seg, _batches = _segment_with_index(tmp_path)
    index = tmp_path / f"{100:020d}.index"
    index.write_bytes(struct.pack(">ii", 2, 0))
    assert list(dump_offset_index(index, sanity_only=True)) == [f"{index} passed sanity check."]
    index.write_bytes(struct.pack(">ii", 2, 0) + b"\1\2\3")
    assert "is corrupt" in next(iter(dump_offset_index(index, sanity_only=True)))


def test_time_index_entries(tmp_path: Path) -> None:
    _seg, batches = _segment_with_index(tmp_path)
    tindex = tmp_path / f"{100:020d}.timeindex"
    # batch 1 (offsets 103..105) has max timestamp T0+12; batch 3 (109..111) T0+32
    tindex.write_bytes(
        struct.pack(">qi", T0 + 12, 5) + struct.pack(">qi", T0 + 32, 11) + b"\0" * 36
    )
    assert read_time_index(tindex) == [(T0 + 12, 105), (T0 + 32, 111)]
    problems = DumpProblems()
    lines = list(dump_time_index(tindex, problems=problems))
    assert lines == [f"timestamp: {T0 + 12} offset: 105", f"timestamp: {T0 + 32} offset: 111"]
    assert not problems, list(problems.lines())
    assert len(batches) == 4


def test_time_index_wrong_timestamp_reported(tmp_path: Path) -> None:
    _segment_with_index(tmp_path)
    tindex = tmp_path / f"{100:020d}.timeindex"
    tindex.write_bytes(struct.pack(">qi", T0 + 999, 5))
    problems = DumpProblems()
    list(dump_time_index(tindex, problems=problems))
    assert any("indexed timestamp" in p for p in problems.other)


def test_txn_index(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 7, 10, 20, 21))
    assert list(dump_txn_index(path)) == [
        "version: 0 producerId: 7 firstOffset: 10 lastOffset: 20 lastStableOffset: 21"
    ]


def test_producer_snapshot(tmp_path: Path) -> None:
    entry = ProducerEntry(1000, 0, -1, T0)
    entry.batches.append(BatchMetadata(0, 9, 0, 9, T0))
    path = tmp_path / f"{10:020d}.snapshot"
    path.write_bytes(encode_snapshot([entry]))
    lines = list(dump_file(path))
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == (
        f"producerId: 1000 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {T0} firstSequence: 0 lastSequence: 9 "
        f"lastOffset: 9 offsetDelta: 9 timestamp: {T0}"
    )


def test_dump_file_dispatch_and_unknown(tmp_path: Path) -> None:
    seg = _write_segment(tmp_path, _batch_a())
    lines = list(dump_file(seg, DumpOptions(print_data=True)))
    assert lines[0] == f"Dumping {seg}"
    assert lines[1] == "Log starting offset: 0"
    other = tmp_path / "leader-epoch-checkpoint"
    other.write_text("0\n0\n")
    assert list(dump_file(other)) == [f"Dumping {other}", f"Ignoring unknown file {other}"]
    badname = tmp_path / "segment.log"
    badname.write_bytes(b"")
    assert "does not start with a base offset" in list(dump_file(badname))[1]


def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seg = _write_segment(tmp_path, _batch_a() + _batch_b())
    index = tmp_path / f"{0:020d}.index"
    index.write_bytes(struct.pack(">ii", 7, 0))  # wrong: batch 0 ends at 9
    rc = millrace_main(["dump-log", "--files", f"{seg},{index}", "--print-data-log"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert out.splitlines()[0] == f"Dumping {seg}"
    assert "| offset: 0 CreateTime:" in out
    assert f"Dumping {index}" in out
    assert "offset: 7 position: 0" in out
    assert "Index offset: 7, log offset: 9" in err

    rc = millrace_main(["dump-log", "--files", str(tmp_path / "missing.log")])
    _out, err = capsys.readouterr()
    assert rc == 1
    assert "missing.log not found" in err


def test_cli_requires_files(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        millrace_main(["dump-log"])
    assert exc.value.code == 2
    assert "--files" in capsys.readouterr().err
