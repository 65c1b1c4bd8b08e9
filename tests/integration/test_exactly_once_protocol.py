"""The exactly-once sink's protocol (``docs/exactly-once.md``) under the faults Spark alone
cannot stage on demand, with the sink's own task and driver code against real broker
processes (one Millrace broker; Apache Kafka 3.9.1 where named) and confluent-kafka as the
reader:

* zombies: a task attempt whose transactional id collides with the live attempt's and that
  initialises it after the live task flushed (the race the old Describe-based commit lost),
  or before it; a zombie writing with an id of its own; in every case the rows a commit
  makes visible are exactly the kept attempt's, and a fenced live transaction is caught
  before anything is visible;
* neighbouring prefixes (``orders`` / ``orders-eu``): a sink never touches the other's
  transactions;
* two drivers on one checkpoint: the older run is fenced and fails loudly;
* fan-out: two ``write_batch``-style sinks of one checkpoint are each exactly once across a
  "driver death" between them;
* leftovers: a dead task's open transaction is fenced when the next batch is planned (the
  output's last stable offset moves on), and never one a prepared batch names;
* long outages: a prepared batch survives any outage on Millrace (KIP-939 two-phase commit);
  on Kafka 3.9 the brokers abort it after ``transaction.timeout.ms`` and the batch is written
  again (wholly when nothing was visible, by Spark partition when part was);
* the partition count of the output changing between batches, the output topic deleted before
  the commit: reported, offsets never committed;
* ``transaction.timeout.ms`` checked against the brokers' ``transaction.max.timeout.ms``.

A "task" here is :func:`spark_connector.exactly_once.task.write_exactly_once` called with an
explicit :class:`TaskIdentity` (batch, Spark partition, attempt, task attempt id), exactly
what a Spark task runs; the "driver" is the :class:`Committer` a commit runs.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.sql.types import StringType, StructField, StructType

from spark_connector.exactly_once.boundaries import BoundaryError, ProgressLog
from spark_connector.exactly_once.committer import FAULT_ENV, Committer, DriverFenced
from spark_connector.exactly_once.planning import open_sink, plan_batch
from spark_connector.exactly_once.settings import ExactlyOnce, ExactlyOnceError, parse_sink_options
from spark_connector.exactly_once.sink_log import SinkLog, new_run_name
from spark_connector.exactly_once.task import TaskIdentity, write_exactly_once
from spark_connector.kafka.transactions import TxnClient
from spark_connector.write.outcome import TaskTransaction
from spark_connector.write.plan import BatchSettings, batch_settings, plan_write
from tests.harness.waiting import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.cluster_config(
        {
            "transaction.state.log.num.partitions": "3",
            "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            "transaction.max.timeout.ms": "300000",
        }
    ),
]

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])
PARTITIONS = 3

Row = tuple[str, str]


# --- the sink, without Spark ------------------------------------------------------------------


@dataclass
class Sink:
    """One exactly-once sink (a streaming query's, or with ``name`` a write_batch one)."""

    bootstrap: str
    topic: str
    checkpoint: Path
    options: dict[str, str] = field(default_factory=dict)
    name: str | None = None

    def _options(self) -> dict[str, str]:
        opts = {
            "kafka.bootstrap.servers": self.bootstrap,
            "topic": self.topic,
            "deliveryGuarantee": "exactly-once",
            "checkpointLocation": str(self.checkpoint),
            **self.options,
        }
        if self.name is not None:
            opts["sinkName"] = self.name
            opts["batchId"] = "0"  # any: only makes the parse a write_batch one
        return opts

    def settings(self) -> BatchSettings:
        chosen = batch_settings(plan_write(self._options(), SCHEMA))
        assert isinstance(chosen, BatchSettings), chosen
        return chosen

    def opened(self) -> ExactlyOnce:
        """What a writer holds on either side of a write (no planning)."""
        plan = plan_write(self._options(), SCHEMA)
        opts = parse_sink_options(
            self._options(),
            streaming=self.name is None,
            producer_options=plan.producer_options,
            topic=self.topic,
        )
        assert opts is not None
        return open_sink(opts, self.bootstrap)

    def planned(self) -> ExactlyOnce:
        """What the planning side pickles into a batch's tasks."""
        return plan_batch(self.opened(), self.bootstrap)

    def task(
        self,
        eos: ExactlyOnce,
        batch: int,
        partition: int,
        tid: int,
        rows: list[Row],
        attempt: int = 0,
    ) -> TaskTransaction:
        plan = plan_write(self._options(), SCHEMA)
        arrow = pa.record_batch(
            [pa.array([k for k, _ in rows], pa.string()), pa.array([v for _, v in rows])],
            names=["key", "value"],
        )
        message = write_exactly_once(
            plan,
            self.settings(),
            eos,
            iter([arrow]) if rows else iter([]),
            TaskIdentity(batch, partition, attempt, tid),
        )
        assert message.transaction is not None
        return message.transaction

    def committer(self, run: str, eos: ExactlyOnce | None = None) -> Committer:
        return Committer(eos or self.opened(), self.bootstrap, run, timeout_s=30.0)

    def log(self) -> SinkLog:
        eos = self.opened()
        assert eos.log_dir is not None
        return SinkLog(eos.log_dir)


def rows(tag: str, n: int) -> list[Row]:
    return [(f"{tag}-k{i}", f"{tag}-v{i}") for i in range(n)]


def committed_rows(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[Row]:
    """Every record a read_committed consumer sees, read to the last stable offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Row] = []
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        while len(eof) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            eof.discard(msg.partition())
            out.append((msg.key().decode(), msg.value().decode()))
        assert len(eof) == partitions, f"{topic} not read to its end"
        return out
    finally:
        consumer.close()


def stable(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> bool:
    """Whether no open transaction holds the output back: every partition's last stable
    offset (ListOffsets latest with read_committed) equals its high watermark."""
    from spark_connector.kafka.fetcher import PartitionFetcher

    for p in range(partitions):
        with PartitionFetcher(bootstrap, topic, p, read_committed=False) as f:
            _low, high = f.watermarks(time.monotonic() + 15)
        with PartitionFetcher(bootstrap, topic, p, read_committed=True) as f:
            _low, lso = f.watermarks(time.monotonic() + 15)
        if lso != high:
            return False
    return True


def exactly(expected: list[Row], seen: list[Row]) -> None:
    counts = Counter(seen)
    duplicates = {r: c for r, c in counts.items() if c > 1}
    assert not duplicates, f"duplicates: {list(duplicates.items())[:5]}"
    missing = set(expected) - set(seen)
    extra = set(seen) - set(expected)
    assert not missing and not extra, f"missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}"


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    )
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in parts}


@pytest.fixture
def sink(cluster: Any, topic_name: str, tmp_path: Path) -> Sink:
    cluster.create_topic(topic_name, PARTITIONS)
    return Sink(cluster.bootstrap, topic_name, tmp_path / "ckpt")


@pytest.fixture(scope="module")
def kafka(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Apache Kafka 3.9.1 broker (``bench.systems.KafkaSystem``, the jars of ``make
    setup``) on the module cluster's ZooKeeper under a chroot, looking for timed-out
    transactions every 500 ms; stopped by its own pid afterwards."""
    from bench.systems import KafkaSystem, kafka_available

    if not kafka_available():
        pytest.fail("Apache Kafka 3.9.1 is not in .cache/jvm/kafka-dist: run `make setup`")
    system = KafkaSystem(
        tmp_path_factory.mktemp("kafka"),
        1,
        str(cluster.json["zookeeper"]),
        {
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            "transaction.state.log.num.partitions": "3",
            "offsets.topic.num.partitions": "3",
        },
    )
    try:
        yield system
    finally:
        system.stop()


@pytest.fixture(params=["millrace", "kafka"])
def system(request: pytest.FixtureRequest, cluster: Any) -> Any:
    """``(bootstrap, create topic)`` of Millrace or of Apache Kafka 3.9.1."""
    if request.param == "millrace":
        return cluster.bootstrap, lambda name: cluster.create_topic(name, PARTITIONS)
    kafka = request.getfixturevalue("kafka")
    return kafka.bootstrap, lambda name: kafka.create_topic(name, PARTITIONS, 1)


@pytest.fixture
def any_sink(system: Any, topic_name: str, tmp_path: Path) -> Sink:
    """A sink on Millrace, and again on Apache Kafka 3.9.1."""
    bootstrap, create = system
    create(topic_name)
    return Sink(bootstrap, topic_name, tmp_path / "ckpt")


# --- zombies ---------------------------------------------------------------------------------


def test_stage_retry_zombie_after_the_live_flush_never_gets_its_rows_committed(
    any_sink: Sink,
) -> None:
    """A new stage attempt's task (tid 9) and a zombie of the old attempt (tid 1) share
    slot 1 of partition 0. The zombie starts writing only after the live task flushed: its
    InitProducerId fences the live transaction. The commit must not make the zombie's rows
    visible (the old sink asked the coordinator for the id's *current* producer and did);
    it finds the live transaction gone before anything is visible, and the batch written
    again is exactly the live task's rows."""
    sink = any_sink
    eos = sink.planned()
    live_rows, zombie_rows = rows("live", 50), rows("zombie", 30)
    live = sink.task(eos, 0, 0, tid=9, rows=live_rows)
    other = sink.task(eos, 0, 1, tid=10, rows=rows("p1", 20))
    zombie = sink.task(eos, 0, 0, tid=1, rows=zombie_rows)
    assert live.transaction is not None and zombie.transaction is not None
    assert live.transaction.transactional_id == zombie.transaction.transactional_id
    assert live.transaction != zombie.transaction  # the zombie's own producer epoch
    with pytest.raises(ExactlyOnceError, match="nothing of the batch is visible"):
        sink.committer(new_run_name(), eos).commit(0, [live, other])
    assert committed_rows(sink.bootstrap, sink.topic) == []
    # the restarted query plans the batch again (fencing the zombie's transaction) and
    # writes it: exactly the live rows, never the zombie's
    eos = sink.planned()
    assert eos.task_writes(0, 0)
    again = [
        sink.task(eos, 0, 0, tid=3, rows=live_rows),
        sink.task(eos, 0, 1, tid=4, rows=rows("p1", 20)),
    ]
    sink.committer(new_run_name(), eos).commit(0, again)
    exactly(live_rows + rows("p1", 20), committed_rows(sink.bootstrap, sink.topic))
    assert stable(sink.bootstrap, sink.topic)


def test_stage_retry_zombie_before_the_live_task_is_fenced_by_it(sink: Sink) -> None:
    """The common order: the zombie (older) initialises first and writes; the live task's
    InitProducerId fences it; the zombie's later writes fail and its rows are aborted."""
    eos = sink.planned()
    plan = plan_write(sink._options(), SCHEMA)
    from spark_connector.write.batch_write import Transactional, write_rows

    txn_id = eos.task_transactional_id(0, 1)
    zombie_arrow = pa.record_batch(
        [pa.array(["z"] * 5), pa.array([f"zombie-{i}" for i in range(5)])], names=["key", "value"]
    )
    zombie = write_rows(plan, sink.settings(), iter([zombie_arrow]), Transactional(txn_id, 60_000))
    live = sink.task(eos, 0, 0, tid=9, rows=rows("live", 40))
    assert live.transaction is not None and live.transaction.transactional_id == txn_id
    assert live.transaction.producer_epoch > zombie.producer_epoch
    sink.committer(new_run_name(), eos).commit(0, [live])
    exactly(rows("live", 40), committed_rows(sink.bootstrap, sink.topic))
    assert stable(sink.bootstrap, sink.topic)


def test_zombie_writes_are_never_committed(any_sink: Sink) -> None:
    """Two attempts of one partition with ids of their own (a stage retry beside a zombie
    still writing): the commit names the kept attempt's producer; the zombie's transaction
    is fenced at the clean-up, so read_committed readers are not held back."""
    sink = any_sink
    eos = sink.planned()
    kept = sink.task(eos, 0, 0, tid=12, rows=rows("kept", 60), attempt=0)
    zombie = sink.task(eos, 0, 0, tid=5, rows=rows("zombie", 60), attempt=0)
    assert kept.transaction is not None and zombie.transaction is not None
    assert kept.transaction.transactional_id != zombie.transaction.transactional_id
    sink.committer(new_run_name(), eos).commit(0, [kept])
    exactly(rows("kept", 60), committed_rows(sink.bootstrap, sink.topic))
    wait_for(lambda: stable(sink.bootstrap, sink.topic), 60, "the zombie's transaction aborted")
    with TxnClient(sink.bootstrap) as client:
        state = client.describe(zombie.transaction.transactional_id)
    assert state.state in ("Empty", "CompleteAbort") and not state.holds(zombie.transaction)


# --- neighbours, drivers, fan-out ------------------------------------------------------------------


def test_neighbouring_prefixes_never_touch_each_other(
    system: Any, topic_name: str, tmp_path: Path
) -> None:
    """Queries with prefixes ``orders`` and ``orders-eu`` at once: a commit of ``orders``
    (and its clean-up of leftovers) leaves ``orders-eu``'s open transaction alone."""
    bootstrap, create = system
    create(f"{topic_name}-a")
    create(f"{topic_name}-b")
    orders = Sink(bootstrap, f"{topic_name}-a", tmp_path / "a", {"transactionalIdPrefix": "orders"})
    orders_eu = Sink(
        bootstrap, f"{topic_name}-b", tmp_path / "b", {"transactionalIdPrefix": "orders-eu"}
    )
    eu = orders_eu.planned()
    eu_task = orders_eu.task(eu, 0, 0, tid=1, rows=rows("eu", 25))
    main = orders.planned()  # planning fences the sink's leftovers: never the neighbour's
    main_task = orders.task(main, 0, 0, tid=1, rows=rows("main", 25))
    orders.committer(new_run_name(), main).commit(0, [main_task])
    orders.planned()
    assert eu_task.transaction is not None
    with TxnClient(bootstrap) as client:
        state = client.describe(eu_task.transaction.transactional_id)
    assert state.state == "Ongoing" and state.holds(eu_task.transaction)
    orders_eu.committer(new_run_name(), eu).commit(0, [eu_task])
    exactly(rows("main", 25), committed_rows(bootstrap, orders.topic))
    exactly(rows("eu", 25), committed_rows(bootstrap, orders_eu.topic))


def test_two_drivers_on_one_checkpoint_the_older_is_fenced(any_sink: Sink) -> None:
    """A job restarted while the old driver still runs: once the newer run commits, the
    older one's next commit fails loudly and makes nothing visible."""
    sink = any_sink
    old_run = new_run_name()
    time.sleep(0.01)
    new_run = new_run_name()
    eos = sink.planned()
    sink.committer(old_run, eos).commit(0, [sink.task(eos, 0, 0, 1, rows("b0", 10))])
    eos = sink.planned()
    sink.committer(new_run, eos).commit(1, [sink.task(eos, 1, 0, 2, rows("b1", 10))])
    eos = sink.planned()
    zombie = sink.task(eos, 2, 0, 3, rows("zombie", 10))
    with pytest.raises(DriverFenced, match="another driver"):
        sink.committer(old_run, eos).commit(2, [zombie])
    exactly(rows("b0", 10) + rows("b1", 10), committed_rows(sink.bootstrap, sink.topic))
    assert sink.log().get(2) is None
    run = sink.log().run()
    assert run is not None and run.run == new_run
    # the newer driver goes on
    eos = sink.planned()
    sink.committer(new_run, eos).commit(2, [sink.task(eos, 2, 0, 4, rows("b2", 10))])
    exactly(
        rows("b0", 10) + rows("b1", 10) + rows("b2", 10), committed_rows(sink.bootstrap, sink.topic)
    )


def test_fan_out_sinks_are_each_exactly_once_across_a_driver_death(
    cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    """Two write_batch sinks of one checkpoint: the first commits batch 0, the driver dies
    before the second; the replay of batch 0 skips the first and writes the second (the old
    sink's shared log skipped the second sink's writes for good)."""
    cluster.create_topic(f"{topic_name}-eu", PARTITIONS)
    cluster.create_topic(f"{topic_name}-us", PARTITIONS)
    checkpoint = tmp_path / "ckpt"
    eu = Sink(cluster.bootstrap, f"{topic_name}-eu", checkpoint, name=f"{topic_name}-eu")
    us = Sink(cluster.bootstrap, f"{topic_name}-us", checkpoint, name=f"{topic_name}-us")
    first_run = new_run_name()
    e = eu.planned()
    eu.committer(first_run, e).commit(0, [eu.task(e, 0, 0, 1, rows("eu", 20))])
    # ... the driver dies here; the replay of batch 0 runs both sinks again
    second_run = new_run_name()
    e = eu.planned()
    u = us.planned()
    assert not e.task_writes(0, 0) and u.task_writes(0, 0)
    eu.committer(second_run, e).commit(0, [eu.task(e, 0, 0, 2, rows("eu", 20))])
    us.committer(second_run, u).commit(0, [us.task(u, 0, 0, 3, rows("us", 20))])
    exactly(rows("eu", 20), committed_rows(cluster.bootstrap, eu.topic))
    exactly(rows("us", 20), committed_rows(cluster.bootstrap, us.topic))
    assert e.sink_id != u.sink_id
    assert {p.name for p in (checkpoint / "millrace-sink" / "sinks").iterdir()} == {
        eu.topic,
        us.topic,
    }


# --- leftovers -----------------------------------------------------------------------------------


def test_a_dead_tasks_transaction_is_fenced_when_the_next_batch_is_planned(sink: Sink) -> None:
    """A task that died after writing holds the output's last stable offset back; planning
    the next batch (a restarted query's first act) fences it: readers move on without
    waiting for transaction.timeout.ms."""
    eos = sink.planned()
    dead = sink.task(eos, 0, 0, tid=1, rows=rows("dead", 10))
    assert not stable(sink.bootstrap, sink.topic)
    sink.planned()
    wait_for(lambda: stable(sink.bootstrap, sink.topic), 60, "the dead task's transaction aborted")
    assert committed_rows(sink.bootstrap, sink.topic) == []
    assert dead.transaction is not None


# --- long outages ---------------------------------------------------------------------------------


def _prepare_and_die(
    sink: Sink, eos: ExactlyOnce, batch: int, reports: list[TaskTransaction]
) -> None:
    """A driver that records the batch as prepared and dies before ending anything."""
    committer = sink.committer(new_run_name(), eos)
    assert committer.log is not None
    with TxnClient(sink.bootstrap) as client:
        committer._claim(client, committer.log)
        committer._create(client, committer.log, batch, reports, committer.log.run())  # type: ignore[arg-type]
    record = committer.log.get(batch)
    assert record is not None and record.state == "prepared"


def test_long_outage_on_millrace_a_prepared_batch_never_times_out(sink: Sink) -> None:
    """Millrace: the prepared batch's transactions were taken over for two-phase commit
    (KIP-939), so a driver down three times transaction.timeout.ms still finds them open
    and the replay commits them: every row once."""
    sink.options["kafka.transaction.timeout.ms"] = "2000"
    eos = sink.planned()
    assert eos.two_phase
    reports = [sink.task(eos, 0, p, tid=p, rows=rows(f"p{p}", 30)) for p in range(2)]
    _prepare_and_die(sink, eos, 0, reports)
    time.sleep(6.5)  # the brokers look for timed-out transactions every 500 ms
    eos = sink.planned()
    assert eos.rewrite is None and not eos.task_writes(0, 0)
    replay = [sink.task(eos, 0, p, tid=10 + p, rows=rows(f"p{p}", 30)) for p in range(2)]
    assert all(r.skipped for r in replay)
    record = sink.committer(new_run_name(), eos).commit(0, replay)
    assert record is not None and record.committed
    exactly(rows("p0", 30) + rows("p1", 30), committed_rows(sink.bootstrap, sink.topic))


def _kafka_sink(kafka: Any, topic: str, tmp_path: Path) -> Sink:
    kafka.create_topic(topic, PARTITIONS, 1)
    return Sink(kafka.bootstrap, topic, tmp_path / "ckpt", {"kafka.transaction.timeout.ms": "2000"})


def test_long_outage_on_kafka_nothing_visible_is_written_again(
    kafka: Any, topic_name: str, tmp_path: Path
) -> None:
    """Apache Kafka 3.9 has no two-phase commit: a driver down longer than
    transaction.timeout.ms after preparing finds the batch's transactions aborted by the
    brokers. Nothing of it was visible: the replay writes the whole batch again."""
    sink = _kafka_sink(kafka, topic_name, tmp_path)
    eos = sink.planned()
    assert not eos.two_phase
    data = {p: rows(f"p{p}", 30) for p in range(2)}
    _prepare_and_die(sink, eos, 0, [sink.task(eos, 0, p, p, data[p]) for p in range(2)])
    time.sleep(4.5)
    eos = sink.planned()
    assert eos.rewrite is not None and eos.rewrite.all
    replay = [sink.task(eos, 0, p, 10 + p, data[p]) for p in range(2)]
    record = sink.committer(new_run_name(), eos).commit(0, replay)
    assert record is not None and record.committed
    exactly(data[0] + data[1], committed_rows(kafka.bootstrap, sink.topic))


def test_long_outage_on_kafka_a_partly_visible_batch_is_completed_by_partition(
    kafka: Any, topic_name: str, tmp_path: Path
) -> None:
    """The driver committed one of the batch's two transactions, then stayed down past
    transaction.timeout.ms: the brokers aborted the other. The replay reports it (Spark
    partitions, output partitions, source offsets), then the next replay writes exactly the
    lost Spark partition again and commits: every row once."""
    sink = _kafka_sink(kafka, topic_name, tmp_path)
    eos = sink.planned()
    data = {p: rows(f"p{p}", 30) for p in range(2)}
    reports = [sink.task(eos, 0, p, p, data[p]) for p in range(2)]
    _prepare_and_die(sink, eos, 0, reports)
    first = reports[0].transaction
    assert first is not None
    with TxnClient(kafka.bootstrap) as client:
        client.end(first, commit=True)  # ... and the driver died before the second
    time.sleep(4.5)
    exactly(data[0], committed_rows(kafka.bootstrap, sink.topic))
    eos = sink.planned()
    assert eos.rewrite is not None and eos.rewrite.partitions == frozenset({1})
    assert not eos.task_writes(0, 0) and eos.task_writes(0, 1)
    replay = [sink.task(eos, 0, p, 10 + p, data[p]) for p in range(2)]
    assert replay[0].skipped and not replay[1].skipped
    record = sink.committer(new_run_name(), eos).commit(0, replay)
    assert record is not None and record.committed
    exactly(data[0] + data[1], committed_rows(kafka.bootstrap, sink.topic))


def test_a_partly_visible_batch_is_reported_naming_what_is_missing(sink: Sink) -> None:
    """Millrace with two-phase commit switched off for the sink (as on Kafka): the driver's
    own commit finds one transaction aborted after the other became visible; the error names
    the Spark partition, its output partitions and the source offsets, and the record says
    which partitions the replay rewrites."""
    sink.options["kafka.transaction.timeout.ms"] = "60000"
    eos = sink.planned()
    reports = [sink.task(eos, 0, p, p, rows(f"p{p}", 20)) for p in range(2)]
    lost = reports[1].transaction
    assert lost is not None
    committer = sink.committer(new_run_name(), eos)
    original = committer._end

    def end_after_losing_one(entries: list[Any]) -> list[Any]:
        with TxnClient(sink.bootstrap) as client:
            client.fence([lost.transactional_id], 60_000)  # as the brokers' timeout would
        return original(entries)

    committer._end = end_after_losing_one  # type: ignore[method-assign]
    with pytest.raises(ExactlyOnceError) as info:
        committer.commit(0, reports)
    message = str(info.value)
    assert "partly visible" in message and "Spark partition 1 (20 rows to" in message
    assert "the replay writes exactly those Spark partitions again" in message
    record = sink.log().get(0)
    assert record is not None and record.state == "partial"
    exactly(rows("p0", 20), committed_rows(sink.bootstrap, sink.topic))


# --- the output topic changes ----------------------------------------------------------------------


def test_partition_count_change_between_batches_fails_before_anything_is_visible(
    sink: Sink,
) -> None:
    eos = sink.planned()
    sink.committer(run := new_run_name(), eos).commit(0, [sink.task(eos, 0, 0, 1, rows("b0", 30))])
    admin = AdminClient({"bootstrap.servers": sink.bootstrap})
    admin.create_partitions([NewPartitions(sink.topic, PARTITIONS + 1)])[sink.topic].result(30)
    wait_for(
        lambda: (
            TxnClient(sink.bootstrap).partition_counts([sink.topic])[sink.topic] == PARTITIONS + 1
        ),
        60,
        "the new partition",
    )
    eos = sink.planned()
    report = sink.task(eos, 1, 0, 2, rows("b1", 30))
    assert dict(report.counts) == {sink.topic: PARTITIONS + 1}
    with pytest.raises(ExactlyOnceError, match=r"has 4 partitions, but batch 0 was written with 3"):
        sink.committer(run, eos).commit(1, [report])
    exactly(rows("b0", 30), committed_rows(sink.bootstrap, sink.topic, PARTITIONS + 1))
    # accepted on purpose: the batch goes through
    sink.options["acceptPartitionCountChange"] = "true"
    eos = sink.planned()
    report = sink.task(eos, 1, 0, 3, rows("b1", 30))
    sink.committer(run, eos).commit(1, [report])
    exactly(
        rows("b0", 30) + rows("b1", 30), committed_rows(sink.bootstrap, sink.topic, PARTITIONS + 1)
    )


def test_output_topic_deleted_before_the_commit_never_advances_offsets(sink: Sink) -> None:
    """The output topic is deleted between the tasks' writes and the commit: the batch's
    output is gone, so its source offsets are not committed and the batch is written again
    on restart."""
    group = f"{sink.topic}-group"
    sink.options["commitOffsetsToGroup"] = group
    (sink.checkpoint / "offsets").mkdir(parents=True)
    (sink.checkpoint / "offsets" / "0").write_text('v1\n{}\n{"in": {"0": 30}}\n')
    eos = sink.planned()
    report = sink.task(eos, 0, 0, 1, rows("b0", 30))
    admin = AdminClient({"bootstrap.servers": sink.bootstrap})
    admin.delete_topics([sink.topic])[sink.topic].result(30)
    wait_for(
        lambda: TxnClient(sink.bootstrap).partition_counts([sink.topic])[sink.topic] == 0,
        60,
        "the topic gone",
    )
    with pytest.raises(ExactlyOnceError, match=r"were deleted and nothing of the batch is visible"):
        sink.committer(new_run_name(), eos).commit(0, [report])
    assert sink.log().get(0) is None  # written again on restart
    consumer = Consumer({"bootstrap.servers": sink.bootstrap, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition("in", 0)], 15)
    finally:
        consumer.close()
    assert committed[0].offset < 0  # nothing committed


# --- start-up checks ---------------------------------------------------------------------------------


def test_the_transaction_timeout_is_checked_against_the_brokers_maximum(sink: Sink) -> None:
    """The module's brokers allow transaction.max.timeout.ms 300000: a larger explicit
    timeout fails at start saying what to set; the default (900000) is lowered to it."""
    assert sink.opened().timeout_ms == 300_000
    sink.options["kafka.transaction.timeout.ms"] = "900000"
    with pytest.raises(ExactlyOnceError) as info:
        sink.opened()
    assert str(info.value) == (
        "option 'kafka.transaction.timeout.ms' is 900000, above the brokers' "
        "transaction.max.timeout.ms (300000): set kafka.transaction.timeout.ms to at most "
        "300000, or raise transaction.max.timeout.ms on the brokers"
    )


def test_source_offsets_and_the_boundary_are_committed_after_the_output(
    cluster: Any, sink: Sink
) -> None:
    """commitOffsetsToGroup: the batch's source offsets (Spark's offsets/N) reach the group
    with the driver transaction, and so does the batch's boundary: its progress record in
    __millrace_batches names where the batch ends in every output partition."""
    group = f"{sink.topic}-group"
    sink.options["commitOffsetsToGroup"] = group
    (sink.checkpoint / "offsets").mkdir(parents=True)
    source = cluster.create_topic(f"{sink.topic}-in", 2)
    (sink.checkpoint / "offsets" / "0").write_text(
        f'v1\n{{"batchWatermarkMs":0}}\n{{"{source}": {{"0": 30, "1": 12}}}}\n'
    )
    eos = sink.planned()
    reports = [sink.task(eos, 0, p, p, rows(f"p{p}", 21)) for p in range(2)]
    sink.committer(new_run_name(), eos).commit(0, reports)
    assert group_offsets(sink.bootstrap, group, source, 2) == {0: 30, 1: 12}
    b = latest_boundary(sink.bootstrap, sink.topic)
    assert b is not None and (b.sink, b.batch, b.partitions) == (eos.base, 0, PARTITIONS)
    assert list(b.cut) == stable_ends(sink.bootstrap, sink.topic)
    assert sum(b.cut) >= 42  # 42 records and a commit marker per partition written


# --- whole micro-batches for readers ------------------------------------------------------------


def latest_boundary(bootstrap: str, topic: str) -> Any:
    with ProgressLog(bootstrap, timeout_s=30) as progress:
        return progress.latest(topic)


def stable_ends(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[int]:
    from spark_connector.kafka.fetcher import PartitionFetcher

    out = []
    for p in range(partitions):
        with PartitionFetcher(bootstrap, topic, p, read_committed=True) as f:
            out.append(f.watermarks(time.monotonic() + 15)[1])
    return out


def rows_up_to(bootstrap: str, topic: str, cut: Any) -> list[Row]:
    """A read_committed read of every partition up to the boundary's cut."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    out: list[Row] = []
    try:
        todo = {p: cut.end(p) for p in range(cut.partitions) if cut.end(p) > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        deadline = time.monotonic() + 30
        positions = dict.fromkeys(todo, 0)
        while any(positions[p] < todo[p] for p in todo):
            assert time.monotonic() < deadline, f"not read up to {todo}: at {positions}"
            for msg in consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue
                p, o = msg.partition() or 0, msg.offset() or 0
                if o < todo[p]:
                    out.append(((msg.key() or b"").decode(), (msg.value() or b"").decode()))
            for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
                positions[tp.partition] = max(positions[tp.partition], tp.offset)
    finally:
        consumer.close()
    return out


def _commit_holding_one_task_back(
    sink: Sink,
    eos: ExactlyOnce,
    run: str,
    batch: int,
    reports: list[TaskTransaction],
    held: tuple[int, int, list[Row]],
) -> None:
    """Commit ``batch`` while the fault hook holds its second task transaction back. While
    held, with ``held`` = (visible, boundary batch, up to it): a plain read_committed read
    sees ``visible`` rows, the latest boundary is the boundary batch's, and reading up to it
    gives exactly the rows named."""
    import os
    import threading

    visible, boundary_batch, up_to = held
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            sink.committer(run, eos).commit(batch, reports)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    os.environ[FAULT_ENV] = f"ended@{batch}=4"
    thread = threading.Thread(target=commit)
    try:
        thread.start()
        wait_for(
            lambda: len(committed_rows(sink.bootstrap, sink.topic)) == visible,
            60,
            f"half of batch {batch}",
        )
        b = latest_boundary(sink.bootstrap, sink.topic)
        assert b is not None and b.batch == boundary_batch
        exactly(up_to, rows_up_to(sink.bootstrap, sink.topic, b))
    finally:
        thread.join(60)
        os.environ.pop(FAULT_ENV, None)
    assert not errors, errors


def test_a_reader_at_the_boundary_never_sees_half_a_batch(any_sink: Sink) -> None:
    """While the committer of a batch holds its second task transaction back (one task
    transaction committed and visible to any read_committed consumer), the boundary is still
    the previous batch's: for the sink's first batch into the topic, a first boundary (batch
    -1) holding what other producers wrote before; then batch 0's. A read up to it gives
    exactly the previous state; then the new boundary gives both."""
    from confluent_kafka import Producer

    sink = any_sink
    before = rows("other", 5)
    other = Producer({"bootstrap.servers": sink.bootstrap})
    for key, value in before:
        other.produce(sink.topic, key=key, value=value, partition=0)
    assert other.flush(30) == 0
    eos = sink.planned()
    run = new_run_name()

    b0 = [sink.task(eos, 0, p, p, rows(f"b0p{p}", 25)) for p in range(2)]
    _commit_holding_one_task_back(sink, eos, run, 0, b0, (30, -1, before))
    first = latest_boundary(sink.bootstrap, sink.topic)
    assert first is not None and first.batch == 0
    eos = sink.planned()
    b1 = [sink.task(eos, 1, p, 10 + p, rows(f"b1p{p}", 25)) for p in range(2)]
    batch0 = before + rows("b0p0", 25) + rows("b0p1", 25)
    # half of batch 1 is visible to a plain read_committed consumer, but the boundary is
    # still batch 0's, and reading up to it gives batch 0
    _commit_holding_one_task_back(sink, eos, run, 1, b1, (80, 0, batch0))
    b = latest_boundary(sink.bootstrap, sink.topic)
    assert b is not None and b.batch == 1
    assert all(b.end(p) >= first.end(p) for p in range(PARTITIONS))
    everything = batch0 + rows("b1p0", 25) + rows("b1p1", 25)
    exactly(everything, rows_up_to(sink.bootstrap, sink.topic, b))
    with ProgressLog(sink.bootstrap) as progress:
        assert progress.at_batch(sink.topic, 0) == first
        with pytest.raises(BoundaryError) as info:
            progress.at_batch(sink.topic, 7)
    assert str(info.value) == (
        f"option 'endingBatch': batch 7 of topic '{sink.topic}' is not available: "
        f"__millrace_batches holds batches -1 (the oldest; older ones were compacted away) to 1 "
        f"(the newest) of sink {eos.base}"
    )


def test_a_driver_dead_before_the_boundary_leaves_the_previous_one(sink: Sink) -> None:
    """The driver transaction fails after every task transaction of batch 1 is committed (as
    when the driver dies there): the output is visible, the boundary is still batch 0's; the
    next run's commit of the prepared batch publishes batch 1's boundary."""
    eos = sink.planned()
    sink.committer(new_run_name(), eos).commit(0, [sink.task(eos, 0, 0, 1, rows("b0", 20))])
    eos = sink.planned()
    reports = [sink.task(eos, 1, p, 10 + p, rows(f"b1p{p}", 20)) for p in range(2)]
    committer = sink.committer(new_run_name(), eos)

    def dies(*_args: Any) -> None:
        raise RuntimeError("the driver died")

    committer._commit_driver = dies  # type: ignore[assignment,method-assign]
    with pytest.raises(RuntimeError, match="the driver died"):
        committer.commit(1, reports)
    assert len(committed_rows(sink.bootstrap, sink.topic)) == 60  # all of batch 1 visible
    b = latest_boundary(sink.bootstrap, sink.topic)
    assert b is not None and b.batch == 0
    exactly(rows("b0", 20), rows_up_to(sink.bootstrap, sink.topic, b))
    eos = sink.planned()
    record = sink.committer(new_run_name(), eos).commit(1, [])
    assert record is not None and record.committed
    b = latest_boundary(sink.bootstrap, sink.topic)
    assert b is not None and b.batch == 1
    exactly(
        rows("b0", 20) + rows("b1p0", 20) + rows("b1p1", 20),
        rows_up_to(sink.bootstrap, sink.topic, b),
    )


def test_a_partly_visible_batch_publishes_no_boundary(sink: Sink) -> None:
    """A batch the brokers partly aborted (step 3.9) has no boundary until its replay
    completes it: readers stay at the batch before."""
    eos = sink.planned()
    run = new_run_name()
    sink.committer(run, eos).commit(0, [sink.task(eos, 0, 0, 1, rows("b0", 10))])
    sink.options["kafka.transaction.timeout.ms"] = "60000"
    eos = sink.planned()
    reports = [sink.task(eos, 1, p, 10 + p, rows(f"b1p{p}", 10)) for p in range(2)]
    lost = reports[1].transaction
    assert lost is not None
    committer = sink.committer(run, eos)
    original = committer._end

    def end_after_losing_one(entries: list[Any]) -> list[Any]:
        with TxnClient(sink.bootstrap) as client:
            client.fence([lost.transactional_id], 60_000)
        return original(entries)

    committer._end = end_after_losing_one  # type: ignore[method-assign]
    with pytest.raises(ExactlyOnceError, match="partly visible"):
        committer.commit(1, reports)
    b = latest_boundary(sink.bootstrap, sink.topic)
    assert b is not None and b.batch == 0
    exactly(rows("b0", 10), rows_up_to(sink.bootstrap, sink.topic, b))
    eos = sink.planned()
    replay = [sink.task(eos, 1, p, 20 + p, rows(f"b1p{p}", 10)) for p in range(2)]
    sink.committer(new_run_name(), eos).commit(1, replay)
    b = latest_boundary(sink.bootstrap, sink.topic)
    assert b is not None and b.batch == 1
    exactly(
        rows("b0", 10) + rows("b1p0", 10) + rows("b1p1", 10),
        rows_up_to(sink.bootstrap, sink.topic, b),
    )


def test_a_new_sink_keeps_what_earlier_writers_wrote(sink: Sink) -> None:
    """The first boundary of a topic other producers wrote to before: partitions the sink
    did not write end at their last stable offset (the state then), not at 0."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": sink.bootstrap})
    for i in range(30):
        producer.produce(sink.topic, key=f"old-{i}", value="x", partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    eos = sink.planned()
    report = sink.task(eos, 0, 0, 1, [("only-key", "v")])
    sink.committer(new_run_name(), eos).commit(0, [report])
    b = latest_boundary(sink.bootstrap, sink.topic)
    assert b is not None
    seen = rows_up_to(sink.bootstrap, sink.topic, b)
    assert len(seen) == 31 and ("only-key", "v") in seen


def test_turning_boundaries_off_retires_the_old_ones(sink: Sink) -> None:
    """batchBoundaries=false: the sink's next commit leaves a tombstone, so readers stop
    using the boundary it published before (they read to the end offsets again)."""
    eos = sink.planned()
    run = new_run_name()
    sink.committer(run, eos).commit(0, [sink.task(eos, 0, 0, 1, rows("b0", 5))])
    assert latest_boundary(sink.bootstrap, sink.topic) is not None
    sink.options["batchBoundaries"] = "false"
    eos = sink.planned()
    sink.committer(run, eos).commit(1, [sink.task(eos, 1, 0, 2, rows("b1", 5))])
    assert latest_boundary(sink.bootstrap, sink.topic) is None
    with (
        ProgressLog(sink.bootstrap) as progress,
        pytest.raises(BoundaryError, match="has no batch boundaries"),
    ):
        progress.at_batch(sink.topic, 0)
