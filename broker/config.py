"""Broker and topic configuration with Kafka's property names, defaults and validation.

Two tables drive everything here:

* ``BROKER_CONFIGS``: the broker properties (``server.properties``) Millrace understands, with
  Kafka's defaults. Unknown names and invalid values raise :class:`ConfigError` naming the
  property, so a typo fails start-up instead of being silently ignored. A short list of Kafka
  properties that have no meaning here (thread pool sizes, socket buffer sizes) is accepted
  and ignored, so a Kafka ``server.properties`` can be reused.
* ``TOPIC_CONFIGS``: the topic-level configs (stored under ``/config/topics/<topic>``), each
  with the broker property that supplies its default (``segment.bytes`` <- ``log.segment.bytes``).

Concurrency: every value here is immutable; a config change builds a new object.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

LONG_MAX = 9_223_372_036_854_775_807


class ConfigError(ValueError):
    """An unknown property or an invalid value; the message names the property."""


class ConfigType(Enum):
    """Kafka's DescribeConfigs ``config_type`` values."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One property: its name, type, default (already parsed), validator and documentation."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Callable[[Any], bool] | None = None
    valid_text: str = ""

    def parse(self, raw: object) -> Any:
        """Parse a raw (usually string) value; raise ConfigError naming the property."""
        try:
            value = _parse_typed(self.type, raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {self.name}: expected "
                f"{self.type.name.lower()}"
            ) from exc
        if self.validator is not None and value is not None and not self.validator(value):
            hint = f" ({self.valid_text})" if self.valid_text else ""
            raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}{hint}")
        return value


def _parse_typed(kind: ConfigType, raw: object) -> Any:
    if raw is None:
        return None
    if kind is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise ValueError(raw)
    if kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        if isinstance(raw, bool):
            raise ValueError(raw)
        value = int(str(raw).strip())
        limit = {ConfigType.INT: 2**31, ConfigType.SHORT: 2**15, ConfigType.LONG: 2**63}[kind]
        if not -limit <= value < limit:
            raise ValueError(raw)
        return value
    if kind is ConfigType.DOUBLE:
        return float(str(raw).strip())
    if kind is ConfigType.LIST:
        if isinstance(raw, list | tuple):
            return tuple(str(x) for x in raw)
        return tuple(p.strip() for p in str(raw).split(",") if p.strip())
    return str(raw).strip()


def _at_least(n: int) -> Callable[[Any], bool]:
    return lambda v: v >= n


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


def _policies(v: tuple[str, ...]) -> bool:
    return len(v) > 0 and all(p in ("delete", "compact") for p in v)


# --- topic-level configs -----------------------------------------------------------------

_T = ConfigType
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef(
            "cleanup.policy",
            _T.LIST,
            ("delete",),
            "delete and/or compact",
            _policies,
            "a list of delete, compact",
        ),
        ConfigDef(
            "compression.type",
            _T.STRING,
            "producer",
            "final compression of the topic",
            _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            "one of producer, uncompressed, gzip, snappy, lz4, zstd",
        ),
        ConfigDef(
            "delete.retention.ms", _T.LONG, 86_400_000, "tombstone retention", _at_least(0), ">= 0"
        ),
        ConfigDef(
            "file.delete.delay.ms",
            _T.LONG,
            60_000,
            "delay before deleting a file",
            _at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "flush.messages",
            _T.LONG,
            LONG_MAX,
            "fsync after this many messages",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef("flush.ms", _T.LONG, LONG_MAX, "fsync after this many ms", _at_least(0), ">= 0"),
        ConfigDef(
            "index.interval.bytes",
            _T.INT,
            4096,
            "bytes between offset index entries",
            _at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "max.compaction.lag.ms",
            _T.LONG,
            LONG_MAX,
            "max time a record stays uncompacted",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "max.message.bytes",
            _T.INT,
            1_048_588,
            "largest record batch size",
            _at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "message.timestamp.type",
            _T.STRING,
            "CreateTime",
            "CreateTime or LogAppendTime",
            _one_of("CreateTime", "LogAppendTime"),
            "CreateTime or LogAppendTime",
        ),
        ConfigDef(
            "message.timestamp.before.max.ms",
            _T.LONG,
            LONG_MAX,
            "max timestamp lag behind the broker",
            _at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "message.timestamp.after.max.ms",
            _T.LONG,
            LONG_MAX,
            "max timestamp lead ahead of the broker",
            _at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "min.cleanable.dirty.ratio",
            _T.DOUBLE,
            0.5,
            "dirty ratio to clean",
            lambda v: 0.0 <= v <= 1.0,
            "between 0 and 1",
        ),
        ConfigDef(
            "min.compaction.lag.ms",
            _T.LONG,
            0,
            "min time a record stays uncompacted",
            _at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "min.insync.replicas",
            _T.INT,
            1,
            "replicas that must ack acks=all",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef("preallocate", _T.BOOLEAN, False, "preallocate segment files"),
        ConfigDef(
            "retention.bytes",
            _T.LONG,
            -1,
            "max partition size before deleting old segments, -1 for no limit",
        ),
        ConfigDef(
            "retention.ms",
            _T.LONG,
            604_800_000,
            "max age of a segment, -1 for no limit",
            _at_least(-1),
            ">= -1",
        ),
        ConfigDef(
            "segment.bytes", _T.INT, 1_073_741_824, "segment file size", _at_least(14), ">= 14"
        ),
        ConfigDef(
            "segment.index.bytes", _T.INT, 10_485_760, "offset index size", _at_least(8), ">= 8"
        ),
        ConfigDef(
            "segment.jitter.ms", _T.LONG, 0, "random jitter for segment.ms", _at_least(0), ">= 0"
        ),
        ConfigDef(
            "segment.ms",
            _T.LONG,
            604_800_000,
            "roll a segment after this age",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef("unclean.leader.election.enable", _T.BOOLEAN, False, "allow out-of-ISR leaders"),
    )
}

# topic config -> the broker property that supplies its default
TOPIC_CONFIG_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The effective configuration of one partition's log (topic overrides over broker
    defaults). Attribute names are the topic config names with dots as underscores."""

    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_index_bytes: int = 10_485_760
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    unclean_leader_election_enable: bool = False

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def value_of(self, topic_config_name: str) -> Any:
        return getattr(self, topic_config_name.replace(".", "_"))

    def with_overrides(self, overrides: Mapping[str, object]) -> LogConfig:
        """Apply topic-level overrides (raw strings), validating each."""
        return dataclasses.replace(self, **parse_topic_overrides(overrides))


def parse_topic_overrides(overrides: Mapping[str, object]) -> dict[str, Any]:
    """Validate topic configs; return them keyed by LogConfig attribute name."""
    out: dict[str, Any] = {}
    for name, raw in overrides.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise ConfigError(f"Unknown topic configuration {name}")
        out[name.replace(".", "_")] = definition.parse(raw)
    return out


def format_config_value(value: Any) -> str:
    """Render a parsed value the way Kafka prints it in DescribeConfigs."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


# --- broker configs ----------------------------------------------------------------------

BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef(
            "broker.id",
            _T.INT,
            -1,
            "broker id; -1 to generate from /brokers/seqid",
            _at_least(-1),
            ">= -1",
        ),
        ConfigDef("broker.id.generation.enable", _T.BOOLEAN, True, "generate broker ids"),
        ConfigDef(
            "reserved.broker.max.id",
            _T.INT,
            1000,
            "largest configurable broker id",
            _at_least(0),
            ">= 0",
        ),
        ConfigDef("broker.rack", _T.STRING, None, "rack of this broker"),
        ConfigDef("listeners", _T.LIST, ("PLAINTEXT://127.0.0.1:9092",), "listeners"),
        ConfigDef("advertised.listeners", _T.LIST, None, "listeners given to clients"),
        ConfigDef("log.dirs", _T.LIST, None, "log directories"),
        ConfigDef("log.dir", _T.STRING, "/tmp/kafka-logs", "log directory if log.dirs unset"),
        ConfigDef("zookeeper.connect", _T.STRING, "127.0.0.1:2181", "ZooKeeper connect string"),
        ConfigDef(
            "zookeeper.session.timeout.ms",
            _T.INT,
            18_000,
            "ZooKeeper session timeout",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "zookeeper.connection.timeout.ms",
            _T.INT,
            18_000,
            "ZooKeeper connect timeout",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "num.partitions", _T.INT, 1, "partitions of auto-created topics", _at_least(1), ">= 1"
        ),
        ConfigDef(
            "default.replication.factor",
            _T.INT,
            1,
            "replication factor of auto-created topics",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "auto.create.topics.enable", _T.BOOLEAN, True, "auto-create topics on metadata requests"
        ),
        ConfigDef("delete.topic.enable", _T.BOOLEAN, True, "allow topic deletion"),
        ConfigDef(
            "socket.request.max.bytes", _T.INT, 104_857_600, "largest request", _at_least(1), ">= 1"
        ),
        ConfigDef(
            "connections.max.idle.ms",
            _T.LONG,
            600_000,
            "close idle connections after this",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "queued.max.requests",
            _T.INT,
            500,
            "requests read ahead per connection before reading pauses",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef("log.roll.ms", _T.LONG, None, "roll segments after this age"),
        ConfigDef(
            "log.roll.hours", _T.INT, 168, "roll segments after this age", _at_least(1), ">= 1"
        ),
        ConfigDef("log.retention.ms", _T.LONG, None, "retention time"),
        ConfigDef("log.retention.minutes", _T.INT, None, "retention time"),
        ConfigDef("log.retention.hours", _T.INT, 168, "retention time"),
        ConfigDef(
            "log.retention.check.interval.ms",
            _T.LONG,
            300_000,
            "retention check interval",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef("log.cleaner.enable", _T.BOOLEAN, True, "run the log cleaner"),
        ConfigDef(
            "log.flush.scheduler.interval.ms",
            _T.LONG,
            1000,
            "flush check interval",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "log.flush.offset.checkpoint.interval.ms",
            _T.INT,
            60_000,
            "recovery point checkpoint interval",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "log.flush.start.offset.checkpoint.interval.ms",
            _T.INT,
            60_000,
            "log start offset checkpoint interval",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef("replica.lag.time.max.ms", _T.LONG, 30_000, "ISR lag time", _at_least(1), ">= 1"),
        ConfigDef("replica.fetch.wait.max.ms", _T.INT, 500, "follower fetch max wait"),
        ConfigDef("replica.fetch.max.bytes", _T.INT, 1_048_576, "follower fetch size"),
        ConfigDef("replica.fetch.min.bytes", _T.INT, 1, "follower fetch min bytes"),
        ConfigDef("replica.socket.timeout.ms", _T.INT, 30_000, "follower socket timeout"),
        ConfigDef(
            "replica.fetch.response.max.bytes", _T.INT, 10_485_760, "follower fetch response size"
        ),
        ConfigDef("replica.fetch.backoff.ms", _T.INT, 1000, "follower fetch error backoff"),
        ConfigDef(
            "request.timeout.ms",
            _T.INT,
            30_000,
            "how long a coordinator waits for its acks=all writes (and inter-broker requests)",
        ),
        ConfigDef(
            "controller.socket.timeout.ms", _T.INT, 30_000, "controller-to-broker request timeout"
        ),
        ConfigDef("controlled.shutdown.enable", _T.BOOLEAN, True, "controlled shutdown"),
        ConfigDef("controlled.shutdown.max.retries", _T.INT, 3, "controlled shutdown retries"),
        ConfigDef("controlled.shutdown.retry.backoff.ms", _T.LONG, 5000, "retry backoff"),
        ConfigDef("auto.leader.rebalance.enable", _T.BOOLEAN, True, "auto leader rebalance"),
        ConfigDef("leader.imbalance.per.broker.percentage", _T.INT, 10, "imbalance ratio"),
        ConfigDef("leader.imbalance.check.interval.seconds", _T.LONG, 300, "check interval"),
        ConfigDef(
            "offsets.topic.num.partitions",
            _T.INT,
            50,
            "__consumer_offsets partitions",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "offsets.topic.replication.factor",
            _T.SHORT,
            3,
            "__consumer_offsets replication factor",
            _at_least(1),
            ">= 1",
        ),
        ConfigDef("offsets.topic.segment.bytes", _T.INT, 104_857_600, "segment size"),
        ConfigDef("offsets.retention.minutes", _T.INT, 10_080, "offset retention"),
        ConfigDef(
            "offsets.retention.check.interval.ms", _T.LONG, 600_000, "offset expiry check interval"
        ),
        ConfigDef("offsets.commit.timeout.ms", _T.INT, 5000, "commit timeout"),
        ConfigDef("offset.metadata.max.bytes", _T.INT, 4096, "offset commit metadata size"),
        ConfigDef("group.initial.rebalance.delay.ms", _T.INT, 3000, "initial rebalance delay"),
        ConfigDef("group.min.session.timeout.ms", _T.INT, 6000, "min session timeout"),
        ConfigDef("group.max.session.timeout.ms", _T.INT, 1_800_000, "max session timeout"),
        ConfigDef("transaction.state.log.num.partitions", _T.INT, 50, "txn log partitions"),
        ConfigDef("transaction.state.log.replication.factor", _T.SHORT, 3, "txn log RF"),
        ConfigDef("transaction.state.log.min.isr", _T.INT, 2, "txn log min ISR"),
        ConfigDef("transaction.state.log.segment.bytes", _T.INT, 104_857_600, "segment size"),
        ConfigDef("transactional.id.expiration.ms", _T.INT, 604_800_000, "txn id expiry"),
        ConfigDef("transaction.max.timeout.ms", _T.INT, 900_000, "max txn timeout"),
        ConfigDef(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            _T.INT,
            10_000,
            "how often timed-out transactions are looked for and aborted",
        ),
        ConfigDef(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            _T.INT,
            3_600_000,
            "how often idle transactional ids are expired",
        ),
        ConfigDef(
            "transaction.partition.verification.enable",
            _T.BOOLEAN,
            True,
            "leaders verify with the coordinator that a partition is in the transaction",
        ),
        ConfigDef(
            "transaction.state.log.load.buffer.size",
            _T.INT,
            5_242_880,
            "read size when a coordinator loads __transaction_state",
        ),
        ConfigDef("producer.id.expiration.ms", _T.INT, 86_400_000, "idle producer expiry"),
        ConfigDef("fetch.max.bytes", _T.INT, 57_671_680, "max fetch response size"),
        ConfigDef(
            "max.incremental.fetch.session.cache.slots",
            _T.INT,
            1000,
            "fetch session slots",
            _at_least(0),
            ">= 0",
        ),
    )
}

# The broker properties that supply topic-config defaults share the topic config's type,
# default and validation (``log.segment.bytes`` is ``segment.bytes``'s definition renamed).
# ``log.retention.ms`` and ``log.roll.ms`` are defined above: unset by default, with the
# ``*.minutes``/``*.hours`` fallbacks Kafka has.
BROKER_CONFIGS.update(
    {
        synonym: dataclasses.replace(TOPIC_CONFIGS[topic_name], name=synonym)
        for topic_name, synonym in TOPIC_CONFIG_SYNONYMS.items()
        if synonym not in BROKER_CONFIGS
    }
)

# Kafka properties accepted for compatibility that have no effect in Millrace.
IGNORED_BROKER_CONFIGS = frozenset(
    {
        "num.network.threads",
        "num.io.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "background.threads",
        "log.cleaner.threads",
        "group.coordinator.rebalance.protocols",
        "listener.security.protocol.map",
        "inter.broker.listener.name",
        "security.inter.broker.protocol",
        "inter.broker.protocol.version",
    }
)


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``PLAINTEXT://host:port`` listener."""

    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str, prop: str = "listeners") -> Listener:
        try:
            name, rest = text.split("://", 1)
            host, port = rest.rsplit(":", 1)
            return cls(name.upper(), host.strip("[]") or "0.0.0.0", int(port))
        except ValueError as exc:
            raise ConfigError(
                f"Invalid value {text!r} for configuration {prop}: expected NAME://host:port"
            ) from exc

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


class BrokerConfig:
    """A broker's validated configuration. ``values`` holds every known property, parsed;
    ``originals`` holds what the user set."""

    def __init__(self, props: Mapping[str, object]) -> None:
        values: dict[str, Any] = {name: d.default for name, d in BROKER_CONFIGS.items()}
        originals: dict[str, Any] = {}
        for name, raw in props.items():
            if name in IGNORED_BROKER_CONFIGS:
                continue
            definition = BROKER_CONFIGS.get(name)
            if definition is None:
                raise ConfigError(f"Unknown broker configuration {name}")
            values[name] = definition.parse(raw)
            originals[name] = values[name]
        self.values = values
        self.originals = originals
        listeners = [Listener.parse(x) for x in values["listeners"]]
        if not listeners:
            raise ConfigError("Invalid value for configuration listeners: empty")
        self.listeners = listeners
        adv = values["advertised.listeners"]
        self.advertised_listeners = (
            [Listener.parse(x, "advertised.listeners") for x in adv] if adv else listeners
        )
        dirs = values["log.dirs"] or (values["log.dir"],)
        self.log_dirs = [Path(d) for d in dirs]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def broker_id(self) -> int:
        return int(self.values["broker.id"])

    @property
    def retention_ms(self) -> int:
        v = self.values
        if v["log.retention.ms"] is not None:
            return int(v["log.retention.ms"])
        if v["log.retention.minutes"] is not None:
            return int(v["log.retention.minutes"]) * 60_000
        return int(v["log.retention.hours"]) * 3_600_000

    @property
    def roll_ms(self) -> int:
        v = self.values
        if v["log.roll.ms"] is not None:
            return int(v["log.roll.ms"])
        return int(v["log.roll.hours"]) * 3_600_000

    def broker_value_for_topic_config(self, topic_config: str) -> Any:
        """The broker-level default of a topic config, honouring Kafka's synonyms."""
        if topic_config == "retention.ms":
            return self.retention_ms
        if topic_config == "segment.ms":
            return self.roll_ms
        return self.values[TOPIC_CONFIG_SYNONYMS[topic_config]]

    def default_log_config(self) -> LogConfig:
        """The LogConfig a topic without overrides gets on this broker."""
        kwargs = {
            name.replace(".", "_"): self.broker_value_for_topic_config(name)
            for name in TOPIC_CONFIGS
        }
        return LogConfig(**kwargs)

    def topic_config_source(self, topic_config: str) -> str:
        """'static' when the broker sets the synonym, 'default' otherwise."""
        synonym = TOPIC_CONFIG_SYNONYMS[topic_config]
        if (
            synonym in self.originals
            or (
                topic_config == "retention.ms"
                and any(
                    k in self.originals for k in ("log.retention.minutes", "log.retention.hours")
                )
            )
            or (topic_config == "segment.ms" and "log.roll.hours" in self.originals)
        ):
            return "static"
        return "default"


def read_properties(path: Path) -> dict[str, str]:
    """Read a Java ``.properties`` file (``key=value``, ``#``/``!`` comments, ``\\``
    continuations)."""
    props: dict[str, str] = {}
    pending = ""
    for raw_line in path.read_text().splitlines():
        line = raw_line.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        for sep_index, ch in enumerate(line):
            if ch in "=:":
                key, value = line[:sep_index], line[sep_index + 1 :]
                break
        else:
            key, value = line, ""
        props[key.strip()] = value.strip()
    return props


def parse_set_options(items: list[str] | None) -> dict[str, str]:
    """Parse repeated ``--set key=value`` options."""
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out
