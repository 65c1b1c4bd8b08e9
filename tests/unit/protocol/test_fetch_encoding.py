"""The hand-written Fetch response encoder must produce what Kafka's schema describes:
decode it with kio's generated reader for every supported version, with and without
aborted transactions (read_committed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from broker.protocol import records, registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.fetch_response import FetchPartitionData, encode_fetch_response

pytestmark = pytest.mark.unit


@dataclass
class _Slice:
    data: bytes
    file: Any = None
    position: int = 0

    @property
    def size(self) -> int:
        return len(self.data)


def _flatten(chunks: list[Any]) -> bytes:
    return b"".join(c if isinstance(c, bytes) else c.data for c in chunks)


def _decode(version: int, parts: list[FetchPartitionData]) -> Any:
    resp = encode_fetch_response(version, parts)
    raw = _flatten(resp.chunks)
    assert len(raw) == resp.size
    cls = registry.response_class(ApiKey.FETCH, version)
    return registry._reader(cls)(raw, 0)[0]


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_response_decodes_with_kafkas_schema(version: int) -> None:
    batch = records.encode_batch([records.SimpleRecord(b"v", b"k", 1)], base_offset=5)
    decoded = _decode(
        version,
        [
            FetchPartitionData("a", 0, ErrorCode.none, 6, 6, 0, None, _Slice(batch)),
            FetchPartitionData("a", 1, ErrorCode.offset_out_of_range, 3, 3, 1),
            FetchPartitionData("b-c", 2, ErrorCode.none, 0, 0, 0),
        ],
    )
    assert [t.topic for t in decoded.responses] == ["a", "b-c"]
    a0, a1 = decoded.responses[0].partitions
    assert a0.partition_index == 0 and a0.high_watermark == 6
    assert a0.records == batch
    assert a0.aborted_transactions is None
    assert a1.error_code == ErrorCode.offset_out_of_range
    if version >= 5:
        assert a1.log_start_offset == 1
    if version >= 7:
        assert decoded.error_code == ErrorCode.none and decoded.session_id == 0


@pytest.mark.parametrize("version", range(4, 13))
def test_aborted_transactions_decode_with_kafkas_schema(version: int) -> None:
    batch = records.encode_batch([records.SimpleRecord(b"v", b"k", 1)], base_offset=7)
    decoded = _decode(
        version,
        [
            FetchPartitionData(
                "t", 0, ErrorCode.none, 20, 12, 0, [(1000, 3), (1001, 9)], _Slice(batch)
            ),
            FetchPartitionData("t", 1, ErrorCode.none, 5, 5, 0, []),
        ],
    )
    p0, p1 = decoded.responses[0].partitions
    assert [(int(a.producer_id), int(a.first_offset)) for a in p0.aborted_transactions] == [
        (1000, 3),
        (1001, 9),
    ]
    assert p0.last_stable_offset == 12 and p0.high_watermark == 20
    assert p0.records == batch
    assert p1.aborted_transactions == ()
