"""Transactions while brokers fail, as Kafka's own transactions system test runs them, on 3
brokers with RF=3 and ``min.insync.replicas`` 2:

* Kafka 3.9.1's ``TransactionalMessageCopier`` (one per input partition, random aborts, the
  consumed offsets sent with each transaction) copies an input topic while one broker is
  SIGKILLed and restarted and another is shut down cleanly and restarted; a copier that dies
  is restarted, as the system test restarts bounced copiers. A read_committed reader of the
  output then sees every input record exactly once, and the copiers' group offsets equal the
  input's end offsets.
* The transaction coordinator's broker and a partition leader are SIGKILLed while a commit
  is in flight: the transaction is completed (committed, or aborted) by the new coordinator,
  all or none of its records are visible, nothing is left hanging and the last stable offset
  of every partition reaches its end.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from broker.coordinator.message_codec import partition_for
from tests.harness.kafka_tools import KAFKA_DIST, TOOLS
from tests.harness.processes import kill_pid
from tests.harness.waiting import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.fault,
    pytest.mark.timeout(420),
    pytest.mark.cluster_config(
        {
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "5000",
            "transaction.state.log.num.partitions": "3",
            "offsets.topic.num.partitions": "3",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "group.initial.rebalance.delay.ms": "0",
            "min.insync.replicas": "2",
            "default.replication.factor": "3",
        },
        brokers=3,
    ),
]

TXN_PARTITIONS = 3


def _lso(cluster: Any, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(cluster.conf({"group.id": "lso", "isolation.level": "read_committed"}))
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _log_end(cluster: Any, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(cluster.conf({"group.id": "leo"}))
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _read_committed(cluster: Any, topic: str, partitions: int) -> list[Any]:
    ends = _lso(cluster, topic, partitions)
    consumer = Consumer(
        cluster.conf(
            {
                "group.id": f"check-{topic}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Any] = []
        positions = [0] * partitions
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, f"read {positions} of {ends}"
            for msg in consumer.consume(500, 1.0):
                assert msg.error() is None, msg.error()
                out.append(msg)
            positions = [
                max(0, tp.offset)
                for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            ]
        return out
    finally:
        consumer.close()


class Copier:
    """One TransactionalMessageCopier process for one input partition (restartable)."""

    def __init__(self, cluster: Any, partition: int, log_dir: Path) -> None:
        self.cluster = cluster
        self.partition = partition
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        out = (self.log_dir / f"copier-{self.partition}-{self.starts}.out").open("wb")
        self.proc = subprocess.Popen(
            [
                "java",
                "-Xmx256m",
                "-cp",
                f"{KAFKA_DIST}/*",
                TOOLS + "TransactionalMessageCopier",
                "--broker-list",
                self.cluster.bootstrap,
                "--input-topic",
                "copy-in",
                "--input-partition",
                str(self.partition),
                "--output-topic",
                "copy-out",
                "--transactional-id",
                f"copier-{self.partition}",
                "--consumer-group",
                "copier-group",
                "--transaction-size",
                "25",
                "--transaction-timeout",
                "20000",
                "--enable-random-aborts",
                "--use-group-metadata",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def done(self) -> bool:
        """True once the copier exited 0 (every input record copied); a copier that died
        is restarted."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            return False
        if code == 0:
            return True
        self.start()
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            kill_pid(self.proc.pid)


@pytest.mark.long  # make fault (make test budget, issue 29)
def test_transactional_copier_while_brokers_bounce(cluster: Any, tmp_path: Path) -> None:
    cluster.create_topic("copy-in", 2, replication_factor=3)
    cluster.create_topic("copy-out", 2, replication_factor=3)
    records = 3000
    feed = Producer(cluster.conf({"enable.idempotence": True, "linger.ms": 5}))
    for i in range(records):
        feed.produce("copy-in", key=str(i), value=f"value-{i}", partition=i % 2)
    assert feed.flush(60) == 0
    copiers = [Copier(cluster, p, tmp_path) for p in range(2)]
    try:
        for c in copiers:
            c.start()
        wait_for(lambda: sum(_log_end(cluster, "copy-out", 2)) > 0, 90, "the copiers writing")
        assert any(c.proc is not None and c.proc.poll() is None for c in copiers), (
            "the copiers finished before any broker failed: copy more records"
        )
        victim = cluster.leader_of("copy-out", 0)
        cluster.stop_broker(hard=True, broker_id=victim)  # SIGKILL mid-copy
        time.sleep(8)
        cluster.start_broker(victim)
        other = next(b for b in cluster.broker_ids() if b != victim)
        cluster.stop_broker(hard=False, broker_id=other)  # controlled shutdown
        cluster.start_broker(other)
        wait_for(lambda: all(c.done() for c in copiers), 300, "both copiers to finish")
        print("copier starts:", [c.starts for c in copiers])
    finally:
        for c in copiers:
            c.stop()
    out = _read_committed(cluster, "copy-out", 2)
    values = [m.value().decode() for m in out]
    assert len(values) == len(set(values)), f"{len(values) - len(set(values))} duplicates"
    assert set(values) == {f"value-{i}" for i in range(records)}
    consumer = Consumer(cluster.conf({"group.id": "copier-group"}))
    try:
        committed = consumer.committed([TopicPartition("copy-in", p) for p in range(2)], 30)
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == _lso(cluster, "copy-in", 2)


def test_coordinator_and_leader_killed_during_a_commit(cluster: Any) -> None:
    cluster.ensure_all_running()
    topic = cluster.create_topic("txn-kill", 3, replication_factor=3)
    txn_id = "txn-kill-commit"
    producer = Producer(
        cluster.conf({"transactional.id": txn_id, "linger.ms": 5, "transaction.timeout.ms": 30000})
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(300):
        producer.produce(topic, key=str(i), value=b"in-txn", partition=i % 3)
    assert producer.flush(60) == 0
    state = cluster.describe("__transaction_state")
    coordinator = state[partition_for(txn_id, TXN_PARTITIONS)][0]
    leaders = {p: view[0] for p, view in cluster.describe(topic).items()}
    other_leader = next((b for b in leaders.values() if b != coordinator), None)
    outcome: list[str] = []

    def commit() -> None:
        try:
            producer.commit_transaction(120)
            outcome.append("committed")
        except KafkaException as exc:
            outcome.append(f"failed: {exc}")

    thread = threading.Thread(target=commit)
    thread.start()
    time.sleep(0.05)
    cluster.stop_broker(hard=True, broker_id=coordinator)
    if other_leader is not None:
        cluster.stop_broker(hard=True, broker_id=other_leader)
        cluster.start_broker(other_leader)
    thread.join(150)
    assert not thread.is_alive(), "commit_transaction never returned"
    cluster.start_broker(coordinator)
    cluster.wait_isr_complete(topic, 90)
    # no hanging transaction: every partition becomes stable at its end
    wait_for(
        lambda: _lso(cluster, topic, 3) == _log_end(cluster, topic, 3),
        120,
        "the last stable offset of every partition to reach its end",
    )
    seen = len(_read_committed(cluster, topic, 3))
    if outcome == ["committed"]:
        assert seen == 300
    else:
        assert seen in (0, 300), f"a partial transaction is visible: {seen} of 300 ({outcome})"


def test_listing_open_transactions_skips_a_dead_broker(cluster: Any) -> None:
    """The exactly-once Spark sink's clean-up lists the open transactions of every broker
    (``TxnClient.list_ongoing``). A broker SIGKILLed just before drops out of the listing once
    the cluster stops listing it (its ZooKeeper session expires), instead of being retried until
    the client's timeout: that stalled a micro-batch's commit for 120 s."""
    from spark_connector.kafka.transactions import TxnClient

    cluster.ensure_all_running()
    topic = cluster.create_topic("txn-list", 3, replication_factor=3)
    txn_id = "txn-list-dead-broker"
    producer = Producer(
        cluster.conf({"transactional.id": txn_id, "transaction.timeout.ms": 300000})
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"open", partition=0)
    assert producer.flush(30) == 0
    coordinator = cluster.describe("__transaction_state")[partition_for(txn_id, TXN_PARTITIONS)][0]
    victim = next(b for b in cluster.broker_ids() if b != coordinator)
    kill_pid(cluster.broker_pid(victim))
    try:
        started = time.monotonic()
        with TxnClient(cluster.bootstrap, timeout_s=120) as client:
            listed = client.list_ongoing("txn-list-")
        took = time.monotonic() - started
        assert listed == [txn_id]
        assert took < 60, f"listing the open transactions took {took:.0f}s with a broker down"
    finally:
        cluster.stop_broker(hard=True, broker_id=victim)  # records it as stopped
        producer.abort_transaction(60)
        cluster.start_broker(victim)
    cluster.wait_isr_complete(topic, 90)
