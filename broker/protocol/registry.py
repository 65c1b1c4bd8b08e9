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

from broker.protocol import interbroker
from broker.protocol.framing import API_VERSIONS_KEY

T = TypeVar("T")

# api_key -> (name, min_version, max_version)
SUPPORTED_APIS: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 9),
    1: ("Fetch", 4, 12),
    2: ("ListOffsets", 1, 7),
    3: ("Metadata", 0, 12),
    4: ("LeaderAndIsr", 5, 5),
    5: ("StopReplica", 3, 3),
    6: ("UpdateMetadata", 7, 7),
    7: ("ControlledShutdown", 3, 3),
    8: ("OffsetCommit", 2, 8),
    9: ("OffsetFetch", 1, 8),
    10: ("FindCoordinator", 0, 4),
    11: ("JoinGroup", 0, 9),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 5),
    16: ("ListGroups", 0, 5),
    18: ("ApiVersions", 0, 3),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 6),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 4),
    23: ("OffsetForLeaderEpoch", 2, 4),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    37: ("CreatePartitions", 0, 3),
    42: ("DeleteGroups", 0, 2),
    43: ("ElectLeaders", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    45: ("AlterPartitionReassignments", 0, 1),
    46: ("ListPartitionReassignments", 0, 0),
    47: ("OffsetDelete", 0, 0),
    60: ("DescribeCluster", 0, 1),
}


def is_supported(api_key: int, version: int) -> bool:
    entry = SUPPORTED_APIS.get(api_key)
    return entry is not None and entry[1] <= version <= entry[2]


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    """The request class; the ZooKeeper-mode inter-broker APIs kio lacks come from
    :mod:`broker.protocol.interbroker`."""
    local = interbroker.REQUESTS.get((api_key, version))
    if local is not None:
        return local
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    """The response class; see :func:`request_class`."""
    local = interbroker.RESPONSES.get((api_key, version))
    if local is not None:
        return local
    return load_response_schema(api_key, version)


def is_flexible(api_key: int, version: int) -> bool:
    """Whether (api_key, version) uses flexible encoding (request header v2)."""
    try:
        return bool(request_class(api_key, version).__flexible__)
    except Exception:  # noqa: BLE001 - an unknown schema is simply not flexible
        return False


def response_uses_flexible_header(api_key: int, version: int) -> bool:
    """ApiVersions responses always use header v0 (KIP-511)."""
    if api_key == API_VERSIONS_KEY:
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
    cls = request_class(api_key, version)
    value, _size = _reader(cls)(buf, pos)
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
    """The nested message class ``name`` from the same kio module (same version) as ``cls``."""
    return getattr(sys.modules[cls.__module__], name)


def nested_optional(cls: type[Any], name: str) -> type[Any] | None:
    """Like :func:`nested`, or None when this version has no such message."""
    found = getattr(sys.modules[cls.__module__], name, None)
    return found if isinstance(found, type) else None


def build(cls: type[T], **kwargs: Any) -> T:
    """Instantiate a kio dataclass, ignoring fields this version does not define."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in kwargs.items() if k in names})
