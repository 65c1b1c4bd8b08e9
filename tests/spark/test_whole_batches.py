"""Readers never see half a micro-batch (``docs/exactly-once.md``, "Whole micro-batches for
readers"): the proof of the issue, with real Spark jobs.

The pipeline is ``jobs/stream_counts.py`` run by ``spark-submit``: counts of JSON events per
key (64 keys, one or two one-minute windows) upserted exactly once (``upsert_to``, two write
tasks per micro-batch) into a compacted topic of 8 partitions; the input, ``EVENTS`` records in
2 partitions, is read ``PER_BATCH`` records per micro-batch with Trigger.AvailableNow: 40
micro-batches. The sum of all counts after batch ``N`` is the number of input records
consumed through ``N`` (Spark's ``offsets/N`` in the checkpoint): the *valid sums*.

While the job runs, the test reads the output again and again and sums the counts:

* ``table``: ``spark.read.format("millrace").option("readAs", "table")`` (the default
  boundary: the newest committed batch);
* ``records``: a plain batch ``spark.read.format("millrace")`` of the records, reduced to
  the latest value per key here;
* ``cli``: ``millrace table --format json``;
* ``control``: a read_committed confluent-kafka consumer of every partition up to its last
  stable offset, the way any Kafka client reads (no boundary).

The committer pauses ``PAUSE_S`` at ``ended`` in every batch (``MILLRACE_SINK_FAULT_PAUSE``:
the first task transaction committed, the second not), so a torn state is visible to plain
consumers for a while in every batch. The proof: every sum the three Millrace readers
observed is a valid sum, and they saw the table grow; the control reader saw at least one
sum that no batch produced (the torn states are real, so the check could fail). Variants:
a broker SIGKILLed mid-run; the driver killed while a batch's output is all visible but its
boundary is not committed (the pause at ``boundaries``), then the job restarted; and the
plain run against Apache Kafka 3.9.1.

Processes: the job runs through :class:`~tests.harness.spark_submit.SparkSubmit` (killed by
pid at teardown); a SIGKILLed broker is started again by the test; the Kafka broker is the
module fixture's, stopped by its pid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness.processes import kill_pid
from tests.harness.spark_submit import REPO, SparkSubmit

pytestmark = [
    pytest.mark.spark,
    pytest.mark.fault,
    pytest.mark.timeout(600),
    pytest.mark.cluster_config(
        {
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "5000",
            "min.insync.replicas": "2",
            "default.replication.factor": "3",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
        },
        brokers=3,
    ),
]

EVENTS = 4000
PER_BATCH = 100
BATCHES = EVENTS // PER_BATCH  # 40
KEYS = 64
INPUT_PARTITIONS = 2
OUTPUT_PARTITIONS = 8
PAUSE_S = 0.5
RUN_TIMEOUT_S = 420.0
KILL_BATCH = 12


@dataclass
class Observation:
    reader: str
    total: int
    at: float


@dataclass
class Counts:
    """One test's stream-counts pipeline and what its readers observed."""

    name: str
    bootstrap: str
    dir: Path
    spark: Any
    input: str
    output: str
    runs: list[SparkSubmit] = field(default_factory=list)
    seen: list[Observation] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def checkpoint(self) -> Path:
        return self.dir / "ckpt"

    def produce_input(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        base = time.time() - 3600
        for i in range(EVENTS):
            ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base + i / 1000))
            producer.produce(
                self.input,
                key=f"e{i}",
                value=json.dumps({"key": f"user-{i % KEYS}", "ts": f"{ts}Z"}),
            )
        assert producer.flush(60) == 0

    # --- the job ---

    def submit(self, pause: str = f"ended={PAUSE_S}") -> SparkSubmit:
        run = SparkSubmit(
            "stream_counts.py",
            [
                "--bootstrap",
                self.bootstrap,
                "--input",
                self.input,
                "--output",
                self.output,
                "--checkpoint",
                str(self.checkpoint),
                "--group",
                f"{self.name}-counter",
                "--available-now",
                "--max-offsets-per-trigger",
                str(PER_BATCH),
            ],
            self.dir / f"run-{len(self.runs) + 1}.log",
            env={"MILLRACE_SINK_FAULT_PAUSE": pause},
        )
        self.runs.append(run)
        return run.start()

    def sink_record(self, batch: int) -> dict[str, Any] | None:
        path = self.checkpoint / "millrace-sink" / "sinks" / self.output / f"{batch}.json"
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return data

    def valid_sums(self) -> list[int]:
        """The sum of the counts after each batch: the input consumed through it."""
        sums = [0]
        offsets = self.checkpoint / "offsets"
        batches = [p for p in offsets.iterdir() if p.name.isdigit()]
        for path in sorted(batches, key=lambda p: int(p.name)):
            source = json.loads(path.read_text().splitlines()[2])
            sums.append(sum(int(o) for o in source[self.input].values()))
        return sorted(set(sums))

    # --- the readers ---

    def _spark(self, **options: str) -> Any:
        reader = (
            self.spark.read.format("millrace")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", self.output)
        )
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    def read_table(self) -> int:
        df = self._spark(readAs="table").selectExpr(
            "CAST(get_json_object(CAST(value AS STRING), '$.count') AS BIGINT) AS c"
        )
        return int(df.groupBy().sum("c").first()[0] or 0)

    def read_records(self) -> int:
        rows = self._spark().select("key", "value", "partition", "offset").collect()
        latest: dict[bytes, tuple[tuple[int, int], bytes | None]] = {}
        for r in rows:
            at = (r["partition"], r["offset"])
            if r["key"] not in latest or latest[r["key"]][0] < at:
                latest[r["key"]] = (at, r["value"])
        return sum(json.loads(v)["count"] for _at, v in latest.values() if v is not None)

    def read_cli(self) -> int:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "broker.cli.main",
                "table",
                "--bootstrap-server",
                self.bootstrap,
                "--topic",
                self.output,
                "--format",
                "json",
                "--timeout",
                "20",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env=env,
        )
        if out.returncode != 0:
            raise RuntimeError(f"millrace table: {out.stderr.strip()[-500:]}")
        return sum(
            json.loads(json.loads(line)["value"])["count"] for line in out.stdout.splitlines()
        )

    def read_control(self) -> int:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"control-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        latest: dict[bytes, bytes | None] = {}
        try:
            consumer.assign([TopicPartition(self.output, p, 0) for p in range(OUTPUT_PARTITIONS)])
            eof: set[int] = set()
            deadline = time.monotonic() + 20
            while len(eof) < OUTPUT_PARTITIONS:
                if time.monotonic() > deadline:
                    raise RuntimeError("control reader: no end of the partitions in 20 s")
                for msg in consumer.consume(1000, 0.2):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            eof.add(msg.partition() or 0)
                            continue
                        raise RuntimeError(f"control reader: {err}")
                    latest[msg.key() or b""] = msg.value()
        finally:
            consumer.close()
        return sum(json.loads(v)["count"] for v in latest.values() if v is not None)

    def readers(self) -> dict[str, Callable[[], int]]:
        return {"table": self.read_table, "records": self.read_records, "cli": self.read_cli}

    def observe(self, run: SparkSubmit, step: Callable[[], bool] | None = None) -> None:
        """Read in a loop while ``run`` runs, recording every sum (the control reader in a
        thread of its own, as fast as it can); ``step()`` runs before every read (a fault's
        trigger) and stops the loop when it returns True."""
        stop = threading.Event()

        def control() -> None:
            while not stop.is_set():
                self.read_once("control", self.read_control)

        thread = threading.Thread(target=control, daemon=True)
        thread.start()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        try:
            while run.running():
                for name, read in self.readers().items():
                    if not run.running() or (step is not None and step()):
                        return
                    self.read_once(name, read)
                assert time.monotonic() < deadline, (
                    f"the job still runs after {RUN_TIMEOUT_S:g}s:\n{run.output()[-3000:]}"
                )
        finally:
            stop.set()
            thread.join(30)
            run.track()

    def read_once(self, name: str, read: Callable[[], int]) -> int | None:
        try:
            total = read()
        except Exception as exc:  # a broker failing over: counted, not fatal
            with self.lock:
                self.failures[name] = self.failures.get(name, 0) + 1
                failures = self.failures[name]
            if failures > 30:
                raise AssertionError(f"reader {name} keeps failing: {exc}") from exc
            return None
        with self.lock:
            self.seen.append(Observation(name, total, time.monotonic()))
        return total

    def finish(self, run: SparkSubmit) -> None:
        rc = run.wait(RUN_TIMEOUT_S)
        assert rc == 0, f"the job failed (exit {rc}):\n{run.output()[-4000:]}"

    def verify(self) -> dict[str, Any]:
        """Every sum a Millrace reader saw is a valid one; the control saw a torn one."""
        valid = self.valid_sums()
        assert valid[-1] == EVENTS and len(valid) >= BATCHES, (len(valid), valid[-1])
        for name, read in self.readers().items():
            total = self.read_once(name, read)
            assert total == EVENTS, f"{name} after the job: {total}, not {EVENTS}"
        ours = [o for o in self.seen if o.reader != "control"]
        torn = [o for o in ours if o.total not in valid]
        assert not torn, (
            f"Millrace readers saw sums no micro-batch produced: "
            f"{[(o.reader, o.total) for o in torn][:10]}; valid sums {valid}"
        )
        distinct = {o.total for o in ours}
        assert len(distinct) >= 5, f"the readers saw too little of the run: sums {sorted(distinct)}"
        for name in ("table", "records", "cli"):
            assert any(o.reader == name for o in ours[:-3]), f"reader {name} never read mid-run"
        control = [o.total for o in self.seen if o.reader == "control"]
        control_torn = [t for t in control if t not in valid]
        return {
            "reads": len(ours),
            "distinct": len(distinct),
            "control_reads": len(control),
            "control_torn": len(control_torn),
            "failures": dict(self.failures),
        }


@pytest.fixture(scope="module")
def kafka(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Apache Kafka 3.9.1 broker on the module cluster's ZooKeeper (chroot); stopped by
    its pid afterwards."""
    from bench.systems import KafkaSystem, kafka_available

    if not kafka_available():
        pytest.fail("Apache Kafka 3.9.1 is not in .cache/jvm/kafka-dist: run `make setup`")
    system = KafkaSystem(
        tmp_path_factory.mktemp("kafka"),
        1,
        str(cluster.json["zookeeper"]),
        {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"},
    )
    try:
        yield system
    finally:
        system.stop()


@pytest.fixture
def counts(
    request: pytest.FixtureRequest, cluster: Any, spark: Any, tmp_path: Path
) -> Iterator[Callable[[str], Counts]]:
    made: list[Counts] = []

    def make(system: str) -> Counts:
        tag = uuid.uuid4().hex[:6]
        name = f"wb-{tag}"
        compact = {"cleanup.policy": "compact"}
        if system == "kafka":
            kafka = request.getfixturevalue("kafka")
            bootstrap = kafka.bootstrap
            kafka.create_topic(f"{name}-in", INPUT_PARTITIONS, 1)
            kafka.create_topic(f"{name}-out", OUTPUT_PARTITIONS, 1, compact)
        else:
            cluster.ensure_all_running()
            bootstrap = cluster.bootstrap
            cluster.create_topic(f"{name}-in", INPUT_PARTITIONS, replication_factor=3)
            cluster.create_topic(f"{name}-out", OUTPUT_PARTITIONS, compact, replication_factor=3)
        c = Counts(name, bootstrap, tmp_path, spark, f"{name}-in", f"{name}-out")
        c.produce_input()
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            for run in c.runs:
                run.kill()


def _report(what: str, stats: dict[str, Any]) -> None:
    print(f"\nwhole batches, {what}: {stats}")


@pytest.mark.long  # make fault (81 s of make test's 30 minutes); boundary reads stay in make test
def test_readers_see_whole_batches_only(counts: Callable[[str], Counts]) -> None:
    c = counts("millrace")
    run = c.submit()
    c.observe(run)
    c.finish(run)
    stats = c.verify()
    _report("millrace", stats)
    assert stats["control_torn"] >= 1, (
        f"the control reader never saw a torn state ({stats}): the check proves nothing"
    )


@pytest.mark.long
def test_readers_see_whole_batches_on_kafka(counts: Callable[[str], Counts]) -> None:
    c = counts("kafka")
    run = c.submit()
    c.observe(run)
    c.finish(run)
    stats = c.verify()
    _report("kafka 3.9.1", stats)
    assert stats["control_torn"] >= 1, stats


@pytest.mark.long
def test_readers_see_whole_batches_with_a_broker_killed(
    counts: Callable[[str], Counts], cluster: Any
) -> None:
    """The leader of output partition 0 is SIGKILLed once a third of the batches are
    committed and started again two thirds in: readers may fail during the failover, never
    see a torn table."""
    c = counts("millrace")
    run = c.submit()
    victim = cluster.leader_of(c.output, 0)
    state = {"killed": False, "restarted": False}

    def step() -> bool:
        done = sum(
            1 for b in range(BATCHES) if (c.sink_record(b) or {}).get("state") == "committed"
        )
        if not state["killed"] and done >= BATCHES // 3:
            kill_pid(cluster.broker_pid(victim))
            cluster.stop_broker(hard=True, broker_id=victim)
            state["killed"] = True
        elif state["killed"] and not state["restarted"] and done >= 2 * BATCHES // 3:
            cluster.start_broker(victim)
            state["restarted"] = True
        return False

    c.observe(run, step)
    c.finish(run)
    if not state["restarted"]:
        cluster.start_broker(victim)
    assert state["killed"], "the broker was never killed: the run ended first"
    stats = c.verify()
    _report(f"broker {victim} killed", stats)


@pytest.mark.parametrize("system", ["millrace", pytest.param("kafka", marks=pytest.mark.long)])
@pytest.mark.long
def test_readers_see_whole_batches_with_the_driver_killed_during_a_commit(
    counts: Callable[[str], Counts], system: str
) -> None:
    """The committer of batch KILL_BATCH pauses after every task transaction is committed
    and its markers written, before the boundary's driver transaction: the whole batch is
    visible to plain consumers, not to Millrace's readers. The driver is SIGKILLed there and
    the job restarted: the replay commits the boundary."""
    c = counts(system)
    run = c.submit(pause=f"ended={PAUSE_S},boundaries@{KILL_BATCH}=60")
    marker = f"at 'boundaries' of batch {KILL_BATCH}"
    c.observe(run, lambda: marker in run.output())
    assert marker in run.output(), f"the committer never paused:\n{run.output()[-3000:]}"
    record = c.sink_record(KILL_BATCH)
    assert record is not None and record["state"] == "prepared", record
    run.kill()
    # the output of the batch is all visible, its boundary is not: readers stay at the one
    # before, while a plain consumer sees the new batch
    valid = c.valid_sums()
    control = c.read_control()
    assert control == valid[KILL_BATCH + 1], (control, valid[KILL_BATCH : KILL_BATCH + 2])
    table = c.read_table()
    assert table == valid[KILL_BATCH], (table, valid[KILL_BATCH : KILL_BATCH + 2])
    assert c.read_cli() == valid[KILL_BATCH]
    rerun = c.submit()
    c.observe(rerun)
    c.finish(rerun)
    stats = c.verify()
    _report(f"{system}, driver killed at batch {KILL_BATCH}", stats)
