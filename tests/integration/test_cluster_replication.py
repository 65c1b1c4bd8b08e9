"""Replication on a 3-broker cluster (issue 3, "Replication"), with real processes.

* A topic with replication factor 3: every partition has 3 replicas, all in the ISR, leaders
  spread over the brokers by the rack-unaware round-robin assignment, and every broker's own
  Metadata answer agrees (the controller's UpdateMetadata reached all of them).
* acks=all produce: the data file of every replica holds the same batches (base offset, last
  offset, partitionLeaderEpoch, CRC), offsets dense from 0, and consumers read every record.
* ``min.insync.replicas=2`` with two of three replicas hard-stopped: an acks=all Produce is
  refused with NOT_ENOUGH_REPLICAS and not appended (acks=1 is still accepted); once the
  replicas return they rejoin the ISR and every acknowledged record is readable exactly once.

The first two tests share one module-scoped 3-broker cluster; the one that kills brokers
starts its own with ``cluster_factory``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import KafkaError, Producer

from broker.protocol import records as rec

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.harness.cluster import Cluster

BROKERS = [1, 2, 3]
# a SIGKILLed broker's ephemeral /brokers/ids/<id> lives until its ZooKeeper session expires
# (6000 ms is ZooKeeper's minimum with the default tickTime); a replica that stops fetching
# leaves the ISR after replica.lag.time.max.ms
FAST_FAILURE_PROPS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "5000",
    # the last broker of `cluster down` cannot hand its leadership to anyone: don't wait 3 x 5 s
    "controlled.shutdown.retry.backoff.ms": "500",
}
NOT_ENOUGH_REPLICAS = 19

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.cluster_config(FAST_FAILURE_PROPS, brokers=3),
]


class Acks:
    """Delivery reports of one confluent-kafka producer: value -> (partition, offset)."""

    def __init__(self) -> None:
        self.ok: dict[bytes, tuple[int, int]] = {}
        self.errors: dict[bytes, KafkaError] = {}
        self.lock = threading.Lock()

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.errors[msg.value()] = err
            else:
                self.ok[msg.value()] = (msg.partition(), msg.offset())


def produce_values(
    producer: Producer,
    topic: str,
    values: list[bytes],
    acks: Acks,
    partitions: int = 1,
    flush_s: float = 120.0,
) -> None:
    """Produce ``values`` round-robin over ``partitions`` and flush."""
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(
                    topic, value, partition=i % partitions, on_delivery=acks.on_delivery
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(flush_s) == 0, f"records still queued after flush({flush_s})"


def acks_all_producer(cluster: Cluster, extra: dict[str, object] | None = None) -> Producer:
    return Producer(
        cluster.conf(
            {
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "batch.num.messages": 200,
                "message.timeout.ms": 60000,
                "retry.backoff.ms": 100,
                "reconnect.backoff.max.ms": 1000,
                **(extra or {}),
            }
        )
    )


def check_dense(
    signature: list[tuple[int, int, int, int]], expected_records: int, where: str
) -> None:
    """Batches cover offsets 0..expected_records-1 with no gap and no overlap."""
    next_offset = 0
    for base, last, epoch, _crc in signature:
        assert base == next_offset, f"{where}: batch at {base}, expected {next_offset}"
        assert last >= base, f"{where}: batch {base}..{last}"
        assert epoch >= 0, f"{where}: batch {base} has no partitionLeaderEpoch ({epoch})"
        next_offset = last + 1
    assert next_offset == expected_records, (
        f"{where}: log ends at {next_offset}, {expected_records} records were acknowledged"
    )


@pytest.fixture(autouse=True)
def _all_brokers_running(request: pytest.FixtureRequest) -> None:
    """An earlier failed test may have left a broker of the module cluster stopped or paused."""
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").ensure_all_running()


# --- shared 3-broker cluster -----------------------------------------------------------------


def test_rf3_topic_replicas_isr_and_spread_leaders(cluster: Cluster, topic_name: str) -> None:
    partitions = 6
    cluster.create_topic(topic_name, partitions, replication_factor=3)
    desc = cluster.wait_isr_complete(topic_name, 60, brokers=BROKERS)

    assert sorted(desc) == list(range(partitions)), desc
    for p, (leader, replicas, isr) in desc.items():
        assert len(replicas) == 3 and sorted(replicas) == BROKERS, f"partition {p}: {replicas}"
        assert sorted(isr) == BROKERS, f"partition {p}: ISR {isr}"
        assert leader == replicas[0], (
            f"partition {p}: leader {leader} is not the preferred replica {replicas[0]} of "
            f"a freshly created topic"
        )
    # round-robin from a random start: 6 partitions on 3 brokers -> each leads exactly 2
    preferred = Counter(replicas[0] for _leader, replicas, _isr in desc.values())
    assert preferred == {1: 2, 2: 2, 3: 2}, f"preferred leaders not spread: {desc}"
    leaders = Counter(leader for leader, _replicas, _isr in desc.values())
    assert leaders == {1: 2, 2: 2, 3: 2}, f"leaders not spread: {desc}"
    # ...with shifted followers: not every partition has its replicas in the same rotation
    second = {(replicas[1] - replicas[0]) % 3 for _l, replicas, _i in desc.values()}
    assert len(second) == 2 or partitions < 6, f"followers never shifted: {desc}"

    views: dict[int, Any] = {}

    def agree() -> bool:
        views.clear()
        views.update({b: cluster.describe_via(b, topic_name) for b in BROKERS})
        return all(v == desc for v in views.values())

    cluster.wait_for(agree, 30, f"every broker's own Metadata for {topic_name} equal to {desc}")

    # every broker lists all brokers and names the same controller
    answers = {b: cluster.raw_metadata(b, []) for b in BROKERS}
    for b, md in answers.items():
        listed = sorted(int(n.node_id) for n in md.brokers)
        assert listed == BROKERS, f"broker {b}'s Metadata lists brokers {listed}"
        ports = {int(n.node_id): int(n.port) for n in md.brokers}
        assert ports == {i: int(cluster.broker(i)["port"]) for i in BROKERS}, (b, ports)
    controllers = {b: int(md.controller_id) for b, md in answers.items()}
    assert len(set(controllers.values())) == 1 and controllers[1] in BROKERS, controllers


def test_acks_all_replicas_hold_identical_batches(cluster: Cluster, topic_name: str) -> None:
    partitions, n = 2, 2000
    cluster.create_topic(topic_name, partitions, replication_factor=3)
    cluster.wait_isr_complete(topic_name, 60, brokers=BROKERS)
    values = [f"replicated-{i:05d}".encode() + b"x" * (i % 50) for i in range(n)]
    acks = Acks()
    produce_values(acks_all_producer(cluster), topic_name, values, acks, partitions)
    assert not acks.errors, f"delivery errors: {list(acks.errors.items())[:3]}"
    assert len(acks.ok) == n

    per_partition = Counter(p for p, _off in acks.ok.values())
    for p in range(partitions):
        common = cluster.wait_replicas_identical(topic_name, p, BROKERS, 60)
        assert len(common) > 1, f"partition {p}: only {len(common)} batch(es); linger too long?"
        check_dense(common, per_partition[p], f"{topic_name}[{p}]")
        for b in BROKERS:
            bad = [h.base_offset for _s, h, ok in cluster.batches(topic_name, p, b) if not ok]
            assert not bad, f"broker {b} {topic_name}[{p}]: batches with a bad CRC at {bad}"

    served = cluster.consume(topic_name, list(range(partitions)))
    for p in range(partitions):
        got = [(m.offset(), m.value()) for m in served[p]]
        want = sorted((off, v) for v, (pp, off) in acks.ok.items() if pp == p)
        assert got == want, f"partition {p}: served records differ from acknowledged ones"


# --- min.insync.replicas ------------------------------------------------------------------


def _raw_batch(values: list[bytes]) -> bytes:
    ts = int(time.time() * 1000)
    return rec.encode_batch([rec.SimpleRecord(value=v, key=b"raw", timestamp=ts) for v in values])


@pytest.mark.fault
def test_not_enough_replicas_then_replicas_rejoin(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = cluster_factory({**FAST_FAILURE_PROPS, "min.insync.replicas": "2"}, brokers=3)
    c.create_topic(topic_name, 1, replication_factor=3)
    leader, replicas, _isr = c.wait_isr_complete(topic_name, 60, brokers=BROKERS)[0]
    followers = [b for b in replicas if b != leader]

    before = [f"before-{i:04d}".encode() for i in range(500)]
    acks = Acks()
    produce_values(acks_all_producer(c), topic_name, before, acks)
    assert not acks.errors and len(acks.ok) == len(before), acks.errors

    for b in followers:
        c.stop_broker(hard=True, broker_id=b)
    # the followers leave the ISR: the controller sees their sessions expire, or the leader
    # sees them fall behind for replica.lag.time.max.ms
    c.wait_for(
        lambda: c.describe(topic_name)[0] == (leader, replicas, (leader,)),
        60,
        f"ISR of {topic_name}[0] shrunk to the leader {leader} alone",
    )

    # acks=all: refused before the append, with the exact error code
    with c.raw(broker_id=leader) as conn:
        pr = conn.produce_v3(topic_name, 0, _raw_batch([b"refused-1", b"refused-2"]), acks=-1)
        assert int(pr.error_code) == NOT_ENOUGH_REPLICAS, (
            f"acks=all Produce with ISR {[leader]} < min.insync.replicas 2 answered "
            f"{pr.error_code!r}, expected NOT_ENOUGH_REPLICAS (19)"
        )
        # acks=1 is not subject to min.insync.replicas
        pr = conn.produce_v3(topic_name, 0, _raw_batch([b"acks1-only"]), acks=1)
        assert int(pr.error_code) == 0, f"acks=1 Produce: {pr.error_code!r}"
        assert int(pr.base_offset) == len(before), int(pr.base_offset)
    log = c.batches(topic_name, 0, leader)
    assert log and log[-1][1].last_offset == len(before), (
        f"leader's log ends at {log[-1][1].last_offset if log else None}: the refused "
        f"batch was appended"
    )

    # confluent-kafka: the delivery fails (librdkafka retries NOT_ENOUGH_REPLICAS until
    # message.timeout.ms, then reports the last error or _MSG_TIMED_OUT)
    failing = Acks()
    producer = acks_all_producer(c, {"message.timeout.ms": 5000, "enable.idempotence": False})
    produce_values(producer, topic_name, [b"client-refused"], failing, flush_s=30)
    assert not failing.ok, f"acks=all produce succeeded with one in-sync replica: {failing.ok}"
    [err] = failing.errors.values()
    assert err.code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT), err

    for b in followers:
        c.start_broker(b)
    c.wait_isr_complete(topic_name, 90, brokers=BROKERS)

    after = [f"after-{i:04d}".encode() for i in range(300)]
    produce_values(acks_all_producer(c), topic_name, after, acks)
    assert not acks.errors, f"acks=all after the replicas returned: {list(acks.errors.items())[:3]}"

    common = c.wait_replicas_identical(topic_name, 0, BROKERS, 60)
    check_dense(common, len(before) + 1 + len(after), f"{topic_name}[0]")
    served = [m.value() for m in c.consume(topic_name, [0])[0]]
    assert served == [*before, b"acks1-only", *after], (
        f"served {len(served)} records; refused ones present: "
        f"{[v for v in served if v.startswith((b'refused', b'client-refused'))]}"
    )


def test_admin_requests_to_a_broker_that_is_not_the_controller(
    cluster: Cluster, topic_name: str
) -> None:
    """CreateTopics, CreatePartitions and DeleteTopics sent to a broker that is not the
    controller (a client whose metadata still names an old controller) are forwarded to the
    controller and succeed, as on KRaft-mode Kafka, instead of failing NOT_CONTROLLER."""
    import datetime

    from kio.schema.create_partitions.v2.request import (
        CreatePartitionsRequest,
        CreatePartitionsTopic,
    )
    from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.delete_topics.v4.request import DeleteTopicsRequest
    from kio.schema.types import TopicName
    from kio.static.primitive import i16, i32, i32Timedelta

    controller = cluster.controller_id()
    other = next(b for b in BROKERS if b != controller)
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=30))
    with cluster.raw(broker_id=other) as conn:
        created = conn.request(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name=TopicName(topic_name),
                        num_partitions=i32(2),
                        replication_factor=i16(3),
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=timeout,
            )
        )
        [result] = created.topics
        assert int(result.error_code) == 0, (result.error_code, result.error_message)
        assert int(result.num_partitions) == 2 and int(result.replication_factor) == 3
        assert sorted(cluster.wait_isr_complete(topic_name, 60, brokers=BROKERS)) == [0, 1]

        grown = conn.request(
            CreatePartitionsRequest(
                topics=(
                    CreatePartitionsTopic(
                        name=TopicName(topic_name), count=i32(3), assignments=None
                    ),
                ),
                timeout=timeout,
                validate_only=False,
            )
        )
        [grown_result] = grown.results
        assert int(grown_result.error_code) == 0, grown_result
        assert sorted(cluster.wait_isr_complete(topic_name, 60, brokers=BROKERS)) == [0, 1, 2]

        deleted = conn.request(
            DeleteTopicsRequest(topic_names=(TopicName(topic_name),), timeout=timeout)
        )
        [deleted_result] = deleted.responses
        assert int(deleted_result.error_code) == 0, deleted_result
    cluster.wait_for(
        lambda: topic_name not in cluster.admin().topic_names(), 60, f"{topic_name} deleted"
    )


def test_a_broker_that_does_not_host_a_known_partition_answers_not_leader(
    cluster: Cluster, topic_name: str
) -> None:
    """A Produce or ListOffsets for a partition the cluster's metadata lists but this broker
    does not host answers NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata and goes
    to the leader), as Kafka's ``ReplicaManager.getPartitionOrError`` does; a topic nobody
    knows answers UNKNOWN_TOPIC_OR_PARTITION."""
    from kio.schema.list_offsets.v1.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    from kio.schema.types import TopicName
    from kio.static.primitive import i32, i64

    cluster.create_topic(topic_name, 1, replication_factor=1)
    leader = cluster.leader_of(topic_name)
    other = next(b for b in BROKERS if b != leader)
    cluster.wait_for(
        lambda: cluster.describe_via(other, topic_name)[0][0] == leader,
        30,
        f"broker {other}'s metadata naming leader {leader}",
    )
    batch = rec.encode_batch([rec.SimpleRecord(b"v", None, int(time.time() * 1000))])
    with cluster.raw(broker_id=other) as conn:
        produced = conn.produce_v3(topic_name, 0, batch)
        assert int(produced.error_code) == 6, produced  # NOT_LEADER_OR_FOLLOWER
        offsets = conn.request(
            ListOffsetsRequest(
                replica_id=i32(-1),
                topics=(
                    ListOffsetsTopic(
                        name=TopicName(topic_name),
                        partitions=(
                            ListOffsetsPartition(partition_index=i32(0), timestamp=i64(-1)),
                        ),
                    ),
                ),
            )
        )
        [t] = offsets.topics
        [p] = t.partitions
        assert int(p.error_code) == 6, p
        unknown = conn.produce_v3(f"{topic_name}-never-created", 0, batch)
        assert int(unknown.error_code) == 3, unknown  # UNKNOWN_TOPIC_OR_PARTITION
    with cluster.raw(broker_id=leader) as conn:
        assert int(conn.produce_v3(topic_name, 0, batch).error_code) == 0
