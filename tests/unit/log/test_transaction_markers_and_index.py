"""Transaction markers (control batches) and the ``.txnindex`` aborted-transaction index."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.transaction_index import (
    ENTRY_SIZE,
    AbortedTxn,
    CorruptTransactionIndexError,
    TransactionIndex,
)
from broker.protocol import records
from broker.protocol.control_records import (
    ControlType,
    EndTxnMarker,
    InvalidControlRecordError,
    decode_marker,
    encode_marker_batch,
)

pytestmark = pytest.mark.unit


def test_marker_batch_layout_matches_kafka() -> None:
    blob = encode_marker_batch(
        ControlType.COMMIT, producer_id=42, producer_epoch=3, coordinator_epoch=7, timestamp_ms=1000
    )
    (header,) = list(records.iter_batches(blob))
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    assert header.record_count == 1 and records.crc_ok(blob, header)
    (rec,) = records.decode_records(blob, header)
    # Kafka's ControlRecordType v0 key and EndTransactionMarker v0 value
    assert rec.key == bytes.fromhex("00000001")
    assert rec.value == bytes.fromhex("000000000007")
    assert decode_marker(blob, header) == EndTxnMarker(ControlType.COMMIT, 7)


def test_abort_marker_round_trip() -> None:

    blob = encode_marker_batch(
        ControlType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=5
    )
    (header,) = list(records.iter_batches(blob))
    marker = decode_marker(blob, header)
    assert marker.control_type is ControlType.ABORT and not marker.is_commit


def test_malformed_control_batches_are_refused() -> None:
    bad_type = records.encode_batch(
        [records.SimpleRecord(key=bytes.fromhex("00000009"), value=bytes.fromhex("000000000000"))],
        transactional=True,
        control=True,
    )
    (header,) = list(records.iter_batches(bad_type))
    with pytest.raises(InvalidControlRecordError, match="unknown control record type 9"):
        decode_marker(bad_type, header)
    short = records.encode_batch(
        [records.SimpleRecord(key=bytes.fromhex("00000001"), value=b"\x00")],
        transactional=True,
        control=True,
    )
    (header,) = list(records.iter_batches(short))
    with pytest.raises(InvalidControlRecordError, match="too short"):
        decode_marker(short, header)
    data = records.encode_batch([records.SimpleRecord(value=b"x")])
    (header,) = list(records.iter_batches(data))
    with pytest.raises(InvalidControlRecordError, match="not a control batch"):
        decode_marker(data, header)


def test_txn_index_append_collect_truncate_reopen(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    assert index.is_empty and not path.exists()  # created on the first append
    a = AbortedTxn(producer_id=1, first_offset=0, last_offset=10, last_stable_offset=11)
    b = AbortedTxn(producer_id=2, first_offset=5, last_offset=20, last_stable_offset=21)
    c = AbortedTxn(producer_id=3, first_offset=30, last_offset=40, last_stable_offset=50)
    for e in (a, b, c):
        index.append(e)
    assert path.stat().st_size == 3 * ENTRY_SIZE == 102
    assert path.read_bytes()[:ENTRY_SIZE] == bytes.fromhex(
        "000000000000000000010000000000000000000000000000000a000000000000000b"
    )
    assert index.collect(11, 25) == ([b], True)  # b's LSO 21 < 25 ... c's LSO 50 >= 25 ends it
    assert index.collect(0, 100) == ([a, b, c], False)
    with pytest.raises(CorruptTransactionIndexError):
        index.append(AbortedTxn(4, 0, 40, 41))
    index.flush()
    index.close()
    again = TransactionIndex(path)
    assert again.entries == [a, b, c]
    again.truncate_to(20)
    assert again.entries == [a] and path.stat().st_size == ENTRY_SIZE
    again.append(AbortedTxn(5, 12, 15, 16))
    again.close()
    assert TransactionIndex(path).entries == [a, AbortedTxn(5, 12, 15, 16)]


def test_txn_index_cuts_a_torn_tail_and_rejects_unknown_versions(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    good = AbortedTxn(1, 100, 110, 111).encode()
    path.write_bytes(good + good[:10])
    assert TransactionIndex(path).entries == [AbortedTxn(1, 100, 110, 111)]
    assert path.stat().st_size == ENTRY_SIZE
    path.write_bytes(b"\x00\x07" + good[2:])
    with pytest.raises(CorruptTransactionIndexError, match="version 7"):
        TransactionIndex(path)


def test_txn_index_rename_and_delete(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    index.rename(tmp_path / "x.deleted")  # no file yet: nothing to move
    assert not (tmp_path / "x.deleted").exists()
    index.append(AbortedTxn(1, 0, 1, 2))
    assert (tmp_path / "x.deleted").exists()
    index.delete()
    assert not (tmp_path / "x.deleted").exists()
