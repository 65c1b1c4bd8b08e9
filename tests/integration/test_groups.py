"""Consumer groups with real confluent-kafka consumers on a 3-broker cluster: partitions are
shared out, a member that leaves cleanly or crashes triggers a rebalance after which the
others own everything, and manual commits after processing leave the committed offsets at
the log end offsets with every record processed at least once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.harness.cluster import REPO
from tests.harness.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(400)]

PROPS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "5000",
    "controlled.shutdown.retry.backoff.ms": "500",
    "offsets.topic.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
}
PARTITIONS = 6
RECORDS = 3000

CRASHING_MEMBER = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "enable.auto.commit": False, "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.2)  # consumes (never commits) until SIGKILLed
"""


class Member:
    """One group member in a thread: processes records, commits after processing, and
    records which partitions it owns."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str) -> None:
        self.name = name
        self.owned: set[int] = set()
        self.seen: list[tuple[int, int]] = []
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        self.consumer.subscribe(
            [topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _on_assign(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.owned |= {p.partition for p in parts}

    def _on_revoke(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.owned -= {p.partition for p in parts}

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
                continue
            self.seen.append((msg.partition(), msg.offset()))
            try:
                self.consumer.commit(message=msg, asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - a commit racing a rebalance may fail
                self.errors.append(f"commit: {exc}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()  # LeaveGroup


def _produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _exclusive(members: list[Member]) -> set[int] | None:
    owned = [m.owned for m in members]
    union = set().union(*owned)
    if sum(len(o) for o in owned) != len(union):
        raise AssertionError(f"a partition owned twice: {[sorted(o) for o in owned]}")
    return union


def test_group_shares_partitions_rebalances_and_commits(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = cluster_factory(PROPS, brokers=3)
    c.create_topic(topic_name, partitions=PARTITIONS, replication_factor=3)
    c.wait_isr_complete(topic_name)
    group = f"{topic_name}-group"
    _produce(c.bootstrap, topic_name, 0, RECORDS)

    members = [Member(f"m{i}", c.bootstrap, group, topic_name) for i in range(3)]
    crasher = subprocess.Popen(
        [sys.executable, "-c", CRASHING_MEMBER, c.bootstrap, group, topic_name],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        # the partitions are shared among the four members (the crashing one in its own
        # process): each in-process member owns some, none owns a partition another owns
        def shared() -> bool:
            _exclusive(members)
            return all(m.owned for m in members)

        try:
            wait_for(shared, 90, "3 in-process members each owning partitions")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; owned: {[sorted(m.owned) for m in members]}, "
                f"errors: {[m.errors[:3] for m in members]}"
            ) from None

        # a member leaves cleanly: the others take its partitions
        leaving = members.pop()
        leaving.close()
        _produce(c.bootstrap, topic_name, RECORDS, RECORDS)
        # the crashing member dies without LeaveGroup: its session expires
        crasher.send_signal(signal.SIGKILL)
        crasher.wait(10)
        wait_for(
            lambda: _exclusive(members) == set(range(PARTITIONS)),
            90,
            "the remaining members owning every partition",
        )
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group})
        try:

            def caught_up() -> bool:
                committed = consumer.committed(
                    [TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=10
                )
                ends = [
                    consumer.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10)[1]
                    for p in range(PARTITIONS)
                ]
                return [tp.offset for tp in committed] == ends

            wait_for(caught_up, 120, "committed offsets equal to the log end offsets")
        finally:
            consumer.close()
        processed = {v for m in [*members, leaving] for v in m.seen}
        expected = {(p, o) for p in range(PARTITIONS) for o in range((2 * RECORDS) // PARTITIONS)}
        assert expected <= processed, f"{len(expected - processed)} records never processed"
    finally:
        if crasher.poll() is None:
            crasher.kill()
            crasher.wait(10)
        for m in members:
            m.close()
