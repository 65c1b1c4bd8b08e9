"""The hand-written ListOffsets and Produce codecs (``broker/protocol/list_offsets_codec.py``,
``produce_codec.py``) against kio, the generic codec generated from Kafka's JSON schemas:
for every supported version, the same values encode to the same bytes, and a kio-encoded
request decodes to the same fields. Malformed requests raise InvalidRequestError (the
dispatcher then closes the connection), never anything else."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import fetch_response, list_offsets_codec, produce_codec, registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import InvalidRequestError

pytestmark = pytest.mark.property

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(min_size=0, max_size=20)
codes = st.sampled_from(
    [ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.offset_out_of_range]
)
LIST_OFFSETS_VERSIONS = range(1, 8)
PRODUCE_VERSIONS = range(3, 10)


def _kio_encode(entity: Any) -> bytes:
    return registry.encode(entity)


offset_answers = st.lists(
    st.tuples(
        names,
        st.lists(st.tuples(i32, codes, i64, i64, i32), max_size=4),
    ),
    max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from(LIST_OFFSETS_VERSIONS), topics=offset_answers)
def test_list_offsets_response_matches_kio(version: int, topics: list[Any]) -> None:
    cls = registry.response_class(ApiKey.LIST_OFFSETS, version)
    topic_cls = registry.nested(cls, "ListOffsetsTopicResponse")
    part_cls = registry.nested(cls, "ListOffsetsPartitionResponse")
    entity = registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        topics=tuple(
            registry.build(
                topic_cls,
                name=name,
                partitions=tuple(
                    registry.build(
                        part_cls,
                        partition_index=p,
                        error_code=code,
                        timestamp=ts,
                        offset=off,
                        leader_epoch=epoch,
                    )
                    for p, code, ts, off, epoch in parts
                ),
            )
            for name, parts in topics
        ),
    )
    ours = list_offsets_codec.encode_response(
        version,
        [(name, [list_offsets_codec.PartitionOffset(*p) for p in parts]) for name, parts in topics],
    )
    assert ours == _kio_encode(entity)


@settings(max_examples=60, deadline=None)
@given(
    version=st.sampled_from(LIST_OFFSETS_VERSIONS),
    replica_id=i32,
    isolation=st.sampled_from([0, 1]),
    topics=st.lists(st.tuples(names, st.lists(st.tuples(i32, i32, i64), max_size=4)), max_size=3),
)
def test_list_offsets_request_decodes_like_kio(
    version: int, replica_id: int, isolation: int, topics: list[Any]
) -> None:
    cls = registry.request_class(ApiKey.LIST_OFFSETS, version)
    topic_cls = registry.nested(cls, "ListOffsetsTopic")
    part_cls = registry.nested(cls, "ListOffsetsPartition")
    entity = registry.build(
        cls,
        replica_id=replica_id,
        isolation_level=isolation,
        topics=tuple(
            registry.build(
                topic_cls,
                name=name,
                partitions=tuple(
                    registry.build(
                        part_cls, partition_index=p, current_leader_epoch=e, timestamp=ts
                    )
                    for p, e, ts in parts
                ),
            )
            for name, parts in topics
        ),
    )
    body = _kio_encode(entity)
    query = list_offsets_codec.decode_request(version, body, 0)
    theirs = registry.decode_request(ApiKey.LIST_OFFSETS, version, body, 0)
    assert query.replica_id == theirs.replica_id
    assert query.isolation_level == int(getattr(theirs, "isolation_level", 0))
    assert [(t.name, [tuple(p) for p in t.partitions]) for t in query.topics] == [
        (
            t.name,
            [
                (
                    p.partition_index,
                    int(getattr(p, "current_leader_epoch", -1)),
                    p.timestamp,
                )
                for p in t.partitions
            ],
        )
        for t in theirs.topics
    ]


@settings(max_examples=200, deadline=None)
@given(version=st.sampled_from(LIST_OFFSETS_VERSIONS), data=st.binary(max_size=80))
def test_list_offsets_garbage_raises_invalid_request(version: int, data: bytes) -> None:
    try:
        list_offsets_codec.decode_request(version, data, 0)
    except InvalidRequestError:
        pass


def test_list_offsets_truncated_request_raises_invalid_request() -> None:
    cls = registry.request_class(ApiKey.LIST_OFFSETS, 7)
    entity = registry.build(
        cls,
        replica_id=-1,
        isolation_level=0,
        topics=(
            registry.build(
                registry.nested(cls, "ListOffsetsTopic"),
                name="events",
                partitions=(
                    registry.build(
                        registry.nested(cls, "ListOffsetsPartition"),
                        partition_index=0,
                        current_leader_epoch=-1,
                        timestamp=-1,
                    ),
                ),
            ),
        ),
    )
    body = _kio_encode(entity)
    for cut in range(len(body) - 1):
        with pytest.raises(InvalidRequestError):
            list_offsets_codec.decode_request(7, body[:cut], 0)
    huge_count = body[:5] + b"\xff\xff\xff\xff\x07"  # 2**31 topics announced, none sent
    with pytest.raises(InvalidRequestError):
        list_offsets_codec.decode_request(7, huge_count, 0)


@settings(max_examples=60, deadline=None)
@given(
    version=st.sampled_from(PRODUCE_VERSIONS),
    topics=st.lists(
        st.tuples(
            names,
            st.lists(
                st.tuples(
                    i32,
                    codes,
                    i64,
                    st.one_of(st.just(-1), st.integers(0, 2**41)),
                    i64,
                    st.one_of(st.none(), st.text(max_size=20)),
                ),
                max_size=4,
            ),
        ),
        max_size=3,
    ),
)
def test_produce_response_matches_kio(version: int, topics: list[Any]) -> None:
    cls = registry.response_class(ApiKey.PRODUCE, version)
    topic_cls = registry.nested(cls, "TopicProduceResponse")
    part_cls = registry.nested(cls, "PartitionProduceResponse")
    entity = registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        responses=tuple(
            registry.build(
                topic_cls,
                name=name,
                partition_responses=tuple(
                    registry.build(
                        part_cls,
                        index=p,
                        error_code=code,
                        base_offset=base,
                        log_append_time=None
                        if append < 0
                        else _EPOCH + datetime.timedelta(milliseconds=append),
                        log_start_offset=start,
                        record_errors=(),
                        error_message=message,
                    )
                    for p, code, base, append, start, message in parts
                ),
            )
            for name, parts in topics
        ),
    )
    ours = produce_codec.encode_response(
        version,
        [(name, [produce_codec.PartitionResult(*p) for p in parts]) for name, parts in topics],
    )
    assert ours == _kio_encode(entity)


def test_produce_response_cuts_an_error_message_that_echoes_a_huge_name() -> None:
    """Found by the protocol fuzzer: an error message quoting a 32,767-byte topic name
    could not be encoded (a Kafka string holds at most 32,767 bytes)."""
    name = "s" * 32767
    body = produce_codec.encode_response(
        8, [(name, [produce_codec.PartitionResult(0, 3, -1, -1, -1, f"unknown {name}")])]
    )
    assert len(body) < 32767 + 1200


produce_requests = st.lists(
    st.tuples(
        names,
        st.lists(st.tuples(i32, st.one_of(st.none(), st.binary(max_size=40))), max_size=4),
    ),
    max_size=3,
)


def _produce_body(version: int, tid: str | None, acks: int, timeout_ms: int, topics: Any) -> bytes:
    cls = registry.request_class(ApiKey.PRODUCE, version)
    topic_cls = registry.nested(cls, "TopicProduceData")
    part_cls = registry.nested(cls, "PartitionProduceData")
    return _kio_encode(
        registry.build(
            cls,
            transactional_id=tid,
            acks=acks,
            timeout=datetime.timedelta(milliseconds=timeout_ms),
            topic_data=tuple(
                registry.build(
                    topic_cls,
                    name=name,
                    partition_data=tuple(
                        registry.build(part_cls, index=i, records=r) for i, r in parts
                    ),
                )
                for name, parts in topics
            ),
        )
    )


@settings(max_examples=100, deadline=None)
@given(
    version=st.sampled_from(PRODUCE_VERSIONS),
    tid=st.one_of(st.none(), names),
    acks=st.sampled_from([-1, 0, 1]),
    timeout_ms=st.integers(0, 2**31 - 1),
    topics=produce_requests,
)
def test_produce_request_decodes_like_kio(
    version: int, tid: str | None, acks: int, timeout_ms: int, topics: Any
) -> None:
    body = _produce_body(version, tid, acks, timeout_ms, topics)
    ours = produce_codec.decode_request(version, body, 0)
    theirs = registry.decode_request(ApiKey.PRODUCE, version, body, 0)
    assert ours.transactional_id == theirs.transactional_id
    assert ours.acks == theirs.acks
    assert ours.timeout == theirs.timeout
    assert [
        (
            t.name,
            [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data],
        )
        for t in ours.topic_data
    ] == [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in theirs.topic_data]


def test_produce_request_records_are_views_of_the_frame_not_copies() -> None:
    """The point of the hand decoder: a 1 MB batch is not copied out of the request; from a
    writable frame (a large request, see broker/network/connection.py) the view is writable,
    so the produce path patches offsets in place."""
    records = b"r" * 100_000
    frame = bytearray(_produce_body(9, None, -1, 30_000, [("events", [(0, records)])]))
    request = produce_codec.decode_request(9, frame, 0)
    view = request.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and not view.readonly and view.obj is frame
    assert bytes(view) == records
    view[0:1] = b"X"
    assert b"X" + records[1:] in frame
    readonly = produce_codec.decode_request(9, bytes(frame), 0)
    assert readonly.topic_data[0].partition_data[0].records.readonly  # type: ignore[union-attr]


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(PRODUCE_VERSIONS), data=st.binary(max_size=80))
def test_produce_garbage_raises_invalid_request(version: int, data: bytes) -> None:
    try:
        produce_codec.decode_request(version, data, 0)
    except InvalidRequestError:
        pass


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_truncated_request_raises_invalid_request(version: int) -> None:
    body = _produce_body(version, "tx", -1, 30_000, [("events", [(0, b"r" * 30), (1, None)])])
    for cut in range(len(body)):
        with pytest.raises(InvalidRequestError):
            produce_codec.decode_request(version, body[:cut], 0)


@pytest.mark.parametrize(
    ("version", "body", "reason"),
    [
        (7, b"\xff\xff\x00\x01\x00\x00\x75\x30\xff\xff\xff\xff", "null or negative array"),
        (7, b"\xff\xff\x00\x01\x00\x00\x75\x30\x00\x00\x00\x01\xff\xff", "null or negative string"),
        (9, b"\x00\x00\x01\x00\x00\x75\x30\x00", "null or negative array"),
    ],
)
def test_produce_nulls_where_kafka_forbids_them_are_refused(
    version: int, body: bytes, reason: str
) -> None:
    with pytest.raises(InvalidRequestError, match=reason):
        produce_codec.decode_request(version, body, 0)


fetched_partitions = st.lists(
    st.tuples(
        i32,
        codes,
        i64,
        i64,
        i64,
        st.one_of(st.none(), st.lists(st.tuples(i64, i64), max_size=3)),
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.tuples(st.integers(0, 2**31 - 1), i64)),
        st.booleans(),  # a current_leader tagged field the follower does not read
    ),
    max_size=4,
)


@settings(max_examples=100, deadline=None)
@given(
    throttle=st.integers(0, 2**31 - 1),
    error=codes,
    session=i32,
    topics=st.lists(st.tuples(names, fetched_partitions), max_size=3),
)
def test_fetch_v12_response_decodes_like_kio(
    throttle: int, error: ErrorCode, session: int, topics: Any
) -> None:
    """The follower's hand decoder (fetch_response.decode_response_v12) reads what kio (and
    so a Kafka leader) writes, unknown tagged fields skipped, records as views."""
    cls = registry.response_class(ApiKey.FETCH, 12)
    part_cls = registry.nested(cls, "PartitionData")
    topic_cls = registry.nested(cls, "FetchableTopicResponse")
    epoch_cls = registry.nested(part_cls, "EpochEndOffset")
    leader_cls = registry.nested(part_cls, "LeaderIdAndEpoch")
    aborted_cls = registry.nested(part_cls, "AbortedTransaction")

    def part(p: Any) -> Any:
        index, code, hw, lso, start, aborted, records, diverging, leader = p
        extra: dict[str, Any] = {}
        if diverging is not None:
            extra["diverging_epoch"] = registry.build(
                epoch_cls, epoch=diverging[0], end_offset=diverging[1]
            )
        if leader:
            extra["current_leader"] = registry.build(leader_cls, leader_id=3, leader_epoch=7)
        return registry.build(
            part_cls,
            partition_index=index,
            error_code=code,
            high_watermark=hw,
            last_stable_offset=lso,
            log_start_offset=start,
            aborted_transactions=None
            if aborted is None
            else tuple(
                registry.build(aborted_cls, producer_id=pid, first_offset=first)
                for pid, first in aborted
            ),
            preferred_read_replica=-1,
            records=records,
            **extra,
        )

    body = _kio_encode(
        registry.build(
            cls,
            throttle_time=datetime.timedelta(milliseconds=throttle),
            error_code=error,
            session_id=session,
            responses=tuple(
                registry.build(topic_cls, topic=name, partitions=tuple(part(p) for p in parts))
                for name, parts in topics
            ),
        )
    )
    ours, end = fetch_response.decode_response_v12(body, 0)
    assert end == len(body)
    assert (ours.throttle_time_ms, ours.error_code, ours.session_id) == (throttle, error, session)
    assert [t.topic for t in ours.responses] == [name for name, _ in topics]
    for topic, (_, parts) in zip(ours.responses, topics, strict=True):
        for got, p in zip(topic.partitions, parts, strict=True):
            index, code, hw, lso, start, aborted, records, diverging, _leader = p
            assert (got.partition_index, got.error_code, got.high_watermark) == (index, code, hw)
            assert (got.last_stable_offset, got.log_start_offset) == (lso, start)
            assert got.aborted_transactions == (None if aborted is None else list(aborted))
            assert (None if got.records is None else bytes(got.records)) == records
            assert got.diverging_epoch == (None if diverging is None else tuple(diverging))


def test_fetch_v12_response_truncated_raises_invalid_request() -> None:
    resp = fetch_response.encode_fetch_response(
        12,
        [fetch_response.FetchPartitionData("events", 0, high_watermark=5, diverging_epoch=(2, 9))],
    )
    body = b"".join(c for c in resp.chunks if isinstance(c, bytes))
    decoded, _ = fetch_response.decode_response_v12(body, 0)
    assert decoded.responses[0].partitions[0].diverging_epoch == (2, 9)
    for cut in range(len(body)):
        with pytest.raises(InvalidRequestError):
            fetch_response.decode_response_v12(body[:cut], 0)
