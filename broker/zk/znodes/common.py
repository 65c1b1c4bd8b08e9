"""Shared pieces of the znode schema: the paths, Kafka's JSON and UUID conventions, and the
tolerant field readers every znode's ``decode`` uses.

Concurrency: constants and pure functions.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from broker.types import TopicPartition

# --------------------------------------------------------------------------- paths

BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"
BROKER_SEQID_PATH = "/brokers/seqid"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
CONFIG_PATH = "/config"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_CHANGES_PATH = "/config/changes"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
CLUSTER_PATH = "/cluster"
CLUSTER_ID_PATH = "/cluster/id"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
CONSUMERS_PATH = "/consumers"

CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")
"""Kafka's ``ConfigType.ALL``: each gets a persistent ``/config/<type>`` at start-up."""

PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS_PATH,
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    BROKER_SEQID_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    *(f"{CONFIG_PATH}/{t}" for t in CONFIG_ENTITY_TYPES),
)
"""Kafka's ``ZkData.PersistentZkPaths``: created (empty) when a broker starts."""

"""``LeaderAndIsr.NoLeader``."""

LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1


class ZNodeDecodeError(ValueError):
    """A znode's bytes are not the JSON Kafka writes there; the message names the path."""


# --------------------------------------------------------------------------- helpers


def encode_json(obj: Any) -> bytes:
    """Kafka's ``Json.encodeAsBytes``: compact JSON, UTF-8 (non-ASCII not escaped)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_json(data: bytes | None, path: str) -> dict[str, Any]:
    if not data:
        raise ZNodeDecodeError(f"znode {path} is empty")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZNodeDecodeError(f"znode {path} holds invalid JSON: {data[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise ZNodeDecodeError(f"znode {path} holds {type(obj).__name__}, expected an object")
    return obj


def get_field(obj: Mapping[str, Any], key: str, path: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise ZNodeDecodeError(f"znode {path} lacks field {key!r}: {dict(obj)!r}") from None


def int_field(value: Any, key: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ZNodeDecodeError(f"znode {path}: field {key!r} is not an integer: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ZNodeDecodeError(
            f"znode {path}: field {key!r} is not an integer: {value!r}"
        ) from None


def int_list_field(value: Any, key: str, path: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ZNodeDecodeError(f"znode {path}: field {key!r} is not a list: {value!r}")
    return tuple(int_field(v, key, path) for v in value)


def now_ms_str() -> str:
    """The current time in ms as a string, as Kafka stores timestamps in znodes."""
    return str(time.time_ns() // 1_000_000)


def uuid_to_kafka_str(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def kafka_str_to_uuid(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``; raises ``ValueError`` unless 22 base64url chars."""
    if len(text) != 22:
        raise ValueError(f"invalid Kafka UUID {text!r}: expected 22 base64url characters")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except ValueError as exc:
        raise ValueError(f"invalid Kafka UUID {text!r}") from exc
    if len(raw) != 16:
        raise ValueError(f"invalid Kafka UUID {text!r}")
    return uuid.UUID(bytes=raw)


ZERO_UUID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)


def random_kafka_uuid() -> uuid.UUID:
    """Kafka's ``Uuid.randomUuid``: random, never a reserved id, never printed with a '-' first."""
    while True:
        value = uuid.uuid4()
        if value in (ZERO_UUID, METADATA_TOPIC_ID) or uuid_to_kafka_str(value).startswith("-"):
            continue
        return value


def random_cluster_id() -> str:
    """A new cluster id as Kafka generates it (``Uuid.randomUuid().toString``)."""
    return uuid_to_kafka_str(random_kafka_uuid())


def partitions_to_json(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    ordered = sorted(partitions)
    return [{"topic": tp.topic, "partition": tp.partition} for tp in ordered]


def partitions_from_json(value: Any, path: str) -> frozenset[TopicPartition]:
    if not isinstance(value, list):
        raise ZNodeDecodeError(f"znode {path}: 'partitions' is not a list: {value!r}")
    out = set()
    for item in value:
        if not isinstance(item, dict):
            raise ZNodeDecodeError(f"znode {path}: partition entry is not an object: {item!r}")
        topic = get_field(item, "topic", path)
        out.add(
            TopicPartition(
                str(topic), int_field(get_field(item, "partition", path), "partition", path)
            )
        )
    return frozenset(out)


def sequence_number(name: str, prefix: str) -> str:
    """The sequence suffix of a sequential znode name (``config_change_0000000007`` -> ``...7``)."""
    base = name.rsplit("/", 1)[-1]
    return base[len(prefix) :] if base.startswith(prefix) else base
