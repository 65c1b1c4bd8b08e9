"""Broker configuration with Kafka's property names, defaults and validation.

``BROKER_CONFIGS`` holds the broker properties (``server.properties``) Millrace understands,
with Kafka's defaults; the properties that supply topic-config defaults
(``TOPIC_CONFIG_SYNONYMS`` of :mod:`broker.topic_config`) share their topic config's
definition. Unknown names and invalid values raise :class:`~broker.config_def.ConfigError`
naming the property, so a typo fails start-up instead of being silently ignored. A short list
of Kafka properties that have no meaning here (thread pool sizes, socket buffer sizes) is
accepted and ignored, so a Kafka ``server.properties`` can be reused.

Also here: reading a ``.properties`` file and ``--set key=value`` options.

Concurrency: every value here is immutable; a config change builds a new object.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.config_def import ConfigDef, ConfigError, ConfigType, at_least
from broker.protocol import inter_broker_protocol as ibp
from broker.security.security_configs import SECURITY_CONFIGS, listener_override_name
from broker.topic_config import TOPIC_CONFIG_SYNONYMS, TOPIC_CONFIGS, LogConfig

__all__ = [
    "BROKER_CONFIGS",
    "IGNORED_BROKER_CONFIGS",
    "BrokerConfig",
    "Listener",
    "check_listeners",
    "parse_metrics_listener",
    "parse_set_options",
    "read_properties",
]

_T = ConfigType


def _valid_ibp(value: object) -> bool:
    try:
        ibp.parse_ibp(str(value))
    except ValueError:
        return False
    return True


def parse_metrics_listener(text: str) -> tuple[str, int] | None:
    """``metrics.http.listener``'s (host, port) from ``http://host:port`` (an IPv6 host in
    brackets); None for an empty or malformed value."""
    scheme, sep, rest = str(text).strip().partition("://")
    if not sep or scheme.lower() != "http" or "/" in rest:
        return None
    host, _, port_text = rest.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        return None
    return host, int(port_text)


BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef(
            "broker.id",
            _T.INT,
            -1,
            "broker id; -1 to generate from /brokers/seqid",
            at_least(-1),
            ">= -1",
        ),
        ConfigDef("broker.id.generation.enable", _T.BOOLEAN, True, "generate broker ids"),
        ConfigDef(
            "reserved.broker.max.id",
            _T.INT,
            1000,
            "largest configurable broker id",
            at_least(0),
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
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "zookeeper.connection.timeout.ms",
            _T.INT,
            18_000,
            "ZooKeeper connect timeout",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "num.partitions", _T.INT, 1, "partitions of auto-created topics", at_least(1), ">= 1"
        ),
        ConfigDef(
            "default.replication.factor",
            _T.INT,
            1,
            "replication factor of auto-created topics",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "auto.create.topics.enable", _T.BOOLEAN, True, "auto-create topics on metadata requests"
        ),
        ConfigDef("delete.topic.enable", _T.BOOLEAN, True, "allow topic deletion"),
        ConfigDef(
            "socket.request.max.bytes", _T.INT, 104_857_600, "largest request", at_least(1), ">= 1"
        ),
        ConfigDef(
            "connections.max.idle.ms",
            _T.LONG,
            600_000,
            "close idle connections after this",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "queued.max.requests",
            _T.INT,
            500,
            "requests read ahead per connection before reading pauses",
            at_least(1),
            ">= 1",
        ),
        ConfigDef("log.roll.ms", _T.LONG, None, "roll segments after this age"),
        ConfigDef(
            "log.roll.hours", _T.INT, 168, "roll segments after this age", at_least(1), ">= 1"
        ),
        ConfigDef("log.retention.ms", _T.LONG, None, "retention time"),
        ConfigDef("log.retention.minutes", _T.INT, None, "retention time"),
        ConfigDef("log.retention.hours", _T.INT, 168, "retention time"),
        ConfigDef(
            "log.retention.check.interval.ms",
            _T.LONG,
            300_000,
            "retention check interval",
            at_least(1),
            ">= 1",
        ),
        ConfigDef("log.cleaner.enable", _T.BOOLEAN, True, "run the log cleaner"),
        ConfigDef(
            "log.cleaner.threads",
            _T.INT,
            1,
            "log cleaner tasks (worker processes)",
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "log.cleaner.dedupe.buffer.size",
            _T.LONG,
            134_217_728,
            "offset-map memory of all cleaner threads (Kafka's 24-byte entries)",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "log.cleaner.io.buffer.size",
            _T.INT,
            524_288,
            "read and write window of the cleaner",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "log.cleaner.io.buffer.load.factor",
            _T.DOUBLE,
            0.9,
            "how full the offset map may get",
            lambda v: 0.0 < v <= 1.0,
            "in (0, 1]",
        ),
        ConfigDef(
            "log.cleaner.io.max.bytes.per.second",
            _T.DOUBLE,
            1.7976931348623157e308,
            "cleaner read + write rate limit",
            lambda v: v > 0,
            "> 0",
        ),
        ConfigDef(
            "log.cleaner.backoff.ms",
            _T.LONG,
            15_000,
            "sleep when no log needs cleaning",
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "log.flush.scheduler.interval.ms",
            _T.LONG,
            1000,
            "flush check interval",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "log.flush.offset.checkpoint.interval.ms",
            _T.INT,
            60_000,
            "recovery point checkpoint interval",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "log.flush.start.offset.checkpoint.interval.ms",
            _T.INT,
            60_000,
            "log start offset checkpoint interval",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "max.incremental.fetch.session.cache.slots",
            _T.INT,
            1000,
            "fetch sessions (KIP-227) the broker keeps",
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "min.incremental.fetch.session.eviction.ms",
            _T.INT,
            120_000,
            "age before a fetch session may be evicted",
            at_least(0),
            ">= 0",
        ),
        ConfigDef("replica.lag.time.max.ms", _T.LONG, 30_000, "ISR lag time", at_least(1), ">= 1"),
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
        ConfigDef(
            "inter.broker.protocol.version",
            _T.STRING,
            str(ibp.DEFAULT),
            "the inter-broker protocol of a mixed or upgrading cluster (Kafka's metadata "
            "versions; broker/protocol/inter_broker_protocol.py)",
            _valid_ibp,
            f"one of Kafka 3.9's versions, {ibp.IBP_VERSIONS[0]} .. {ibp.IBP_VERSIONS[-1]}",
        ),
        ConfigDef(
            "millrace.broker.failure.detection.enable",
            _T.BOOLEAN,
            True,
            "fail a dead broker process over before its ZooKeeper session expires "
            "(docs/failover.md)",
        ),
        ConfigDef(
            "metrics.http.listener",
            _T.STRING,
            "",
            "where the broker serves its Prometheus metrics, http://host:port (port 0: any "
            "free port); empty: no endpoint and no metrics recorded (docs/metrics.md)",
            lambda v: parse_metrics_listener(v) is not None or not v,
            "expected http://host:port with a port from 0 to 65535, or empty",
        ),
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
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "offsets.topic.replication.factor",
            _T.SHORT,
            3,
            "__consumer_offsets replication factor",
            at_least(1),
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
            "transaction.two.phase.commit.enable",
            _T.BOOLEAN,
            True,
            "InitProducerId may enable two-phase commit (KIP-939): the transaction then never "
            "times out (Kafka's default is false; Millrace's exactly-once Spark sink needs it)",
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
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "quota.window.num",
            _T.INT,
            11,
            "samples kept of a client quota's rate",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "quota.window.size.seconds",
            _T.INT,
            1,
            "time span of each client quota sample",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "quota.producer.default",
            _T.LONG,
            2**63 - 1,
            "deprecated: produce bytes/s of a client id without a dynamic quota",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "quota.consumer.default",
            _T.LONG,
            2**63 - 1,
            "deprecated: fetch bytes/s of a client id without a dynamic quota",
            at_least(1),
            ">= 1",
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

BROKER_CONFIGS.update({d.name: d for d in SECURITY_CONFIGS})

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
        "group.coordinator.rebalance.protocols",
        "principal.builder.class",
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
            host, port_text = rest.rsplit(":", 1)
            port = int(port_text)
        except ValueError as exc:
            raise ConfigError(
                f"Invalid value {text!r} for configuration {prop}: expected NAME://host:port"
            ) from exc
        if not name.strip() or not 0 <= port <= 65535:
            raise ConfigError(
                f"Invalid value {text!r} for configuration {prop}: expected NAME://host:port "
                "with a listener name and a port from 0 to 65535"
            )
        return cls(name.strip().upper(), host.strip("[]") or "0.0.0.0", port)

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


_UNROUTABLE_HOSTS = frozenset({"0.0.0.0", "::"})


def check_listeners(
    listeners: list[Listener],
    advertised: list[Listener],
    *,
    advertised_set: bool,
    protocol_map: tuple[str, ...],
) -> None:
    """Kafka's start-up checks of ``listeners`` and ``advertised.listeners``
    (``KafkaConfig``'s validation), each failing with a one-line :class:`ConfigError` naming
    the setting:

    * every listener has its own name, in ``listeners`` and in ``advertised.listeners``;
    * every listener has its own port, except one IPv4 and one IPv6 address sharing a port;
    * the names of ``advertised.listeners`` are among those of ``listeners``;
    * every listener name has a security protocol in ``listener.security.protocol.map``
      (which maps each protocol's own name by default);
    * no advertised address is the wildcard ``0.0.0.0`` or ``::`` (a client cannot connect
      to it): a broker binding to every interface names its own address in
      ``advertised.listeners``.
    """
    _check_distinct_names("listeners", listeners)
    if advertised_set:
        _check_distinct_names("advertised.listeners", advertised)
    _check_distinct_ports(listeners)
    names = [x.name for x in listeners]
    for item in advertised:
        if item.name not in names:
            raise ConfigError(
                f"Invalid value for configuration advertised.listeners: listener {item.name} "
                f"({item}) is not in listeners (listener names there: {', '.join(names)})"
            )
    mapped = {entry.partition(":")[0].strip().upper() for entry in protocol_map}
    for item in listeners:
        if item.name not in mapped:
            raise ConfigError(
                f"Invalid value for configuration listener.security.protocol.map: listener "
                f"{item.name} of listeners has no security protocol (add "
                f"{item.name}:PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL to "
                f"listener.security.protocol.map)"
            )
    for item in advertised:
        if item.host in _UNROUTABLE_HOSTS:
            prop = "advertised.listeners" if advertised_set else "listeners"
            why = "" if advertised_set else " (advertised.listeners is unset: listeners is)"
            raise ConfigError(
                f"Invalid value for configuration {prop}: {item} is advertised to clients, "
                f"who cannot connect to the wildcard address {item.host}{why}; set "
                "advertised.listeners to this host's own name or address"
            )


def _check_distinct_names(prop: str, items: list[Listener]) -> None:
    seen: dict[str, Listener] = {}
    for item in items:
        if item.name in seen:
            raise ConfigError(
                f"Invalid value for configuration {prop}: listener name {item.name} is used "
                f"twice ({seen[item.name]} and {item}); each listener needs a name of its own"
            )
        seen[item.name] = item


def _check_distinct_ports(listeners: list[Listener]) -> None:
    """Port 0 (any free port) may repeat; so may a port shared by an IPv4 and an IPv6
    address, as Kafka allows."""
    by_port: dict[int, Listener] = {}
    for item in listeners:
        other = by_port.get(item.port)
        if other is not None and item.port != 0 and not _one_v4_one_v6(other.host, item.host):
            raise ConfigError(
                f"Invalid value for configuration listeners: {other} and {item} use the same "
                f"port {item.port}; each listener needs a port of its own"
            )
        by_port[item.port] = item


def _advertised(items: tuple[str, ...], prop: str = "listeners") -> list[Listener]:
    """The listeners given to clients: as written, except that a listener without a host
    (``PLAINTEXT://:9092``, bound to every interface) is advertised with this machine's fully
    qualified name, as Kafka advertises its canonical host name."""
    out = []
    for text in items:
        listener = Listener.parse(text, prop)
        if not text.split("://", 1)[1].rsplit(":", 1)[0]:
            listener = dataclasses.replace(listener, host=socket.getfqdn())
        out.append(listener)
    return out


def _one_v4_one_v6(a: str, b: str) -> bool:
    """True if one of two listener hosts is an IPv4 address and the other an IPv6 one (Kafka
    lets such a pair share a port)."""
    try:
        versions = {ipaddress.ip_address(a).version, ipaddress.ip_address(b).version}
    except ValueError:
        return False
    return versions == {4, 6}


class BrokerConfig:
    """A broker's validated configuration. ``values`` holds every known property, parsed;
    ``originals`` holds what the user set."""

    def __init__(self, props: Mapping[str, object]) -> None:
        values: dict[str, Any] = {name: d.default for name, d in BROKER_CONFIGS.items()}
        originals: dict[str, Any] = {}
        self.listener_overrides: dict[str, dict[str, Any]] = {}
        for name, raw in props.items():
            if name in IGNORED_BROKER_CONFIGS:
                continue
            override = listener_override_name(name)
            if override is not None:
                listener, setting = override
                base = BROKER_CONFIGS.get(setting) or BROKER_CONFIGS["sasl.jaas.config"]
                value = dataclasses.replace(base, name=name).parse(raw)
                self.listener_overrides.setdefault(listener, {})[setting] = value
                originals[name] = value
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
            _advertised(adv, "advertised.listeners") if adv else _advertised(values["listeners"])
        )
        check_listeners(
            listeners,
            self.advertised_listeners,
            advertised_set=bool(adv),
            protocol_map=values["listener.security.protocol.map"],
        )
        dirs = values["log.dirs"] or (values["log.dir"],)
        self.log_dirs = [Path(d) for d in dirs]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def listener_value(self, listener: str, name: str) -> Any:
        """A setting as ``listener`` sees it: its ``listener.name.<listener>.<name>``
        override, else the broker-wide value (None for an unknown per-mechanism name)."""
        overrides = self.listener_overrides.get(listener.upper(), {})
        if name in overrides:
            return overrides[name]
        return self.values.get(name)

    @property
    def metrics_listener(self) -> tuple[str, int] | None:
        """(host, port) of ``metrics.http.listener``; None: no metrics endpoint."""
        return parse_metrics_listener(self.values["metrics.http.listener"] or "")

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
