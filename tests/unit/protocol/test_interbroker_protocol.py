"""Encoding of the hand-written ZooKeeper-mode inter-broker messages (broker.protocol.interbroker):
round trips through kio's generic reader/writer, the registry lookups, and golden bytes derived
by hand from Kafka 3.9's LeaderAndIsrRequest.json / LeaderAndIsrResponse.json (v5)."""

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader
from kio.static.primitive import i8, i16, i32, i64

from broker.protocol import registry
from broker.protocol.interbroker import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaderAndIsrTopicError,
    LeaderAndIsrTopicState,
    RemainingPartition,
    StopReplicaPartitionError,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaResponse,
    StopReplicaTopicState,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
    UpdateMetadataTopicState,
)

pytestmark = pytest.mark.unit

ID_A = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
ID_B = uuid.UUID("7f3c9a52-1d44-4e0b-9b1a-5c2e8d6f4a10")


def b(*ids: int) -> tuple[BrokerId, ...]:
    return tuple(BrokerId(i) for i in ids)


def roundtrip_request(entity: Any) -> Any:
    data = registry.encode(entity)
    decoded = registry.decode_request(entity.__api_key__, entity.__version__, data, 0)
    assert decoded == entity
    assert registry.encode(decoded) == data
    return decoded


def roundtrip_response(entity: Any) -> Any:
    data = registry.encode(entity)
    cls = registry.response_class(entity.__api_key__, entity.__version__)
    decoded, size = entity_reader(cls)(data, 0)
    assert size == len(data)
    assert decoded == entity
    return decoded


# ------------------------------------------------------------------------------- registry


@pytest.mark.parametrize(
    ("api_key", "version", "request_cls", "response_cls", "name"),
    [
        (4, 5, LeaderAndIsrRequest, LeaderAndIsrResponse, "LeaderAndIsr"),
        (5, 3, StopReplicaRequest, StopReplicaResponse, "StopReplica"),
        (6, 7, UpdateMetadataRequest, UpdateMetadataResponse, "UpdateMetadata"),
        (7, 3, ControlledShutdownRequest, ControlledShutdownResponse, "ControlledShutdown"),
    ],
)
def test_registry_serves_interbroker_classes(
    api_key: int, version: int, request_cls: type, response_cls: type, name: str
) -> None:
    assert registry.request_class(api_key, version) is request_cls
    assert registry.response_class(api_key, version) is response_cls
    # every version a Kafka 3.9 controller sends (test_interbroker_versions.py covers them)
    low, high = {4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (1, 3)}[api_key]
    assert registry.SUPPORTED_APIS[api_key] == (name, low, high)
    assert registry.is_supported(api_key, version)
    assert not registry.is_supported(api_key, low - 1)
    assert not registry.is_supported(api_key, high + 1)
    assert registry.is_flexible(api_key, version)
    assert registry.response_uses_flexible_header(api_key, version)
    for cls in (request_cls, response_cls):
        assert cls.__api_key__ == api_key
        assert cls.__version__ == version


def test_kio_classes_still_used_for_other_apis() -> None:
    assert registry.request_class(3, 12).__module__.startswith("kio.schema.metadata")


# ------------------------------------------------------------------------------- golden bytes


def test_leader_and_isr_v5_request_golden_bytes() -> None:
    request = LeaderAndIsrRequest(
        controller_id=BrokerId(1),
        controller_epoch=i32(2),
        broker_epoch=i64(5),
        type_=i8(2),
        topic_states=(
            LeaderAndIsrTopicState(
                topic_name=TopicName("t"),
                topic_id=ID_A,
                partition_states=(
                    LeaderAndIsrPartitionState(
                        partition_index=i32(0),
                        controller_epoch=i32(2),
                        leader=BrokerId(1),
                        leader_epoch=i32(3),
                        isr=b(1, 2),
                        partition_epoch=i32(4),
                        replicas=b(1, 2),
                        is_new=True,
                    ),
                ),
            ),
        ),
        live_leaders=(
            LeaderAndIsrLiveLeader(broker_id=BrokerId(1), host_name="h", port=i32(9092)),
        ),
    )
    # Derived by hand from LeaderAndIsrRequest.json v5 (flexible: compact arrays/strings are
    # length+1 uvarints, each struct ends with an empty tagged-field section 0x00).
    expected = bytes.fromhex(
        "00000001"  # ControllerId
        "00000002"  # ControllerEpoch
        "0000000000000005"  # BrokerEpoch
        "02"  # Type = FULL
        "02"  # TopicStates: 1 element
        "0274"  # TopicName "t"
        "000102030405060708090a0b0c0d0e0f"  # TopicId
        "02"  # PartitionStates: 1 element
        "00000000"  # PartitionIndex
        "00000002"  # ControllerEpoch
        "00000001"  # Leader
        "00000003"  # LeaderEpoch
        "030000000100000002"  # Isr [1, 2]: length+1, then int32s
        "00000004"  # PartitionEpoch
        "030000000100000002"  # Replicas [1, 2]
        "01"  # AddingReplicas []
        "01"  # RemovingReplicas []
        "01"  # IsNew
        "00"  # partition state tagged fields
        "00"  # topic state tagged fields
        "02"  # LiveLeaders: 1 element
        "00000001"  # BrokerId
        "0268"  # HostName "h"
        "00002384"  # Port 9092
        "00"  # live leader tagged fields
        "00"  # request tagged fields
    )
    assert registry.encode(request) == expected
    assert registry.decode_request(4, 5, expected, 0) == request


def test_leader_and_isr_v5_response_golden_bytes() -> None:
    response = LeaderAndIsrResponse(
        error_code=ErrorCode.none,
        topics=(
            LeaderAndIsrTopicError(
                topic_id=ID_A,
                partition_errors=(
                    LeaderAndIsrPartitionError(
                        partition_index=i32(7), error_code=ErrorCode.not_leader_or_follower
                    ),
                ),
            ),
        ),
    )
    expected = bytes.fromhex(
        "0000"  # ErrorCode
        "02"  # Topics: 1 element
        "000102030405060708090a0b0c0d0e0f"  # TopicId
        "02"  # PartitionErrors: 1 element
        "00000007"  # PartitionIndex
        "0006"  # ErrorCode NOT_LEADER_OR_FOLLOWER
        "00"  # partition error tagged fields
        "00"  # topic tagged fields
        "00"  # response tagged fields
    )
    assert registry.encode(response) == expected
    decoded, _ = entity_reader(LeaderAndIsrResponse)(expected, 0)
    assert decoded == response


def test_controlled_shutdown_v3_request_golden_bytes() -> None:
    request = ControlledShutdownRequest(broker_id=BrokerId(3), broker_epoch=i64(0x101))
    assert registry.encode(request) == bytes.fromhex("00000003000000000000010100")
    assert registry.decode_request(7, 3, registry.encode(request), 0) == request


# ------------------------------------------------------------------------------- round trips


def partition_state(index: int, leader: int, replicas: tuple[int, ...]) -> Any:
    return LeaderAndIsrPartitionState(
        partition_index=i32(index),
        controller_epoch=i32(11),
        leader=BrokerId(leader),
        leader_epoch=i32(40 + index),
        isr=b(*replicas[:2]),
        partition_epoch=i32(100 + index),
        replicas=b(*replicas),
        adding_replicas=b(*replicas[2:]),
        removing_replicas=b(),
        is_new=index % 2 == 0,
    )


def test_leader_and_isr_request_roundtrip() -> None:
    request = LeaderAndIsrRequest(
        controller_id=BrokerId(2),
        controller_epoch=i32(11),
        broker_epoch=i64(2**40 + 3),
        type_=i8(1),
        topic_states=(
            LeaderAndIsrTopicState(
                topic_name=TopicName("orders"),
                topic_id=ID_B,
                partition_states=tuple(partition_state(p, 1 + p % 3, (1, 2, 3)) for p in range(5)),
            ),
            LeaderAndIsrTopicState(
                topic_name=TopicName("payments-ünïcode"),
                topic_id=None,  # encodes as the all-zero uuid
                partition_states=(partition_state(0, 3, (3, 1)),),
            ),
            LeaderAndIsrTopicState(
                topic_name=TopicName("empty"), topic_id=ID_A, partition_states=()
            ),
        ),
        live_leaders=tuple(
            LeaderAndIsrLiveLeader(
                broker_id=BrokerId(i), host_name=f"broker-{i}", port=i32(9090 + i)
            )
            for i in (1, 2, 3)
        ),
    )
    decoded = roundtrip_request(request)
    assert decoded.topic_states[1].topic_id is None
    assert decoded.topic_states[0].partition_states[4].adding_replicas == (3,)
    # Defaults from the JSON schema.
    minimal = LeaderAndIsrRequest(
        controller_id=BrokerId(1),
        controller_epoch=i32(1),
        type_=i8(0),
        topic_states=(),
        live_leaders=(),
    )
    assert minimal.broker_epoch == -1
    assert roundtrip_request(minimal).broker_epoch == -1


def test_leader_and_isr_response_roundtrip() -> None:
    response = LeaderAndIsrResponse(
        error_code=ErrorCode.none,
        topics=(
            LeaderAndIsrTopicError(
                topic_id=ID_A,
                partition_errors=tuple(
                    LeaderAndIsrPartitionError(partition_index=i32(p), error_code=ErrorCode.none)
                    for p in range(4)
                ),
            ),
            LeaderAndIsrTopicError(
                topic_id=ID_B,
                partition_errors=(
                    LeaderAndIsrPartitionError(
                        partition_index=i32(0), error_code=ErrorCode.kafka_storage_error
                    ),
                ),
            ),
        ),
    )
    roundtrip_response(response)
    roundtrip_response(LeaderAndIsrResponse(error_code=ErrorCode.stale_controller_epoch, topics=()))


def test_update_metadata_request_roundtrip() -> None:
    request = UpdateMetadataRequest(
        controller_id=BrokerId(1),
        controller_epoch=i32(5),
        broker_epoch=i64(77),
        topic_states=(
            UpdateMetadataTopicState(
                topic_name=TopicName("orders"),
                topic_id=ID_B,
                partition_states=tuple(
                    UpdateMetadataPartitionState(
                        partition_index=i32(p),
                        controller_epoch=i32(5),
                        leader=BrokerId(-1 if p == 2 else 1 + p % 3),
                        leader_epoch=i32(p),
                        isr=b(1, 2, 3) if p != 2 else b(),
                        zk_version=i32(9),
                        replicas=b(1, 2, 3),
                        offline_replicas=b(3) if p == 2 else b(),
                    )
                    for p in range(3)
                ),
            ),
            UpdateMetadataTopicState(
                topic_name=TopicName("idless"), topic_id=None, partition_states=()
            ),
        ),
        live_brokers=(
            UpdateMetadataBroker(
                id=BrokerId(1),
                endpoints=(
                    UpdateMetadataEndpoint(
                        port=i32(9092),
                        host="10.0.0.1",
                        listener="PLAINTEXT",
                        security_protocol=i16(0),
                    ),
                    UpdateMetadataEndpoint(
                        port=i32(9093), host="b1.example", listener="SSL", security_protocol=i16(1)
                    ),
                ),
                rack="rack-a",
            ),
            UpdateMetadataBroker(
                id=BrokerId(2),
                endpoints=(
                    UpdateMetadataEndpoint(
                        port=i32(9092),
                        host="10.0.0.2",
                        listener="PLAINTEXT",
                        security_protocol=i16(0),
                    ),
                ),
                rack=None,
            ),
        ),
    )
    decoded = roundtrip_request(request)
    assert decoded.live_brokers[1].rack is None
    assert decoded.topic_states[1].topic_id is None
    roundtrip_response(UpdateMetadataResponse(error_code=ErrorCode.none))
    roundtrip_response(UpdateMetadataResponse(error_code=ErrorCode.stale_broker_epoch))


def test_stop_replica_roundtrip() -> None:
    request = StopReplicaRequest(
        controller_id=BrokerId(1),
        controller_epoch=i32(3),
        broker_epoch=i64(12),
        topic_states=(
            StopReplicaTopicState(
                topic_name=TopicName("orders"),
                partition_states=(
                    StopReplicaPartitionState(
                        partition_index=i32(0), leader_epoch=i32(4), delete_partition=True
                    ),
                    StopReplicaPartitionState(partition_index=i32(1), delete_partition=False),
                ),
            ),
            StopReplicaTopicState(
                topic_name=TopicName("deleted"),
                partition_states=(
                    StopReplicaPartitionState(
                        partition_index=i32(0), leader_epoch=i32(-2), delete_partition=True
                    ),
                ),
            ),
        ),
    )
    decoded = roundtrip_request(request)
    assert decoded.topic_states[0].partition_states[1].leader_epoch == -1
    response = StopReplicaResponse(
        error_code=ErrorCode.none,
        partition_errors=(
            StopReplicaPartitionError(
                topic_name=TopicName("orders"), partition_index=i32(0), error_code=ErrorCode.none
            ),
            StopReplicaPartitionError(
                topic_name=TopicName("orders"),
                partition_index=i32(1),
                error_code=ErrorCode.fenced_leader_epoch,
            ),
        ),
    )
    roundtrip_response(response)


def test_controlled_shutdown_roundtrip() -> None:
    assert roundtrip_request(ControlledShutdownRequest(broker_id=BrokerId(2))).broker_epoch == -1
    response = ControlledShutdownResponse(
        error_code=ErrorCode.none,
        remaining_partitions=(
            RemainingPartition(topic_name=TopicName("orders"), partition_index=i32(0)),
            RemainingPartition(topic_name=TopicName("orders"), partition_index=i32(3)),
            RemainingPartition(topic_name=TopicName("payments"), partition_index=i32(1)),
        ),
    )
    roundtrip_response(response)
    roundtrip_response(
        ControlledShutdownResponse(error_code=ErrorCode.stale_broker_epoch, remaining_partitions=())
    )
