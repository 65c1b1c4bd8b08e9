"""The API registry: which APIs and versions the broker implements, and the kio message
classes for each (request, response) pair. ApiVersions answers from this table, so the
broker advertises exactly what it implements.

Version ranges are chosen so that librdkafka 2.x, kafka-python 3.x and the Kafka 3.9/4.x Java
clients all find a common version, while staying below versions whose semantics Millrace
does not implement yet (e.g. Fetch v13+ and Produce v13 address topics by id only).

``build`` constructs a kio dataclass from keyword arguments, dropping the fields that a
particular version does not have, so a handler can describe one response for every
version it supports.

Concurrency: the tables are immutable after import; the class caches are thread-safe.
"""

from __future__ import annotations

import dataclasses
import io
import sys
from functools import cache
from typing import Any, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.protocol import interbroker, nulls, request_walk, tagged_fields
from broker.protocol.api_keys import ApiKey

T = TypeVar("T")

# api key -> (name, min_version, max_version)
SUPPORTED_APIS: dict[ApiKey, tuple[str, int, int]] = {
    ApiKey.PRODUCE: ("Produce", 3, 9),
    ApiKey.FETCH: ("Fetch", 4, 12),
    ApiKey.LIST_OFFSETS: ("ListOffsets", 1, 7),
    ApiKey.METADATA: ("Metadata", 0, 12),
    # the ZooKeeper-mode inter-broker APIs: every version Kafka 3.9 sends (interbroker.py)
    ApiKey.LEADER_AND_ISR: ("LeaderAndIsr", 0, 7),
    ApiKey.STOP_REPLICA: ("StopReplica", 0, 4),
    ApiKey.UPDATE_METADATA: ("UpdateMetadata", 0, 8),
    ApiKey.CONTROLLED_SHUTDOWN: ("ControlledShutdown", 1, 3),
    ApiKey.ALTER_PARTITION: ("AlterPartition", 0, 3),
    ApiKey.ALLOCATE_PRODUCER_IDS: ("AllocateProducerIds", 0, 0),
    ApiKey.OFFSET_COMMIT: ("OffsetCommit", 2, 8),
    ApiKey.OFFSET_FETCH: ("OffsetFetch", 1, 8),
    ApiKey.FIND_COORDINATOR: ("FindCoordinator", 0, 4),
    ApiKey.JOIN_GROUP: ("JoinGroup", 0, 9),
    ApiKey.HEARTBEAT: ("Heartbeat", 0, 4),
    ApiKey.LEAVE_GROUP: ("LeaveGroup", 0, 5),
    ApiKey.SYNC_GROUP: ("SyncGroup", 0, 5),
    ApiKey.DESCRIBE_GROUPS: ("DescribeGroups", 0, 5),
    ApiKey.LIST_GROUPS: ("ListGroups", 0, 5),
    ApiKey.API_VERSIONS: ("ApiVersions", 0, 3),
    ApiKey.CREATE_TOPICS: ("CreateTopics", 2, 7),
    ApiKey.DELETE_TOPICS: ("DeleteTopics", 1, 6),
    ApiKey.DELETE_RECORDS: ("DeleteRecords", 0, 2),
    ApiKey.INIT_PRODUCER_ID: ("InitProducerId", 0, 6),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ("OffsetForLeaderEpoch", 2, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: ("AddPartitionsToTxn", 0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN: ("AddOffsetsToTxn", 0, 4),
    ApiKey.END_TXN: ("EndTxn", 0, 4),
    ApiKey.WRITE_TXN_MARKERS: ("WriteTxnMarkers", 1, 1),
    ApiKey.TXN_OFFSET_COMMIT: ("TxnOffsetCommit", 0, 4),
    ApiKey.DESCRIBE_CONFIGS: ("DescribeConfigs", 1, 4),
    ApiKey.ALTER_CONFIGS: ("AlterConfigs", 0, 2),
    ApiKey.CREATE_PARTITIONS: ("CreatePartitions", 0, 3),
    ApiKey.DELETE_GROUPS: ("DeleteGroups", 0, 2),
    ApiKey.ELECT_LEADERS: ("ElectLeaders", 0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ("IncrementalAlterConfigs", 0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: ("AlterPartitionReassignments", 0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ("ListPartitionReassignments", 0, 0),
    ApiKey.OFFSET_DELETE: ("OffsetDelete", 0, 0),
    ApiKey.DESCRIBE_CLUSTER: ("DescribeCluster", 0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: ("DescribeLogDirs", 1, 4),
    ApiKey.DESCRIBE_PRODUCERS: ("DescribeProducers", 0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: ("DescribeTransactions", 0, 0),
    ApiKey.LIST_TRANSACTIONS: ("ListTransactions", 0, 1),
    ApiKey.SASL_HANDSHAKE: ("SaslHandshake", 0, 1),
    ApiKey.SASL_AUTHENTICATE: ("SaslAuthenticate", 0, 2),
    ApiKey.DESCRIBE_ACLS: ("DescribeAcls", 1, 3),
    ApiKey.CREATE_ACLS: ("CreateAcls", 1, 3),
    ApiKey.DELETE_ACLS: ("DeleteAcls", 1, 3),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: ("DescribeClientQuotas", 0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: ("AlterClientQuotas", 0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: ("DescribeUserScramCredentials", 0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ("AlterUserScramCredentials", 0, 0),
    ApiKey.MILLRACE_LOCAL_FETCH: ("MillraceLocalFetch", 11, 11),
}


PRIVATE_APIS: dict[ApiKey, ApiKey] = {ApiKey.MILLRACE_LOCAL_FETCH: ApiKey.FETCH}
"""Millrace's own APIs -> the Kafka API whose request (and response layout) each takes, at
the same version. ApiVersions lists them only to a client that names itself Millrace's
(``client_software_name`` starting with MILLRACE_SOFTWARE_PREFIX), so Kafka's clients and
tools never see a key they do not know."""

MILLRACE_SOFTWARE_PREFIX = "millrace"


SERVED_BEYOND_ADVERTISED: dict[ApiKey, int] = {
    ApiKey.FETCH: 17,
    ApiKey.LIST_OFFSETS: 9,
}
"""Newest versions served but not advertised in ApiVersions: what a Kafka 3.9 broker's
replica fetcher sends a Millrace leader. It never asks ApiVersions: it sends the versions its
``inter.broker.protocol.version`` names (at 3.9: Fetch v17, by topic id, and ListOffsets v9).
Clients keep negotiating from the advertised ranges above."""


def is_supported(api_key: int, version: int) -> bool:
    """Whether (api_key, version) is served (advertised, or in SERVED_BEYOND_ADVERTISED)."""
    if api_key not in ApiKey._value2member_map_:
        return False
    key = ApiKey(api_key)
    entry = SUPPORTED_APIS.get(key)
    if entry is None:
        return False
    return entry[1] <= version <= max(entry[2], SERVED_BEYOND_ADVERTISED.get(key, entry[2]))


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    """The request class; the ZooKeeper-mode inter-broker APIs kio lacks come from
    :mod:`broker.protocol.interbroker`."""
    local = interbroker.REQUESTS.get((api_key, version))
    if local is not None:
        return local
    return load_request_schema(PRIVATE_APIS.get(api_key, api_key), version)  # type: ignore[call-overload]


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    """The response class; see :func:`request_class`."""
    local = interbroker.RESPONSES.get((api_key, version))
    if local is not None:
        return local
    return load_response_schema(PRIVATE_APIS.get(api_key, api_key), version)  # type: ignore[call-overload]


def is_flexible(api_key: int, version: int) -> bool:
    """Whether (api_key, version) uses flexible encoding (request header v2)."""
    try:
        return bool(request_class(api_key, version).__flexible__)
    except Exception:  # noqa: BLE001 - an unknown schema is simply not flexible
        return False


def response_uses_flexible_header(api_key: int, version: int) -> bool:
    """ApiVersions responses always use header v0 (KIP-511)."""
    if api_key == ApiKey.API_VERSIONS:
        return False
    return bool(response_class(api_key, version).__flexible__)


_READERS: dict[Any, Any] = {}
_WRITERS: dict[Any, Any] = {}
_FIELDS: dict[Any, frozenset[str]] = {}


def _reader(cls: Any) -> Any:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _writer(cls: Any) -> Any:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def decode_request(api_key: int, version: int, buf: bytes | memoryview, pos: int) -> Any:
    """Decode the request body at ``buf[pos:]``. Every length and count is first checked
    against the bytes there (:mod:`broker.protocol.request_walk`). Unknown tagged fields (KIP-482: a reader
    skips the tags it does not know) make kio raise; the body is then decoded again without
    them (:mod:`broker.protocol.tagged_fields`). A null where the schema forbids one raises
    InvalidRequestError (:mod:`broker.protocol.nulls`)."""
    cls = request_class(api_key, version)
    request_walk.check(cls, buf, pos)  # before kio reserves memory for any claimed count
    try:
        value, _size = _reader(cls)(buf, pos)
    except KeyError as exc:
        if not tagged_fields.is_unknown_tag_error(exc):
            raise
        value, _size = _reader(cls)(tagged_fields.strip_unknown_tags(cls, buf, pos), 0)
    nulls.check(cls, value)
    return value


def encode(entity: Any) -> bytes:
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


def _field_names(cls: Any) -> frozenset[str]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


def nested(cls: type[Any], name: str) -> type[Any]:
    """The nested message class ``name`` from the same kio module (same version) as ``cls``
    (or, for :mod:`broker.protocol.interbroker`'s classes, of the same message version)."""
    found = nested_optional(cls, name)
    if found is None:
        raise AttributeError(f"{cls.__module__}.{cls.__name__} v{cls.__version__} has no {name}")
    return found


def nested_optional(cls: type[Any], name: str) -> type[Any] | None:
    """Like :func:`nested`, or None when this version has no such message."""
    if cls.__module__ == interbroker.__name__:
        return interbroker.nested(cls, name)
    found = getattr(sys.modules[cls.__module__], name, None)
    return found if isinstance(found, type) else None


_ANY_FIELDS: dict[Any, frozenset[str]] = {}


def _any_version_field_names(cls: type[Any]) -> frozenset[str]:
    """The field names of the message ``cls`` (same class name) in every version kio knows of
    its API: ``kio.schema.<api>.v<N>.(request|response)``."""
    cached = _ANY_FIELDS.get(cls)
    if cached is not None:
        return cached
    local = interbroker.field_names_any_version(cls)
    if local is not None:
        _ANY_FIELDS[cls] = local
        return local
    module = cls.__module__  # e.g. kio.schema.produce.v9.response
    parts = module.split(".")
    names = set(_field_names(cls))
    if len(parts) >= 5 and parts[0] == "kio" and parts[3].startswith("v"):
        package = sys.modules.get(".".join(parts[:3]))
        base = ".".join(parts[:3])
        directory = getattr(package, "__path__", None)
        if directory is not None:
            import importlib
            import pkgutil

            for info in pkgutil.iter_modules(directory):
                if not (info.name.startswith("v") and info.name[1:].isdigit()):
                    continue
                try:
                    other = importlib.import_module(f"{base}.{info.name}.{parts[4]}")
                except ImportError:
                    continue
                twin = getattr(other, cls.__name__, None)
                if isinstance(twin, type) and dataclasses.is_dataclass(twin):
                    names.update(f.name for f in dataclasses.fields(twin))
    result = _ANY_FIELDS[cls] = frozenset(names)
    return result


def build(cls: type[T], **kwargs: Any) -> T:
    """Instantiate a kio dataclass, ignoring fields this version does not define.

    A keyword that is a field of this message in no version kio knows (a misspelling)
    raises TypeError naming it, instead of being dropped silently."""
    names = _field_names(cls)
    unknown = [k for k in kwargs if k not in names]
    if unknown:
        known = _any_version_field_names(cls)
        wrong = [k for k in unknown if k not in known]
        if wrong:
            raise TypeError(
                f"{cls.__module__}.{cls.__name__} has no field {', '.join(sorted(wrong))} "
                "in any version"
            )
    return cls(**{k: v for k, v in kwargs.items() if k in names})
