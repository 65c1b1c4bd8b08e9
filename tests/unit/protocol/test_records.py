"""Record batch validation, patching and decoding (broker/protocol/records.py)."""

from __future__ import annotations

import pytest

from broker.log import log_validator
from broker.protocol import compression, records
from broker.protocol.errors import ErrorCode

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000


def _batch(n: int = 3, codec: int = 0, key: bytes | None = b"k", ts: int = NOW) -> bytes:
    return records.encode_batch(
        [records.SimpleRecord(b"value-%d" % i, key, ts + i, (("h", b"v"),)) for i in range(n)],
        compression_type=codec,
    )


def _validate(buf: bytes | bytearray, **kw: object) -> log_validator.ValidatedBatches:
    args: dict[str, object] = dict(
        max_batch_bytes=1_000_000,
        now_ms=NOW,
        timestamp_before_max_ms=2**62,
        timestamp_after_max_ms=2**62,
        log_append_time=False,
        compacted=False,
    )
    args.update(kw)
    return log_validator.validate_for_append(buf, **args)  # type: ignore[arg-type]


def test_valid_batches_are_accepted_and_counted() -> None:
    buf = _batch(3) + _batch(5)
    v = _validate(buf)
    assert [h.record_count for h in v.headers] == [3, 5]
    assert v.record_count == 8
    assert v.headers[1].position == len(_batch(3))


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_every_codec_round_trips(codec: int) -> None:
    buf = _batch(20, codec)
    (header,) = _validate(buf).headers
    assert header.compression == codec
    got = records.decode_records(buf, header)
    assert [r.value for r in got] == [b"value-%d" % i for i in range(20)]
    assert got[5].timestamp == NOW + 5
    assert got[0].headers == (("h", b"v"),)


def test_crc_corruption_is_rejected() -> None:
    buf = bytearray(_batch(3))
    buf[-1] ^= 0xFF
    with pytest.raises(records.CorruptRecordError) as info:
        _validate(buf)
    assert info.value.code == ErrorCode.corrupt_message


def test_old_magic_is_rejected_with_a_clear_code() -> None:
    buf = bytearray(_batch(1))
    buf[records.MAGIC_OFFSET] = 1
    with pytest.raises(records.UnsupportedMagicError) as info:
        _validate(buf)
    assert info.value.code == ErrorCode.unsupported_for_message_format
    assert "magic 1" in str(info.value)


def test_truncated_batch_is_corrupt() -> None:
    buf = _batch(3)
    with pytest.raises(records.CorruptRecordError):
        _validate(buf[:-4])
    with pytest.raises(records.CorruptRecordError):
        _validate(buf[:30])


def test_oversized_batch_is_rejected() -> None:
    buf = _batch(10)
    with pytest.raises(log_validator.RecordTooLargeError) as info:
        _validate(buf, max_batch_bytes=len(buf) - 1)
    assert info.value.code == ErrorCode.message_too_large
    _validate(buf, max_batch_bytes=len(buf))


def test_keyless_records_rejected_on_compacted_topics() -> None:
    with pytest.raises(records.InvalidRecordError):
        _validate(_batch(2, key=None), compacted=True)
    _validate(_batch(2, key=b"k"), compacted=True)


def test_timestamps_outside_the_allowed_window_are_rejected() -> None:
    with pytest.raises(log_validator.InvalidTimestampError):
        _validate(_batch(1, ts=NOW - 10_000), timestamp_before_max_ms=1000)
    with pytest.raises(log_validator.InvalidTimestampError):
        _validate(_batch(1, ts=NOW + 10_000), timestamp_after_max_ms=1000)


def test_patching_base_offset_and_epoch_keeps_crc_valid() -> None:
    buf = bytearray(_batch(4))
    (header,) = _validate(buf).headers
    records.set_base_offset(buf, header, 1234)
    records.set_partition_leader_epoch(buf, header, 7)
    (patched,) = _validate(buf).headers
    assert patched.base_offset == 1234
    assert patched.last_offset == 1237
    assert patched.partition_leader_epoch == 7
    assert records.decode_records(buf, patched)[2].offset == 1236


def test_log_append_time_rewrites_timestamp_and_crc() -> None:
    buf = bytearray(_batch(3))
    (header,) = _validate(buf).headers
    records.set_log_append_time(buf, header, NOW + 99)
    (patched,) = _validate(buf).headers
    assert patched.is_log_append_time
    assert patched.max_timestamp == NOW + 99
    assert all(r.timestamp == NOW + 99 for r in records.decode_records(buf, patched))


def test_decompression_is_bounded() -> None:
    payload = b"\x00" * 1_000_000
    for codec in (1, 2, 3, 4):
        data = compression.compress(codec, payload)
        with pytest.raises(compression.DecompressionError):
            compression.decompress(codec, data, 10_000)
        assert compression.decompress(codec, data, 1_000_000) == payload


def test_xerial_framed_snappy_is_accepted() -> None:
    import struct

    import cramjam

    block = bytes(cramjam.snappy.compress_raw(b"hello" * 100))
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert compression.decompress(2, framed, 10_000) == b"hello" * 100


def test_control_batches_from_clients_are_rejected() -> None:
    buf = records.encode_batch([records.SimpleRecord(b"x", b"k", NOW)], control=True)
    with pytest.raises(records.InvalidRecordError):
        _validate(buf)
