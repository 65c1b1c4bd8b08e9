"""The reader's direct fetch path (``fetcher=direct``) against a scripted leader: offset gaps,
data loss, read_committed over interleaved transactions, leader moves and partial batches.

The scripted fetcher serves real v2 record batches (``broker.protocol.records.encode_batch``,
markers from ``control_records``) the way a broker does: a fetch at offset ``o`` returns the
batches that end at or after ``o`` (the first may start before it), at most ``per_fetch`` of
them, the last one cut in half when ``torn`` (Kafka truncates a fetch's last batch), and the
aborted transactions that overlap what it returns (first offset before its end, marker at or
after the fetch offset)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from broker.protocol.control_records import ControlType, encode_marker_batch
from broker.protocol.records import SimpleRecord, encode_batch
from spark_connector.kafka import fetcher as f
from spark_connector.read.consumer import read_range, record_schema
from spark_connector.read.options import parse_read_options
from spark_connector.read.planner import OffsetRange

pytestmark = pytest.mark.unit

SCHEMA = record_schema()


class _Log:
    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []  # base, next offset, bytes
        self.aborted: list[tuple[int, int, int]] = []  # producer id, first, last offset
        self.low = 0

    @property
    def high(self) -> int:
        return self.batches[-1][1] if self.batches else 0

    def add(self, offsets: list[int], **kw: Any) -> None:
        """One batch holding records at ``offsets`` (gaps: compacted away)."""
        base = offsets[0]
        records = [
            SimpleRecord(key=b"k%d" % o, value=b"v%d" % o, timestamp=1000 + o) for o in offsets
        ]
        raw = bytearray(encode_batch(records, base_offset=base, **kw))
        # offset deltas as given (encode_batch numbers records 0..n-1): re-encode by hand
        if offsets != list(range(base, base + len(offsets))):
            raw = bytearray(_with_offsets(records, offsets, **kw))
        self.batches.append((base, offsets[-1] + 1, bytes(raw)))

    def marker(self, offset: int, pid: int, commit: bool) -> None:
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        raw = encode_marker_batch(
            kind,
            producer_id=pid,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=5,
            base_offset=offset,
        )
        self.batches.append((offset, offset + 1, raw))


def _with_offsets(records: list[SimpleRecord], offsets: list[int], **kw: Any) -> bytes:
    """A batch whose records sit at ``offsets`` (as after compaction): one batch per record,
    concatenated, so that each record keeps its offset."""
    return b"".join(
        encode_batch([r], base_offset=o, **kw) for r, o in zip(records, offsets, strict=True)
    )


class _ScriptedFetcher:
    log: _Log = _Log()
    per_fetch = 2
    torn = False
    errors: list[int] = []

    def __init__(self, bootstrap: str, topic: str, partition: int, **kw: Any) -> None:
        self.fetches = 0

    def __enter__(self) -> _ScriptedFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def watermarks(self, deadline: float) -> tuple[int, int]:
        return self.log.low, self.log.high

    def prefetch(self, offset: int) -> None:
        pass

    def fetch(self, offset: int) -> f.FetchResult:
        if self.errors:
            return f.FetchResult(self.errors.pop(0))
        if offset < self.log.low or offset > self.log.high:
            return f.FetchResult(f.OFFSET_OUT_OF_RANGE)
        chosen = [b for b in self.log.batches if b[1] > offset and b[0] >= self.log.low]
        chosen = chosen[: self.per_fetch]
        blob = b"".join(raw for _, _, raw in chosen)
        if self.torn and len(chosen) > 1:
            blob = blob[: len(blob) - len(chosen[-1][2]) // 2]
        last = chosen[-1][1] if chosen else offset
        # as a broker: the aborted transactions overlapping [offset, last)
        aborted = [(pid, lo) for pid, lo, hi in self.log.aborted if lo < last and hi >= offset]
        return f.FetchResult(
            f.NONE, self.log.high, self.log.high, self.log.low, aborted, memoryview(blob)
        )


def _read(
    monkeypatch: pytest.MonkeyPatch,
    log: _Log,
    from_: int,
    until: int,
    *,
    fail: bool = True,
    committed: bool = False,
    torn: bool = False,
    errors: tuple[int, ...] = (),
) -> list[tuple[int, bytes]]:
    monkeypatch.setattr(_ScriptedFetcher, "log", log)
    monkeypatch.setattr(_ScriptedFetcher, "torn", torn)
    monkeypatch.setattr(_ScriptedFetcher, "errors", list(errors))
    monkeypatch.setattr(f, "PartitionFetcher", _ScriptedFetcher)
    opts = {
        "kafka.bootstrap.servers": "h:1",
        "subscribe": "t",
        "failOnDataLoss": str(fail).lower(),
        "fetcher": "direct",
    }
    if committed:
        opts["kafka.isolation.level"] = "read_committed"
    options = parse_read_options(opts, streaming=False)
    batches = list(read_range(options, OffsetRange("t", 0, from_, until), SCHEMA))
    for b in batches:
        assert b.schema.equals(SCHEMA)
    table = pa.Table.from_batches(batches, SCHEMA)
    return list(
        zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True)
    )


def _gappy_log(low: int) -> _Log:
    log = _Log()
    log.add([0, 1, 2])
    log.add([5, 6])  # 3, 4 compacted away
    log.add([9])  # 7, 8 compacted away
    log.marker(10, pid=7, commit=True)
    log.low = low
    return log


@pytest.mark.parametrize("torn", [False, True])
@pytest.mark.parametrize(
    ("low", "from_", "until", "fail", "expected"),
    [
        (0, 0, 11, True, [0, 1, 2, 5, 6, 9]),  # gaps inside, control record at 10
        (0, 1, 6, True, [1, 2, 5]),  # starts inside a batch, ends in a gap
        (0, 3, 6, True, [5]),  # range starts and ends in gaps
        (0, 7, 9, True, []),  # range entirely in a gap
        (5, 0, 11, False, [5, 6, 9]),  # log start moved past the range start: skipped
        (5, 0, 11, True, "failOnDataLoss"),  # ... or fails
    ],
)
def test_gaps_and_data_loss(
    monkeypatch: pytest.MonkeyPatch,
    low: int,
    from_: int,
    until: int,
    fail: bool,
    expected: Any,
    torn: bool,
) -> None:
    log = _gappy_log(low)
    if isinstance(expected, str):
        with pytest.raises(RuntimeError, match=expected):
            _read(monkeypatch, log, from_, until, fail=fail, torn=torn)
        return
    got = _read(monkeypatch, log, from_, until, fail=fail, torn=torn)
    assert [o for o, _ in got] == expected
    assert all(v == b"v%d" % o for o, v in got)


def test_log_ending_before_the_range_end_is_data_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _gappy_log(0)
    with pytest.raises(RuntimeError, match="failOnDataLoss"):
        _read(monkeypatch, log, 0, 20)
    assert [o for o, _ in _read(monkeypatch, log, 0, 20, fail=False)] == [0, 1, 2, 5, 6, 9]


def test_read_committed_skips_aborted_transactions_and_markers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Producers 1 (aborted) and 2 (committed) interleave with plain records; producer 1
    later commits a second transaction, which must be read."""
    log = _Log()
    txn = {"transactional": True, "producer_epoch": 0}
    log.add([0, 1])  # plain
    log.add([2, 3], producer_id=1, **txn)  # pid 1, aborted below
    log.add([4], producer_id=2, **txn)  # pid 2, committed
    log.add([5, 6], producer_id=1, **txn)
    log.marker(7, pid=1, commit=False)
    log.add([8])  # plain
    log.marker(9, pid=2, commit=True)
    log.add([10, 11], producer_id=1, **txn)  # pid 1 again, committed
    log.marker(12, pid=1, commit=True)
    log.aborted = [(1, 2, 7)]
    committed = _read(monkeypatch, log, 0, 13, committed=True)
    assert [o for o, _ in committed] == [0, 1, 4, 8, 10, 11]
    everything = _read(monkeypatch, log, 0, 13)
    assert [o for o, _ in everything] == [0, 1, 2, 3, 4, 5, 6, 8, 10, 11]
    # starting after the aborted transaction began: still skipped
    assert [o for o, _ in _read(monkeypatch, log, 3, 13, committed=True)] == [4, 8, 10, 11]


def test_moved_leader_and_lost_connections_are_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _gappy_log(0)
    errors = (6, f.CONNECTION_ERROR, 74, 3)
    got = _read(monkeypatch, log, 0, 11, errors=errors)
    assert [o for o, _ in got] == [0, 1, 2, 5, 6, 9]


def test_a_fatal_fetch_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(f.FetcherError, match="TOPIC_AUTHORIZATION_FAILED"):
        _read(monkeypatch, _gappy_log(0), 0, 11, errors=(29,))


def test_fetcher_option() -> None:
    def options(**kw: str) -> Any:
        return parse_read_options(
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", **kw}, streaming=False
        )

    scram = {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="u" password="p";',
    }
    kerberos = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "GSSAPI"}
    assert options().uses_direct_fetch()
    assert not options(fetcher="librdkafka").uses_direct_fetch()
    assert options(**scram).uses_direct_fetch()  # the direct fetcher speaks SASL and TLS
    assert not options(**kerberos).uses_direct_fetch()
    assert options(**{"kafka.ssl.ca.location": "/x"}).uses_direct_fetch()  # PLAINTEXT: ignored
    assert options(**{"kafka.security.protocol": "PLAINTEXT"}).uses_direct_fetch()
    with pytest.raises(ValueError, match="option 'fetcher'"):
        options(fetcher="fast")
    with pytest.raises(ValueError, match="option 'fetcher'.*kafka.sasl.mechanism.*GSSAPI"):
        options(fetcher="direct", **kerberos)
    with pytest.raises(ValueError, match="option 'kafka.security.protocol'"):
        options(**{"kafka.security.protocol": "SASL"})
