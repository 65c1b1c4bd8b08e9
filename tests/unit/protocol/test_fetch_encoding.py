"""The hand-written Fetch response encoder must produce what Kafka's schema describes:
decode it with kio's generated reader for every supported version, with and without
aborted transactions (read_committed). Records come as a file region (sent with sendfile)
or as a region that carries its bytes already (written inline); both must encode to the
same bytes, the inline one as a single chunk."""

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
class _Region:
    """A file region: the network layer sends it with sendfile (``content`` stands in for
    the file's bytes)."""

    content: bytes
    file: Any = None
    position: int = 0

    @property
    def size(self) -> int:
        return len(self.content)


@dataclass
class _Inline(_Region):
    """A region whose bytes were read already (a FetchSlice with ``data``)."""

    @property
    def data(self) -> bytes:
        return self.content


@pytest.fixture(params=[_Region, _Inline], ids=["sendfile", "inline"])
def _Slice(request: pytest.FixtureRequest) -> type[_Region]:
    return request.param


def _flatten(chunks: list[Any]) -> bytes:
    return b"".join(c if isinstance(c, bytes) else c.content for c in chunks)


def _decode(version: int, parts: list[FetchPartitionData]) -> Any:
    resp = encode_fetch_response(version, parts)
    raw = _flatten(resp.chunks)
    assert len(raw) == resp.size
    if all(isinstance(p.records, _Inline) or p.records is None for p in parts):
        assert len(resp.chunks) == 1  # one write
    else:
        assert any(isinstance(c, _Region) for c in resp.chunks)  # left to sendfile
    cls = registry.response_class(ApiKey.FETCH, version)
    return registry._reader(cls)(raw, 0)[0]


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_response_decodes_with_kafkas_schema(version: int, _Slice: type[_Region]) -> None:
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
def test_aborted_transactions_decode_with_kafkas_schema(
    version: int, _Slice: type[_Region]
) -> None:
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


@pytest.mark.parametrize("version", [4, 11, 12])
def test_inline_and_sendfile_regions_encode_the_same_bytes(version: int) -> None:
    a = records.encode_batch([records.SimpleRecord(b"v" * 50, b"k", 1)], base_offset=0)
    b = records.encode_batch([records.SimpleRecord(b"w", None, 2)], base_offset=3)

    def parts(kind: type[_Region], other: type[_Region]) -> list[FetchPartitionData]:
        return [
            FetchPartitionData("t", 0, ErrorCode.none, 4, 4, 0, None, kind(a)),
            FetchPartitionData("t", 1, ErrorCode.none, 9, 9, 0, None, other(b)),
        ]

    sent = _flatten(encode_fetch_response(version, parts(_Region, _Region)).chunks)
    for kinds in ((_Inline, _Inline), (_Inline, _Region), (_Region, _Inline)):
        assert _flatten(encode_fetch_response(version, parts(*kinds)).chunks) == sent


@pytest.mark.parametrize("version", range(13, 18))
def test_topic_id_versions_decode_with_kafkas_schema(version: int, _Slice: type[_Region]) -> None:
    """Fetch v13-v17 (served to Kafka followers): topics by id, and the tagged
    ``diverging_epoch`` (v12+) of a fetcher whose log diverges (KIP-595)."""
    import uuid

    tid = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
    other = uuid.uuid4()
    batch = records.encode_batch([records.SimpleRecord(b"v", b"k", 1)], base_offset=5)
    decoded = _decode(
        version,
        [
            FetchPartitionData("a", 0, ErrorCode.none, 6, 6, 0, None, _Slice(batch), topic_id=tid),
            FetchPartitionData(
                "a", 1, ErrorCode.none, 9, 9, 0, None, topic_id=tid, diverging_epoch=(3, 7)
            ),
            FetchPartitionData("", 4, ErrorCode.unknown_topic_id, topic_id=other),
        ],
    )
    assert [t.topic_id for t in decoded.responses] == [tid, other]
    a0, a1 = decoded.responses[0].partitions
    assert a0.records == batch and a0.diverging_epoch.epoch == -1
    assert (a1.diverging_epoch.epoch, a1.diverging_epoch.end_offset) == (3, 7)
    assert not a1.records
    assert decoded.responses[1].partitions[0].error_code == ErrorCode.unknown_topic_id


def test_diverging_epoch_in_v12() -> None:
    decoded = _decode(12, [FetchPartitionData("t", 0, diverging_epoch=(2, 40))])
    p = decoded.responses[0].partitions[0]
    assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (2, 40)
