"""The ZooKeeper znodes of ZooKeeper-mode Kafka 3.x: paths and JSON, byte-compatible.

One frozen dataclass per znode kind. Each has ``path(...)`` (a classmethod or property: the
znode's path), ``encode() -> bytes`` (the JSON exactly as Kafka 3.9's ``ZkData.scala`` writes
it: compact, ``"version"`` as Kafka sets it, timestamps and producer-id bounds as strings) and
``decode(data, ...) -> Self`` (tolerant of the older versions Kafka itself still reads). The
key parts of a path that the JSON does not carry (broker id, topic, partition) are passed to
``decode``.

Layout (DESIGN.md section 3 "ZooKeeper layout", checklist section 10)::

    /brokers/ids/<id>                             BrokerIdZNode (ephemeral)
    /brokers/seqid                                BROKER_SEQID_PATH (version = generated id)
    /brokers/topics/<t>                           TopicZNode
    /brokers/topics/<t>/partitions/<p>/state      PartitionState
    /controller                                   ControllerZNode (ephemeral)
    /controller_epoch                             ControllerEpochZNode
    /config/topics/<t>                            TopicConfigZNode
    /config/changes/config_change_<seq>           ConfigChangeNotificationZNode
    /admin/delete_topics/<t>                      DeleteTopicZNode (empty data)
    /admin/reassign_partitions                    ReassignPartitionsZNode
    /admin/preferred_replica_election             PreferredReplicaElectionZNode
    /isr_change_notification/isr_change_<seq>     IsrChangeNotificationZNode
    /cluster/id                                   ClusterIdZNode
    /latest_producer_id_block                     ProducerIdBlockZNode

Key order inside the JSON follows what Kafka 3.x brokers are observed to write (Kafka builds
most of these from hash maps, so the order carries no meaning; readers must not rely on it).

Concurrency: values are immutable; functions are pure.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

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

NO_LEADER = -1
"""``LeaderAndIsr.NoLeader``."""

LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1


class ZNodeDecodeError(ValueError):
    """A znode's bytes are not the JSON Kafka writes there; the message names the path."""


# --------------------------------------------------------------------------- helpers


def encode_json(obj: Any) -> bytes:
    """Kafka's ``Json.encodeAsBytes``: compact JSON, UTF-8 (non-ASCII not escaped)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _decode_json(data: bytes | None, path: str) -> dict[str, Any]:
    if not data:
        raise ZNodeDecodeError(f"znode {path} is empty")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZNodeDecodeError(f"znode {path} holds invalid JSON: {data[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise ZNodeDecodeError(f"znode {path} holds {type(obj).__name__}, expected an object")
    return obj


def _field(obj: Mapping[str, Any], key: str, path: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise ZNodeDecodeError(f"znode {path} lacks field {key!r}: {dict(obj)!r}") from None


def _int(value: Any, key: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ZNodeDecodeError(f"znode {path}: field {key!r} is not an integer: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ZNodeDecodeError(
            f"znode {path}: field {key!r} is not an integer: {value!r}"
        ) from None


def _int_list(value: Any, key: str, path: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ZNodeDecodeError(f"znode {path}: field {key!r} is not a list: {value!r}")
    return tuple(_int(v, key, path) for v in value)


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


def _partitions_json(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    ordered = sorted(partitions)
    return [{"topic": tp.topic, "partition": tp.partition} for tp in ordered]


def _partitions_from_json(value: Any, path: str) -> frozenset[TopicPartition]:
    if not isinstance(value, list):
        raise ZNodeDecodeError(f"znode {path}: 'partitions' is not a list: {value!r}")
    out = set()
    for item in value:
        if not isinstance(item, dict):
            raise ZNodeDecodeError(f"znode {path}: partition entry is not an object: {item!r}")
        topic = _field(item, "topic", path)
        out.add(
            TopicPartition(str(topic), _int(_field(item, "partition", path), "partition", path))
        )
    return frozenset(out)


# --------------------------------------------------------------------------- brokers


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised endpoint, ``LISTENER://host:port`` (IPv6 hosts in brackets)."""

    listener: str
    host: str
    port: int

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.connection_string

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        try:
            listener, rest = text.split("://", 1)
            host, port = rest.rsplit(":", 1)
            return cls(listener, host[1:-1] if host.startswith("[") else host, int(port))
        except ValueError:
            raise ValueError(f"invalid endpoint {text!r}: expected LISTENER://host:port") from None


@dataclass(frozen=True, slots=True)
class BrokerIdZNode:
    """``/brokers/ids/<id>`` (ephemeral): a live broker's registration, JSON version 5.

    ``{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},
    "endpoints":["PLAINTEXT://127.0.0.1:9092"],"jmx_port":-1,"features":{},
    "host":"127.0.0.1","timestamp":"1646557610504","port":9092,"version":5}``; ``rack`` only
    when set. ``host``/``port`` are the first PLAINTEXT endpoint (null/-1 if none), kept for
    old clients; when both are left unset they are derived from ``endpoints``. A listener's
    security protocol defaults to its name. The znode's czxid is the *broker epoch*.

    ``endpoints`` holds connection strings (``Endpoint`` objects or strings are accepted and
    normalised to a tuple of strings); :attr:`parsed_endpoints` gives them parsed.
    """

    broker_id: int
    host: str | None = None
    port: int = -1
    endpoints: Sequence[str] = ()
    listener_security_protocol_map: Mapping[str, str] = field(default_factory=dict)
    rack: str | None = None
    jmx_port: int = -1
    timestamp: str = field(default_factory=now_ms_str)
    features: Mapping[str, Any] = field(default_factory=dict)
    version: int = 5

    def __post_init__(self) -> None:
        parsed = tuple(Endpoint.parse(str(e)) for e in self.endpoints)
        object.__setattr__(self, "endpoints", tuple(ep.connection_string for ep in parsed))
        protocols = dict(self.listener_security_protocol_map)
        for ep in parsed:
            protocols.setdefault(ep.listener, ep.listener)
        object.__setattr__(self, "listener_security_protocol_map", protocols)
        if self.host is None and self.port == -1:
            plaintext = next((ep for ep in parsed if protocols[ep.listener] == "PLAINTEXT"), None)
            if plaintext is not None:
                object.__setattr__(self, "host", plaintext.host)
                object.__setattr__(self, "port", plaintext.port)

    @classmethod
    def create(
        cls,
        broker_id: int,
        endpoints: Sequence[Endpoint | str],
        *,
        security_protocols: Mapping[str, str] | None = None,
        rack: str | None = None,
        jmx_port: int = -1,
        timestamp_ms: int | None = None,
    ) -> BrokerIdZNode:
        """A registration for ``endpoints``; host/port from the first PLAINTEXT endpoint."""
        return cls(
            broker_id=broker_id,
            endpoints=tuple(str(ep) for ep in endpoints),
            listener_security_protocol_map=dict(security_protocols or {}),
            rack=rack,
            jmx_port=jmx_port,
            timestamp=str(timestamp_ms) if timestamp_ms is not None else now_ms_str(),
        )

    @staticmethod
    def path_for(broker_id: int) -> str:
        return f"{BROKER_IDS_PATH}/{broker_id}"

    def path(self) -> str:
        return self.path_for(self.broker_id)

    @property
    def parsed_endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(Endpoint.parse(e) for e in self.endpoints)

    def endpoint(self, listener: str) -> Endpoint | None:
        """The endpoint of the named listener, if advertised."""
        return next((ep for ep in self.parsed_endpoints if ep.listener == listener), None)

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "listener_security_protocol_map": dict(self.listener_security_protocol_map),
            "endpoints": list(self.endpoints),
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        obj.update(
            jmx_port=self.jmx_port,
            features=dict(self.features),
            host=self.host,
            timestamp=self.timestamp,
            port=self.port,
            version=self.version,
        )
        return encode_json(obj)

    @classmethod
    def decode(cls, data: bytes, broker_id: int) -> BrokerIdZNode:
        path = cls.path_for(broker_id)
        obj = _decode_json(data, path)
        version = _int(_field(obj, "version", path), "version", path)
        host = obj.get("host")
        port = _int(obj.get("port", -1), "port", path)
        if version < 1:
            raise ZNodeDecodeError(f"znode {path}: unsupported registration version {version}")
        if version == 1:
            endpoints: tuple[str, ...] = (Endpoint("PLAINTEXT", str(host), port).connection_string,)
            protocols: dict[str, str] = {"PLAINTEXT": "PLAINTEXT"}
        else:
            raw = _field(obj, "endpoints", path)
            if not isinstance(raw, list):
                raise ZNodeDecodeError(f"znode {path}: 'endpoints' is not a list: {raw!r}")
            endpoints = tuple(str(x) for x in raw)
            protocol_map = obj.get("listener_security_protocol_map")
            protocols = (
                {str(k): str(v) for k, v in protocol_map.items()}
                if isinstance(protocol_map, dict)
                else {}
            )
        rack = obj.get("rack")
        features = obj.get("features")
        try:
            return cls(
                broker_id=broker_id,
                host=None if host is None else str(host),
                port=port,
                endpoints=endpoints,
                listener_security_protocol_map=protocols,
                rack=None if rack is None else str(rack),
                jmx_port=_int(obj.get("jmx_port", -1), "jmx_port", path),
                timestamp=str(obj.get("timestamp", "")),
                features=features if isinstance(features, dict) else {},
                version=version,
            )
        except ValueError as exc:  # a malformed endpoint
            raise ZNodeDecodeError(f"znode {path}: {exc}") from None


BrokerRegistration = BrokerIdZNode
"""Alias: the registration a broker writes at ``/brokers/ids/<id>``."""


# --------------------------------------------------------------------------- topics


def _replica_map_json(m: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
    return {str(p): list(m[p]) for p in sorted(m)}


def _replica_map_from_json(value: Any, key: str, path: str) -> dict[int, tuple[int, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ZNodeDecodeError(f"znode {path}: {key!r} is not an object: {value!r}")
    return {_int(p, key, path): _int_list(r, key, path) for p, r in value.items()}


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
        obj = _decode_json(data, path)
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
            version=_int(obj.get("version", 1), "version", path),
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
        obj = _decode_json(data, path)
        return cls(
            leader=_int(_field(obj, "leader", path), "leader", path),
            leader_epoch=_int(_field(obj, "leader_epoch", path), "leader_epoch", path),
            isr=_int_list(_field(obj, "isr", path), "isr", path),
            controller_epoch=_int(_field(obj, "controller_epoch", path), "controller_epoch", path),
            leader_recovery_state=_int(
                obj.get("leader_recovery_state", LEADER_RECOVERY_RECOVERED),
                "leader_recovery_state",
                path,
            ),
            version=_int(obj.get("version", 1), "version", path),
        )


TopicPartitionStateZNode = PartitionState


# --------------------------------------------------------------------------- controller


@dataclass(frozen=True, slots=True)
class ControllerZNode:
    """``/controller`` (ephemeral): the active controller, JSON version 2.

    ``{"version":2,"brokerid":1,"timestamp":"1689018188126","kraftControllerEpoch":-1}``;
    version 1 (before 3.4) lacks ``kraftControllerEpoch``.
    """

    broker_id: int
    timestamp: str = field(default_factory=now_ms_str)
    kraft_controller_epoch: int = -1
    version: int = 2

    PATH: ClassVar[str] = CONTROLLER_PATH

    def path(self) -> str:
        return CONTROLLER_PATH

    def encode(self) -> bytes:
        return encode_json(
            {
                "version": self.version,
                "brokerid": self.broker_id,
                "timestamp": self.timestamp,
                "kraftControllerEpoch": self.kraft_controller_epoch,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> ControllerZNode:
        obj = _decode_json(data, CONTROLLER_PATH)
        p = CONTROLLER_PATH
        return cls(
            broker_id=_int(_field(obj, "brokerid", p), "brokerid", p),
            timestamp=str(obj.get("timestamp", "")),
            kraft_controller_epoch=_int(
                obj.get("kraftControllerEpoch", -1), "kraftControllerEpoch", p
            ),
            version=_int(obj.get("version", 1), "version", p),
        )


@dataclass(frozen=True, slots=True)
class ControllerEpochZNode:
    """``/controller_epoch``: the controller epoch as a plain decimal integer (``5``).

    Incremented by a conditional update at each election; fences zombie controllers.
    """

    epoch: int

    PATH: ClassVar[str] = CONTROLLER_EPOCH_PATH
    INITIAL: ClassVar[int] = 0
    """``KafkaController.InitialControllerEpoch``: the first elected controller gets 1."""

    def path(self) -> str:
        return CONTROLLER_EPOCH_PATH

    def encode(self) -> bytes:
        return str(self.epoch).encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> ControllerEpochZNode:
        try:
            return cls(int(data.decode("ascii").strip()))
        except (UnicodeDecodeError, ValueError):
            raise ZNodeDecodeError(
                f"znode {CONTROLLER_EPOCH_PATH} is not an integer: {data[:50]!r}"
            ) from None


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
        obj = _decode_json(data, path)
        config = obj.get("config") or {}
        if not isinstance(config, dict):
            raise ZNodeDecodeError(f"znode {path}: 'config' is not an object: {config!r}")
        return cls(
            topic,
            {str(k): str(v) for k, v in config.items()},
            _int(obj.get("version", 1), "version", path),
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
        obj = _decode_json(data, CONFIG_CHANGES_PATH)
        p = CONFIG_CHANGES_PATH
        return cls(str(_field(obj, "entity_path", p)), _int(obj.get("version", 2), "version", p))


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
        obj = _decode_json(data, p)
        raw = _field(obj, "partitions", p)
        if not isinstance(raw, list):
            raise ZNodeDecodeError(f"znode {p}: 'partitions' is not a list: {raw!r}")
        out: dict[TopicPartition, tuple[int, ...]] = {}
        for item in raw:
            if not isinstance(item, dict):
                raise ZNodeDecodeError(f"znode {p}: entry is not an object: {item!r}")
            tp = TopicPartition(
                str(_field(item, "topic", p)), _int(_field(item, "partition", p), "partition", p)
            )
            out[tp] = _int_list(_field(item, "replicas", p), "replicas", p)
        return cls(out, _int(obj.get("version", 1), "version", p))


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
            {"version": self.version, "partitions": _partitions_json(self.partitions)}
        )

    @classmethod
    def decode(cls, data: bytes) -> PreferredReplicaElectionZNode:
        p = PREFERRED_REPLICA_ELECTION_PATH
        obj = _decode_json(data, p)
        return cls(
            _partitions_from_json(_field(obj, "partitions", p), p),
            _int(obj.get("version", 1), "version", p),
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
            {"version": self.version, "partitions": _partitions_json(self.partitions)}
        )

    @classmethod
    def decode(cls, data: bytes) -> IsrChangeNotificationZNode:
        p = ISR_CHANGE_NOTIFICATION_PATH
        obj = _decode_json(data, p)
        return cls(
            _partitions_from_json(_field(obj, "partitions", p), p),
            _int(obj.get("version", 1), "version", p),
        )


# --------------------------------------------------------------------------- cluster-wide


@dataclass(frozen=True, slots=True)
class ClusterIdZNode:
    """``/cluster/id``: ``{"version":"1","id":"Sfr7YvlkRHSHrmSrwq9mug"}`` (version is a string)."""

    id: str
    version: str = "1"

    PATH: ClassVar[str] = CLUSTER_ID_PATH

    def path(self) -> str:
        return CLUSTER_ID_PATH

    def encode(self) -> bytes:
        return encode_json({"version": self.version, "id": self.id})

    @classmethod
    def decode(cls, data: bytes) -> ClusterIdZNode:
        obj = _decode_json(data, CLUSTER_ID_PATH)
        return cls(str(_field(obj, "id", CLUSTER_ID_PATH)), str(obj.get("version", "1")))


@dataclass(frozen=True, slots=True)
class ProducerIdBlockZNode:
    """``/latest_producer_id_block``: the last allocated block of producer ids, version 1.

    ``{"version":1,"broker":1,"block_start":"0","block_end":"999"}`` (bounds inclusive, as
    strings). Allocation is a conditional update on the znode version, so ids never repeat.
    """

    broker: int
    block_start: int
    block_end: int
    version: int = 1

    PATH: ClassVar[str] = PRODUCER_ID_BLOCK_PATH

    def path(self) -> str:
        return PRODUCER_ID_BLOCK_PATH

    @property
    def next_block_start(self) -> int:
        return self.block_end + 1

    def encode(self) -> bytes:
        return encode_json(
            {
                "version": self.version,
                "broker": self.broker,
                "block_start": str(self.block_start),
                "block_end": str(self.block_end),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlockZNode:
        p = PRODUCER_ID_BLOCK_PATH
        obj = _decode_json(data, p)
        return cls(
            broker=_int(_field(obj, "broker", p), "broker", p),
            block_start=_int(_field(obj, "block_start", p), "block_start", p),
            block_end=_int(_field(obj, "block_end", p), "block_end", p),
            version=_int(obj.get("version", 1), "version", p),
        )


def sequence_number(name: str, prefix: str) -> str:
    """The sequence suffix of a sequential znode name (``config_change_0000000007`` -> ``...7``)."""
    base = name.rsplit("/", 1)[-1]
    return base[len(prefix) :] if base.startswith(prefix) else base


__all__ = [
    "BROKER_IDS_PATH",
    "BROKER_SEQID_PATH",
    "BROKER_TOPICS_PATH",
    "CLUSTER_ID_PATH",
    "CONFIG_CHANGES_PATH",
    "CONFIG_TOPICS_PATH",
    "CONTROLLER_EPOCH_PATH",
    "CONTROLLER_PATH",
    "DELETE_TOPICS_PATH",
    "ISR_CHANGE_NOTIFICATION_PATH",
    "NO_LEADER",
    "PERSISTENT_PATHS",
    "PREFERRED_REPLICA_ELECTION_PATH",
    "PRODUCER_ID_BLOCK_PATH",
    "REASSIGN_PARTITIONS_PATH",
    "BrokerIdZNode",
    "BrokerRegistration",
    "ClusterIdZNode",
    "ConfigChangeNotificationZNode",
    "ControllerEpochZNode",
    "ControllerZNode",
    "DeleteTopicZNode",
    "Endpoint",
    "IsrChangeNotificationZNode",
    "PartitionState",
    "PreferredReplicaElectionZNode",
    "ProducerIdBlockZNode",
    "ReassignPartitionsZNode",
    "TopicConfigZNode",
    "TopicPartitionStateZNode",
    "TopicZNode",
    "ZNodeDecodeError",
    "encode_json",
    "kafka_str_to_uuid",
    "now_ms_str",
    "random_cluster_id",
    "random_kafka_uuid",
    "sequence_number",
    "uuid_to_kafka_str",
]
