"""Real clients against a test cluster: the confluent-kafka AdminClient with the waits tests
need, a consumer that reads partitions to their high watermarks, and readers of log files."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


class KafkaAdmin:
    """confluent-kafka AdminClient plus the waits tests need."""

    def __init__(self, bootstrap: str, extra: dict[str, object] | None = None) -> None:
        """``extra``: client settings (a secured cluster's ``client_config``)."""
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.client = AdminClient({"bootstrap.servers": bootstrap, **(extra or {})})

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        replication_factor: int = 1,
        replica_assignment: list[list[int]] | None = None,
    ) -> None:
        """Create ``name`` and wait for its leaders; ``replica_assignment`` (the replicas of
        partition 0, 1, ...) replaces ``partitions`` and ``replication_factor``."""
        from confluent_kafka.admin import NewTopic

        if replica_assignment is not None:
            # (this confluent-kafka wants the partition count given with an assignment)
            new = NewTopic(
                name,
                num_partitions=len(replica_assignment),
                replica_assignment=replica_assignment,
                config=config or {},
            )
            partitions = len(replica_assignment)
        else:
            new = NewTopic(
                name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                config=config or {},
            )
        futures = self.client.create_topics(
            [new],
            operation_timeout=30,
            request_timeout=30,
        )
        futures[name].result(timeout=timeout_s)
        self.wait_for_leaders(name, partitions, timeout_s)

    def wait_for_leaders(self, name: str, partitions: int, timeout_s: float = 60.0) -> None:
        """Poll metadata until ``name`` has ``partitions`` partitions, each with a leader."""
        deadline = time.monotonic() + timeout_s
        last = "no metadata"
        while time.monotonic() < deadline:
            md = self.client.list_topics(topic=name, timeout=10)
            topic = md.topics.get(name)
            if topic is not None and topic.error is None:
                leaders = {p: pm.leader for p, pm in topic.partitions.items()}
                last = f"partitions/leaders {leaders}"
                if len(leaders) == partitions and all(
                    leader >= 0 and pm.error is None
                    for leader, pm in zip(leaders.values(), topic.partitions.values(), strict=True)
                ):
                    return
            elif topic is not None:
                last = f"topic error {topic.error}"
            time.sleep(0.2)
        raise AssertionError(
            f"topic {name!r}: metadata never showed a leader for all {partitions} partitions "
            f"within {timeout_s}s (last: {last})"
        )

    def topic_names(self) -> set[str]:
        return set(self.client.list_topics(timeout=10).topics)


def kafka_admin(bootstrap: str, extra: dict[str, object] | None = None) -> KafkaAdmin:
    return KafkaAdmin(bootstrap, extra)


# --- client helpers --------------------------------------------------------------------------


def confluent_conf(bootstrap: str, extra: dict[str, object] | None = None) -> dict[str, object]:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap}
    debug = os.environ.get("MILLRACE_CLIENT_DEBUG")
    if debug:
        conf["debug"] = debug
    conf.update(extra or {})
    return conf


def confluent_consume(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    start: int | None = None,
    extra: dict[str, object] | None = None,
    timeout_s: float = 90.0,
) -> dict[int, list[Any]]:
    """Read every partition from ``start`` (default: beginning) up to its current high
    watermark with a confluent-kafka Consumer using assign() (no group membership).
    Raises AssertionError on a message error or if a partition does not reach its high
    watermark in time."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    first = OFFSET_BEGINNING if start is None else start
    conf = confluent_conf(
        bootstrap,
        {
            "group.id": f"itest-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            **(extra or {}),
        },
    )
    consumer = Consumer(conf)
    try:
        high = {p: high_watermark(consumer, topic, p) for p in partitions}
        pending = {p for p in partitions if high[p] > max(first, 0)}
        out: dict[int, list[Any]] = {p: [] for p in partitions}
        if not pending:
            return out
        consumer.assign([TopicPartition(topic, p, first) for p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(
                        f"consumer error on {msg.topic()}[{msg.partition()}]: {err}"
                    )
                p = msg.partition()
                out[p].append(msg)
                if msg.offset() + 1 >= high[p]:
                    pending.discard(p)
        assert not pending, (
            f"{topic}: partitions {sorted(pending)} not read up to their high watermarks "
            f"{ {p: high[p] for p in pending} } within {timeout_s}s; got "
            f"{ {p: len(out[p]) for p in pending} } records"
        )
        return out
    finally:
        consumer.close()


def high_watermark(consumer: Any, topic: str, partition: int, timeout_s: float = 30.0) -> int:
    """The partition's high watermark, asked of its leader by ListOffsets. While leadership
    moves (after a restart or an election), librdkafka's query answers
    NOT_LEADER_FOR_PARTITION or LEADER_NOT_AVAILABLE and does not retry; like any client,
    ask again after its metadata catches up."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    retriable = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _low, hw = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)
            return int(hw)
        except KafkaException as e:
            if e.args[0].code() not in retriable or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def read_log_batches(partition_dir: Path) -> list[tuple[Path, Any, bool]]:
    """Batch headers of every ``.log`` segment in ``partition_dir``: (file, header, crc_ok)."""
    from broker.protocol import records

    out = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        for header in records.iter_batches(data, allow_partial_tail=True):
            out.append((seg, header, records.crc_ok(data, header)))
    return out


def batch_signature(batches: list[tuple[Path, Any, bool]]) -> list[tuple[int, int, int, int]]:
    """(base_offset, last_offset, partitionLeaderEpoch, crc) of each batch: two replicas of a
    partition hold identical logs when these lists are equal (segment boundaries aside)."""
    return [
        (h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc) for _seg, h, _ok in batches
    ]
