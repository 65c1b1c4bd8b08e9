"""The rolling migration of docs/operations.md ("Mixed clusters and rolling migration"), under
load: a 3-broker Apache Kafka 3.9.1 cluster becomes a Millrace cluster one broker at a time
(each Millrace broker starts on the stopped Kafka broker's ``log.dirs`` and ``broker.id``),
then goes back to Kafka the same way, while

* an idempotent acks=all producer (confluent-kafka) writes numbered records,
* a consumer group reads them and commits its offsets,
* a transactional producer commits and aborts transactions, one after the other.

After every broker change the test waits until every partition (the internal topics
included) has its whole replica set in sync, as the procedure says. At the end: no
acknowledged record lost or duplicated, the group's committed offsets are what it last
committed, the committed transactions are visible to read_committed and the aborted ones are
not, and ``/controller`` moved from a Kafka broker to a Millrace broker and back.

``make fault`` runs it (marked long); ``make test`` does not.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.mixed import KAFKA, MILLRACE, MixedCluster, wait_brokers_registered
from tests.harness.waiting import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.fault,
    pytest.mark.long,
    pytest.mark.timeout(1500),
]

TOPIC = "migrating"
TXN_TOPIC = "migrating-txn"
GROUP = "migrating-group"
PARTITIONS = 3
BROKERS = [1, 2, 3]
BROKER_PROPS = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
}


class Load:
    """The three workloads, each in its own thread, until :meth:`stop`."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stopping = threading.Event()
        self.failures: list[str] = []
        self.lock = threading.Lock()
        # the producer
        self.sent = 0
        self.acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
        self.produce_errors: list[Any] = []
        # the group
        self.consumed = 0
        self.committed: dict[int, int] = {}
        # the transactions
        self.committed_txn_values: list[int] = []
        self.aborted_txn_values: list[int] = []
        self.threads = [
            threading.Thread(target=self._guard(self._produce), name="producer", daemon=True),
            threading.Thread(target=self._guard(self._consume), name="group", daemon=True),
            threading.Thread(target=self._guard(self._transact), name="txn", daemon=True),
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(240)
            assert not t.is_alive(), f"workload {t.name} did not stop"
        assert not self.failures, self.failures

    def _guard(self, body: Any) -> Any:
        def run() -> None:
            try:
                body()
            except Exception as exc:  # noqa: BLE001 - reported by stop()
                with self.lock:
                    self.failures.append(f"{threading.current_thread().name}: {exc!r}")

        return run

    # --- idempotent acks=all producer ---------------------------------------------------

    def _produce(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 300000,
                "retry.backoff.ms": 100,
                "retry.backoff.max.ms": 1000,
                "reconnect.backoff.max.ms": 1000,
                "topic.metadata.refresh.interval.ms": 2000,
            }
        )

        def delivered(err: Any, msg: Any) -> None:
            with self.lock:
                if err is not None:
                    self.produce_errors.append(err)
                else:
                    self.acked[msg.partition()].append((int(msg.value()), msg.offset()))

        while not self.stopping.is_set():
            for _ in range(20):
                value = self.sent
                self.sent += 1
                producer.produce(
                    TOPIC, str(value).encode(), partition=value % PARTITIONS, on_delivery=delivered
                )
            producer.poll(0.1)
        assert producer.flush(300) == 0, "records still queued at the end"

    # --- a consumer group committing its offsets -----------------------------------------

    def _consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 45000,
                "topic.metadata.refresh.interval.ms": 2000,
            }
        )
        consumer.subscribe([TOPIC])
        try:
            since_commit = 0
            while not self.stopping.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    self.consumed += 1
                    since_commit += 1
                if since_commit >= 50:
                    try:
                        done = consumer.commit(asynchronous=False)
                    except KafkaException:
                        continue  # the coordinator moved: commit again later
                    since_commit = 0
                    with self.lock:
                        for tp in done or ():
                            if tp.error is None and tp.offset >= 0:
                                self.committed[tp.partition] = tp.offset
        finally:
            consumer.close()

    # --- a transactional producer: commit, abort, commit, ... --------------------------------

    def _transact(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": "migrating-txn-id",
                "transaction.timeout.ms": 60000,
                "message.timeout.ms": 60000,
            }
        )
        producer.init_transactions(120)
        n = 0
        while not self.stopping.is_set():
            commit = n % 2 == 0
            values = list(range(n * 10, n * 10 + 10))
            n += 1
            producer.begin_transaction()
            for v in values:
                producer.produce(TXN_TOPIC, str(v).encode(), partition=v % PARTITIONS)
            committed = self._finish(producer, commit)
            with self.lock:
                (self.committed_txn_values if committed else self.aborted_txn_values).extend(values)
            time.sleep(0.3)

    def _finish(self, producer: Producer, commit: bool) -> bool:
        """Commit (or abort) the open transaction, riding out retriable errors; True if it
        committed, False if it aborted (as asked, or because it had to)."""
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                if commit:
                    producer.commit_transaction(60)
                else:
                    producer.abort_transaction(60)
                return commit
            except KafkaException as exc:
                error = exc.args[0]
                if error.retriable():
                    continue
                if error.txn_requires_abort():
                    commit = False
                    continue
                raise
        raise AssertionError("the transaction did not end within 240 s")


# --------------------------------------------------------------------------- cluster helpers


def isr_complete(cluster: MixedCluster) -> bool:
    """Every partition of every topic has its whole replica set in its ISR (ZooKeeper)."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk_connect, timeout=10.0)
    zk.start(timeout=15)
    try:
        for topic in zk.get_children("/brokers/topics"):
            data, _ = zk.get(f"/brokers/topics/{topic}")
            assignment = json.loads(data)["partitions"]
            for p, replicas in assignment.items():
                raw, _ = zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")
                state = json.loads(raw)
                if sorted(state["isr"]) != sorted(replicas) or state["leader"] < 0:
                    return False
        return True
    finally:
        zk.stop()
        zk.close()


def wait_in_sync(cluster: MixedCluster, what: str) -> None:
    def check() -> bool:
        for node in cluster.nodes.values():
            assert node.running(), f"broker {node.broker_id} exited: {cluster.tail(node)}"
        return isr_complete(cluster)

    wait_for(check, 240, f"every ISR complete ({what})")


def controller_kind(cluster: MixedCluster) -> tuple[int, str]:
    broker_id = cluster.controller_id()
    return broker_id, cluster.node(broker_id).kind if broker_id in cluster.nodes else "?"


def replace(
    cluster: MixedCluster, broker_id: int, kind: str, history: list[tuple[int, str]]
) -> None:
    """One step of the procedure: stop the broker (controlled shutdown), start the other
    kind on its log.dirs and broker.id, wait until every ISR is complete."""
    cluster.stop(broker_id)
    wait_for(lambda: cluster.controller_id() >= 0, 120, "a controller")
    history.append(controller_kind(cluster))
    if kind == MILLRACE:
        cluster.start_millrace(broker_id)
    else:
        cluster.start_kafka(broker_id)
    wait_brokers_registered(cluster, BROKERS, 180)
    cluster.wait_listening(broker_id)
    wait_in_sync(cluster, f"broker {broker_id} as {kind}")
    history.append(controller_kind(cluster))


# --------------------------------------------------------------------------- the test


def test_rolling_migration_kafka_to_millrace_and_back(tmp_path: Path) -> None:
    cluster = MixedCluster(tmp_path, BROKER_PROPS)
    load: Load | None = None
    try:
        cluster.start_zookeeper()
        cluster.start_kafka(3)  # the first Kafka broker becomes the controller
        wait_brokers_registered(cluster, [3])
        cluster.start_kafka(1)
        cluster.start_kafka(2)
        wait_brokers_registered(cluster, BROKERS)
        for b in BROKERS:
            cluster.wait_listening(b)
        history = [controller_kind(cluster)]
        assert history[0] == (3, KAFKA)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for name in (TOPIC, TXN_TOPIC):
            for f in admin.create_topics([NewTopic(name, PARTITIONS, 3)]).values():
                f.result(60)
        load = Load(cluster.bootstrap)
        load.start()
        wait_for(lambda: load is not None and load.consumed > 200, 120, "the load running")
        wait_in_sync(cluster, "Kafka cluster under load")

        # Kafka -> Millrace: the controller's broker last, so the role moves to Millrace
        for broker_id in (1, 2, 3):
            replace(cluster, broker_id, MILLRACE, history)
        assert {n.kind for n in cluster.nodes.values()} == {MILLRACE}
        # Millrace -> Kafka: the controller's broker last, so the role moves back to Kafka
        order = sorted(BROKERS, key=lambda b: b == cluster.controller_id())
        for broker_id in order:
            replace(cluster, broker_id, KAFKA, history)
        assert {n.kind for n in cluster.nodes.values()} == {KAFKA}

        consumed = load.consumed
        wait_for(
            lambda: load is not None and load.consumed >= consumed + 100,
            120,
            "the load running on the Kafka cluster again",
        )
        load.stop()
        kinds = [kind for _b, kind in history]
        transitions = {(a, b) for a, b in itertools.pairwise(kinds) if a != b}
        assert (KAFKA, MILLRACE) in transitions and (MILLRACE, KAFKA) in transitions, history
        check_records(cluster, load)
        check_group(cluster, load)
        check_transactions(cluster, load)
    finally:
        if load is not None:
            load.stopping.set()
        cluster.close()


def read_all(
    cluster: MixedCluster, topic: str, isolation: str = "read_uncommitted"
) -> dict[int, list[tuple[int, int]]]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"check-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 120
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out[msg.partition()].append((int(msg.value()), msg.offset()))
                idle_since = time.monotonic()
            elif (
                all((out[p][-1][1] + 1 if out[p] else 0) >= ends[p] for p in range(PARTITIONS))
                or time.monotonic() - idle_since > 10
            ):
                break
        return out
    finally:
        consumer.close()


def check_records(cluster: MixedCluster, load: Load) -> None:
    assert not load.produce_errors, load.produce_errors[:3]
    got = read_all(cluster, TOPIC)
    total = 0
    for p in range(PARTITIONS):
        dups = [v for v, k in Counter(v for v, _o in got[p]).items() if k > 1]
        acked = sorted(load.acked[p], key=lambda vo: vo[1])
        missing = sorted({v for v, _o in acked} - {v for v, _o in got[p]})
        assert not dups and not missing, (
            f"partition {p}: {len(missing)} acknowledged records lost (e.g. {missing[:5]}), "
            f"{len(dups)} duplicated (e.g. {dups[:5]})"
        )
        assert got[p] == acked, f"partition {p}: records not at their acknowledged offsets"
        total += len(acked)
    assert total == load.sent > 1000


def check_group(cluster: MixedCluster, load: Load) -> None:
    assert load.committed, "the group committed nothing"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP})
    try:
        found = consumer.committed(
            [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=60
        )
    finally:
        consumer.close()
    now = {tp.partition: tp.offset for tp in found if tp.offset >= 0}
    assert now == load.committed, (now, load.committed)


def check_transactions(cluster: MixedCluster, load: Load) -> None:
    assert load.committed_txn_values and load.aborted_txn_values
    committed = read_all(cluster, TXN_TOPIC, "read_committed")
    seen = sorted(v for p in committed.values() for v, _o in p)
    assert seen == sorted(load.committed_txn_values)
    assert not set(seen) & set(load.aborted_txn_values)
