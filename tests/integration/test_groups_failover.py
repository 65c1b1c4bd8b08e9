"""Group coordinator failover: a confluent-kafka group consumer commits offsets synchronously
after processing each record while the broker that coordinates its group (the leader of the
group's ``__consumer_offsets`` partition) is SIGKILLed. Every commit the coordinator
acknowledged before the kill survives (acks=all replication of the offsets partition), the
group carries on with the new coordinator (the member keeps or regains an assignment and its
commits advance), and at the end the committed offsets equal the log end offsets.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from broker.coordinator.group.offsets_topic import partition_for
from tests.harness.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(300)]

OFFSETS_PARTITIONS = 3
PROPS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "5000",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "group.initial.rebalance.delay.ms": "0",
}
PARTITIONS = 3
RATE_PER_S = 150  # records produced per second while the consumer commits


class CommittingMember:
    """A group consumer in a thread: processes each record, then commits it synchronously.
    ``acked`` holds, per partition, the highest offset a successful commit acknowledged."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        self.acked: dict[int, int] = {}
        self.processed: dict[int, int] = {}  # next offset to commit, per partition
        self.commits = 0
        self.assigns: list[list[int]] = []
        self.assignment: list[int] = []  # the consumer's assignment, as its own thread saw it
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": "failover-member",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign)
        self.thread = threading.Thread(target=self._run, name="failover-member", daemon=True)
        self.thread.start()

    def _on_assign(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.assigns.append(sorted(p.partition for p in parts))

    def _commit(self, offsets: dict[int, int]) -> None:
        try:
            result = self.consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as exc:  # the coordinator is gone or moving: retried later
            self.errors.append(f"commit: {exc}")
            return
        with self.lock:
            for tp in result or []:
                if tp.error is not None:
                    self.errors.append(f"commit {tp.partition}: {tp.error}")
                    continue
                if tp.offset > self.acked.get(tp.partition, -1):
                    self.acked[tp.partition] = tp.offset
            self.commits += 1

    def _run(self) -> None:
        # only this thread calls the consumer: a synchronous commit in one thread and a call
        # such as assignment() in another can deadlock inside the client
        while not self.stop.is_set():
            msg = self.consumer.poll(0.1)
            self.assignment = sorted(tp.partition for tp in self.consumer.assignment())
            if msg is None:
                # idle: make sure everything processed is committed (an earlier commit may
                # have failed while the coordinator moved)
                with self.lock:
                    behind = {p: o for p, o in self.processed.items() if self.acked.get(p, -1) < o}
                if behind:
                    self._commit(behind)
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
                continue
            self.processed[msg.partition()] = msg.offset() + 1
            self._commit({msg.partition(): msg.offset() + 1})

    def snapshot(self) -> tuple[dict[int, int], int]:
        with self.lock:
            return dict(self.acked), self.commits

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()


class Feeder:
    """Produces to the topic at a steady rate (acks=all, idempotent: a batch retried after
    the SIGKILL is not written twice) until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.sent = 0
        self.stop = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "enable.idempotence": True,
            }
        )
        self.thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for _ in range(RATE_PER_S // 10):
                self.producer.produce(
                    self.topic, value=str(self.sent).encode(), partition=self.sent % PARTITIONS
                )
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.1)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.producer.flush(60) == 0, "records not delivered"


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, read by a fresh consumer (no subscription)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        for tp in got:
            if tp.error is not None:
                raise AssertionError(f"committed() {tp.partition}: {tp.error}")
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def _log_ends(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-watermarks"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        c.close()


@pytest.mark.long  # make fault (make test budget, issue 29)
def test_commits_survive_coordinator_sigkill(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = cluster_factory(PROPS, brokers=3)
    c.create_topic(topic_name, partitions=PARTITIONS, replication_factor=3)
    c.wait_isr_complete(topic_name)
    group = f"{topic_name}-group"

    feeder = Feeder(c.bootstrap, topic_name)
    member = CommittingMember(c.bootstrap, group, topic_name)
    killed: int | None = None
    try:
        wait_for(
            lambda: member.snapshot()[1] >= 50,
            90,
            f"the member committing (errors so far: {member.errors[:5]})",
        )
        # the offsets partition is fully replicated, so acks=all commits are on every replica
        c.wait_isr_complete("__consumer_offsets")
        offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
        coordinator = c.describe("__consumer_offsets")[offsets_partition][0]
        assert coordinator in c.broker_ids(), f"no leader for {offsets_partition}"

        c.stop_broker(hard=True, broker_id=coordinator)
        killed = coordinator
        acked_at_kill, commits_at_kill = member.snapshot()
        assert acked_at_kill, "no commit acknowledged before the kill"

        new_coordinator = wait_for(
            lambda: (
                (leader := c.describe("__consumer_offsets")[offsets_partition][0])
                not in (-1, coordinator)
                and leader
            ),
            60,
            f"a new leader for __consumer_offsets[{offsets_partition}]",
        )

        # every acknowledged commit survived the coordinator's death
        def survived() -> dict[int, int]:
            committed = _committed(c.bootstrap, group, topic_name)
            lost = {p: (o, committed.get(p)) for p, o in acked_at_kill.items() if committed[p] < o}
            assert not lost, (
                f"acknowledged commits lost ({{partition: (acked, committed)}}): {lost}"
            )
            return committed

        wait_for(survived, 60, "the committed offsets readable from the new coordinator")
        # one more read after the fact: what the new coordinator serves stays at or past
        # every commit acknowledged before the kill
        survived()

        # the group carries on: the member holds an assignment and its commits advance
        wait_for(
            lambda: member.snapshot()[1] >= commits_at_kill + 50,
            90,
            f"commits advancing on the new coordinator {new_coordinator} "
            f"(errors: {member.errors[-5:]})",
        )
        assert member.assignment, "the member has no assignment after failover"
        acked_later, _ = member.snapshot()
        assert any(acked_later[p] > acked_at_kill.get(p, -1) for p in acked_later)

        feeder.finish()
        ends = _log_ends(c.bootstrap, topic_name)
        # nothing the feeder sent is missing (a duplicate around the leader change is
        # librdkafka's, confluentinc/librdkafka#4953, even with idempotence)
        assert sum(ends.values()) >= feeder.sent, (ends, feeder.sent)

        def caught_up() -> bool:
            return _committed(c.bootstrap, group, topic_name) == ends

        try:
            wait_for(caught_up, 90, "committed offsets equal to the log end offsets")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; committed {_committed(c.bootstrap, group, topic_name)}, "
                f"log ends {ends}, errors {member.errors[-5:]}"
            ) from None
        assigned = sorted({p for a in member.assigns for p in a})
        assert assigned == list(range(PARTITIONS)), f"assignments seen: {member.assigns}"
    finally:
        feeder.stop.set()
        member.close()
        if killed is not None:
            c.start_broker(killed)
    c.wait_isr_complete("__consumer_offsets", timeout_s=90)
    assert _committed(c.bootstrap, group, topic_name) == _log_ends(c.bootstrap, topic_name)
