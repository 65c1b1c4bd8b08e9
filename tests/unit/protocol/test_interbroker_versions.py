"""Every version of the ZooKeeper-mode inter-broker messages a Kafka 3.9 broker sends or
answers (broker.protocol.interbroker): round trips of each (api, version), and golden bytes
built by hand, field by field, from Kafka 3.9's message JSON with an encoder written here
(independent of kio's), for each version whose layout differs from the one before.

Also the inter.broker.protocol.version table (Kafka's ControllerChannelManager) and that
malformed bodies are refused before anything is allocated."""

from __future__ import annotations

import dataclasses
import struct
import typing
import uuid
from typing import Any

import pytest
from kio.schema.alter_partition.v2 import request as kio_alter_v2
from kio.schema.alter_partition.v3 import request as kio_alter_v3
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from broker.protocol import interbroker, registry
from broker.protocol.inter_broker_protocol import (
    DEFAULT,
    IBP_VERSIONS,
    InterBrokerProtocolVersion,
    parse_ibp,
)

pytestmark = pytest.mark.unit

TOPIC_ID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")

# --------------------------------------------------------------------------- a small encoder


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def boolean(v: bool) -> bytes:
    return b"\x01" if v else b"\x00"


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def string(s: str | None, flex: bool) -> bytes:
    if s is None:
        return b"\x00" if flex else i16(-1)
    raw = s.encode()
    return (uvarint(len(raw) + 1) if flex else i16(len(raw))) + raw


def array(items: list[bytes], flex: bool) -> bytes:
    return (uvarint(len(items) + 1) if flex else i32(len(items))) + b"".join(items)


def ints(values: list[int], flex: bool) -> bytes:
    return array([i32(v) for v in values], flex)


def struct_(flex: bool, *parts: bytes) -> bytes:
    """A struct's fields, then (flexible versions) its empty tagged-field section."""
    return b"".join(parts) + (b"\x00" if flex else b"")


def cls_of(api_key: int, version: int, kind: str = "request") -> Any:
    lookup = registry.request_class if kind == "request" else registry.response_class
    return lookup(api_key, version)


def nested(top: Any, name: str) -> Any:
    return registry.nested(top, name)


def check_request(entity: Any, expected: bytes) -> None:
    assert registry.encode(entity) == expected
    decoded = registry.decode_request(entity.__api_key__, entity.__version__, expected, 0)
    assert decoded == entity


def check_response(entity: Any, expected: bytes) -> None:
    assert registry.encode(entity) == expected
    decoded, size = entity_reader(type(entity))(expected, 0)
    assert size == len(expected) and decoded == entity


# --------------------------------------------------------------------------- round trips


def _sample(cls: Any, depth: int = 0) -> Any:
    """An instance of ``cls`` with a non-default value in every field (two elements per
    array), so that an encoding that skipped or misplaced a field would not round-trip."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for n, f in enumerate(dataclasses.fields(cls)):
        hint = hints[f.name]
        kafka_type = f.metadata.get("kafka_type")
        origin = typing.get_origin(hint)
        if origin is tuple:
            inner = typing.get_args(hint)[0]
            if dataclasses.is_dataclass(inner):
                kwargs[f.name] = tuple(_sample(inner, depth + 1) for _ in range(2))
            else:
                kwargs[f.name] = (3 + n, 7 + depth)
            continue
        kwargs[f.name] = {
            "int8": 1,
            "int16": 2,
            "int32": 100 + n,
            "int64": 2**40 + n,
            "bool": True,
            "string": f"s{n}-{depth}",
            "uuid": uuid.UUID(int=0x1234 + n),
            "error_code": ErrorCode.not_leader_or_follower,
        }.get(str(kafka_type))
        if kafka_type == "timedelta_i32":
            import datetime

            kwargs[f.name] = datetime.timedelta(milliseconds=5)
    return cls(**kwargs)


ALL_VERSIONS = sorted(
    [(k, v, "request") for (k, v) in interbroker.REQUESTS]
    + [(k, v, "response") for (k, v) in interbroker.RESPONSES]
)


@pytest.mark.parametrize(("api_key", "version", "kind"), ALL_VERSIONS)
def test_every_version_round_trips(api_key: int, version: int, kind: str) -> None:
    cls = cls_of(api_key, version, kind)
    assert cls.__api_key__ == api_key and cls.__version__ == version
    message = next(m for m in interbroker.MESSAGES if m.api_key == api_key and m.kind == kind)
    assert cls.__flexible__ == (version >= message.flexible_from)
    entity = _sample(cls)
    data = registry.encode(entity)
    if kind == "request":
        assert registry.decode_request(api_key, version, data, 0) == entity
        assert registry.is_supported(api_key, version)
    else:
        decoded, size = entity_reader(cls)(data, 0)
        assert size == len(data) and decoded == entity


def test_the_registry_serves_every_version_kafka_39_sends() -> None:
    assert registry.SUPPORTED_APIS[4] == ("LeaderAndIsr", 0, 7)
    assert registry.SUPPORTED_APIS[5] == ("StopReplica", 0, 4)
    assert registry.SUPPORTED_APIS[6] == ("UpdateMetadata", 0, 8)
    assert registry.SUPPORTED_APIS[7] == ("ControlledShutdown", 1, 3)
    assert registry.SUPPORTED_APIS[56] == ("AlterPartition", 0, 3)
    assert registry.SUPPORTED_APIS[67] == ("AllocateProducerIds", 0, 0)
    for api_key, (low, high) in interbroker.VERSIONS.items():
        assert not registry.is_supported(api_key, high + 1)
        assert not registry.is_supported(api_key, low - 1)
    # a Kafka 3.9 follower's replica fetcher sends these without asking ApiVersions
    assert registry.is_supported(1, 17) and registry.is_supported(2, 9)
    assert registry.SUPPORTED_APIS[1][2] == 12 and registry.SUPPORTED_APIS[2][2] == 7


# --------------------------------------------------------------------------- LeaderAndIsr


def _lair_state(cls: Any, version: int) -> Any:
    return registry.build(
        nested(cls, "LeaderAndIsrPartitionState"),
        topic_name="t",
        partition_index=0,
        controller_epoch=2,
        leader=1,
        leader_epoch=3,
        isr=(1, 2),
        partition_epoch=4,
        replicas=(1, 2, 3),
        adding_replicas=(3,),
        removing_replicas=(),
        is_new=True,
        leader_recovery_state=1,
    )


def _lair_state_bytes(version: int, flex: bool, *, with_topic: bool) -> bytes:
    parts = [string("t", flex)] if with_topic else []
    parts += [i32(0), i32(2), i32(1), i32(3), ints([1, 2], flex), i32(4), ints([1, 2, 3], flex)]
    if version >= 3:
        parts += [ints([3], flex), ints([], flex)]
    if version >= 1:
        parts.append(boolean(True))
    if version >= 6:
        parts.append(i8(1))
    return struct_(flex, *parts)


@pytest.mark.parametrize("version", range(8))
def test_leader_and_isr_request_golden_bytes(version: int) -> None:
    cls = cls_of(4, version)
    flex = version >= 4
    state = _lair_state(cls, version)
    leader = nested(cls, "LeaderAndIsrLiveLeader")(broker_id=1, host_name="h", port=9092)
    fields: dict[str, Any] = {}
    if version < 2:
        fields["ungrouped_partition_states"] = (state,)
    else:
        fields["topic_states"] = (
            registry.build(
                nested(cls, "LeaderAndIsrTopicState"),
                topic_name="t",
                topic_id=TOPIC_ID,
                partition_states=(state,),
            ),
        )
    request = registry.build(
        cls,
        controller_id=1,
        is_k_raft_controller=False,
        controller_epoch=2,
        broker_epoch=5,
        type_=0,
        live_leaders=(leader,),
        **fields,
    )
    out = [i32(1)]
    if version >= 7:
        out.append(boolean(False))  # isKRaftController
    out.append(i32(2))
    if version >= 2:
        out.append(i64(5))
    if version >= 5:
        out.append(i8(0))  # Type
    if version < 2:
        out.append(array([_lair_state_bytes(version, flex, with_topic=True)], flex))
    else:
        topic = [string("t", flex)]
        if version >= 5:
            topic.append(TOPIC_ID.bytes)
        topic.append(array([_lair_state_bytes(version, flex, with_topic=False)], flex))
        out.append(array([struct_(flex, *topic)], flex))
    out.append(array([struct_(flex, i32(1), string("h", flex), i32(9092))], flex))
    check_request(request, struct_(flex, *out))


@pytest.mark.parametrize("version", range(8))
def test_leader_and_isr_response_golden_bytes(version: int) -> None:
    cls = cls_of(4, version, "response")
    flex = version >= 4
    error_cls = nested(cls, "LeaderAndIsrPartitionError")
    error = registry.build(
        error_cls, topic_name="t", partition_index=7, error_code=ErrorCode.kafka_storage_error
    )
    if version < 5:
        response = cls(error_code=ErrorCode.none, partition_errors=(error,))
        body = array([struct_(flex, string("t", flex), i32(7), i16(56))], flex)
    else:
        topic = nested(cls, "LeaderAndIsrTopicError")(topic_id=TOPIC_ID, partition_errors=(error,))
        response = cls(error_code=ErrorCode.none, topics=(topic,))
        part = struct_(flex, i32(7), i16(56))
        body = array([struct_(flex, TOPIC_ID.bytes, array([part], flex))], flex)
    check_response(response, struct_(flex, i16(0), body))


# --------------------------------------------------------------------------- StopReplica


@pytest.mark.parametrize("version", range(5))
def test_stop_replica_request_golden_bytes(version: int) -> None:
    cls = cls_of(5, version)
    flex = version >= 2
    fields: dict[str, Any] = {}
    if version == 0:
        fields["delete_partitions"] = True
        fields["ungrouped_partitions"] = (
            nested(cls, "StopReplicaPartitionV0")(topic_name="t", partition_index=1),
        )
        body = boolean(True) + array([struct_(flex, string("t", flex), i32(1))], flex)
    elif version <= 2:
        fields["delete_partitions"] = True
        fields["topics"] = (nested(cls, "StopReplicaTopicV1")(name="t", partition_indexes=(1, 2)),)
        body = boolean(True) + array([struct_(flex, string("t", flex), ints([1, 2], flex))], flex)
    else:
        state_cls = nested(cls, "StopReplicaPartitionState")
        fields["topic_states"] = (
            nested(cls, "StopReplicaTopicState")(
                topic_name="t",
                partition_states=(
                    state_cls(partition_index=1, leader_epoch=-2, delete_partition=True),
                ),
            ),
        )
        state = struct_(flex, i32(1), i32(-2), boolean(True))
        body = array([struct_(flex, string("t", flex), array([state], flex))], flex)
    request = registry.build(
        cls,
        controller_id=1,
        is_k_raft_controller=False,
        controller_epoch=2,
        broker_epoch=5,
        **fields,
    )
    head = i32(1) + (boolean(False) if version >= 4 else b"") + i32(2)
    head += i64(5) if version >= 1 else b""
    check_request(request, struct_(flex, head + body))


@pytest.mark.parametrize("version", range(5))
def test_stop_replica_response_golden_bytes(version: int) -> None:
    cls = cls_of(5, version, "response")
    flex = version >= 2
    error = nested(cls, "StopReplicaPartitionError")(
        topic_name="t", partition_index=1, error_code=ErrorCode.fenced_leader_epoch
    )
    response = cls(error_code=ErrorCode.none, partition_errors=(error,))
    part = struct_(flex, string("t", flex), i32(1), i16(74))
    check_response(response, struct_(flex, i16(0), array([part], flex)))


# --------------------------------------------------------------------------- UpdateMetadata


@pytest.mark.parametrize("version", range(9))
def test_update_metadata_request_golden_bytes(version: int) -> None:
    cls = cls_of(6, version)
    flex = version >= 6
    state = registry.build(
        nested(cls, "UpdateMetadataPartitionState"),
        topic_name="t",
        partition_index=0,
        controller_epoch=2,
        leader=1,
        leader_epoch=3,
        isr=(1, 2),
        zk_version=4,
        replicas=(1, 2),
        offline_replicas=(2,),
    )
    state_parts = [string("t", flex)] if version < 5 else []
    state_parts += [i32(0), i32(2), i32(1), i32(3), ints([1, 2], flex), i32(4), ints([1, 2], flex)]
    if version >= 4:
        state_parts.append(ints([2], flex))
    state_bytes = struct_(flex, *state_parts)
    broker_cls = nested(cls, "UpdateMetadataBroker")
    if version == 0:
        broker = broker_cls(id=1, v0_host="h", v0_port=9092)
        broker_bytes = struct_(flex, i32(1), string("h", flex), i32(9092))
    else:
        endpoint = registry.build(
            nested(cls, "UpdateMetadataEndpoint"),
            port=9092,
            host="h",
            listener="PLAINTEXT",
            security_protocol=0,
        )
        broker = registry.build(broker_cls, id=1, endpoints=(endpoint,), rack="r")
        ep = [i32(9092), string("h", flex)]
        if version >= 3:
            ep.append(string("PLAINTEXT", flex))
        ep.append(i16(0))
        broker_parts = [i32(1), array([struct_(flex, *ep)], flex)]
        if version >= 2:
            broker_parts.append(string("r", flex))
        broker_bytes = struct_(flex, *broker_parts)
    fields: dict[str, Any] = {}
    if version < 5:
        fields["ungrouped_partition_states"] = (state,)
        states = array([state_bytes], flex)
    else:
        fields["topic_states"] = (
            registry.build(
                nested(cls, "UpdateMetadataTopicState"),
                topic_name="t",
                topic_id=TOPIC_ID,
                partition_states=(state,),
            ),
        )
        topic = [string("t", flex)] + ([TOPIC_ID.bytes] if version >= 7 else [])
        states = array([struct_(flex, *topic, array([state_bytes], flex))], flex)
    request = registry.build(
        cls,
        controller_id=1,
        is_k_raft_controller=False,
        controller_epoch=2,
        broker_epoch=5,
        live_brokers=(broker,),
        **fields,
    )
    out = i32(1) + (boolean(False) if version >= 8 else b"") + i32(2)
    out += i64(5) if version >= 5 else b""
    out += states + array([broker_bytes], flex)
    check_request(request, struct_(flex, out))
    if version == 8:  # the tagged Type (tag 0): written only when not the default 0
        full = dataclasses.replace(request, type_=2)
        check_request(full, out + b"\x01" + b"\x00" + b"\x01" + i8(2))


def test_update_metadata_v8_skips_unknown_tagged_fields() -> None:
    """KIP-482: a reader skips the tags it does not know (a newer controller's)."""
    cls = cls_of(6, 8)
    request = cls(controller_id=1, controller_epoch=2, topic_states=(), live_brokers=())
    body = registry.encode(request)
    assert body.endswith(b"\x00")
    with_unknown = body[:-1] + b"\x01" + uvarint(9) + uvarint(3) + b"abc"
    assert registry.decode_request(6, 8, with_unknown, 0) == request


@pytest.mark.parametrize("version", range(9))
def test_update_metadata_response_golden_bytes(version: int) -> None:
    flex = version >= 6
    check_response(
        cls_of(6, version, "response")(error_code=ErrorCode.stale_broker_epoch),
        struct_(flex, i16(77)),
    )


# --------------------------------------------------------------------------- ControlledShutdown


@pytest.mark.parametrize("version", [1, 2, 3])
def test_controlled_shutdown_golden_bytes(version: int) -> None:
    flex = version >= 3
    request = registry.build(cls_of(7, version), broker_id=3, broker_epoch=0x101)
    check_request(request, struct_(flex, i32(3) + (i64(0x101) if version >= 2 else b"")))
    cls = cls_of(7, version, "response")
    response = cls(
        error_code=ErrorCode.none,
        remaining_partitions=(
            nested(cls, "RemainingPartition")(topic_name="t", partition_index=2),
        ),
    )
    part = struct_(flex, string("t", flex), i32(2))
    check_response(response, struct_(flex, i16(0), array([part], flex)))
    assert not registry.is_supported(7, 0)  # its request header has no client id


# --------------------------------------------------------------------------- AlterPartition


@pytest.mark.parametrize("version", range(4))
def test_alter_partition_request_golden_bytes(version: int) -> None:
    cls = cls_of(56, version)
    flex = True
    part_cls = nested(cls, "PartitionData")
    fields: dict[str, Any] = {}
    if version >= 3:
        state_cls = nested(cls, "BrokerState")
        fields["new_isr_with_epochs"] = (
            state_cls(broker_id=1, broker_epoch=10),
            state_cls(broker_id=2, broker_epoch=11),
        )
        isr = array([struct_(flex, i32(1), i64(10)), struct_(flex, i32(2), i64(11))], flex)
    else:
        fields["new_isr"] = (1, 2)
        isr = ints([1, 2], flex)
    partition = registry.build(
        part_cls,
        partition_index=0,
        leader_epoch=3,
        leader_recovery_state=1,
        partition_epoch=4,
        **fields,
    )
    topic = registry.build(
        nested(cls, "TopicData"), topic_name="t", topic_id=TOPIC_ID, partitions=(partition,)
    )
    request = cls(broker_id=1, broker_epoch=9, topics=(topic,))
    part = [i32(0), i32(3), isr]
    if version >= 1:
        part.append(i8(1))
    part.append(i32(4))
    name = TOPIC_ID.bytes if version >= 2 else string("t", flex)
    body = array([struct_(flex, name, array([struct_(flex, *part)], flex))], flex)
    expected = struct_(flex, i32(1), i64(9), body)
    check_request(request, expected)
    if version >= 2:  # kio's classes (Kafka 4's JSON, versions 2-3) read the same bytes
        kio_cls = {2: kio_alter_v2, 3: kio_alter_v3}[version].AlterPartitionRequest
        decoded, size = entity_reader(kio_cls)(expected, 0)
        assert size == len(expected)
        assert decoded.topics[0].partitions[0].partition_epoch == 4


@pytest.mark.parametrize("version", range(4))
def test_alter_partition_response_golden_bytes(version: int) -> None:
    import datetime

    cls = cls_of(56, version, "response")
    flex = True
    partition = registry.build(
        nested(cls, "PartitionData"),
        partition_index=0,
        error_code=ErrorCode.none,
        leader_id=1,
        leader_epoch=3,
        isr=(1, 2),
        leader_recovery_state=0,
        partition_epoch=5,
    )
    topic = registry.build(
        nested(cls, "TopicData"), topic_name="t", topic_id=TOPIC_ID, partitions=(partition,)
    )
    response = cls(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, topics=(topic,))
    part = [i32(0), i16(0), i32(1), i32(3), ints([1, 2], flex)]
    if version >= 1:
        part.append(i8(0))
    part.append(i32(5))
    name = TOPIC_ID.bytes if version >= 2 else string("t", flex)
    body = array([struct_(flex, name, array([struct_(flex, *part)], flex))], flex)
    check_response(response, struct_(flex, i32(0), i16(0), body))


def test_allocate_producer_ids_golden_bytes() -> None:
    import datetime

    request = registry.request_class(67, 0)(broker_id=3, broker_epoch=44)
    check_request(request, struct_(True, i32(3), i64(44)))
    response = registry.response_class(67, 0)(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        producer_id_start=2000,
        producer_id_len=1000,
    )
    check_response(response, struct_(True, i32(0), i16(0), i64(2000), i32(1000)))


# --------------------------------------------------------------------------- malformed


REQUEST_VERSIONS = [(k, v) for (k, v, kind) in ALL_VERSIONS if kind == "request"]


@pytest.mark.parametrize(("api_key", "version"), REQUEST_VERSIONS)
def test_truncated_bodies_are_refused(api_key: int, version: int) -> None:
    """Every cut of a valid body fails to decode (the dispatcher then closes the connection,
    as Kafka does when it cannot parse a request)."""
    data = registry.encode(_sample(cls_of(api_key, version)))
    for cut in range(len(data)):
        with pytest.raises(Exception):  # noqa: B017 - any decode error
            registry.decode_request(api_key, version, data[:cut], 0)


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (4, 0, i32(1) + i32(2) + i32(2**31 - 1)),  # 2**31-1 partition states, no bytes
        (5, 0, i32(1) + i32(2) + boolean(True) + i32(2**31 - 1)),
        (6, 8, i32(1) + boolean(False) + i32(2) + i64(5) + uvarint(2**31 - 1)),
        (56, 3, i32(1) + i64(9) + uvarint(2**31 - 1)),
    ],
)
def test_inflated_counts_are_refused_before_allocation(
    api_key: int, version: int, body: bytes
) -> None:
    with pytest.raises(Exception, match=r"(?i)exceed|short|truncat|beyond|bytes|count"):
        registry.decode_request(api_key, version, body, 0)


# --------------------------------------------------------------------------- IBP


def test_inter_broker_protocol_versions_parse_as_kafka_does() -> None:
    assert parse_ibp("3.9") == parse_ibp("3.9-IV0") == parse_ibp("3.9.1") == DEFAULT
    assert parse_ibp("2.8").name == "2.8-IV1"
    assert parse_ibp("0.10.0").name == "0.10.0-IV1"
    assert parse_ibp("0.10.0.1").name == "0.10.0-IV1"
    assert parse_ibp("0.8.2").name == "0.8.2"
    assert parse_ibp("3.3").name == "3.3-IV3"
    for bad in ("4.0", "3.10", "x", "", "2.8-IV7"):
        with pytest.raises(ValueError):
            parse_ibp(bad)
    assert [InterBrokerProtocolVersion(v) for v in IBP_VERSIONS] == sorted(
        InterBrokerProtocolVersion(v) for v in reversed(IBP_VERSIONS)
    )


@pytest.mark.parametrize(
    ("ibp", "lair", "um", "sr", "alter_partition", "allocate_ids"),
    [
        ("3.9", 7, 8, 4, True, True),
        ("3.4-IV0", 7, 8, 4, True, True),
        ("3.3", 6, 7, 3, True, True),
        ("3.2", 6, 7, 3, True, True),
        ("3.1", 5, 7, 3, True, True),
        ("3.0", 5, 7, 3, True, True),
        ("2.8", 5, 7, 3, True, False),
        ("2.8-IV0", 4, 6, 3, True, False),
        ("2.7", 4, 6, 3, True, False),
        ("2.7-IV1", 4, 6, 3, False, False),
        ("2.6", 4, 6, 3, False, False),
        ("2.5", 4, 6, 2, False, False),
        ("2.4-IV0", 3, 5, 1, False, False),
        ("2.2", 2, 5, 1, False, False),
        ("2.1", 1, 4, 0, False, False),
        ("1.0", 1, 4, 0, False, False),
        ("0.11.0", 0, 3, 0, False, False),
        ("0.10.1", 0, 2, 0, False, False),
        ("0.10.0-IV0", 0, 1, 0, False, False),
        ("0.9.0", 0, 1, 0, False, False),
        ("0.8.2", 0, 0, 0, False, False),
    ],
)
def test_versions_sent_follow_kafkas_controller_channel_manager(
    ibp: str, lair: int, um: int, sr: int, alter_partition: bool, allocate_ids: bool
) -> None:
    v = parse_ibp(ibp)
    assert (v.leader_and_isr_version, v.update_metadata_version, v.stop_replica_version) == (
        lair,
        um,
        sr,
    )
    assert v.alter_partition_supported is alter_partition
    assert v.allocate_producer_ids_supported is allocate_ids
