"""The Spark exactly-once sinks found in the cluster, from the traces a sink leaves there
(``docs/exactly-once.md``, "Names" and "Whole micro-batches for readers"):

* its progress records in ``__millrace_batches`` (compacted; key: the output topic; value:
  JSON ``{"v": 1, "topic", "sink": "<prefix>-<sinkid>", "batch", "time", "cut"}``, decoded
  with the connector's own :meth:`~spark_connector.exactly_once.boundaries.Boundary.decode`),
  read with ``read_committed`` from the start to the last stable offset: the sinks, their
  output topics and the last committed batch of each;
* its transactional ids ``<prefix>-<sinkid>-driver`` and ``<prefix>-<sinkid>-<p>-<slot>``
  (ListTransactions): their states;
* the consumer group its driver commits the source offsets to (``commitOffsetsToGroup``):
  the cluster records no name for it, so a group is attributed to a sink when the group's
  partition of ``__consumer_offsets`` (Kafka's ``abs(hashCode(group)) % partitions``) has
  the sink driver's producer id among its active producers (DescribeProducers); when other
  groups share that partition the page says the attribution is ambiguous. The group's lag
  is then the sink's input lag.

Concurrency: every call makes its own clients and closes them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from broker.cli.common import CliError
from broker.cli.web_console.cluster_source import ClusterSource, ConsoleError, error_text
from broker.cli.web_console.group_source import GroupDetail, describe_group, list_groups
from broker.cli.web_console.txn_source import Transaction, _client, list_transactions
from broker.types import TopicPartition

PROGRESS_TOPIC = "__millrace_batches"
OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True, slots=True)
class SinkOutput:
    topic: str
    batch: int
    time_ms: int
    cut: tuple[int, ...]
    ends: tuple[int | None, ...]  # the topic's last stable offsets now

    @property
    def beyond_cut(self) -> int:
        """Committed records past the cut (another batch being committed, other writers)."""
        return sum(max((e or 0) - c, 0) for e, c in zip(self.ends, self.cut, strict=False))


@dataclass(slots=True)
class Sink:
    name: str  # <prefix>-<sinkid>
    outputs: list[SinkOutput] = field(default_factory=list)
    transactions: list[Transaction] = field(default_factory=list)
    groups: list[GroupDetail] = field(default_factory=list)
    group_note: str | None = None

    @property
    def prefix(self) -> str:
        return self.name.rsplit("-", 1)[0] if "-" in self.name else self.name

    @property
    def sink_id(self) -> str:
        return self.name.rsplit("-", 1)[-1]

    @property
    def last_batch(self) -> int:
        return max((o.batch for o in self.outputs), default=-1)

    @property
    def last_time_ms(self) -> int:
        return max((o.time_ms for o in self.outputs), default=0)


def _read_progress(source: ClusterSource, partitions: int) -> dict[tuple[str, str], object]:
    """The newest boundary per (sink, topic) in the progress topic."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkTopicPartition

    from spark_connector.exactly_once.boundaries import Boundary

    tps = [TopicPartition(PROGRESS_TOPIC, p) for p in range(partitions)]
    starts, errors = source.offsets(tps, "earliest")
    ends, end_errors = source.offsets(tps, "latest", committed_only=True)
    errors.update(end_errors)
    if errors:
        tp, problem = sorted(errors.items())[0]
        raise ConsoleError(f"cannot read {tp}: {problem}")
    todo = {tp: (starts[tp], ends[tp]) for tp in tps if ends[tp] > starts[tp]}
    newest: dict[tuple[str, str], object] = {}
    if not todo:
        return newest
    consumer = Consumer(source.consumer_config({"isolation.level": "read_committed"}))
    try:
        consumer.assign(
            [CkTopicPartition(tp.topic, tp.partition, lo) for tp, (lo, _hi) in todo.items()]
        )
        remaining = set(todo)
        deadline = time.monotonic() + source.timeout_s
        while remaining and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue
                b = Boundary.decode(msg.key(), msg.value(), int(msg.offset() or 0))
                if b is not None:
                    newest[(b.sink, b.topic)] = b
            positions = consumer.position(
                [CkTopicPartition(tp.topic, tp.partition) for tp in remaining]
            )
            for ck in positions:
                tp = TopicPartition(ck.topic, ck.partition)
                if ck.offset >= todo[tp][1]:
                    remaining.discard(tp)
        if remaining:
            raise ConsoleError(
                f"cannot read {PROGRESS_TOPIC} to its end within {source.timeout_s:g} s"
            )
    finally:
        consumer.close()
    return newest


def _driver_groups(
    source: ClusterSource, driver_pid: int, groups: list[str], offsets_partitions: int
) -> tuple[list[str], bool]:
    """(groups whose offsets partition has the driver's producer active, ambiguous?)."""
    from broker.coordinator.message_codec import partition_for

    txn = _client(source)
    try:
        cluster = txn.cluster([OFFSETS_TOPIC])
    except CliError as exc:
        raise ConsoleError(str(exc)) from exc
    by_partition: dict[int, list[str]] = {}
    for g in groups:
        by_partition.setdefault(partition_for(g, offsets_partitions), []).append(g)
    found: list[str] = []
    ambiguous = False
    for p, members in sorted(by_partition.items()):
        try:
            producers = txn.describe_producers(cluster, TopicPartition(OFFSETS_TOPIC, p), None)
        except CliError:
            continue
        if any(int(x.producer_id) == driver_pid for x in producers):
            found.extend(members)
            ambiguous = ambiguous or len(members) > 1
    return sorted(found), ambiguous


def find_sinks(source: ClusterSource) -> list[Sink]:
    """The sinks whose progress records the cluster holds (see the module docstring)."""
    from spark_connector.exactly_once.boundaries import Boundary

    cluster = source.cluster()
    names = {t.name: t for t in cluster.topics}
    if PROGRESS_TOPIC not in names:
        return []
    newest = _read_progress(source, len(names[PROGRESS_TOPIC].partitions))
    sinks: dict[str, Sink] = {}
    out_tps = {
        TopicPartition(b.topic, p)
        for b in newest.values()
        if isinstance(b, Boundary) and b.topic in names
        for p in range(len(names[b.topic].partitions))
    }
    ends, _errors = source.offsets(out_tps, "latest", committed_only=True)
    for (sink_name, topic), b in sorted(newest.items()):
        assert isinstance(b, Boundary)
        count = len(names[topic].partitions) if topic in names else 0
        sink = sinks.setdefault(sink_name, Sink(sink_name))
        sink.outputs.append(
            SinkOutput(
                topic,
                b.batch,
                b.time_ms,
                b.cut,
                tuple(ends.get(TopicPartition(topic, p)) for p in range(count)),
            )
        )
    if not sinks:
        return []
    txns = list_transactions(source).transactions
    groups = [g for g, _state in list_groups(source)]
    offsets_partitions = len(names[OFFSETS_TOPIC].partitions) if OFFSETS_TOPIC in names else 0
    for sink in sinks.values():
        sink.transactions = [t for t in txns if t.transactional_id.startswith(sink.name + "-")]
        driver = [t for t in sink.transactions if t.transactional_id == sink.name + "-driver"]
        if not driver or not offsets_partitions:
            sink.group_note = "no driver transaction known: no group committed by this sink"
            continue
        try:
            found, ambiguous = _driver_groups(
                source, driver[0].producer_id, groups, offsets_partitions
            )
            sink.groups = [describe_group(source, g) for g in found]
        except ConsoleError as exc:
            sink.group_note = f"cannot look up its group: {error_text(exc)}"
            continue
        if not found:
            sink.group_note = "no group receives offsets from this sink's driver"
        elif ambiguous:
            sink.group_note = (
                "these groups share the offsets partition the driver commits to: "
                "one of them is the sink's"
            )
    return sorted(sinks.values(), key=lambda s: s.name)
