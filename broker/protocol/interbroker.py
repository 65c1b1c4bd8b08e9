"""ZooKeeper-mode inter-broker message schemas, every version Kafka 3.9 sends, in kio's style.

The ``kio`` package is generated from the Kafka 4.x message JSON, and Kafka 4.0 removed the
ZooKeeper-mode controller APIs, so kio has no classes for them (and only versions 2-3 of
AlterPartition). This module transcribes, field for field, Kafka 3.9's
``clients/src/main/resources/common/message/*.json`` (branch ``3.9``) of:

- LeaderAndIsr (api key 4) v0-v7: v1 IsNew; v2 BrokerEpoch, partitions grouped by topic;
  v3 AddingReplicas/RemovingReplicas; v4 flexible; v5 TopicId and Type (KIP-516), responses
  by topic id; v6 LeaderRecoveryState (KIP-704); v7 isKRaftController (KIP-866).
- StopReplica (5) v0-v4: v0 ungrouped partitions and one DeletePartitions flag; v1 BrokerEpoch,
  partitions by topic; v2 flexible; v3 per-partition LeaderEpoch and DeletePartition
  (KIP-570); v4 isKRaftController.
- UpdateMetadata (6) v0-v8: v0 one host/port per broker; v1 endpoints; v2 rack; v3 listener
  names; v4 offline replicas; v5 BrokerEpoch, partitions by topic; v6 flexible; v7 TopicId;
  v8 isKRaftController and the tagged ``Type`` (tag 0).
- ControlledShutdown (7) v1-v3 (v0 has a request header without client id, sent only below
  IBP 0.9, and is not served): v2 BrokerEpoch; v3 flexible.
- AlterPartition (56) v0-v3 (KIP-497; v1 LeaderRecoveryState, v2 topic ids, v3
  NewIsrWithEpochs, KIP-903): all flexible.

The classes are *generated* at import from the transcription below (one :class:`_Field` per
JSON field, with its versions, default, nullability and tag), the way kio's generator writes
its modules: frozen, slotted, keyword-only dataclasses with class-level ``__type__``,
``__version__``, ``__flexible__``, ``__api_key__`` and ``__header_schema__``; fields carry
``field(metadata={"kafka_type": ...})`` (plus ``"tag"`` for tagged fields); JSON defaults
become dataclass defaults; primitive arrays default to ``()``; uuids are ``uuid.UUID | None``
(the all-zero uuid decodes to ``None``); snake_case names (``Type`` becomes ``type_``,
``isKRaftController`` ``is_k_raft_controller``, ``ThrottleTimeMs`` the
``datetime.timedelta`` ``throttle_time``). So ``kio.serial.entity_reader`` /
``entity_writer`` encode and decode them like any kio message. Flexible requests use request
header v2 (v1 otherwise), flexible responses response header v1 (v0 otherwise). Nested
classes are named after the JSON struct types (``LeaderAndIsrPartitionState``,
``StopReplicaPartitionV0``, ...); :func:`nested` finds one for a message class and version.

``REQUESTS`` / ``RESPONSES`` map (api key, version) to the top-level classes; the registry
consults them before kio. The names this module exported before it served every version
(``LeaderAndIsrRequest``, ``StopReplicaPartitionState``, ...) are kept, bound to the classes
of LeaderAndIsr v5, StopReplica v3, UpdateMetadata v7 and ControlledShutdown v3.

Annotations must stay evaluated (no ``from __future__ import annotations``): kio's serializer
classifies fields from their real types, not from strings.

Concurrency: everything is built once at import; instances are frozen.
"""

import dataclasses
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

__all__ = [
    "REQUESTS",
    "RESPONSES",
    "VERSIONS",
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "LeaderAndIsrLiveLeader",
    "LeaderAndIsrPartitionError",
    "LeaderAndIsrPartitionState",
    "LeaderAndIsrRequest",
    "LeaderAndIsrResponse",
    "LeaderAndIsrTopicError",
    "LeaderAndIsrTopicState",
    "RemainingPartition",
    "StopReplicaPartitionError",
    "StopReplicaPartitionState",
    "StopReplicaRequest",
    "StopReplicaResponse",
    "StopReplicaTopicState",
    "UpdateMetadataBroker",
    "UpdateMetadataEndpoint",
    "UpdateMetadataPartitionState",
    "UpdateMetadataRequest",
    "UpdateMetadataResponse",
    "UpdateMetadataTopicState",
    "field_names_any_version",
    "nested",
    "request_class",
    "response_class",
]

_ANY = 99
"""The open end of a ``"N+"`` version range."""


class _NoDefault:
    """The JSON declares no default (``dataclasses.MISSING`` cannot be a field default)."""


_MISSING: Any = _NoDefault()


@dataclass(frozen=True, slots=True)
class _Field:
    """One field of a message or struct, as Kafka's JSON declares it."""

    name: str
    """Kafka's name (``ControllerId``)."""
    kafka_type: str
    """``int8``/``int16``/``int32``/``int64``/``bool``/``string``/``uuid``/``error_code``, or
    ``struct`` (then ``fields`` and ``struct_name``)."""
    versions: tuple[int, int]
    array: bool = False
    default: Any = _MISSING
    nullable: tuple[int, int] | None = None
    tag: int | None = None
    entity: str | None = None
    """``brokerId`` / ``topicName``: typed ``BrokerId`` / ``TopicName`` as kio types them."""
    struct_name: str | None = None
    fields: tuple["_Field", ...] = ()

    def present(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]


def _v(spec: str) -> tuple[int, int]:
    """``"3+"`` -> (3, 99); ``"0-4"`` -> (0, 4); ``"5"`` -> (5, 5)."""
    if spec.endswith("+"):
        return int(spec[:-1]), _ANY
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


def F(
    name: str,
    kafka_type: str,
    versions: str,
    *,
    array: bool = False,
    default: Any = _MISSING,
    nullable: str | None = None,
    tag: int | None = None,
    entity: str | None = None,
) -> _Field:
    return _Field(
        name,
        kafka_type,
        _v(versions),
        array=array,
        default=default,
        nullable=_v(nullable) if nullable else None,
        tag=tag,
        entity=entity,
    )


def S(name: str, struct_name: str, versions: str, *fields: _Field, array: bool = True) -> _Field:
    return _Field(name, "struct", _v(versions), array=array, struct_name=struct_name, fields=fields)


@dataclass(frozen=True, slots=True)
class _Message:
    name: str
    api_key: int
    kind: str  # "request" | "response"
    versions: tuple[int, int]
    flexible_from: int
    fields: tuple[_Field, ...]


# ============================================================================================
# The transcription of Kafka 3.9's JSON
# ============================================================================================

_LEADER_AND_ISR_PARTITION_STATE = (
    F("TopicName", "string", "0-1", entity="topicName"),
    F("PartitionIndex", "int32", "0+"),
    F("ControllerEpoch", "int32", "0+"),
    F("Leader", "int32", "0+", entity="brokerId"),
    F("LeaderEpoch", "int32", "0+"),
    F("Isr", "int32", "0+", array=True, entity="brokerId"),
    F("PartitionEpoch", "int32", "0+"),
    F("Replicas", "int32", "0+", array=True, entity="brokerId"),
    F("AddingReplicas", "int32", "3+", array=True, entity="brokerId"),
    F("RemovingReplicas", "int32", "3+", array=True, entity="brokerId"),
    F("IsNew", "bool", "1+", default=False),
    F("LeaderRecoveryState", "int8", "6+", default=0),
)

LEADER_AND_ISR_REQUEST = _Message(
    "LeaderAndIsrRequest",
    4,
    "request",
    (0, 7),
    4,
    (
        F("ControllerId", "int32", "0+", entity="brokerId"),
        F("isKRaftController", "bool", "7+", default=False),
        F("ControllerEpoch", "int32", "0+"),
        F("BrokerEpoch", "int64", "2+", default=-1),
        F("Type", "int8", "5+"),
        S(
            "UngroupedPartitionStates",
            "LeaderAndIsrPartitionState",
            "0-1",
            *_LEADER_AND_ISR_PARTITION_STATE,
        ),
        S(
            "TopicStates",
            "LeaderAndIsrTopicState",
            "2+",
            F("TopicName", "string", "2+", entity="topicName"),
            F("TopicId", "uuid", "5+"),
            S(
                "PartitionStates",
                "LeaderAndIsrPartitionState",
                "2+",
                *_LEADER_AND_ISR_PARTITION_STATE,
            ),
        ),
        S(
            "LiveLeaders",
            "LeaderAndIsrLiveLeader",
            "0+",
            F("BrokerId", "int32", "0+", entity="brokerId"),
            F("HostName", "string", "0+"),
            F("Port", "int32", "0+"),
        ),
    ),
)

_LEADER_AND_ISR_PARTITION_ERROR = (
    F("TopicName", "string", "0-4", entity="topicName"),
    F("PartitionIndex", "int32", "0+"),
    F("ErrorCode", "error_code", "0+"),
)

LEADER_AND_ISR_RESPONSE = _Message(
    "LeaderAndIsrResponse",
    4,
    "response",
    (0, 7),
    4,
    (
        F("ErrorCode", "error_code", "0+"),
        S(
            "PartitionErrors",
            "LeaderAndIsrPartitionError",
            "0-4",
            *_LEADER_AND_ISR_PARTITION_ERROR,
        ),
        S(
            "Topics",
            "LeaderAndIsrTopicError",
            "5+",
            F("TopicId", "uuid", "5+"),
            S(
                "PartitionErrors",
                "LeaderAndIsrPartitionError",
                "5+",
                *_LEADER_AND_ISR_PARTITION_ERROR,
            ),
        ),
    ),
)

STOP_REPLICA_REQUEST = _Message(
    "StopReplicaRequest",
    5,
    "request",
    (0, 4),
    2,
    (
        F("ControllerId", "int32", "0+", entity="brokerId"),
        F("isKRaftController", "bool", "4+", default=False),
        F("ControllerEpoch", "int32", "0+"),
        F("BrokerEpoch", "int64", "1+", default=-1),
        F("DeletePartitions", "bool", "0-2"),
        S(
            "UngroupedPartitions",
            "StopReplicaPartitionV0",
            "0",
            F("TopicName", "string", "0", entity="topicName"),
            F("PartitionIndex", "int32", "0"),
        ),
        S(
            "Topics",
            "StopReplicaTopicV1",
            "1-2",
            F("Name", "string", "1-2", entity="topicName"),
            F("PartitionIndexes", "int32", "1-2", array=True),
        ),
        S(
            "TopicStates",
            "StopReplicaTopicState",
            "3+",
            F("TopicName", "string", "3+", entity="topicName"),
            S(
                "PartitionStates",
                "StopReplicaPartitionState",
                "3+",
                F("PartitionIndex", "int32", "3+"),
                F("LeaderEpoch", "int32", "3+", default=-1),
                F("DeletePartition", "bool", "3+"),
            ),
        ),
    ),
)

STOP_REPLICA_RESPONSE = _Message(
    "StopReplicaResponse",
    5,
    "response",
    (0, 4),
    2,
    (
        F("ErrorCode", "error_code", "0+"),
        S(
            "PartitionErrors",
            "StopReplicaPartitionError",
            "0+",
            F("TopicName", "string", "0+", entity="topicName"),
            F("PartitionIndex", "int32", "0+"),
            F("ErrorCode", "error_code", "0+"),
        ),
    ),
)

_UPDATE_METADATA_PARTITION_STATE = (
    F("TopicName", "string", "0-4", entity="topicName"),
    F("PartitionIndex", "int32", "0+"),
    F("ControllerEpoch", "int32", "0+"),
    F("Leader", "int32", "0+", entity="brokerId"),
    F("LeaderEpoch", "int32", "0+"),
    F("Isr", "int32", "0+", array=True, entity="brokerId"),
    F("ZkVersion", "int32", "0+"),
    F("Replicas", "int32", "0+", array=True, entity="brokerId"),
    F("OfflineReplicas", "int32", "4+", array=True, entity="brokerId"),
)

UPDATE_METADATA_REQUEST = _Message(
    "UpdateMetadataRequest",
    6,
    "request",
    (0, 8),
    6,
    (
        F("ControllerId", "int32", "0+", entity="brokerId"),
        F("isKRaftController", "bool", "8+", default=False),
        F("Type", "int8", "8+", default=0, tag=0),
        F("ControllerEpoch", "int32", "0+"),
        F("BrokerEpoch", "int64", "5+", default=-1),
        S(
            "UngroupedPartitionStates",
            "UpdateMetadataPartitionState",
            "0-4",
            *_UPDATE_METADATA_PARTITION_STATE,
        ),
        S(
            "TopicStates",
            "UpdateMetadataTopicState",
            "5+",
            F("TopicName", "string", "5+", entity="topicName"),
            F("TopicId", "uuid", "7+"),
            S(
                "PartitionStates",
                "UpdateMetadataPartitionState",
                "5+",
                *_UPDATE_METADATA_PARTITION_STATE,
            ),
        ),
        S(
            "LiveBrokers",
            "UpdateMetadataBroker",
            "0+",
            F("Id", "int32", "0+", entity="brokerId"),
            F("V0Host", "string", "0"),
            F("V0Port", "int32", "0"),
            S(
                "Endpoints",
                "UpdateMetadataEndpoint",
                "1+",
                F("Port", "int32", "1+"),
                F("Host", "string", "1+"),
                F("Listener", "string", "3+"),
                F("SecurityProtocol", "int16", "1+"),
            ),
            F("Rack", "string", "2+", nullable="0+"),
        ),
    ),
)

UPDATE_METADATA_RESPONSE = _Message(
    "UpdateMetadataResponse",
    6,
    "response",
    (0, 8),
    6,
    (F("ErrorCode", "error_code", "0+"),),
)

CONTROLLED_SHUTDOWN_REQUEST = _Message(
    "ControlledShutdownRequest",
    7,
    "request",
    (1, 3),
    3,
    (
        F("BrokerId", "int32", "0+", entity="brokerId"),
        F("BrokerEpoch", "int64", "2+", default=-1),
    ),
)

CONTROLLED_SHUTDOWN_RESPONSE = _Message(
    "ControlledShutdownResponse",
    7,
    "response",
    (1, 3),
    3,
    (
        F("ErrorCode", "error_code", "0+"),
        S(
            "RemainingPartitions",
            "RemainingPartition",
            "0+",
            F("TopicName", "string", "0+", entity="topicName"),
            F("PartitionIndex", "int32", "0+"),
        ),
    ),
)

ALTER_PARTITION_REQUEST = _Message(
    "AlterPartitionRequest",
    56,
    "request",
    (0, 3),
    0,
    (
        F("BrokerId", "int32", "0+", entity="brokerId"),
        F("BrokerEpoch", "int64", "0+", default=-1),
        S(
            "Topics",
            "TopicData",
            "0+",
            F("TopicName", "string", "0-1", entity="topicName"),
            F("TopicId", "uuid", "2+"),
            S(
                "Partitions",
                "PartitionData",
                "0+",
                F("PartitionIndex", "int32", "0+"),
                F("LeaderEpoch", "int32", "0+"),
                F("NewIsr", "int32", "0-2", array=True, entity="brokerId"),
                S(
                    "NewIsrWithEpochs",
                    "BrokerState",
                    "3+",
                    F("BrokerId", "int32", "3+", entity="brokerId"),
                    F("BrokerEpoch", "int64", "3+", default=-1),
                ),
                F("LeaderRecoveryState", "int8", "1+", default=0),
                F("PartitionEpoch", "int32", "0+"),
            ),
        ),
    ),
)

ALTER_PARTITION_RESPONSE = _Message(
    "AlterPartitionResponse",
    56,
    "response",
    (0, 3),
    0,
    (
        F("ThrottleTimeMs", "timedelta_i32", "0+"),
        F("ErrorCode", "error_code", "0+"),
        S(
            "Topics",
            "TopicData",
            "0+",
            F("TopicName", "string", "0-1", entity="topicName"),
            F("TopicId", "uuid", "2+"),
            S(
                "Partitions",
                "PartitionData",
                "0+",
                F("PartitionIndex", "int32", "0+"),
                F("ErrorCode", "error_code", "0+"),
                F("LeaderId", "int32", "0+", entity="brokerId"),
                F("LeaderEpoch", "int32", "0+"),
                F("Isr", "int32", "0+", array=True, entity="brokerId"),
                F("LeaderRecoveryState", "int8", "1+", default=0),
                F("PartitionEpoch", "int32", "0+"),
            ),
        ),
    ),
)

MESSAGES = (
    LEADER_AND_ISR_REQUEST,
    LEADER_AND_ISR_RESPONSE,
    STOP_REPLICA_REQUEST,
    STOP_REPLICA_RESPONSE,
    UPDATE_METADATA_REQUEST,
    UPDATE_METADATA_RESPONSE,
    CONTROLLED_SHUTDOWN_REQUEST,
    CONTROLLED_SHUTDOWN_RESPONSE,
    ALTER_PARTITION_REQUEST,
    ALTER_PARTITION_RESPONSE,
)

VERSIONS: dict[int, tuple[int, int]] = {
    m.api_key: m.versions for m in MESSAGES if m.kind == "request"
}
"""api key -> (oldest, newest) version defined here."""

# ============================================================================================
# The generator (kio's conventions)
# ============================================================================================

_PRIMITIVES: dict[str, tuple[Any, Any]] = {
    # kafka type -> (python type, default constructor)
    "int8": (i8, i8),
    "int16": (i16, i16),
    "int32": (i32, i32),
    "int64": (i64, i64),
    "bool": (bool, bool),
    "string": (str, str),
    "uuid": (uuid.UUID | None, None),
    "error_code": (ErrorCode, ErrorCode),
    "timedelta_i32": (i32Timedelta, None),
}
_ENTITIES = {"brokerId": BrokerId, "topicName": TopicName}
_RENAMED = {"type": "type_", "throttle_time_ms": "throttle_time"}
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake(name: str) -> str:
    """kio's field names: ``isKRaftController`` -> ``is_k_raft_controller``."""
    out = _WORD.sub("_", name).lower()
    return _RENAMED.get(out, out)


def _python_type(f: _Field, version: int, structs: dict[str, type]) -> Any:
    if f.kafka_type == "struct":
        assert f.struct_name is not None
        inner: Any = structs[f.struct_name]
    else:
        base, _ctor = _PRIMITIVES[f.kafka_type]
        inner = _ENTITIES.get(f.entity or "", base) if f.kafka_type != "uuid" else base
        nullable = f.nullable is not None and f.nullable[0] <= version <= f.nullable[1]
        if nullable and f.kafka_type == "string":
            inner = inner | None
    if f.array:
        return tuple[inner, ...]
    return inner


def _default(f: _Field) -> Any:
    if f.kafka_type == "struct":
        return dataclasses.MISSING
    if f.array:
        return ()  # kio: primitive arrays default to the empty tuple
    if f.default is _MISSING:
        return dataclasses.MISSING
    _base, ctor = _PRIMITIVES[f.kafka_type]
    return f.default if ctor is None else ctor(f.default)


def _make_class(
    name: str,
    fields: tuple[_Field, ...],
    message: _Message,
    version: int,
    entity_type: EntityType,
    namespace: dict[str, type],
) -> type:
    """The class of one struct (nested classes first, into ``namespace``)."""
    specs: list[tuple[str, Any, Any]] = []
    for f in fields:
        if not f.present(version):
            continue
        if f.kafka_type == "struct":
            assert f.struct_name is not None
            if f.struct_name not in namespace:
                _make_class(f.struct_name, f.fields, message, version, EntityType.nested, namespace)
            specs.append((snake(f.name), _python_type(f, version, namespace), field()))
            continue
        metadata: dict[str, Any] = {"kafka_type": f.kafka_type}
        if f.tag is not None:
            metadata["tag"] = f.tag
        default = _default(f)
        spec = (
            field(metadata=metadata)
            if default is dataclasses.MISSING
            else field(metadata=metadata, default=default)
        )
        specs.append((snake(f.name), _python_type(f, version, namespace), spec))
    cls = dataclasses.make_dataclass(
        name, specs, frozen=True, slots=True, kw_only=True, namespace={"__module__": __name__}
    )
    flexible = version >= message.flexible_from
    if message.kind == "request":
        header: type = RequestHeaderV2 if flexible else RequestHeaderV1
    else:
        header = ResponseHeaderV1 if flexible else ResponseHeaderV0
    cls.__type__ = entity_type  # type: ignore[attr-defined]
    cls.__version__ = i16(version)  # type: ignore[attr-defined]
    cls.__flexible__ = flexible  # type: ignore[attr-defined]
    cls.__api_key__ = i16(message.api_key)  # type: ignore[attr-defined]
    cls.__header_schema__ = header  # type: ignore[attr-defined]
    namespace[name] = cls
    return cls


_NESTED: dict[type, dict[str, type]] = {}
_ALL_FIELDS: dict[tuple[int, str, str], frozenset[str]] = {}
REQUESTS: dict[tuple[int, int], type] = {}
"""(api_key, version) -> request class, consulted by broker.protocol.registry before kio."""
RESPONSES: dict[tuple[int, int], type] = {}
"""(api_key, version) -> response class, consulted by broker.protocol.registry before kio."""


def _build() -> None:
    for message in MESSAGES:
        table = REQUESTS if message.kind == "request" else RESPONSES
        kind = EntityType.request if message.kind == "request" else EntityType.response
        for version in range(message.versions[0], message.versions[1] + 1):
            namespace: dict[str, type] = {}
            top = _make_class(message.name, message.fields, message, version, kind, namespace)
            table[(message.api_key, version)] = top
            for cls in namespace.values():
                _NESTED[cls] = namespace
                key = (message.api_key, message.kind, cls.__name__)
                names = frozenset(f.name for f in dataclasses.fields(cls))
                _ALL_FIELDS[key] = _ALL_FIELDS.get(key, frozenset()) | names


_build()


def request_class(api_key: int, version: int) -> type[Any]:
    return REQUESTS[(api_key, version)]


def response_class(api_key: int, version: int) -> type[Any]:
    return RESPONSES[(api_key, version)]


def nested(cls: type[Any], name: str) -> type[Any] | None:
    """The struct class ``name`` of the same message and version as ``cls`` (a class of this
    module), or None when that version has no such struct; None also when ``cls`` is not
    one of this module's classes."""
    namespace = _NESTED.get(cls)
    return None if namespace is None else namespace.get(name)


def field_names_any_version(cls: type[Any]) -> frozenset[str] | None:
    """The field names the struct ``cls`` has in any version of its message (None if
    ``cls`` is not one of this module's classes)."""
    if cls not in _NESTED:
        return None
    kind = "request" if cls.__header_schema__ in (RequestHeaderV1, RequestHeaderV2) else "response"
    return _ALL_FIELDS.get((int(cls.__api_key__), kind, cls.__name__))


# The names exported before every version was served (LeaderAndIsr v5, StopReplica v3,
# UpdateMetadata v7, ControlledShutdown v3), kept for their users.
def _at(table: dict[tuple[int, int], type], api_key: int, version: int, name: str) -> Any:
    found = nested(table[(api_key, version)], name)
    assert found is not None, name
    return found


LeaderAndIsrRequest: Any = REQUESTS[(4, 5)]
LeaderAndIsrPartitionState: Any = _at(REQUESTS, 4, 5, "LeaderAndIsrPartitionState")
LeaderAndIsrTopicState: Any = _at(REQUESTS, 4, 5, "LeaderAndIsrTopicState")
LeaderAndIsrLiveLeader: Any = _at(REQUESTS, 4, 5, "LeaderAndIsrLiveLeader")
LeaderAndIsrResponse: Any = RESPONSES[(4, 5)]
LeaderAndIsrPartitionError: Any = _at(RESPONSES, 4, 5, "LeaderAndIsrPartitionError")
LeaderAndIsrTopicError: Any = _at(RESPONSES, 4, 5, "LeaderAndIsrTopicError")
StopReplicaRequest: Any = REQUESTS[(5, 3)]
StopReplicaPartitionState: Any = _at(REQUESTS, 5, 3, "StopReplicaPartitionState")
StopReplicaTopicState: Any = _at(REQUESTS, 5, 3, "StopReplicaTopicState")
StopReplicaResponse: Any = RESPONSES[(5, 3)]
StopReplicaPartitionError: Any = _at(RESPONSES, 5, 3, "StopReplicaPartitionError")
UpdateMetadataRequest: Any = REQUESTS[(6, 7)]
UpdateMetadataPartitionState: Any = _at(REQUESTS, 6, 7, "UpdateMetadataPartitionState")
UpdateMetadataTopicState: Any = _at(REQUESTS, 6, 7, "UpdateMetadataTopicState")
UpdateMetadataEndpoint: Any = _at(REQUESTS, 6, 7, "UpdateMetadataEndpoint")
UpdateMetadataBroker: Any = _at(REQUESTS, 6, 7, "UpdateMetadataBroker")
UpdateMetadataResponse: Any = RESPONSES[(6, 7)]
ControlledShutdownRequest: Any = REQUESTS[(7, 3)]
ControlledShutdownResponse: Any = RESPONSES[(7, 3)]
RemainingPartition: Any = _at(RESPONSES, 7, 3, "RemainingPartition")
