"""The connector's hand-written Metadata v9 codec against kio's (generated from Kafka's JSON
schemas): the same request bytes, the same reading of any response, and a clear
``struct.error`` for one that does not parse."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v9.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_writer
from kio.static.primitive import i32

from spark_connector.kafka import metadata_codec

NAMES = st.text(min_size=1, max_size=20)
INT32 = st.integers(-(2**31), 2**31 - 1)
ERRORS = st.sampled_from(
    [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.topic_authorization_failed,
    ]
)


def _kio_bytes(entity: object) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _frame(response: MetadataResponse, correlation: int = 7) -> bytes:
    """A response frame as the connection returns it: correlation id, empty tagged fields,
    body."""
    return struct.pack(">i", correlation) + b"\x00" + _kio_bytes(response)


@given(
    topics=st.none() | st.lists(NAMES, max_size=5),
    auto_create=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_the_request_is_kios_byte_for_byte(topics: list[str] | None, auto_create: bool) -> None:
    kio = MetadataRequest(
        topics=None
        if topics is None
        else tuple(MetadataRequestTopic(name=TopicName(t)) for t in topics),
        allow_auto_topic_creation=auto_create,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    assert metadata_codec.encode_request(topics, auto_create=auto_create) == _kio_bytes(kio)


_partitions = st.lists(
    st.builds(
        MetadataResponsePartition,
        error_code=ERRORS,
        partition_index=INT32.map(i32),
        leader_id=INT32.map(BrokerId),
        leader_epoch=INT32.map(i32),
        replica_nodes=st.lists(INT32.map(BrokerId), max_size=4).map(tuple),
        isr_nodes=st.lists(INT32.map(BrokerId), max_size=4).map(tuple),
        offline_replicas=st.lists(INT32.map(BrokerId), max_size=2).map(tuple),
    ),
    max_size=6,
    unique_by=lambda p: int(p.partition_index),
).map(tuple)

_responses = st.builds(
    MetadataResponse,
    throttle_time=st.integers(0, 10_000).map(lambda ms: datetime.timedelta(milliseconds=ms)),
    brokers=st.lists(
        st.builds(
            MetadataResponseBroker,
            node_id=INT32.map(BrokerId),
            host=NAMES,
            port=INT32.map(i32),
            rack=st.none() | NAMES,
        ),
        max_size=4,
        unique_by=lambda b: int(b.node_id),
    ).map(tuple),
    cluster_id=st.none() | NAMES,
    controller_id=INT32.map(BrokerId),
    topics=st.lists(
        st.builds(
            MetadataResponseTopic,
            error_code=ERRORS,
            name=NAMES.map(TopicName),
            is_internal=st.booleans(),
            partitions=_partitions,
            topic_authorized_operations=INT32.map(i32),
        ),
        max_size=4,
    ).map(tuple),
    cluster_authorized_operations=INT32.map(i32),
)


@given(response=_responses)
@settings(max_examples=300, deadline=None)
def test_any_response_reads_as_kio_wrote_it(response: MetadataResponse) -> None:
    answer = metadata_codec.decode_response(_frame(response))
    assert answer.brokers == {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
    assert answer.controller == int(response.controller_id)
    assert [(t.name, t.error) for t in answer.topics] == [
        (str(t.name), int(t.error_code)) for t in response.topics
    ]
    for got, sent in zip(answer.topics, response.topics, strict=True):
        assert got.partitions == {
            int(p.partition_index): (int(p.leader_id), int(p.leader_epoch)) for p in sent.partitions
        }


def _one_topic_response() -> MetadataResponse:
    return MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(MetadataResponseBroker(node_id=BrokerId(1), host="127.0.0.1", port=i32(9092)),),
        cluster_id="c",
        controller_id=BrokerId(1),
        topics=(
            MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=TopicName("events"),
                partitions=tuple(
                    MetadataResponsePartition(
                        error_code=ErrorCode.none,
                        partition_index=i32(p),
                        leader_id=BrokerId(1),
                        leader_epoch=i32(3),
                        replica_nodes=(BrokerId(1),),
                        isr_nodes=(BrokerId(1),),
                    )
                    for p in range(3)
                ),
            ),
        ),
    )


def test_every_truncation_is_a_struct_error() -> None:
    frame = _frame(_one_topic_response())
    assert metadata_codec.decode_response(frame).topics[0].partitions[2] == (1, 3)
    for cut in range(len(frame)):
        with pytest.raises(struct.error):
            metadata_codec.decode_response(frame[:cut])


def test_a_name_that_is_not_utf8_or_a_count_past_the_end_is_a_struct_error() -> None:
    frame = bytearray(_frame(_one_topic_response()))
    at = frame.index(b"events")
    bad_name = bytes(frame[:at]) + b"\xff\xfe" + bytes(frame[at + 2 :])
    with pytest.raises(struct.error, match="UTF-8"):
        metadata_codec.decode_response(bad_name)
    # the brokers array claims 2**28 entries: refused before anything is allocated for them
    huge = bytes(frame[:9]) + b"\x80\x80\x80\x80\x01" + bytes(frame[10:])
    with pytest.raises(struct.error, match="elements"):
        metadata_codec.decode_response(huge)
