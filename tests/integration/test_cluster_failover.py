"""Failover on a 3-broker cluster (issue 3, "Tests that must exist"), with real processes.

Every test starts its own cluster (``cluster_factory``, 3 brokers, ZooKeeper session timeout
6 s, ``replica.lag.time.max.ms`` 5 s) and most run an idempotent acks=all confluent-kafka
producer in a thread (the harness's ``AckedProducer``) that writes sequential values per
partition and records what was acknowledged, while brokers are killed and restarted:

* SIGKILL of a partition leader, later restarted: a new leader is elected, production goes
  on, the restarted broker rejoins every ISR, every acknowledged record is readable exactly
  once and in order per partition, and all replicas hold identical logs.
* Controlled shutdown (SIGTERM): leadership and ISR membership are moved away (in ZooKeeper)
  before the process exits; nothing acknowledged is lost.
* Rolling restart of all brokers (SIGTERM + start, full ISR in between): nothing lost or
  duplicated.
* Fast crash failover (docs/failover.md): with the default session timeout, a SIGKILLed
  leader and then the SIGKILLed controller lose their leaderships while their registrations
  are still in ZooKeeper, their restarts register at once, a paused leader is not failed
  over, and a second broker with a running broker's id is refused at once.
* SIGKILL of the controller: another broker takes over with a higher ``/controller_epoch``,
  creates topics, and moves a leader by preferred leader election (ElectLeaders).
* The leader SIGKILL runs on a SASL_SSL cluster, the controller SIGKILL on a mutual-TLS one
  (issue 28): every inter-broker request goes over the secured listener. Those two run in
  ``make fault`` (marker long); ``make test`` runs the fast-failover test, on SASL_SSL, which
  kills a leader and the controller too.
* KIP-101 divergent logs: (a) a leader with acks=1 records its paused followers never saw is
  killed, a follower takes over and writes more, the old leader returns and truncates;
  (b) a fast double leader change under load. Both end with identical logs everywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition

from broker.protocol import records as rec
from tests.harness.acked_producer import AckedProducer
from tests.harness.ports import free_port
from tests.harness.processes import kill_pid

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.harness.cluster import Cluster

BROKERS = [1, 2, 3]
FAULT_PROPS = {
    # a SIGKILLed broker is noticed when its ZooKeeper session expires (6000 ms is
    # ZooKeeper's minimum with the default tickTime)
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "5000",
    "min.insync.replicas": "2",
    # the last broker of `cluster down` cannot hand its leadership to anyone: don't wait 3 x 5 s
    "controlled.shutdown.retry.backoff.ms": "500",
}

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(300)]


# --- helpers -----------------------------------------------------------------------------------


def run_producer(c: Cluster, topic: str, partitions: int, rate: int = 300) -> AckedProducer:
    """The harness's idempotent acks=all producer, in the background at about ``rate``
    records/s (small values: ``b"<p>:<seq>:"``)."""
    return AckedProducer(c, topic, partitions, value_bytes=0).start(rate)


def start_cluster(
    cluster_factory: Callable[..., Cluster],
    extra: dict[str, str] | None = None,
    security: str | None = None,
) -> Cluster:
    return cluster_factory({**FAULT_PROPS, **(extra or {})}, brokers=3, security=security)


def make_topic(c: Cluster, topic: str, partitions: int = 3) -> dict[int, Any]:
    c.create_topic(topic, partitions, replication_factor=3)
    return c.wait_isr_complete(topic, 60, brokers=BROKERS)


def partition_state(c: Cluster, topic: str, partition: int) -> dict[str, Any]:
    """``/brokers/topics/<t>/partitions/<p>/state`` from ZooKeeper."""
    data = c.zk_get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    assert data is not None, f"no partition state znode for {topic}[{partition}]"
    return json.loads(data)  # type: ignore[no-any-return]


def wait_broker_out(c: Cluster, topic: str, broker_id: int, timeout_s: float = 60) -> None:
    """Until Metadata shows ``broker_id`` leading no partition of ``topic`` and in no ISR,
    with every partition led."""

    def gone() -> bool:
        return all(
            leader >= 0 and leader != broker_id and broker_id not in isr
            for leader, _replicas, isr in c.describe(topic).values()
        )

    c.wait_for(gone, timeout_s, f"broker {broker_id} out of {topic}'s leaders and ISRs")


def check_identical_logs(c: Cluster, topic: str, partitions: int) -> None:
    """All three replicas of every partition hold the same batches, offsets dense from 0."""
    for p in range(partitions):
        common = c.wait_replicas_identical(topic, p, BROKERS, 90)
        next_offset = 0
        for base, last, epoch, _crc in common:
            assert base == next_offset, f"{topic}[{p}]: batch at {base}, expected {next_offset}"
            assert epoch >= 0, f"{topic}[{p}]: batch {base} without partitionLeaderEpoch"
            next_offset = last + 1


def controlled_stop(c: Cluster, broker_id: int) -> None:
    """SIGTERM one broker (``cluster stop-broker``); it must exit by itself, cleanly (the
    command falls back to SIGKILL after 60 s, which would not be a controlled shutdown)."""
    started = time.monotonic()
    c.stop_broker(hard=False, broker_id=broker_id)
    took = time.monotonic() - started
    markers = {d: (d / ".kafka_cleanshutdown").exists() for d in c.log_dirs(broker_id)}
    assert took < 30 and all(markers.values()), (
        f"broker {broker_id} did not exit cleanly on SIGTERM: took {took:.1f}s, "
        f".kafka_cleanshutdown present per log dir {markers}"
    )


def leader_of(c: Cluster, topic: str, partition: int, not_in: tuple[int, ...] = ()) -> int:
    """Wait until the partition has a leader outside ``not_in``; return it."""

    def leader() -> int | None:
        lead = c.describe(topic)[partition][0]
        return lead if lead >= 0 and lead not in not_in else None

    return int(c.wait_for(leader, 60, f"a leader of {topic}[{partition}] not in {not_in}"))


# --- tests -----------------------------------------------------------------------------------


@pytest.mark.long  # make fault; make test has test_dead_processes_fail_over_...
def test_leader_sigkill_and_restart(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    # secured: replication, the controller's requests and the producer over SASL_SSL with
    # SCRAM (the plaintext paths are what every other test here runs)
    c = start_cluster(cluster_factory, security="sasl_ssl")
    partitions = 3
    make_topic(c, topic_name, partitions)
    producer = run_producer(c, topic_name, partitions)
    try:
        producer.wait_progress(200, 60, "before the kill")
        victim = leader_of(c, topic_name, 0)
        c.stop_broker(hard=True, broker_id=victim)
        new_leader = leader_of(c, topic_name, 0, not_in=(victim,))
        assert new_leader in BROKERS
        wait_broker_out(c, topic_name, victim)
        producer.wait_progress(200, 60, f"after SIGKILL of leader {victim}")

        c.start_broker(victim)
        c.wait_isr_complete(topic_name, 90, brokers=BROKERS)
        producer.wait_progress(200, 60, f"after broker {victim} rejoined")
    finally:
        producer.stop()
    producer.check_served(c)
    check_identical_logs(c, topic_name, partitions)


def wait_failed_over_before_expiry(c: Cluster, topic: str, dead: int) -> None:
    """Until a live broker's Metadata shows ``dead`` leading nothing of ``topic`` and in no
    ISR, checking at that moment that ``dead``'s registration is still in ZooKeeper: the
    move came from the controller's watch of the process (docs/failover.md), not from the
    expiry of its ZooKeeper session."""
    via = next(b for b in BROKERS if b != dead)

    def moved() -> bool:
        try:
            view = c.describe_via(via, topic)
        except (LookupError, OSError):
            return False
        return all(ld >= 0 and ld != dead and dead not in isr for ld, _r, isr in view.values())

    c.wait_for(moved, 60, f"broker {dead} out of {topic}'s leaders and ISRs")
    registration = c.zk_get(f"/brokers/ids/{dead}")
    assert registration is not None, (
        f"broker {dead}'s leaderships moved only once its ZooKeeper session expired"
    )


def test_dead_processes_fail_over_before_their_sessions_expire(
    cluster_factory: Callable[..., Cluster], topic_name: str, tmp_path: Path
) -> None:
    # Kafka's default session timeout (ZooKeeper caps it at 20 ticks): the fast path must
    # not need a short one
    # secured (issue 28): the controller's watch of each broker completes a TLS handshake,
    # and every request of the fail-over goes over SASL_SSL
    c = start_cluster(cluster_factory, {"zookeeper.session.timeout.ms": "18000"}, "sasl_ssl")
    partitions = 3
    make_topic(c, topic_name, partitions)
    producer = run_producer(c, topic_name, partitions)
    try:
        producer.wait_progress(200, 60, "before the faults")
        controller = c.controller_id()
        led = {p: leader for p, (leader, _r, _i) in c.describe(topic_name).items()}
        victim = next(b for b in led.values() if b != controller)

        # a paused process keeps its sockets: nothing moves (no false failover)
        states = {p: partition_state(c, topic_name, p) for p in range(partitions)}
        with c.paused(victim):
            time.sleep(3)
        assert {p: partition_state(c, topic_name, p) for p in range(partitions)} == states, (
            f"broker {victim} was failed over while only paused"
        )
        producer.wait_progress(100, 60, f"after broker {victim} was resumed")

        # a SIGKILLed leader, then the SIGKILLed controller (also a leader): each is failed
        # over while its registration lives on, and restarted at once (the new process
        # replaces its predecessor's stale registration)
        for dead in (victim, controller):
            epoch = c.zk_stat_czxid(f"/brokers/ids/{dead}")
            c.stop_broker(hard=True, broker_id=dead)
            wait_failed_over_before_expiry(c, topic_name, dead)
            producer.wait_progress(200, 60, f"after SIGKILL of broker {dead}")
            c.start_broker(dead)
            assert c.zk_stat_czxid(f"/brokers/ids/{dead}") != epoch
            c.wait_isr_complete(topic_name, 90, brokers=BROKERS)
            producer.wait_progress(200, 60, f"after broker {dead} rejoined")
        assert c.controller_id() != controller
    finally:
        producer.stop()
    producer.check_served(c)
    check_identical_logs(c, topic_name, partitions)
    check_duplicate_id_refused(c, tmp_path)


def check_duplicate_id_refused(c: Cluster, tmp_path: Path) -> None:
    """A second broker with a running broker's id stops at once with a message that names
    the running one (it does not wait for a session to expire)."""
    config = tmp_path / "duplicate.properties"
    config.write_text(
        "broker.id=1\n"
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}\n"
        f"log.dirs={tmp_path / 'duplicate-data'}\n"
        f"zookeeper.connect={c.json['zookeeper']}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.cli.main", "broker", "start", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        _out, err = proc.communicate(timeout=60)
    finally:
        kill_pid(proc.pid)
    text = err.decode(errors="replace")
    assert proc.returncode == 1, text
    assert "broker id 1 is already registered in ZooKeeper by a running broker" in text, text
    assert c.broker_address(1).split(":")[-1] in text, text


def test_controlled_shutdown_moves_leadership_first(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = start_cluster(cluster_factory)
    partitions = 3
    make_topic(c, topic_name, partitions)
    producer = run_producer(c, topic_name, partitions)
    try:
        producer.wait_progress(200, 60, "before the shutdown")
        victim = leader_of(c, topic_name, 0)
        current = c.describe(topic_name)
        led = [p for p, (leader, _r, _i) in current.items() if leader == victim]
        epochs = {p: partition_state(c, topic_name, p)["leader_epoch"] for p in led}

        controlled_stop(c, victim)
        # the controller wrote the new leaders and ISRs before it let the broker exit
        for p in range(partitions):
            state = partition_state(c, topic_name, p)
            assert state["leader"] != victim and state["leader"] in BROKERS, (p, state)
            assert victim not in state["isr"], (p, state)
            if p in led:
                assert state["leader_epoch"] > epochs[p], (p, epochs[p], state)
        wait_broker_out(c, topic_name, victim, timeout_s=10)
        producer.wait_progress(200, 60, f"after the controlled shutdown of {victim}")

        c.start_broker(victim)
        c.wait_isr_complete(topic_name, 90, brokers=BROKERS)
        producer.wait_progress(200, 60, f"after broker {victim} rejoined")
    finally:
        producer.stop()
    producer.check_served(c)
    check_identical_logs(c, topic_name, partitions)


@pytest.mark.long  # 26 s: make fault (make test keeps under 30 minutes)
def test_rolling_restart_under_load(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = start_cluster(cluster_factory)
    partitions = 3
    make_topic(c, topic_name, partitions)
    producer = run_producer(c, topic_name, partitions)
    try:
        producer.wait_progress(200, 60, "before the rolling restart")
        for b in BROKERS:
            controlled_stop(c, b)
            for p in range(partitions):
                state = partition_state(c, topic_name, p)
                assert state["leader"] != b and b not in state["isr"], (b, p, state)
            producer.wait_progress(100, 60, f"while broker {b} is down")
            c.start_broker(b)
            c.wait_isr_complete(topic_name, 90, brokers=BROKERS)
            producer.wait_progress(100, 60, f"after broker {b} restarted")
    finally:
        producer.stop()
    producer.check_served(c)
    check_identical_logs(c, topic_name, partitions)


@pytest.mark.long  # make fault; make test has test_dead_processes_fail_over_...
def test_controller_sigkill_failover(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    # secured: the new controller reaches every broker over mutual TLS
    c = start_cluster(cluster_factory, {"auto.leader.rebalance.enable": "false"}, "ssl")
    partitions = 3
    desc = make_topic(c, topic_name, partitions)
    old = c.controller_id()
    assert old in BROKERS, f"no controller: {old}"
    epoch_before = c.controller_epoch()

    c.stop_broker(hard=True, broker_id=old)

    def new_controller() -> int | None:
        seen = {b: c.controller_id(via=b) for b in c.serving_ids()}
        ids = set(seen.values())
        if len(ids) == 1 and (cid := ids.pop()) not in (old, -1):
            return cid
        return None

    new = int(c.wait_for(new_controller, 60, f"a controller other than {old}, agreed by all"))
    epoch_after = c.controller_epoch()
    assert epoch_after > epoch_before, (epoch_before, epoch_after)
    znode = c.zk_get("/controller")
    assert znode is not None and json.loads(znode)["brokerid"] == new, znode

    # the new controller brings a new topic online (2 live brokers: RF 2)
    created = f"{topic_name}-after"
    c.create_topic(created, 2, replication_factor=2)
    for leader, replicas, _isr in c.wait_isr_complete(created, 60).values():
        assert old not in replicas and leader in replicas, c.describe(created)
    wait_broker_out(c, topic_name, old)

    # ... and moves a leader: the returning broker is preferred for some partitions
    c.start_broker(old)
    after = c.wait_isr_complete(topic_name, 90, brokers=BROKERS)
    preferred_by_old = [p for p, (_l, replicas, _i) in desc.items() if replicas[0] == old]
    assert preferred_by_old, f"setup: broker {old} is no preferred leader in {desc}"
    assert all(after[p][0] != old for p in preferred_by_old), (
        f"broker {old} leads again without an election (auto rebalance is off): {after}"
    )
    futures = c.admin().client.elect_leaders(
        ElectionType.PREFERRED,
        [TopicPartition(topic_name, p) for p in preferred_by_old],
        # no timeout keywords: confluent-kafka 2.16's C binding rejects them (SystemError)
    )
    results = futures.result(timeout=90)
    failed = {f"{tp.topic}[{tp.partition}]": e for tp, e in results.items() if e is not None}
    assert not failed, f"preferred election failed: {failed}"
    c.wait_for(
        lambda: all(c.describe(topic_name)[p][0] == old for p in preferred_by_old),
        30,
        f"broker {old} leading {topic_name} partitions {preferred_by_old} again",
    )
    assert c.controller_id() == new, "the controller moved back without a failure"

    # and the cluster still serves the topic written before the failover
    p = Producer(c.conf({"acks": "all", "enable.idempotence": True}))
    for i in range(30):
        p.produce(topic_name, f"v{i}".encode(), partition=i % partitions)
    assert p.flush(60) == 0
    served = c.consume(topic_name, list(range(partitions)))
    assert sum(len(v) for v in served.values()) == 30


@pytest.mark.long  # make fault (make test budget, issue 29)
def test_kip101_leader_with_unreplicated_data(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    # ISR must not shrink while the followers are paused (large replica.lag.time.max.ms),
    # and the pause must stay well below the ZooKeeper session timeout
    c = cluster_factory(
        {
            "zookeeper.session.timeout.ms": "10000",
            "replica.lag.time.max.ms": "60000",
            "min.insync.replicas": "1",
            "controlled.shutdown.retry.backoff.ms": "500",
        },
        brokers=3,
    )
    leader, replicas, _isr = make_topic(c, topic_name, 1)[0]
    followers = [b for b in replicas if b != leader]
    epoch = partition_state(c, topic_name, 0)["leader_epoch"]

    acked = Producer(c.conf({"acks": "all", "enable.idempotence": True, "linger.ms": 5}))
    first = [f"first-{i:04d}".encode() for i in range(300)]
    for v in first:
        acked.produce(topic_name, v, partition=0)
    assert acked.flush(60) == 0
    c.wait_replicas_identical(topic_name, 0, BROKERS, 30)

    leader_pid = c.broker_pid(leader)
    with c.paused(*followers):
        time.sleep(1.0)  # long-poll fetches in flight return (empty) before the writes
        isr = c.describe_via(leader, topic_name)[0][2]
        assert sorted(isr) == BROKERS, f"setup: ISR shrank to {isr} during the pause"
        ts = int(time.time() * 1000)
        with c.raw(broker_id=leader) as conn:
            for k in range(3):
                batch = rec.encode_batch(
                    [
                        rec.SimpleRecord(value=f"unreplicated-{k}-{i}".encode(), timestamp=ts)
                        for i in range(10)
                    ]
                )
                pr = conn.produce_v3(topic_name, 0, batch, acks=1)
                assert int(pr.error_code) == 0, pr
                assert int(pr.base_offset) == len(first) + 10 * k, pr
        os.kill(leader_pid, signal.SIGKILL)
    c.stop_broker(hard=True, broker_id=leader)  # records the death in cluster.json

    new_leader = leader_of(c, topic_name, 0, not_in=(leader,))
    assert new_leader in followers
    assert partition_state(c, topic_name, 0)["leader_epoch"] > epoch

    second = [f"second-{i:04d}".encode() for i in range(300)]
    for v in second:
        acked.produce(topic_name, v, partition=0)
    assert acked.flush(90) == 0

    c.start_broker(leader)
    c.wait_isr_complete(topic_name, 90, brokers=BROKERS)
    common = c.wait_replicas_identical(topic_name, 0, BROKERS, 90)
    assert common[-1][1] + 1 == len(first) + len(second), (
        f"log ends at {common[-1][1] + 1}; the old leader's unreplicated records were kept "
        f"or acknowledged ones lost"
    )
    check_identical_logs(c, topic_name, 1)
    served = [m.value() for m in c.consume(topic_name, [0])[0]]
    assert served == first + second, (
        f"served {len(served)} records, {sum(v.startswith(b'unreplicated') for v in served)} "
        f"of them never replicated"
    )


@pytest.mark.long  # 27 s: make fault (test_kip101_leader_with_unreplicated_data stays in make test)
def test_kip101_fast_double_leader_change(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = start_cluster(cluster_factory, {"min.insync.replicas": "1"})
    make_topic(c, topic_name, 1)
    producer = run_producer(c, topic_name, 1, rate=200)
    try:
        producer.wait_progress(200, 60, "before the first kill")
        first = leader_of(c, topic_name, 0)
        c.stop_broker(hard=True, broker_id=first)
        second = leader_of(c, topic_name, 0, not_in=(first,))
        c.stop_broker(hard=True, broker_id=second)  # at once: it may lack the latest writes
        third = leader_of(c, topic_name, 0, not_in=(first, second))
        assert third not in (first, second)
        producer.wait_progress(100, 60, f"with {third} the only replica left")

        c.start_broker(first)
        c.start_broker(second)
        c.wait_isr_complete(topic_name, 90, brokers=BROKERS)
        producer.wait_progress(100, 60, "after both returned")
    finally:
        producer.stop()
    producer.check_served(c)
    check_identical_logs(c, topic_name, 1)
