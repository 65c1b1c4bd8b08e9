"""The pure parts of micro-batch boundaries (``spark_connector/exactly_once/boundaries.py``,
``docs/exactly-once.md`` "Whole micro-batches for readers"): the progress record's format,
the cut rule, which boundary a stream reads next, the committed-records filter the progress
reader relies on, and the reader options that choose a boundary."""

from __future__ import annotations

import json
import struct

import pytest

from spark_connector.exactly_once.boundaries import (
    PROGRESS_PARTITIONS,
    Boundary,
    _at_or_before,
    _dominates,
    next_cut,
    progress_partition,
)
from spark_connector.read.options import parse_read_options
from spark_connector.records.decoder import committed_records
from spark_connector.records.encoder import build_batch, encode_key_values
from spark_connector.records.partitioner import partition_for_key

pytestmark = pytest.mark.unit

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "counts"}


# --- the progress record -----------------------------------------------------------------------


def test_a_boundary_round_trips_through_its_record() -> None:
    b = Boundary("counts", "millrace-0123", 41, 1_790_000_000_000, (10, 0, 7))
    key, value = b.encode()
    assert key == b"counts"
    assert json.loads(value) == {
        "v": 1,
        "topic": "counts",
        "sink": "millrace-0123",
        "batch": 41,
        "time": 1_790_000_000_000,
        "cut": [10, 0, 7],
    }
    back = Boundary.decode(key, value, offset=99)
    assert back == Boundary("counts", "millrace-0123", 41, 1_790_000_000_000, (10, 0, 7), 99)
    assert back is not None and back.partitions == 3
    assert [back.end(p) for p in range(5)] == [10, 0, 7, 0, 0]  # later partitions: 0


@pytest.mark.parametrize(
    "value",
    [
        None,  # a tombstone
        b"not json",
        b"[1, 2]",
        b'{"v": 2, "topic": "counts", "sink": "s", "batch": 1, "time": 0, "cut": []}',
        b'{"v": 1, "topic": "other", "sink": "s", "batch": 1, "time": 0, "cut": []}',
        b'{"v": 1, "topic": "counts", "sink": "s", "batch": "x", "time": 0, "cut": []}',
        b'{"v": 1, "topic": "counts", "sink": "s", "time": 0, "cut": []}',
    ],
)
def test_a_record_that_is_not_a_boundary_is_skipped(value: bytes | None) -> None:
    assert Boundary.decode(b"counts", value) is None


def test_a_topics_records_go_to_its_murmur2_partition() -> None:
    for topic in ("counts", "orders-eu", "a", "x" * 200):
        assert progress_partition(topic) == partition_for_key(topic.encode(), PROGRESS_PARTITIONS)
        assert 0 <= progress_partition(topic, 3) < 3


# --- the cut ------------------------------------------------------------------------------------


def test_the_cut_is_the_largest_of_previous_written_and_stable() -> None:
    previous = Boundary("t", "s", 3, 0, (5, 9, 2))
    cut = next_cut(previous, 4, written={0: 8, 2: 4}, stable={0: 9, 1: 9, 2: 3, 3: 6})
    # p0: the stable offset (a marker after the batch's last record); p1: not written, the
    # stable end; p2: written above a lower stable offset (an open transaction below it);
    # p3: a partition the previous boundary did not have
    assert cut == (9, 9, 4, 6)


def test_the_first_cut_of_a_topic_keeps_what_earlier_writers_wrote() -> None:
    """A partition this sink never wrote ends at its stable offset, not at 0: a reader of a
    table a new query starts upserting into still sees the keys written before."""
    assert next_cut(None, 3, written={1: 12}, stable={0: 40, 1: 13, 2: 0}) == (40, 13, 0)


def test_a_cut_never_goes_backwards() -> None:
    previous = Boundary("t", "s", 3, 0, (50, 50))
    # a zombie's open transaction holds the stable offset below the previous cut
    assert next_cut(previous, 2, written={}, stable={0: 20, 1: 50}) == (50, 50)


# --- the next whole batch of a stream ----------------------------------------------------------


def test_a_stream_reads_the_first_boundary_past_its_position() -> None:
    b = Boundary("t", "s", 4, 0, (10, 20))
    assert _dominates(b, {0: 10, 1: 15})
    assert _dominates(b, {})  # a stream at the beginning
    assert not _dominates(b, {0: 10, 1: 20})  # already read
    assert not _dominates(b, {0: 11, 1: 15})  # behind the position in one partition
    assert _at_or_before(b, {0: 10, 1: 20})
    assert _at_or_before(b, {0: 12, 1: 25})
    assert not _at_or_before(b, {0: 10, 1: 19})


# --- read_committed over the progress partition ------------------------------------------------


def _control(base: int, producer_id: int, abort: bool) -> bytes:
    key = struct.pack(">hh", 0, 0 if abort else 1)
    value = struct.pack(">hi", 0, 0)
    records = encode_key_values([(key, value)])
    batch = bytearray(
        build_batch(records, 1, producer_id=producer_id, producer_epoch=0, transactional=True)
    )
    attributes = struct.unpack_from(">h", batch, 21)[0] | 0x20  # control
    struct.pack_into(">h", batch, 21, attributes)
    struct.pack_into(">q", batch, 0, base)
    return bytes(batch)


def _data(base: int, producer_id: int, pairs: list[tuple[bytes, bytes]]) -> bytes:
    batch = bytearray(
        build_batch(
            encode_key_values(list(pairs)),
            len(pairs),
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=0,
            transactional=producer_id >= 0,
        )
    )
    struct.pack_into(">q", batch, 0, base)
    return bytes(batch)


def test_committed_records_skip_aborted_transactions_and_markers() -> None:
    blob = b"".join(
        (
            _data(0, 7, [(b"t", b"committed-1"), (b"u", b"committed-2")]),
            _data(2, 8, [(b"t", b"aborted")]),
            _control(3, 7, abort=False),
            _control(4, 8, abort=True),
            _data(5, 8, [(b"t", b"later, committed")]),
            _data(6, -1, [(b"t", b"plain")]),
        )
    )
    got = list(committed_records(blob, aborted=[(8, 2)]))
    assert got == [
        (0, b"t", b"committed-1"),
        (1, b"u", b"committed-2"),
        (5, b"t", b"later, committed"),
        (6, b"t", b"plain"),
    ]


# --- reader options ----------------------------------------------------------------------------


def test_a_batch_read_ends_at_the_latest_boundary_by_default() -> None:
    assert parse_read_options(BS, streaming=False).ending_batch == "latest"
    assert parse_read_options({**BS, "endingBatch": "7"}, streaming=False).ending_batch == 7
    assert parse_read_options({**BS, "endingBatch": "none"}, streaming=False).ending_batch is None
    given = parse_read_options({**BS, "endingOffsets": "latest"}, streaming=False)
    assert given.ending_batch is None  # explicit ending offsets win
    uncommitted = {**BS, "kafka.isolation.level": "read_uncommitted"}
    assert parse_read_options(uncommitted, streaming=False).ending_batch is None
    stream = parse_read_options({**BS, "wholeBatches": "true"}, streaming=True)
    assert stream.whole_batches and stream.ending_batch is None
    assert not parse_read_options(BS, streaming=True).whole_batches


@pytest.mark.parametrize(
    ("options", "streaming", "names"),
    [
        ({"endingBatch": "-1"}, False, "'endingBatch'"),
        ({"endingBatch": "soon"}, False, "'endingBatch'"),
        ({"endingBatch": "3", "endingOffsets": "latest"}, False, "'endingOffsets'"),
        ({"endingBatch": "3", "kafka.isolation.level": "read_uncommitted"}, False, "isolation"),
        ({"wholeBatches": "true"}, False, "'wholeBatches'"),
        ({"endingBatch": "3"}, True, "'endingBatch'"),
        ({"wholeBatches": "yes"}, True, "'wholeBatches'"),
        ({"wholeBatches": "true", "maxOffsetsPerTrigger": "10"}, True, "'maxOffsetsPerTrigger'"),
        ({"wholeBatches": "true", "kafka.isolation.level": "read_uncommitted"}, True, "isolation"),
    ],
)
def test_bad_boundary_options_are_named(
    options: dict[str, str], streaming: bool, names: str
) -> None:
    with pytest.raises(ValueError, match=names):
        parse_read_options({**BS, **options}, streaming=streaming)


def test_a_retirement_is_a_tombstone_that_ends_the_boundaries_before_it() -> None:
    from spark_connector.exactly_once.boundaries import _current

    off = Boundary.retirement("counts")
    assert off.retired and off.encode() == (b"counts", None)
    a, b, c = (Boundary("counts", "s", n, 0, (n,)) for n in range(3))
    assert _current([a, b]) == [a, b]
    assert _current([a, off, b, c]) == [b, c]
    assert _current([a, b, off]) == []


def test_a_first_boundary_is_batch_minus_one_of_its_sink_and_not_a_retirement() -> None:
    first = Boundary("counts", "millrace-abc", -1, 5, (3, 0))
    assert not first.retired
    key, value = first.encode()
    assert value is not None
    assert Boundary.decode(key, value, 9) == Boundary("counts", "millrace-abc", -1, 5, (3, 0), 9)
    # a live record without a sink is malformed, not a retirement
    assert Boundary.decode(key, value.replace(b'"millrace-abc"', b'""')) is None
