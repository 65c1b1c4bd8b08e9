"""The hand-written Fetch response encoder must produce what Kafka's schema describes:
decode it with kio's generated reader for every supported version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from broker.api.fetch import encode_response
from broker.protocol import records, registry
from broker.protocol.errors import ErrorCode
from broker.replication.replica_manager import FetchResult
from broker.types import TopicPartition

pytestmark = pytest.mark.unit


@dataclass
class _Slice:
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


def _flatten(chunks: list[Any]) -> bytes:
    return b"".join(c if isinstance(c, bytes) else c.data for c in chunks)


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_response_decodes_with_kafkas_schema(version: int) -> None:
    batch = records.encode_batch([records.SimpleRecord(b"v", b"k", 1)], base_offset=5)
    results = [
        FetchResult(TopicPartition("a", 0), ErrorCode.none, 6, 6, 0, _Slice(batch)),  # type: ignore[arg-type]
        FetchResult(TopicPartition("a", 1), ErrorCode.offset_out_of_range, 3, 3, 1, None),
        FetchResult(TopicPartition("b-c", 2), ErrorCode.none, 0, 0, 0, None),
    ]
    resp = encode_response(version, results)
    raw = _flatten(resp.chunks)
    assert len(raw) == resp.size
    cls = registry.response_class(1, version)
    decoded = registry._reader(cls)(raw, 0)[0]
    assert [t.topic for t in decoded.responses] == ["a", "b-c"]
    a0, a1 = decoded.responses[0].partitions
    assert a0.partition_index == 0 and a0.high_watermark == 6
    assert a0.records == batch
    assert a1.error_code == ErrorCode.offset_out_of_range
    if version >= 5:
        assert a1.log_start_offset == 1
    if version >= 7:
        assert decoded.error_code == ErrorCode.none and decoded.session_id == 0
