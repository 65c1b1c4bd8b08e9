"""The exactly-once sink's offsets are never ahead of its output, even while a partition
leader of the output fails over between EndTxn and its marker (``docs/exactly-once.md``,
step 3.7).

Three Millrace brokers; one ``__transaction_state`` and one ``__consumer_offsets`` partition
(one replica each), so one broker coordinates every transaction and one the consumer group,
and no write of theirs waits for the third broker; the output
partition's leader is a third broker, with a follower on the coordinator. The leader is
SIGSTOPped before the commit: EndTxn answers (PrepareCommit is written on the coordinator)
while the marker cannot be written. A probe reads the group's committed offsets and the
output (read_committed) the whole time: the offsets must not appear before every output
record is visible. The leader is then SIGKILLed; the follower takes over, the marker is
written, and the commit finishes: offsets and output both visible, every row once.
(The old sink committed the offsets as soon as the other transactions' EndTxn answered.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from spark_connector.exactly_once.sink_log import new_run_name
from tests.integration.test_exactly_once_protocol import Sink, committed_rows, exactly, rows

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.cluster_config(
        {
            "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
            # one replica each: no write of theirs waits for the stopped broker
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "offsets.topic.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "5000",
            "controlled.shutdown.retry.backoff.ms": "500",
        },
        brokers=3,
    ),
]


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    )
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], 20)
    finally:
        consumer.close()
    return int(tp.offset)


def _place_output(cluster: Any, topic_name: str, tmp_path: Path) -> tuple[str, str, list[int]]:
    """The source topic, and the output topic led by the broker (the last of the returned
    ids) that neither coordinates the transactions (the first) nor the group (the second);
    its follower is the transaction coordinator. Returns (source, output, those 3 ids)."""
    source = cluster.create_topic(f"{topic_name}-in", 1, replication_factor=3)
    cluster.create_topic("warm-up", 1, replication_factor=3)
    sink = Sink(cluster.bootstrap, "warm-up", tmp_path / "warm")
    eos = sink.planned()  # creates __transaction_state and __consumer_offsets
    sink.committer(new_run_name(), eos).commit(0, [sink.task(eos, 0, 0, 1, rows("w", 1))])
    coordinator = cluster.leader_of("__transaction_state", 0)
    group_leader = cluster.leader_of("__consumer_offsets", 0)
    doomed = next(b for b in cluster.broker_ids() if b not in (coordinator, group_leader))
    out = cluster.create_topic(
        f"{topic_name}-out", 1, replication_factor=2, replica_assignment=[[doomed, coordinator]]
    )
    assert cluster.leader_of(out, 0) == doomed
    cluster.wait_isr_complete(out, 1)
    return source, out, [coordinator, group_leader, doomed]


class _OffsetProbe:
    """A thread reading the group's committed offset of ``source`` until it reaches
    ``rows``; at that moment every one of the ``rows`` output rows must be visible
    (read_committed), else a violation is recorded."""

    def __init__(self, bootstrap: str, group: str, source: str, out: str, rows: int) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.source = source
        self.out = out
        self.rows = rows
        self.violations: list[str] = []
        self.seen_offsets = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                offset = _committed(self.bootstrap, self.group, self.source)
            except Exception:  # noqa: BLE001 - a coordinator moving: try again
                continue
            if offset >= self.rows:
                visible = len(committed_rows(self.bootstrap, self.out, 1))
                if visible < self.rows:
                    self.violations.append(f"offset {offset} committed with {visible} rows visible")
                self.seen_offsets.set()
                return
            time.sleep(0.1)  # the probe's pace


def test_offsets_never_ahead_during_failover(cluster: Any, topic_name: str, tmp_path: Path) -> None:
    source, out, (coordinator, group_leader, doomed) = _place_output(cluster, topic_name, tmp_path)
    group = f"{topic_name}-group"
    # clients bootstrap from the two brokers that stay up, so that no request but the
    # marker's waits for the stopped leader
    bootstrap = ",".join(cluster.broker_address(b) for b in (coordinator, group_leader))
    sink = Sink(bootstrap, out, tmp_path / "ckpt", {"commitOffsetsToGroup": group})
    (sink.checkpoint / "offsets").mkdir(parents=True)
    (sink.checkpoint / "offsets" / "0").write_text(f'v1\n{{}}\n{{"{source}": {{"0": 40}}}}\n')
    data = rows("b0", 40)
    eos = sink.planned()
    report = sink.task(eos, 0, 0, 1, data)

    probe = _OffsetProbe(bootstrap, group, source, out, len(data))
    outcome: list[object] = []

    def commit() -> None:
        try:
            outcome.append(sink.committer(new_run_name(), eos).commit(0, [report]))
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    committer = threading.Thread(target=commit, daemon=True)
    cluster.pause_broker(doomed)
    try:
        probe.thread.start()
        committer.start()
        time.sleep(4.0)  # EndTxn has answered; the marker waits for the stopped leader
        assert committer.is_alive(), f"the commit finished while the leader was stopped: {outcome}"
        assert _committed(bootstrap, group, source) < 0, "offsets ahead of the output"
        cluster.stop_broker(hard=True, broker_id=doomed)  # the follower takes over
        committer.join(120)
        assert not committer.is_alive(), "the commit did not finish after the failover"
        assert not isinstance(outcome[0], Exception), outcome[0]
        assert probe.seen_offsets.wait(60), "the offsets were never committed"
    finally:
        probe.stop.set()
        cluster.resume_broker(doomed)
        cluster.ensure_running(doomed)
    assert not probe.violations, probe.violations
    exactly(data, committed_rows(cluster.bootstrap, out, 1))
    assert _committed(cluster.bootstrap, group, source) == 40
