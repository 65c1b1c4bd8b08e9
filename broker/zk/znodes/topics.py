"""The znodes of topics and their administration: assignments (``/brokers/topics/<t>``),
partition states, topic configs and their change notifications, the admin requests
(deletion, legacy reassignment and preferred election) and ISR-change notifications. Format and
conventions as described in :mod:`broker.zk.znodes`.

Concurrency: values are immutable; functions are pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from broker.types import TopicPartition
from broker.zk.znodes.common import (
    BROKER_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    CONFIG_TOPICS_PATH,
    DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LEADER_RECOVERY_RECOVERED,
    PREFERRED_REPLICA_ELECTION_PATH,
    REASSIGN_PARTITIONS_PATH,
    ZNodeDecodeError,
    decode_json,
    encode_json,
    get_field,
    int_field,
    int_list_field,
    kafka_str_to_uuid,
    partitions_from_json,
    partitions_to_json,
    uuid_to_kafka_str,
)

# --------------------------------------------------------------------------- topics


def _replica_map_json(m: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
    return {str(p): list(m[p]) for p in sorted(m)}


def _replica_map_from_json(value: Any, key: str, path: str) -> dict[int, tuple[int, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ZNodeDecodeError(f"znode {path}: {key!r} is not an object: {value!r}")
    return {int_field(p, key, path): int_list_field(r, key, path) for p, r in value.items()}


@dataclass(frozen=True, slots=True)
class TopicZNode:
    """``/brokers/topics/<t>``: a topic's id and replica assignment, JSON version 3.

    ``{"partitions":{"0":[1,2]},"topic_id":"cMr3GpVESX2L3byPGf93lQ","adding_replicas":{},
    "removing_replicas":{},"version":3}``; ``topic_id`` is omitted when unknown (topics
    created before Kafka 2.8). ``adding``/``removing`` hold in-flight reassignments only.
    """

    topic: str
    partitions: Mapping[int, Sequence[int]]
    topic_id: uuid.UUID | None = None
    adding_replicas: Mapping[int, Sequence[int]] = field(default_factory=dict)
    removing_replicas: Mapping[int, Sequence[int]] = field(default_factory=dict)
    version: int = 3

    def __post_init__(self) -> None:
        # normalise to {int: tuple}, sorted by partition, so equal assignments compare equal
        for name in ("partitions", "adding_replicas", "removing_replicas"):
            value: Mapping[int, Sequence[int]] = getattr(self, name)
            object.__setattr__(
                self,
                name,
                {int(k): tuple(int(r) for r in value[k]) for k in sorted(value, key=int)},
            )

    @classmethod
    def create(
        cls,
        topic: str,
        assignment: Mapping[int, Sequence[int]],
        topic_id: uuid.UUID | None = None,
    ) -> TopicZNode:
        return cls(topic, assignment, topic_id)

    @staticmethod
    def path_for(topic: str) -> str:
        return f"{BROKER_TOPICS_PATH}/{topic}"

    @staticmethod
    def partitions_path(topic: str) -> str:
        return f"{BROKER_TOPICS_PATH}/{topic}/partitions"

    def path(self) -> str:
        return self.path_for(self.topic)

    @property
    def assignment(self) -> dict[int, list[int]]:
        """Partition -> replicas, as plain lists."""
        return {p: list(r) for p, r in sorted(self.partitions.items())}

    @property
    def topic_id_str(self) -> str | None:
        return uuid_to_kafka_str(self.topic_id) if self.topic_id is not None else None

    def encode(self) -> bytes:
        obj: dict[str, Any] = {"partitions": _replica_map_json(self.partitions)}
        if self.topic_id is not None:
            obj["topic_id"] = uuid_to_kafka_str(self.topic_id)
        obj["adding_replicas"] = _replica_map_json(self.adding_replicas)
        obj["removing_replicas"] = _replica_map_json(self.removing_replicas)
        obj["version"] = self.version
        return encode_json(obj)

    @classmethod
    def decode(cls, data: bytes, topic: str) -> TopicZNode:
        path = cls.path_for(topic)
        obj = decode_json(data, path)
        raw_id = obj.get("topic_id")
        try:
            topic_id = kafka_str_to_uuid(str(raw_id)) if raw_id is not None else None
        except ValueError as exc:
            raise ZNodeDecodeError(f"znode {path}: {exc}") from None
        return cls(
            topic=topic,
            partitions=_replica_map_from_json(obj.get("partitions"), "partitions", path),
            topic_id=topic_id,
            adding_replicas=_replica_map_from_json(
                obj.get("adding_replicas"), "adding_replicas", path
            ),
            removing_replicas=_replica_map_from_json(
                obj.get("removing_replicas"), "removing_replicas", path
            ),
            version=int_field(obj.get("version", 1), "version", path),
        )


@dataclass(frozen=True, slots=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<p>/state``: leader, leader epoch, ISR, JSON version 1.

    ``{"controller_epoch":5,"leader":3,"version":1,"leader_epoch":4,"isr":[2,3]}``, plus
    ``"leader_recovery_state":1`` only while recovering (KIP-704). ``leader`` is -1 when
    there is none. Writes are conditional on the znode version (the controller and the
    partition leader both update it).
    """

    leader: int
    leader_epoch: int
    isr: Sequence[int]
    controller_epoch: int
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED
    version: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "isr", tuple(int(r) for r in self.isr))

    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{BROKER_TOPICS_PATH}/{topic}/partitions/{partition}/state"

    @staticmethod
    def partition_path(topic: str, partition: int) -> str:
        return f"{BROKER_TOPICS_PATH}/{topic}/partitions/{partition}"

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": self.version,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state != LEADER_RECOVERY_RECOVERED:
            obj["leader_recovery_state"] = self.leader_recovery_state
        return encode_json(obj)

    @classmethod
    def decode(cls, data: bytes, topic: str = "?", partition: int = -1) -> PartitionState:
        path = cls.path(topic, partition)
        obj = decode_json(data, path)
        return cls(
            leader=int_field(get_field(obj, "leader", path), "leader", path),
            leader_epoch=int_field(get_field(obj, "leader_epoch", path), "leader_epoch", path),
            isr=int_list_field(get_field(obj, "isr", path), "isr", path),
            controller_epoch=int_field(
                get_field(obj, "controller_epoch", path), "controller_epoch", path
            ),
            leader_recovery_state=int_field(
                obj.get("leader_recovery_state", LEADER_RECOVERY_RECOVERED),
                "leader_recovery_state",
                path,
            ),
            version=int_field(obj.get("version", 1), "version", path),
        )


TopicPartitionStateZNode = PartitionState


# --------------------------------------------------------------------------- configs


@dataclass(frozen=True, slots=True)
class TopicConfigZNode:
    """``/config/topics/<t>``: a topic's config overrides, JSON version 1.

    ``{"version":1,"config":{"retention.ms":"100000"}}``; values are strings.
    """

    topic: str
    config: Mapping[str, str] = field(default_factory=dict)
    version: int = 1

    ENTITY_TYPE: ClassVar[str] = "topics"

    @staticmethod
    def path_for(topic: str) -> str:
        return f"{CONFIG_TOPICS_PATH}/{topic}"

    def path(self) -> str:
        return self.path_for(self.topic)

    def encode(self) -> bytes:
        return encode_json(
            {"version": self.version, "config": {str(k): str(v) for k, v in self.config.items()}}
        )

    @classmethod
    def decode(cls, data: bytes | None, topic: str) -> TopicConfigZNode:
        if not data:  # Kafka reads a missing/empty config znode as no overrides
            return cls(topic, {})
        path = cls.path_for(topic)
        obj = decode_json(data, path)
        config = obj.get("config") or {}
        if not isinstance(config, dict):
            raise ZNodeDecodeError(f"znode {path}: 'config' is not an object: {config!r}")
        return cls(
            topic,
            {str(k): str(v) for k, v in config.items()},
            int_field(obj.get("version", 1), "version", path),
        )


@dataclass(frozen=True, slots=True)
class ConfigChangeNotificationZNode:
    """``/config/changes/config_change_<seq>`` (persistent sequential), JSON version 2.

    ``{"version":2,"entity_path":"topics/my-topic"}``: tells every broker to re-read
    ``/config/<entity_path>``.
    """

    entity_path: str
    version: int = 2

    PREFIX: ClassVar[str] = "config_change_"

    @classmethod
    def for_topic(cls, topic: str) -> ConfigChangeNotificationZNode:
        return cls(f"topics/{topic}")

    @classmethod
    def create_path(cls) -> str:
        """The prefix to create a sequential znode under."""
        return f"{CONFIG_CHANGES_PATH}/{cls.PREFIX}"

    @classmethod
    def path(cls, sequence: str | int) -> str:
        seq = f"{sequence:010d}" if isinstance(sequence, int) else sequence
        return f"{CONFIG_CHANGES_PATH}/{cls.PREFIX}{seq}"

    def encode(self) -> bytes:
        return encode_json({"version": self.version, "entity_path": self.entity_path})

    @classmethod
    def decode(cls, data: bytes) -> ConfigChangeNotificationZNode:
        obj = decode_json(data, CONFIG_CHANGES_PATH)
        p = CONFIG_CHANGES_PATH
        return cls(
            str(get_field(obj, "entity_path", p)), int_field(obj.get("version", 2), "version", p)
        )


# --------------------------------------------------------------------------- admin


@dataclass(frozen=True, slots=True)
class DeleteTopicZNode:
    """``/admin/delete_topics/<t>``: the topic is marked for deletion. No data (empty)."""

    topic: str

    @staticmethod
    def path_for(topic: str) -> str:
        return f"{DELETE_TOPICS_PATH}/{topic}"

    def path(self) -> str:
        return self.path_for(self.topic)

    def encode(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, data: bytes | None, topic: str) -> DeleteTopicZNode:
        return cls(topic)


@dataclass(frozen=True, slots=True)
class ReassignPartitionsZNode:
    """``/admin/reassign_partitions`` (legacy, pre-KIP-455 tools), JSON version 1.

    ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}``
    """

    partitions: Mapping[TopicPartition, tuple[int, ...]]
    version: int = 1

    PATH: ClassVar[str] = REASSIGN_PARTITIONS_PATH

    def path(self) -> str:
        return REASSIGN_PARTITIONS_PATH

    def encode(self) -> bytes:
        return encode_json(
            {
                "version": self.version,
                "partitions": [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "replicas": list(self.partitions[tp]),
                    }
                    for tp in sorted(self.partitions)
                ],
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> ReassignPartitionsZNode:
        p = REASSIGN_PARTITIONS_PATH
        obj = decode_json(data, p)
        raw = get_field(obj, "partitions", p)
        if not isinstance(raw, list):
            raise ZNodeDecodeError(f"znode {p}: 'partitions' is not a list: {raw!r}")
        out: dict[TopicPartition, tuple[int, ...]] = {}
        for item in raw:
            if not isinstance(item, dict):
                raise ZNodeDecodeError(f"znode {p}: entry is not an object: {item!r}")
            tp = TopicPartition(
                str(get_field(item, "topic", p)),
                int_field(get_field(item, "partition", p), "partition", p),
            )
            out[tp] = int_list_field(get_field(item, "replicas", p), "replicas", p)
        return cls(out, int_field(obj.get("version", 1), "version", p))


@dataclass(frozen=True, slots=True)
class PreferredReplicaElectionZNode:
    """``/admin/preferred_replica_election`` (legacy tools), JSON version 1.

    ``{"version":1,"partitions":[{"topic":"t","partition":0}]}``
    """

    partitions: frozenset[TopicPartition]
    version: int = 1

    PATH: ClassVar[str] = PREFERRED_REPLICA_ELECTION_PATH

    def path(self) -> str:
        return PREFERRED_REPLICA_ELECTION_PATH

    def encode(self) -> bytes:
        return encode_json(
            {"version": self.version, "partitions": partitions_to_json(self.partitions)}
        )

    @classmethod
    def decode(cls, data: bytes) -> PreferredReplicaElectionZNode:
        p = PREFERRED_REPLICA_ELECTION_PATH
        obj = decode_json(data, p)
        return cls(
            partitions_from_json(get_field(obj, "partitions", p), p),
            int_field(obj.get("version", 1), "version", p),
        )


@dataclass(frozen=True, slots=True)
class IsrChangeNotificationZNode:
    """``/isr_change_notification/isr_change_<seq>`` (persistent sequential), JSON version 1.

    ``{"version":1,"partitions":[{"topic":"t","partition":0}]}``: a leader changed these
    partitions' ISR in ZooKeeper; the controller re-reads them and sends UpdateMetadata.
    """

    partitions: frozenset[TopicPartition]
    version: int = 1

    PREFIX: ClassVar[str] = "isr_change_"

    @classmethod
    def create_path(cls) -> str:
        return f"{ISR_CHANGE_NOTIFICATION_PATH}/{cls.PREFIX}"

    @classmethod
    def path(cls, sequence: str | int) -> str:
        seq = f"{sequence:010d}" if isinstance(sequence, int) else sequence
        return f"{ISR_CHANGE_NOTIFICATION_PATH}/{cls.PREFIX}{seq}"

    def encode(self) -> bytes:
        return encode_json(
            {"version": self.version, "partitions": partitions_to_json(self.partitions)}
        )

    @classmethod
    def decode(cls, data: bytes) -> IsrChangeNotificationZNode:
        p = ISR_CHANGE_NOTIFICATION_PATH
        obj = decode_json(data, p)
        return cls(
            partitions_from_json(get_field(obj, "partitions", p), p),
            int_field(obj.get("version", 1), "version", p),
        )
