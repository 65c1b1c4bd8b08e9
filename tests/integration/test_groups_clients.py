"""Consumer groups with other clients and features, on a single-broker cluster.

* kafka-python's ``KafkaConsumer`` with ``group_id``: two members share a topic's partitions
  under the range and under the roundrobin assignor (the coordinator selects the protocol and
  passes the leader's assignment through untouched), commit offsets with a metadata string,
  and ``committed(..., metadata=True)`` reads both back.
* Cooperative rebalancing: two kafka-python members on cooperative-sticky, then a
  confluent-kafka (librdkafka) member on cooperative-sticky joins: the rebalance is
  incremental (no member gives up everything) and each partition ends up owned exactly once.
* Static membership (KIP-345) with confluent-kafka: a member with ``group.instance.id`` that
  closes (static members send no LeaveGroup) and comes back within ``session.timeout.ms``
  gets its partitions back without a rebalance (the generation stays, the other member sees
  no revocation); a second consumer using an instance id that is in use fences the first
  (FENCED_INSTANCE_ID).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.errors import KafkaError as KPError
from kafka.structs import OffsetAndMetadata

from broker.coordinator.group.offsets_topic import GroupMetadataValue, partition_for
from broker.coordinator.group.persistence import LoadedPartition, apply_records
from tests.harness.waiting import wait_for

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

OFFSETS_PARTITIONS = 3

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.cluster_config(
        {
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        }
    ),
]

PARTITIONS = 6
PER_PARTITION = 50


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(partitions * per_partition):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(60) == 0


def _exclusive(owned: list[set[int]]) -> set[int]:
    union = set().union(*owned)
    if sum(len(o) for o in owned) != len(union):
        raise AssertionError(f"a partition owned twice: {[sorted(o) for o in owned]}")
    return union


# --- kafka-python members ------------------------------------------------------------------


def _meta(partition: int, offset: int) -> str:
    """The metadata string committed with ``offset`` (non-ASCII: a UTF-8 round trip)."""
    return f"meta-{partition}-{offset}-\u00e9"


class KPMember(ConsumerRebalanceListener):
    """A kafka-python group member in a thread: consumes, and commits what it processed with
    ``OffsetAndMetadata(offset, "meta-<partition>-<offset>", -1)``. Tracks its partitions through the
    rebalance listener (called on the client's IO thread)."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, assignor: type) -> None:
        self.name = name
        self.topic = topic
        self.lock = threading.Lock()
        self.owned: set[int] = set()
        self.revocations: list[set[int]] = []
        self.errors: list[str] = []
        self.processed: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.stop = threading.Event()
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            partition_assignment_strategy=[assignor],
            session_timeout_ms=10000,
            heartbeat_interval_ms=1000,
            max_poll_interval_ms=60000,
        )
        self.consumer.subscribe([topic], listener=self)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    # listener
    def on_partitions_revoked(self, revoked: Any) -> None:
        parts = {tp.partition for tp in revoked}
        with self.lock:
            if parts:
                self.revocations.append(parts)
            self.owned -= parts

    def on_partitions_assigned(self, assigned: Any) -> None:
        with self.lock:
            self.owned |= {tp.partition for tp in assigned}

    def on_partitions_lost(self, lost: Any) -> None:
        with self.lock:
            self.owned -= {tp.partition for tp in lost}

    def owned_now(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                batches = self.consumer.poll(timeout_ms=200)
            except KPError as exc:
                self.errors.append(f"poll: {exc!r}")
                continue
            for tp, msgs in batches.items():
                if msgs:
                    self.processed[tp.partition] = msgs[-1].offset + 1
            pending = {
                p: o
                for p, o in self.processed.items()
                if self.committed.get(p, -1) < o and p in self.owned_now()
            }
            if not pending:
                continue
            try:
                self.consumer.commit(
                    {
                        KTopicPartition(self.topic, p): OffsetAndMetadata(o, _meta(p, o), -1)
                        for p, o in pending.items()
                    }
                )
            except KPError as exc:  # a commit racing a rebalance: retried on the next loop
                self.errors.append(f"commit: {exc!r}")
                continue
            self.committed.update(pending)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()


def _kp_committed(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, OffsetAndMetadata | None]:
    """Committed offsets with metadata, read by a fresh kafka-python consumer of the group
    that does not subscribe (so it does not join)."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: c.committed(KTopicPartition(topic, p), metadata=True) for p in range(partitions)}
    finally:
        c.close()


def _log_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-watermarks"})
    try:
        return {
            p: c.get_watermark_offsets(CTopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        c.close()


@pytest.mark.parametrize(
    "assignor", [RangePartitionAssignor, RoundRobinPartitionAssignor], ids=["range", "roundrobin"]
)
def test_kafka_python_members_share_and_commit_with_metadata(
    cluster: Cluster, topic_name: str, assignor: type
) -> None:
    cluster.create_topic(topic_name, partitions=PARTITIONS)
    _produce(cluster.bootstrap, topic_name, PARTITIONS, PER_PARTITION)
    group = f"{topic_name}-group"
    members = [KPMember(f"kp{i}", cluster.bootstrap, group, topic_name, assignor) for i in (0, 1)]
    try:

        def shared() -> bool:
            owned = [m.owned_now() for m in members]
            return _exclusive(owned) == set(range(PARTITIONS)) and all(owned)

        try:
            wait_for(shared, 90, "two kafka-python members sharing every partition")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; owned {[sorted(m.owned_now()) for m in members]}, "
                f"errors {[m.errors[:3] for m in members]}"
            ) from None
        owned = sorted(sorted(m.owned_now()) for m in members)
        # the leader's assignor decided the split, and the coordinator delivered it as is
        if assignor is RangePartitionAssignor:
            assert owned == [[0, 1, 2], [3, 4, 5]], owned
        else:
            assert owned == [[0, 2, 4], [1, 3, 5]], owned

        ends = _log_ends(cluster.bootstrap, topic_name, PARTITIONS)
        assert all(e == PER_PARTITION for e in ends.values()), ends
        try:
            got = wait_for(
                lambda: (
                    (c := _kp_committed(cluster.bootstrap, group, topic_name, PARTITIONS))
                    and all(c[p] is not None and c[p].offset == ends[p] for p in c)
                    and c
                ),
                60,
                "every partition committed up to its log end",
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; committed {_kp_committed(cluster.bootstrap, group, topic_name, PARTITIONS)}"
                f", errors {[m.errors[:3] for m in members]}"
            ) from None
        for p in range(PARTITIONS):
            oam = got[p]
            assert oam is not None, f"partition {p}: no committed offset"
            assert oam.offset == ends[p], (p, oam)
            assert oam.metadata == _meta(p, ends[p]), (p, oam)
    finally:
        for m in members:
            m.close()


# --- cooperative-sticky: kafka-python + librdkafka --------------------------------------------


class ConfluentMember:
    """A confluent-kafka member in a thread, polling; only this thread calls the consumer."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, **conf: Any) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.owned: set[int] = set()
        self.events: list[tuple[str, list[int]]] = []
        self.errors: list[KafkaError] = []
        self.stop = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                "error_cb": self.errors.append,
                **conf,
            }
        )
        self.consumer.subscribe(
            [topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _on_assign(self, _c: Any, parts: list[CTopicPartition]) -> None:
        with self.lock:
            self.events.append(("assign", sorted(p.partition for p in parts)))
            self.owned |= {p.partition for p in parts}

    def _on_revoke(self, _c: Any, parts: list[CTopicPartition]) -> None:
        with self.lock:
            self.events.append(("revoke", sorted(p.partition for p in parts)))
            self.owned -= {p.partition for p in parts}

    def _on_lost(self, _c: Any, parts: list[CTopicPartition]) -> None:
        with self.lock:
            self.events.append(("lost", sorted(p.partition for p in parts)))
            self.owned -= {p.partition for p in parts}

    def owned_now(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def events_now(self) -> list[tuple[str, list[int]]]:
        with self.lock:
            return list(self.events)

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is not None and msg.error():
                self.errors.append(msg.error())
                if msg.error().fatal():
                    return

    def close(self) -> None:
        """Stop polling and close (a static member sends no LeaveGroup)."""
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()


def test_cooperative_sticky_kafka_python_and_librdkafka(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, partitions=PARTITIONS)
    _produce(cluster.bootstrap, topic_name, PARTITIONS, PER_PARTITION)
    group = f"{topic_name}-group"
    kp = [
        KPMember(f"kp{i}", cluster.bootstrap, group, topic_name, CooperativeStickyAssignor)
        for i in (0, 1)
    ]
    rd: ConfluentMember | None = None
    try:
        wait_for(
            lambda: (
                _exclusive(owned := [m.owned_now() for m in kp]) == set(range(PARTITIONS))
                and all(len(o) == 3 for o in owned)
            ),
            90,
            "two cooperative kafka-python members owning 3 partitions each",
        )
        before = [m.owned_now() for m in kp]
        revocations_before = [len(m.revocations) for m in kp]

        rd = ConfluentMember(
            "rd",
            cluster.bootstrap,
            group,
            topic_name,
            **{"partition.assignment.strategy": "cooperative-sticky"},
        )
        members_owned = lambda: [*(m.owned_now() for m in kp), rd.owned_now()]  # noqa: E731

        try:
            wait_for(
                lambda: (
                    _exclusive(owned := members_owned()) == set(range(PARTITIONS))
                    and all(len(o) == 2 for o in owned)
                ),
                90,
                "three members owning 2 partitions each",
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; owned {[sorted(o) for o in members_owned()]}, rd events "
                f"{rd.events_now()}, errors {[m.errors[:3] for m in kp]} {rd.errors[:3]}"
            ) from None
        # incremental: each kafka-python member kept what it still owns and gave up only the
        # partition that moved to the newcomer; the newcomer never had anything revoked
        for m, had in zip(kp, before, strict=True):
            assert m.owned_now() <= had, (m.name, had, m.owned_now())
        for m, n in zip(kp, revocations_before, strict=True):
            revoked_later = m.revocations[n:]
            assert all(len(r) < 3 for r in revoked_later), (m.name, revoked_later)
        assert all(kind == "assign" for kind, _ in rd.events_now()), rd.events_now()
        # and it stays so for a few more heartbeats
        time.sleep(3)
        assert _exclusive(members_owned()) == set(range(PARTITIONS))
    finally:
        for m in kp:
            m.close()
        if rd is not None:
            rd.close()


# --- static membership ------------------------------------------------------------------------


def _stored_group(cluster: Cluster, group: str) -> GroupMetadataValue | None:
    """The latest group metadata record of ``group`` in the broker's own
    ``__consumer_offsets`` log (single-broker cluster)."""
    p = partition_for(group, OFFSETS_PARTITIONS)
    loaded = LoadedPartition()
    apply_records(
        loaded, [seg.read_bytes() for seg in cluster.segment_files("__consumer_offsets", p)]
    )
    return loaded.groups.get(group)


def _describe(cluster: Cluster, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)


def _fenced(errors: list[KafkaError]) -> bool:
    """librdkafka turns FENCED_INSTANCE_ID into a fatal error (code _FATAL, the broker's
    error in the text)."""
    return any(
        e.code() == KafkaError.FENCED_INSTANCE_ID
        or (e.code() == KafkaError._FATAL and "fenced" in e.str().lower())
        for e in errors
    )


def test_static_member_rejoins_without_rebalance_and_duplicates_are_fenced(
    cluster: Cluster, topic_name: str
) -> None:
    partitions = 4
    cluster.create_topic(topic_name, partitions=partitions)
    group = f"{topic_name}-group"
    conf = {"session.timeout.ms": 30000, "partition.assignment.strategy": "range"}
    a = ConfluentMember(
        "a", cluster.bootstrap, group, topic_name, **{"group.instance.id": "a", **conf}
    )
    b = ConfluentMember(
        "b", cluster.bootstrap, group, topic_name, **{"group.instance.id": "b", **conf}
    )
    members = [a, b]
    try:
        wait_for(
            lambda: (
                _exclusive(owned := [a.owned_now(), b.owned_now()]) == set(range(partitions))
                and all(len(o) == 2 for o in owned)
            ),
            90,
            "two static members owning 2 partitions each",
        )
        stored = wait_for(
            lambda: (g := _stored_group(cluster, group)) is not None and len(g.members) == 2 and g,
            30,
            "the group's metadata record with both members",
        )
        generation = stored.generation
        a_owned = a.owned_now()
        b_events = b.events_now()

        # a goes away without LeaveGroup and comes back under the same instance id, well
        # within session.timeout.ms: it gets its partitions back, no rebalance happens
        a.close()
        members.remove(a)
        desc = _describe(cluster, group)
        assert sorted(m.group_instance_id for m in desc.members) == ["a", "b"], (
            "closing a static member must not remove it from the group: "
            f"{[(m.member_id, m.group_instance_id) for m in desc.members]}"
        )
        a2 = ConfluentMember(
            "a2", cluster.bootstrap, group, topic_name, **{"group.instance.id": "a", **conf}
        )
        members.append(a2)
        try:
            wait_for(lambda: a2.owned_now() == a_owned, 60, f"the rejoined member owning {a_owned}")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; a2 events {a2.events_now()}, b events {b.events_now()}, "
                f"errors {a2.errors[:3]} {b.errors[:3]}"
            ) from None
        time.sleep(3)  # a few heartbeats of b
        assert b.events_now() == b_events, (
            f"the other member saw a rebalance: {b.events_now()[len(b_events) :]}"
        )
        assert b.owned_now() == set(range(partitions)) - a_owned
        stored_after = _stored_group(cluster, group)
        assert stored_after is not None and stored_after.generation == generation, (
            f"generation {generation} -> {stored_after and stored_after.generation}"
        )
        desc = _describe(cluster, group)
        assert str(desc.state).endswith("STABLE"), desc.state
        assert sorted(m.group_instance_id for m in desc.members) == ["a", "b"]

        # a second consumer with instance id "b" while b is alive: one of the two is fenced
        b_dup = ConfluentMember(
            "b-dup", cluster.bootstrap, group, topic_name, **{"group.instance.id": "b", **conf}
        )
        members.append(b_dup)
        try:
            wait_for(
                lambda: _fenced(b.errors) or _fenced(b_dup.errors),
                60,
                "FENCED_INSTANCE_ID for one of the two consumers with instance id 'b'",
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; errors b {b.errors[:5]}, b-dup {b_dup.errors[:5]}"
            ) from None
    finally:
        for m in members:
            m.close()
