"""The console's view of the cluster: brokers, controller, topics and partitions
(DescribeCluster, Metadata), log start/end offsets (ListOffsets), topic configs
(DescribeConfigs) and the topic changes of ``--allow-writes`` (CreateTopics, DeleteTopics,
IncrementalAlterConfigs), all through one confluent-kafka ``AdminClient``.

Every call has a time-out (``timeout_s``); a failure raises :class:`ConsoleError` with one
line naming what failed, which the app renders on the page.

Concurrency: librdkafka's AdminClient is thread-safe, so one :class:`ClusterSource` serves
every request thread of the app and the sampler thread at once; it keeps no other state.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.cli.client_settings import client_config
from broker.cli.common import CliError, kafka_error_text
from broker.types import TopicPartition

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

INTERNAL_PREFIX = "__"


class ConsoleError(Exception):
    """A failure to show on the page as one line."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One broker: registered (answers Metadata) or only named in ``cluster.json``."""

    broker_id: int
    host: str
    port: int
    rack: str | None
    controller: bool
    registered: bool
    metrics_url: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as Metadata reports it (``leader`` -1: offline)."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if p.under_replicated)

    @property
    def offline(self) -> int:
        return sum(1 for p in self.partitions if p.offline)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerInfo, ...]
    topics: tuple[TopicInfo, ...]

    @property
    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics)

    @property
    def under_replicated(self) -> int:
        return sum(t.under_replicated for t in self.topics)

    @property
    def offline(self) -> int:
        return sum(t.offline for t in self.topics)

    def topic(self, name: str) -> TopicInfo:
        for t in self.topics:
            if t.name == name:
                return t
        raise ConsoleError(f"topic '{name}' does not exist")


@dataclass(frozen=True, slots=True)
class ConfigRow:
    """One topic config entry; ``default``: at its default (not set on the topic or broker)."""

    name: str
    value: str
    source: str
    default: bool
    read_only: bool
    sensitive: bool


DESCRIBE_TIMEOUT_S = 3.0
"""At most this long for DescribeCluster before the page falls back on Metadata's brokers."""


def error_text(exc: object) -> str:
    """One line for any failure of a client call."""
    if isinstance(exc, ConsoleError | CliError):
        return str(exc)
    text = kafka_error_text(exc)
    return text or type(exc).__name__


def read_cluster_file(directory: str | None) -> dict[str, Any]:
    """``cluster.json`` of ``--dir`` (empty without ``--dir``)."""
    if not directory:
        return {}
    path = Path(directory) / "cluster.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise CliError(f"--dir {directory}: {path} not found (is the cluster up?)") from exc
    except (OSError, ValueError) as exc:
        raise CliError(f"--dir {directory}: cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise CliError(f"--dir {directory}: {path} is not a JSON object")
    return data


class ClusterSource:
    """The cluster calls of the console (see the module docstring)."""

    def __init__(self, args: argparse.Namespace, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        self.args = args
        self.timeout_s = timeout_s
        self.conf: dict[str, Any] = client_config(args)
        self.admin: AdminClient = AdminClient(dict(self.conf))

    def metrics_urls(self) -> dict[int, str]:
        """Broker id -> Prometheus URL, from ``cluster.json`` (read each time: ``cluster up``
        may have written it since)."""
        data = self._cluster_file()
        out: dict[int, str] = {}
        for b in data.get("brokers") or []:
            if isinstance(b, dict) and b.get("metrics_url") and "id" in b:
                out[int(b["id"])] = str(b["metrics_url"])
        return out

    def _cluster_file(self) -> dict[str, Any]:
        """``cluster.json`` now; {} when it is gone or unreadable (``cluster down`` since):
        the pages then show what the brokers answer, without metrics."""
        try:
            return read_cluster_file(getattr(self.args, "dir", None))
        except CliError:
            return {}

    def _known_brokers(self) -> list[dict[str, Any]]:
        data = self._cluster_file()
        return [b for b in data.get("brokers") or [] if isinstance(b, dict) and "id" in b]

    def consumer_config(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        conf = dict(self.conf)
        conf.update(
            {
                "group.id": "millrace-console",  # assign() only: never joined, never committed
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "socket.timeout.ms": int(self.timeout_s * 1000),
                "session.timeout.ms": 10_000,
            }
        )
        conf.update(extra)
        return conf

    # --- reads ------------------------------------------------------------------------------

    def _live_nodes(self, metadata: Any) -> tuple[str, int, list[tuple[int, str, int, str | None]]]:
        """(cluster id, controller id, [(id, host, port, rack)]) of the live brokers:
        DescribeCluster's answer (it has the racks), or, while no controller answers (an
        election under way), the Metadata response's brokers and controller."""
        from confluent_kafka import KafkaException

        try:
            described = self.admin.describe_cluster(
                request_timeout=min(self.timeout_s, DESCRIBE_TIMEOUT_S)
            ).result(timeout=min(self.timeout_s, DESCRIBE_TIMEOUT_S) + 1)
        except (KafkaException, TimeoutError):
            nodes: list[tuple[int, str, int, str | None]] = [
                (b.id, b.host, b.port, None) for b in metadata.brokers.values()
            ]
            return str(metadata.cluster_id or "-"), int(metadata.controller_id), nodes
        controller = described.controller.id if described.controller is not None else -1
        nodes = [(n.id, n.host, n.port, n.rack or None) for n in described.nodes]
        return str(described.cluster_id or "-"), controller, nodes

    def cluster(self) -> ClusterInfo:
        from confluent_kafka import KafkaException

        try:
            # Metadata first: it refreshes the client's idea of the controller, whom
            # librdkafka's DescribeCluster waits for (after the controller's process died, a
            # client that has not asked for metadata since would wait for the dead one).
            metadata = self.admin.list_topics(timeout=self.timeout_s)
        except (KafkaException, TimeoutError) as exc:
            raise ConsoleError(f"cannot describe the cluster: {error_text(exc)}") from exc
        cluster_id, controller, nodes = self._live_nodes(metadata)
        urls = self.metrics_urls()
        brokers = {
            bid: BrokerInfo(bid, host, port, rack, bid == controller, True, urls.get(bid))
            for bid, host, port, rack in nodes
        }
        for b in self._known_brokers():
            bid = int(b["id"])
            if bid not in brokers:
                brokers[bid] = BrokerInfo(
                    bid,
                    str(b.get("host", "?")),
                    int(b.get("port", 0)),
                    None,
                    False,
                    False,
                    urls.get(bid),
                )
        topics = []
        for name, t in sorted(metadata.topics.items()):
            if t.error is not None:
                continue
            parts = tuple(
                PartitionInfo(name, p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
                for p in sorted(t.partitions.values(), key=lambda p: p.id)
            )
            topics.append(TopicInfo(name, name.startswith(INTERNAL_PREFIX), parts))
        return ClusterInfo(
            cluster_id,
            controller,
            tuple(sorted(brokers.values(), key=lambda b: b.broker_id)),
            tuple(topics),
        )

    def offsets(
        self, partitions: Iterable[TopicPartition], which: str, *, committed_only: bool = False
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, str]]:
        """(offset per partition, error per partition) of ListOffsets ``which``
        (``earliest`` or ``latest``; ``committed_only``: the last stable offset)."""
        from confluent_kafka import IsolationLevel, KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition
        from confluent_kafka.admin import OffsetSpec

        spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
        request = {CkTopicPartition(tp.topic, tp.partition): spec for tp in set(partitions)}
        if not request:
            return {}, {}
        isolation = (
            IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
        )
        try:
            futures = self.admin.list_offsets(
                request, isolation_level=isolation, request_timeout=self.timeout_s
            )
        except KafkaException as exc:
            raise ConsoleError(f"cannot list offsets: {error_text(exc)}") from exc
        found: dict[TopicPartition, int] = {}
        errors: dict[TopicPartition, str] = {}
        for ck, future in futures.items():
            tp = TopicPartition(ck.topic, ck.partition)
            try:
                found[tp] = int(future.result(timeout=self.timeout_s + 1).offset)
            except (KafkaException, TimeoutError) as exc:
                errors[tp] = error_text(exc)
        return found, errors

    def topic_configs(self, topic: str) -> list[ConfigRow]:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

        resource = ConfigResource(ResourceType.TOPIC, topic)
        try:
            entries = (
                self.admin.describe_configs([resource], request_timeout=self.timeout_s)[resource]
                .result(timeout=self.timeout_s + 1)
                .values()
            )
        except (KafkaException, TimeoutError) as exc:
            raise ConsoleError(
                f"cannot describe the configs of topic '{topic}': {error_text(exc)}"
            ) from exc
        rows = []
        for e in entries:
            source = e.source if isinstance(e.source, ConfigSource) else ConfigSource(e.source)
            default = bool(e.is_default) or source == ConfigSource.DEFAULT_CONFIG
            rows.append(
                ConfigRow(
                    e.name,
                    "(sensitive)" if e.is_sensitive else ("" if e.value is None else e.value),
                    source.name,
                    default,
                    bool(e.is_read_only),
                    bool(e.is_sensitive),
                )
            )
        return sorted(rows, key=lambda r: r.name)

    # --- writes (only with --allow-writes; the app checks) ---------------------------------

    def create_topic(
        self, name: str, partitions: int, replication: int, configs: Mapping[str, str]
    ) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=replication, config=dict(configs)
        )
        try:
            self.admin.create_topics([topic], request_timeout=self.timeout_s)[name].result(
                timeout=self.timeout_s + 1
            )
        except (KafkaException, TimeoutError) as exc:
            raise ConsoleError(f"cannot create topic '{name}': {error_text(exc)}") from exc
        self._await_metadata(name, present=True)

    def delete_topic(self, name: str) -> None:
        from confluent_kafka import KafkaException

        try:
            self.admin.delete_topics([name], request_timeout=self.timeout_s)[name].result(
                timeout=self.timeout_s + 1
            )
        except (KafkaException, TimeoutError) as exc:
            raise ConsoleError(f"cannot delete topic '{name}': {error_text(exc)}") from exc
        self._await_metadata(name, present=False)

    def _await_metadata(self, name: str, *, present: bool) -> None:
        """Wait (up to the request timeout) until the Metadata the next page reads shows
        topic ``name`` with a leader for every partition, or no longer shows it.

        CreateTopics and DeleteTopics answer once the controller's metadata has the change;
        the client's next Metadata request may go to a broker whose UpdateMetadata is still
        on its way, as in Kafka. Past the timeout the page shows what the cluster says."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                topics = self.admin.list_topics(timeout=self.timeout_s).topics
            except KafkaException:
                topics = None
            if topics is not None:
                t = topics.get(name)
                shown = (
                    t is not None
                    and t.error is None
                    and bool(t.partitions)
                    and all(p.leader >= 0 for p in t.partitions.values())
                )
                if shown if present else t is None:
                    return
            time.sleep(0.1)

    def alter_configs(self, topic: str, changes: Mapping[str, str | None]) -> None:
        """IncrementalAlterConfigs: ``name -> value`` sets, ``name -> None`` deletes (back to
        the default)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        entries = [
            ConfigEntry(
                name,
                value,
                incremental_operation=AlterConfigOpType.DELETE
                if value is None
                else AlterConfigOpType.SET,
            )
            for name, value in sorted(changes.items())
        ]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        try:
            self.admin.incremental_alter_configs([resource], request_timeout=self.timeout_s)[
                resource
            ].result(timeout=self.timeout_s + 1)
        except (KafkaException, TimeoutError) as exc:
            raise ConsoleError(
                f"cannot change the configs of topic '{topic}': {error_text(exc)}"
            ) from exc
