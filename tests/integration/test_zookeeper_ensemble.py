"""A ZooKeeper ensemble (issue 29 part 2): ``millrace cluster up --zookeepers 3`` with real
ZooKeeper nodes, real broker processes and real clients (confluent-kafka).

* Smoke (``make test``): one broker on a 3-node ensemble; the node the broker's session is
  connected to is stopped, and produce (acks=all), consume and topic creation go on.
* A broker whose ``zookeeper.connect`` names no reachable node fails at start with one line
  naming the connect string.
* The ensemble scenario (``make fault``: marked long and fault; one module-scoped cluster of
  3 brokers on 3 nodes): with the node the controller's session uses stopped, acks=all
  produce and consume, a consumer group's offset commits, a transaction and a leader
  election (SIGKILL of a partition leader) all work, and every broker keeps its
  registration; then 2 of the 3 nodes are stopped (no quorum: the leaders still take a
  plain acks=all producer's records and serve fetches) past the brokers' session timeout
  and started again, and the cluster recovers: every broker registered, a controller,
  idempotent produce, consume and topic creation.

Every process is stopped by its pid (``Cluster.down``), also when a test fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.harness.cluster import REPO, Cluster, start_cluster
from tests.harness.ports import free_port
from tests.harness.processes import kill_pid
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 6000
ENSEMBLE_PROPS = {
    # a SIGKILLed broker is noticed when its ZooKeeper session expires
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "replica.lag.time.max.ms": "5000",
    "min.insync.replicas": "2",
    # the last broker of `cluster down` cannot hand its leadership to anyone: don't wait 3 x 5 s
    "controlled.shutdown.retry.backoff.ms": "500",
}
SERVING = ("leader", "follower")


# --- helpers -------------------------------------------------------------------------------------


def produce(
    cluster: Cluster,
    topic: str,
    values: list[bytes],
    partitions: int = 1,
    idempotent: bool = True,
) -> None:
    """acks=all (idempotent unless told); every record acknowledged without error (flush
    within 60 s)."""
    errors: list[Any] = []
    producer = Producer(
        cluster.conf({"acks": "all", "enable.idempotence": idempotent, "message.timeout.ms": 60000})
    )
    for i, value in enumerate(values):
        producer.produce(
            topic,
            value,
            partition=i % partitions,
            on_delivery=lambda err, _msg: err is not None and errors.append(err),
        )
        producer.poll(0)
    left = producer.flush(60)
    assert left == 0 and not errors, f"{left} record(s) unacknowledged, errors {errors[:5]}"


def consume_values(
    cluster: Cluster, topic: str, partitions: int = 1, extra: dict[str, object] | None = None
) -> list[bytes]:
    got = cluster.consume(topic, list(range(partitions)), extra=extra)
    return [m.value() for p in sorted(got) for m in got[p]]


def read_committed(cluster: Cluster, topic: str, partitions: int, count: int) -> list[bytes]:
    """``count`` records of ``topic`` read from the beginning with isolation.level
    read_committed (the high watermark is no end mark there: a commit marker sits below
    it and is never delivered)."""
    consumer = Consumer(
        cluster.conf(
            {
                "group.id": f"{topic}-reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
    )
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + 90
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    assert len(got) == count, f"read_committed: {len(got)} of {count} records"
    return got


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def serving_nodes(cluster: Cluster) -> list[int]:
    return sorted(i for i, m in cluster.zk_modes().items() if m in SERVING)


def status(cluster: Cluster) -> dict[str, Any]:
    from broker.cli.cluster import cluster_status

    return cluster_status(cluster.dir)


def wait_registered(cluster: Cluster, timeout_s: float = 90.0) -> dict[str, Any]:
    """Until every broker is registered in ZooKeeper and a controller is elected."""

    def check() -> dict[str, Any] | None:
        st = status(cluster)
        ok = st["zookeeper_serving"] and st["controller"] is not None
        return st if ok and all(b["registered"] for b in st["brokers"]) else None

    result: dict[str, Any] = wait_for(check, timeout_s, "every broker registered, a controller")
    return result


def stop_session_node(cluster: Cluster) -> int:
    """Stop the ZooKeeper node the controller's session is connected to (found with
    ``cons``; node 1 if none lists it); wait until the other two serve. Returns the node."""
    cluster.wait_zk_modes(cluster.zk_node_ids())
    victim = cluster.zk_session_node("/controller") or 1
    cluster.stop_zookeeper(victim)
    others = [n for n in cluster.zk_node_ids() if n != victim]
    modes = cluster.wait_zk_modes(others)
    assert sorted(modes[n] or "" for n in others) == ["follower", "leader"], modes
    return victim


# --- make test: the smoke test and the unreachable connect string ------------------------------


def test_one_zookeeper_node_down_smoke(
    tmp_path_factory: pytest.TempPathFactory, topic_name: str
) -> None:
    """One broker on a 3-node ensemble: cluster.json and the broker's zookeeper.connect name
    every node; with the node the broker's session uses stopped, the broker goes on
    serving acks=all produce, consume and a topic creation (a ZooKeeper write)."""
    c = start_cluster(
        tmp_path_factory.mktemp("ensemble-smoke"),
        {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)},
        brokers=1,
        zookeepers=3,
    )
    try:
        nodes = c.zk_nodes()
        connect = ",".join(f"127.0.0.1:{n['port']}" for n in nodes)
        assert c.json["zookeeper"] == connect
        assert [n["id"] for n in nodes] == [1, 2, 3]
        assert c.json["zookeeper_pid"] == nodes[0]["pid"] and c.json["zk_port"] == nodes[0]["port"]
        for n in nodes:
            data_dir = Path(n["data_dir"])
            assert (data_dir / "myid").read_text().strip() == str(n["id"])
            cfg = (data_dir / "zoo.cfg").read_text()
            assert f"clientPort={n['port']}" in cfg
            assert all(
                f"server.{m['id']}=127.0.0.1:{m['peer_port']}:{m['election_port']}" in cfg
                for m in nodes
            )
        props = Path(c.broker(1)["config"]).read_text()
        assert f"zookeeper.connect={connect}\n" in props

        c.create_topic(topic_name)
        victim = stop_session_node(c)
        st = status(c)
        assert st["zookeeper_serving"] and st["zookeeper_quorum"] == 2
        assert {z["id"]: z["mode"] for z in st["zookeepers"]}[victim] == "down"

        produce(c, topic_name, values("a", 200))
        assert consume_values(c, topic_name) == values("a", 200)
        other = c.create_topic(f"{topic_name}-after")
        produce(c, other, values("b", 10))
        assert consume_values(c, other) == values("b", 10)
        assert c.zk_session_node("/controller") not in (victim, None)
        assert all(b["registered"] for b in status(c)["brokers"])
    finally:
        c.down()


def test_a_broker_without_a_reachable_zookeeper_fails_with_one_line(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    config = tmp_path / "server.properties"
    config.write_text(
        "broker.id=1\n"
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}\n"
        f"log.dirs={tmp_path / 'data'}\n"
        f"zookeeper.connect={dead}\n"
        "zookeeper.connection.timeout.ms=2000\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.cli.main", "broker", "start", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        _out, err = proc.communicate(timeout=60)
    finally:
        kill_pid(proc.pid)
    last = err.decode(errors="replace").strip().splitlines()[-1]
    assert proc.returncode == 1
    assert last.startswith(f"millrace broker: could not connect to ZooKeeper at {dead} "), last


# --- make fault: the ensemble scenario on 3 brokers ----------------------------------------------


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("ensemble"), ENSEMBLE_PROPS, 3, zookeepers=3)
    try:
        yield c
    finally:
        c.down()


def one_node_down(cluster: Cluster) -> int:
    """The ensemble with exactly one node stopped (the controller's, if this test is the
    first to ask), every broker running. Returns the stopped node."""
    cluster.reload()
    stopped = [n["id"] for n in cluster.zk_nodes() if n.get("pid") is None]
    for node in stopped[1:]:
        cluster.start_zookeeper(node)
    cluster.ensure_all_running()
    if stopped:
        cluster.wait_zk_modes([n for n in cluster.zk_node_ids() if n != stopped[0]])
        return int(stopped[0])
    return stop_session_node(cluster)


@pytest.mark.long
@pytest.mark.fault
@pytest.mark.timeout(300)
def test_one_node_down_produce_consume_groups_transactions(
    ensemble: Cluster, topic_name: str
) -> None:
    c = ensemble
    before = {b["id"]: b["broker_epoch"] for b in wait_registered(c)["brokers"]}
    victim = one_node_down(c)
    assert serving_nodes(c) == [n for n in (1, 2, 3) if n != victim]
    topic = c.create_topic(topic_name, partitions=3, replication_factor=3)
    c.wait_isr_complete(topic)

    # acks=all produce and consume
    produce(c, topic, values("v", 300), partitions=3)
    assert sorted(consume_values(c, topic, 3)) == sorted(values("v", 300))

    # a consumer group: join, consume, commit; a new member of the group sees the commits
    group = f"{topic}-group"
    conf = c.conf(
        {
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
        }
    )
    consumer = Consumer(conf)
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 90
        while seen < 300 and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                assert msg.error() is None, msg.error()
                seen += 1
        assert seen == 300, f"the group member read {seen} of 300 records"
        committed = consumer.commit(asynchronous=False)
        assert committed is not None and all(tp.error is None for tp in committed), committed
    finally:
        consumer.close()
    checker = Consumer(conf)
    try:
        offsets = checker.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    finally:
        checker.close()
    assert sum(tp.offset for tp in offsets) == 300, offsets

    # a transaction commits
    txn = Producer(c.conf({"transactional.id": f"{topic}-txn", "transaction.timeout.ms": 60000}))
    txn.init_transactions(60)
    txn.begin_transaction()
    for i, value in enumerate(values("t", 30)):
        txn.produce(topic, value, partition=i % 3)
    txn.commit_transaction(60)
    read = read_committed(c, topic, 3, 330)
    assert sorted(read) == sorted(values("v", 300) + values("t", 30))

    # every broker kept its registration: the sessions moved to the serving nodes
    after = {b["id"]: b["broker_epoch"] for b in wait_registered(c)["brokers"]}
    assert after == before, (before, after)


@pytest.mark.long
@pytest.mark.fault
@pytest.mark.timeout(300)
def test_one_node_down_leader_election(ensemble: Cluster, topic_name: str) -> None:
    c = ensemble
    one_node_down(c)
    topic = c.create_topic(topic_name, replication_factor=3)
    c.wait_isr_complete(topic)
    produce(c, topic, values("before", 100))
    leader = c.leader_of(topic)
    c.stop_broker(hard=True, broker_id=leader)

    def elected() -> int | None:
        led = c.describe(topic)[0][0]
        return led if led >= 0 and led != leader else None

    new_leader = wait_for(elected, 60, f"a new leader for {topic} after SIGKILL of {leader}")
    assert new_leader in [b for b in (1, 2, 3) if b != leader]
    produce(c, topic, values("after", 100))
    assert consume_values(c, topic) == values("before", 100) + values("after", 100)
    c.start_broker(leader)  # registers through the two serving nodes
    c.wait_isr_complete(topic, timeout_s=90)


@pytest.mark.long
@pytest.mark.fault
@pytest.mark.timeout(400)
def test_majority_loss_and_recovery(ensemble: Cluster, topic_name: str) -> None:
    c = ensemble
    c.reload()
    for node in [n["id"] for n in c.zk_nodes() if n.get("pid") is None]:
        c.start_zookeeper(node)
    c.wait_zk_modes([1, 2, 3])
    c.ensure_all_running()
    topic = c.create_topic(topic_name, partitions=3, replication_factor=3)
    c.wait_isr_complete(topic)
    produce(c, topic, values("before", 90), partitions=3)

    # the ZooKeeper leader and one follower go: one node of three cannot serve
    leader = next(i for i, m in c.zk_modes().items() if m == "leader")
    lost = [leader, next(n for n in (1, 2, 3) if n != leader)]
    started = time.monotonic()
    for node in lost:
        c.stop_zookeeper(node)
    c.wait_zk_modes([])
    st = status(c)
    assert not st["zookeeper_serving"] and st["controller"] is None
    modes = {z["id"]: z["mode"] for z in st["zookeepers"]}
    assert [modes[n] for n in lost] == ["down", "down"]
    assert [m for n, m in modes.items() if n not in lost] == ["not serving"]
    # leaders go on serving what needs no ZooKeeper write: a plain acks=all producer (an
    # idempotent one would wait for a producer id block) and fetches
    produce(c, topic, values("during", 30), partitions=3, idempotent=False)
    assert sorted(consume_values(c, topic, 3)) == sorted(
        values("before", 90) + values("during", 30)
    )
    # the outage lasts past the brokers' session timeout (the fault, not an assertion)
    time.sleep(max(0.0, SESSION_TIMEOUT_MS / 1000 + 2 - (time.monotonic() - started)))

    for node in lost:
        c.start_zookeeper(node)
    c.wait_zk_modes([1, 2, 3])
    st = wait_registered(c)
    assert st["zookeeper_serving"] and st["controller"] in (1, 2, 3)
    c.wait_ready()
    c.wait_isr_complete(topic, timeout_s=90)
    produce(c, topic, values("after", 90), partitions=3)
    expected = values("before", 90) + values("during", 30) + values("after", 90)
    assert sorted(consume_values(c, topic, 3)) == sorted(expected)
    fresh = c.create_topic(f"{topic_name}-new", replication_factor=3)
    produce(c, fresh, values("new", 10))
    assert consume_values(c, fresh) == values("new", 10)
