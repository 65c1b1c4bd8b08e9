"""The znodes of the cluster's membership and coordination: broker registrations
(``/brokers/ids/<id>``), the controller (``/controller``, ``/controller_epoch``), the cluster id,
the producer-id blocks and the brokers' log-dir event notifications. Format and conventions as described in :mod:`broker.zk.znodes`.

Concurrency: values are immutable; functions are pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from broker.zk.znodes.common import (
    BROKER_IDS_PATH,
    CLUSTER_ID_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    PRODUCER_ID_BLOCK_PATH,
    ZNodeDecodeError,
    decode_json,
    encode_json,
    get_field,
    int_field,
    now_ms_str,
)

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
        obj = decode_json(data, path)
        version = int_field(get_field(obj, "version", path), "version", path)
        host = obj.get("host")
        port = int_field(obj.get("port", -1), "port", path)
        if version < 1:
            raise ZNodeDecodeError(f"znode {path}: unsupported registration version {version}")
        if version == 1:
            endpoints: tuple[str, ...] = (Endpoint("PLAINTEXT", str(host), port).connection_string,)
            protocols: dict[str, str] = {"PLAINTEXT": "PLAINTEXT"}
        else:
            raw = get_field(obj, "endpoints", path)
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
                jmx_port=int_field(obj.get("jmx_port", -1), "jmx_port", path),
                timestamp=str(obj.get("timestamp", "")),
                features=features if isinstance(features, dict) else {},
                version=version,
            )
        except ValueError as exc:  # a malformed endpoint
            raise ZNodeDecodeError(f"znode {path}: {exc}") from None


BrokerRegistration = BrokerIdZNode
"""Alias: the registration a broker writes at ``/brokers/ids/<id>``."""


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
        obj = decode_json(data, CONTROLLER_PATH)
        p = CONTROLLER_PATH
        return cls(
            broker_id=int_field(get_field(obj, "brokerid", p), "brokerid", p),
            timestamp=str(obj.get("timestamp", "")),
            kraft_controller_epoch=int_field(
                obj.get("kraftControllerEpoch", -1), "kraftControllerEpoch", p
            ),
            version=int_field(obj.get("version", 1), "version", p),
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
        obj = decode_json(data, CLUSTER_ID_PATH)
        return cls(str(get_field(obj, "id", CLUSTER_ID_PATH)), str(obj.get("version", "1")))


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
        obj = decode_json(data, p)
        return cls(
            broker=int_field(get_field(obj, "broker", p), "broker", p),
            block_start=int_field(get_field(obj, "block_start", p), "block_start", p),
            block_end=int_field(get_field(obj, "block_end", p), "block_end", p),
            version=int_field(obj.get("version", 1), "version", p),
        )


# --------------------------------------------------------------------------- log dir events


@dataclass(frozen=True, slots=True)
class LogDirEventNotificationZNode:
    """``/log_dir_event_notification/log_dir_event_<seq>`` (persistent sequential), JSON
    version 1 (KIP-112, Kafka's ``LogDirEventNotificationSequenceZNode``).

    ``{"version":1,"broker":<id>,"event":1}``: a log directory of broker ``broker`` failed
    (``event`` 1 is ``LogDirFailureEvent``, the only kind); the controller sends the broker
    LeaderAndIsr for all its replicas to learn which are offline, then deletes the znode.
    """

    broker: int
    event: int = 1
    version: int = 1

    PREFIX: ClassVar[str] = "log_dir_event_"
    LOG_DIR_FAILURE_EVENT: ClassVar[int] = 1

    @classmethod
    def create_path(cls) -> str:
        return f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{cls.PREFIX}"

    @classmethod
    def path(cls, sequence: str | int) -> str:
        seq = f"{sequence:010d}" if isinstance(sequence, int) else sequence
        return f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{cls.PREFIX}{seq}"

    def encode(self) -> bytes:
        return encode_json({"version": self.version, "broker": self.broker, "event": self.event})

    @classmethod
    def decode(cls, data: bytes) -> LogDirEventNotificationZNode:
        p = LOG_DIR_EVENT_NOTIFICATION_PATH
        obj = decode_json(data, p)
        return cls(
            int_field(get_field(obj, "broker", p), "broker", p),
            int_field(obj.get("event", 1), "event", p),
            int_field(obj.get("version", 1), "version", p),
        )
