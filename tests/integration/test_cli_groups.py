"""``millrace groups list|describe|reset-offsets|delete`` against a real one-broker cluster
and a real confluent-kafka consumer group: committed offsets, log end offsets and lag in
``describe``, members and state while the group is active, the refusal to reset an active
group, reset-offsets plans (``--to-earliest``, ``--shift-by``, ``--to-datetime``,
``--to-latest``) versus ``--execute`` (checked with ``Consumer.committed``), and ``delete``
of a non-empty then of an empty group. Every command runs as a separate ``millrace``
process (``Cluster.cli``)."""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PROPS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
TOPIC = "orders"
GROUP = "billing"
RECORDS_PER_PARTITION = 10
BASE_TS = 1_700_000_000_000  # record i of each partition has timestamp BASE_TS + i seconds


def groups(c: Cluster, *args: str) -> str:
    """``millrace groups ARGS --dir <cluster dir>``; asserts exit code 0, returns stdout."""
    return c.cli("groups", *args, "--dir", str(c.dir))


def groups_rc(c: Cluster, *args: str) -> tuple[int, str, str]:
    """``millrace groups ARGS --dir <cluster dir>``: (exit code, stdout, stderr)."""
    return c._cli("groups", *args, "--dir", str(c.dir))


def _rows(stdout: str) -> list[list[str]]:
    """The data rows of a table (blank lines and the header dropped), split on blanks."""
    lines = [ln.split() for ln in stdout.splitlines() if ln.strip()]
    assert lines and lines[0][0] == "GROUP", stdout
    return lines[1:]


def _offset_table(stdout: str) -> dict[int, tuple[str, str, str]]:
    """describe's rows of TOPIC: partition -> (current offset, log end offset, lag)."""
    return {int(r[2]): (r[3], r[4], r[5]) for r in _rows(stdout) if r[1] == TOPIC}


def _plan(stdout: str) -> dict[int, int]:
    """reset-offsets' plan: partition -> new offset."""
    rows = _rows(stdout)
    assert all(r[0] == GROUP and r[1] == TOPIC for r in rows), stdout
    return {int(r[2]): int(r[3]) for r in rows}


def _committed(c: Cluster) -> dict[int, int]:
    consumer = Consumer(c.conf({"group.id": GROUP, "enable.auto.commit": False}))
    try:
        parts = consumer.committed([TopicPartition(TOPIC, p) for p in (0, 1)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in parts}


def _produce(c: Cluster) -> None:
    producer = Producer(c.conf({"linger.ms": 0}))
    for p in (0, 1):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(
                TOPIC, value=f"{p}-{i}".encode(), partition=p, timestamp=BASE_TS + i * 1000
            )
    assert producer.flush(30) == 0


def _join_and_commit(c: Cluster) -> Consumer:
    """A group member that owns both partitions, has read everything and committed
    offsets 4 (partition 0) and 7 (partition 1)."""
    consumer = Consumer(
        c.conf(
            {
                "group.id": GROUP,
                "client.id": "billing-worker",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
            }
        )
    )
    consumer.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + 90
    while seen < 2 * RECORDS_PER_PARTITION and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen += 1
    assert seen == 2 * RECORDS_PER_PARTITION, f"consumed only {seen} records"
    consumer.commit(
        offsets=[TopicPartition(TOPIC, 0, 4), TopicPartition(TOPIC, 1, 7)], asynchronous=False
    )
    return consumer


def _check_active_group(c: Cluster) -> None:
    """list, describe (offsets, members, state) while the member is active; reset-offsets
    and delete are refused."""
    assert GROUP in groups(c, "list").split()

    out = groups(c, "describe", "--group", GROUP)
    rows = _rows(out)
    assert {int(r[2]): (r[3], r[4], r[5]) for r in rows} == {
        0: ("4", "10", "6"),
        1: ("7", "10", "3"),
    }, out
    assert all(r[0] == GROUP and r[-1] == "billing-worker" for r in rows), out
    assert rows[0][6] != "-" and rows[0][6] == rows[1][6], out  # the member's id

    out = groups(c, "describe", "--group", GROUP, "--members", "--verbose")
    header, *members = (ln.split() for ln in out.splitlines() if ln.strip())
    assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert len(members) == 1 and members[0][0] == GROUP, out
    assert members[0][-3:] == ["billing-worker", "2", f"{TOPIC}(0,1)"], out

    out = groups(c, "describe", "--group", GROUP, "--state")
    (state_row,) = _rows(out)
    assert state_row[0] == GROUP and state_row[-2:] == ["Stable", "1"], out
    assert state_row[1] == c.bootstrap.split(",")[0] and state_row[2] == "(1)", out

    rc, out, err = groups_rc(
        c, "reset-offsets", "--group", GROUP, "--all-topics", "--to-earliest", "--execute"
    )
    assert rc == 1, (out, err)
    assert (
        f"Assignments can only be reset if the group '{GROUP}' is inactive, but the "
        "current state is Stable." in err
    ), err

    rc, out, err = groups_rc(c, "delete", "--group", GROUP)
    assert rc == 1, (out, err)
    assert f"* Group '{GROUP}' could not be deleted due to: " in out, out
    assert "NON_EMPTY_GROUP" in out or "not empty" in out, out


def _check_empty_group(c: Cluster) -> None:
    """Once the member left: describe shows the offsets and no member, list --state."""

    def described() -> tuple[str, str] | None:
        rc, out, err = groups_rc(c, "describe", "--group", GROUP)
        return (out, err) if rc == 0 and "has no active members" in err else None

    out, err = c.wait_for(described, 60, "the group to become Empty")
    assert f"Consumer group '{GROUP}' has no active members." in err
    rows = _rows(out)
    assert [r[6:] for r in rows] == [["-", "-", "-"]] * 2, out
    assert _offset_table(out) == {0: ("4", "10", "6"), 1: ("7", "10", "3")}, out

    out = groups(c, "list", "--state", "empty")
    assert [GROUP, "Empty"] in _rows(out), out
    assert _rows(groups(c, "list", "--state", "Stable")) == []


def _check_reset_offsets(c: Cluster) -> None:
    """reset-offsets: a plan by default (and with --dry-run), applied with --execute."""
    base = ["reset-offsets", "--group", GROUP]
    out = groups(c, *base, "--topic", TOPIC, "--to-earliest")
    assert _plan(out) == {0: 0, 1: 0}, out
    assert _committed(c) == {0: 4, 1: 7}  # the plan changed nothing
    out = groups(c, *base, "--topic", TOPIC, "--to-earliest", "--dry-run")
    assert _plan(out) == {0: 0, 1: 0}, out
    assert _committed(c) == {0: 4, 1: 7}
    out = groups(c, *base, "--topic", TOPIC, "--to-earliest", "--execute")
    assert _plan(out) == {0: 0, 1: 0}, out
    assert _committed(c) == {0: 0, 1: 0}

    out = groups(c, *base, "--all-topics", "--shift-by", "3", "--execute")
    assert _plan(out) == {0: 3, 1: 3}, out
    assert _committed(c) == {0: 3, 1: 3}
    rc, out, err = groups_rc(c, *base, "--all-topics", "--shift-by", "-5")
    assert rc == 0 and _plan(out) == {0: 0, 1: 0}, (out, err)  # clamped to log start
    assert "is lower than earliest offset" in err, err
    out = groups(c, *base, "--all-topics", "--to-offset", "99")
    assert _plan(out) == {0: 10, 1: 10}, out  # clamped to the log end offset
    assert _committed(c) == {0: 3, 1: 3}

    when = datetime.datetime.fromtimestamp((BASE_TS + 5000) / 1000, datetime.UTC)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    out = groups(c, *base, "--topic", f"{TOPIC}:0", "--to-datetime", stamp, "--execute")
    assert _plan(out) == {0: 5}, out
    assert _committed(c) == {0: 5, 1: 3}
    out = groups(c, *base, "--topic", f"{TOPIC}:1", "--to-latest", "--execute")
    assert _plan(out) == {1: 10}, out
    assert _committed(c) == {0: 5, 1: 10}

    out = groups(c, "describe", "--group", GROUP)
    assert _offset_table(out) == {0: ("5", "10", "5"), 1: ("10", "10", "0")}, out

    rc, out, err = groups_rc(c, *base, "--topic", "no-such-topic", "--to-earliest", "--dry-run")
    assert rc == 1 and err.count("\n") == 1 and "no-such-topic" in err, (out, err)


def _check_delete(c: Cluster) -> None:
    out = groups(c, "delete", "--group", GROUP)
    assert out.strip() == f"Deletion of requested consumer groups ('{GROUP}') was successful."
    assert GROUP not in groups(c, "list").split()
    rc, out, err = groups_rc(c, "describe", "--group", GROUP)
    assert rc == 1 and f"Consumer group '{GROUP}' does not exist." in err, (out, err)


def test_groups_cli(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(PROPS)
    c.create_topic(TOPIC, partitions=2)
    _produce(c)
    consumer = _join_and_commit(c)
    try:
        _check_active_group(c)
    finally:
        consumer.close()
    _check_empty_group(c)
    _check_reset_offsets(c)
    _check_delete(c)
