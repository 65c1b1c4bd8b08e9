"""``jobs/topic_to_delta.py`` lands a topic in Delta Lake exactly once through crashes: real
``spark-submit`` runs (``local[2,4]``, so failed tasks are retried) against a real broker,
killed while a micro-batch is being written and restarted from their checkpoint with
``--available-now``.

What is checked, after every fault:

* the Delta table against the input (chispa, row order ignored) on (topic, partition,
  offset, key, value): every record once, none lost, none twice; with ``--mode merge``,
  against the topic's latest live record per key (``readAs=table``);
* the ``--group`` offsets at the input's end offsets, and, sampled while the job runs (the
  Delta log read first, the group second), never ahead of what the table holds.

The faults: the driver SIGKILLed while a micro-batch's data files were written but not
committed to the Delta log, then while a micro-batch was committed to Delta but not to
Spark's commit log (the restart replays it: Delta must skip it by ``txnAppId`` /
``txnVersion``); the executor side's Python workers SIGKILLed while a micro-batch's tasks ran
(Spark retries the tasks); the same driver kill in ``--mode merge`` on a compacted topic of
upserts and tombstones. A driver kill happens with the run frozen (SIGSTOP of the JVM and
the Python driver) in the state the test wanted, looked at again while frozen, so the state
the restart starts from is known, not raced; a worker kill is confirmed by the lost task in
Spark's log. Processes: ``tests/harness/spark_submit.py``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness.spark_submit import SparkSubmit

pytestmark = [pytest.mark.spark, pytest.mark.fault, pytest.mark.timeout(420)]

PARTITIONS = 3
COLUMNS = ["topic", "partition", "offset", "key", "value"]
POLL_S = 0.02
SAMPLE_S = 0.25
TRACK_S = 0.5
RUN_TIMEOUT_S = 180.0
LOST_TASK = re.compile(r"\[batchId = (\d+)\] Lost task .*Python worker exited unexpectedly")

Record = tuple[str, int, int, str, str | None]  # topic, partition, offset, key, value


# --- input -----------------------------------------------------------------------------------


def _produce(
    cluster: Any, topic: str, items: list[tuple[str, str | None, int | None]]
) -> list[Record]:
    """Produce (key, value, partition) items (value None: a tombstone; partition None: by
    key); returns them as the broker stored them (from the delivery reports)."""
    from confluent_kafka import Producer

    stored: list[Record] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        value = msg.value()
        stored.append(
            (
                msg.topic(),
                msg.partition(),
                msg.offset(),
                msg.key().decode(),
                None if value is None else value.decode(),
            )
        )

    producer = Producer(cluster.conf({"linger.ms": 5, "enable.idempotence": True}))
    for key, value, partition in items:
        kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
        producer.produce(topic, key=key, value=value, on_delivery=report, **kwargs)
        producer.poll(0)
    assert producer.flush(30) == 0, "records left undelivered"
    assert not errors, errors
    return stored


def _end_offsets(records: list[Record], partitions: int) -> dict[int, int]:
    ends = dict.fromkeys(range(partitions), 0)
    for _topic, p, offset, _key, _value in records:
        ends[p] = max(ends[p], offset + 1)
    return ends


def _watermarks(cluster: Any, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(cluster.conf({"group.id": "delta-eos-watermarks"}))
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


# --- what the run has done, from its files ---------------------------------------------------


def _batch_ids(directory: Path) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(directory) if n.isdigit())
    except FileNotFoundError:
        return []


def _batch_end(ckpt: Path, batch: int, topic: str) -> dict[int, int]:
    """The end offsets of micro-batch ``batch`` from Spark's ``offsets/<batch>``."""
    lines = (ckpt / "offsets" / str(batch)).read_text().splitlines()
    for line in lines[2:]:  # "v1", the batch metadata, one line per source
        data = json.loads(line)
        if isinstance(data, dict) and topic in data:
            return {int(p): int(o) for p, o in data[topic].items()}
    raise AssertionError(f"no offsets of {topic} in {ckpt}/offsets/{batch}: {lines}")


@dataclass
class DeltaLog:
    """The Delta table's log as the test reads it (JSON commits, read incrementally): the
    highest ``txn`` version, the data files the log lists, and (append tables) the highest
    offset + 1 per partition from the files' statistics."""

    table: Path
    version: int = -1
    txn: int = -1
    txns: Counter[int] = field(default_factory=Counter)
    files: set[str] = field(default_factory=set)
    high: dict[int, int] = field(default_factory=dict)

    def refresh(self) -> DeltaLog:
        while True:
            path = self.table / "_delta_log" / f"{self.version + 1:020d}.json"
            try:
                lines = path.read_text().splitlines()
            except FileNotFoundError:
                return self
            for line in lines:
                action = json.loads(line)
                if "txn" in action:
                    self.txn = max(self.txn, int(action["txn"]["version"]))
                    self.txns[int(action["txn"]["version"])] += 1
                elif "add" in action:
                    self.files.add(action["add"]["path"])
                    stats = json.loads(action["add"].get("stats") or "{}")
                    lo, hi = stats.get("minValues", {}), stats.get("maxValues", {})
                    if stats.get("numRecords") and lo.get("partition") == hi.get("partition"):
                        p = int(hi["partition"])
                        self.high[p] = max(self.high.get(p, 0), int(hi["offset"]) + 1)
                elif "remove" in action:
                    self.files.discard(action["remove"]["path"])
            self.version += 1

    def unlisted_files(self) -> set[str]:
        """Data files in the table directory that no commit lists (being written, or left
        by a killed write)."""
        try:
            names = os.listdir(self.table)
        except FileNotFoundError:
            return set()
        return {n for n in names if n.endswith(".parquet")} - self.files


@dataclass(frozen=True)
class Progress:
    """One look at a run: the highest batch in Spark's offset log and commit log, and the
    highest batch Delta committed (its txnVersion); -1 for none."""

    offsets: int
    commits: int
    delta_txn: int
    unlisted: int

    @property
    def in_flight(self) -> int | None:
        """The batch being run (planned, not committed by Spark), if any."""
        return self.offsets if self.offsets > self.commits else None


class GroupProbe:
    """The committed offsets of the job's ``--group`` (a consumer that never joins it)."""

    def __init__(self, cluster: Any, group: str, topic: str, partitions: int) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.partitions = partitions
        self.consumer = Consumer(cluster.conf({"group.id": group, "enable.auto.commit": False}))

    def committed(self) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        got = self.consumer.committed(tps, timeout=10)
        return {tp.partition: max(tp.offset, 0) for tp in got}

    def close(self) -> None:
        self.consumer.close()


@dataclass
class Job:
    """One topic_to_delta pipeline (table, checkpoint, group) and its runs."""

    cluster: Any
    topic: str
    partitions: int
    dir: Path
    mode: str
    max_offsets: int
    runs: list[SparkSubmit]
    group: str = "delta-eos"
    samples: int = 0

    @property
    def table(self) -> Path:
        return self.dir / "table"

    @property
    def ckpt(self) -> Path:
        return self.dir / "ckpt"

    def log(self) -> DeltaLog:
        return DeltaLog(self.table).refresh()

    def progress(self, delta: DeltaLog) -> Progress:
        offsets = _batch_ids(self.ckpt / "offsets")
        commits = _batch_ids(self.ckpt / "commits")
        delta.refresh()
        return Progress(
            offsets[-1] if offsets else -1,
            commits[-1] if commits else -1,
            delta.txn,
            len(delta.unlisted_files()),
        )

    def extent(self, delta: DeltaLog) -> dict[int, int]:
        """How far into each partition the table holds the input: from the data files'
        statistics (append), or the end offsets of the last batch Delta committed (merge:
        rows are replaced, so the statistics do not say)."""
        if self.mode == "append":
            return {p: delta.high.get(p, 0) for p in range(self.partitions)}
        if delta.txn < 0:
            return dict.fromkeys(range(self.partitions), 0)
        return _batch_end(self.ckpt, delta.txn, self.topic)

    def check_not_ahead(self, delta: DeltaLog, probe: GroupProbe) -> None:
        """The group's offsets never run ahead of the table: the Delta log first, then the
        group (which only moves forward), so a violation cannot hide between the reads."""
        delta.refresh()
        extent = self.extent(delta)
        group = probe.committed()
        self.samples += 1
        ahead = {p: (o, extent[p]) for p, o in group.items() if o > extent[p]}
        assert not ahead, (
            f"group {self.group} ahead of the Delta table (partition: (group, table)): {ahead}"
            f" at Delta version {delta.version}"
        )

    def start(self, tag: str) -> SparkSubmit:
        from spark_connector.session import submit_args

        args = [
            "--bootstrap",
            self.cluster.bootstrap,
            "--topic",
            self.topic,
            "--table",
            str(self.table),
            "--checkpoint",
            str(self.ckpt),
            "--group",
            self.group,
            "--mode",
            self.mode,
            "--decode",
            "--max-offsets-per-trigger",
            str(self.max_offsets),
            "--available-now",
        ]
        run = SparkSubmit(
            "topic_to_delta.py",
            args,
            self.dir / f"spark-submit-{len(self.runs)}-{tag}.log",
            submit_args=submit_args(delta=True),
        )
        self.runs.append(run)
        return run.start()

    def watch(
        self,
        run: SparkSubmit,
        probe: GroupProbe,
        step: Callable[[Progress], bool] | None = None,
        timeout_s: float = RUN_TIMEOUT_S,
    ) -> Progress:
        """Follow ``run`` until it ends (or ``step(progress)`` returns True: it killed the
        run), checking the group against the table every SAMPLE_S; returns the last
        progress."""
        delta = DeltaLog(self.table)
        deadline = time.monotonic() + timeout_s
        next_sample = next_track = 0.0
        while run.running():
            now = time.monotonic()
            assert now < deadline, f"run still going after {timeout_s:g}s:\n{run.output()[-4000:]}"
            if now >= next_track:  # a scan of /proc: not every poll
                run.track()
                next_track = now + TRACK_S
            progress = self.progress(delta)
            if step is not None and step(progress):
                break
            if time.monotonic() >= next_sample:
                self.check_not_ahead(delta, probe)
                next_sample = time.monotonic() + SAMPLE_S
            time.sleep(POLL_S)
        self.check_not_ahead(delta, probe)
        return self.progress(delta)

    def kill_driver_when(
        self, run: SparkSubmit, wanted: Callable[[Progress], bool]
    ) -> Callable[[Progress], bool]:
        """A ``watch`` step: when the run looks ``wanted``, freeze it, look again (the look
        is now stable) and SIGKILL it if it still is; otherwise let it go on."""

        def step(progress: Progress) -> bool:
            if not wanted(progress) or not run.freeze():
                return False
            if wanted(self.progress(DeltaLog(self.table))):
                run.kill()
                return True
            run.thaw()
            return False

        return step

    def finish(self, probe: GroupProbe) -> Progress:
        """A restart from the checkpoint with --available-now, to its end (exit code 0)."""
        run = self.start("restart")
        last = self.watch(run, probe)
        code = run.wait(60)
        assert code == 0, f"restart failed (exit {code}):\n{run.output()[-6000:]}"
        return last


@pytest.fixture
def jobs(cluster: Any, tmp_path: Path) -> Iterator[Callable[..., Job]]:
    """``jobs(topic, mode=..., max_offsets=...)``: a pipeline whose spark-submit runs are
    SIGKILLed by their pids at teardown, whatever happened."""
    made: list[Job] = []

    def make(topic: str, *, partitions: int, mode: str = "append", max_offsets: int) -> Job:
        job = Job(cluster, topic, partitions, tmp_path / topic, mode, max_offsets, [])
        job.dir.mkdir()
        made.append(job)
        return job

    try:
        yield make
    finally:
        for job in made:
            for run in job.runs:
                run.kill()


# --- reading the results ---------------------------------------------------------------------


def _table_rows(spark: Any, job: Job) -> Any:
    return spark.read.format("delta").load(str(job.table)).select(*COLUMNS)


def _rows_df(spark: Any, records: list[Record]) -> Any:
    schema = "topic string, partition int, offset bigint, key string, value string"
    return spark.createDataFrame(records, schema)


def _counts(got: list[Any], expected: list[Record]) -> tuple[int, int]:
    """(duplicates, lost) of the table's rows against the expected records."""
    seen = Counter((t, p, o) for t, p, o, _k, _v in got)
    duplicates = sum(n - 1 for n in seen.values())
    lost = sum(1 for t, p, o, _k, _v in expected if (t, p, o) not in seen)
    return duplicates, lost


def _check_exactly_once(spark: Any, job: Job, expected: list[Record], fault: str) -> None:
    from chispa import assert_df_equality

    table = _table_rows(spark, job)
    got = [tuple(r) for r in table.collect()]
    duplicates, lost = _counts(got, expected)
    print(
        f"\n[{fault}] records in: {len(expected)}, rows in Delta: {len(got)}, duplicates: "
        f"{duplicates}, lost: {lost}; runs: {len(job.runs)}, group/table samples: {job.samples}"
    )
    assert_df_equality(
        table, _rows_df(spark, expected), ignore_row_order=True, ignore_nullable=True
    )
    assert (duplicates, lost) == (0, 0)


def _check_group_at_end(job: Job, probe: GroupProbe, ends: dict[int, int]) -> None:
    assert _watermarks(job.cluster, job.topic, job.partitions) == ends
    assert probe.committed() == ends, f"group {job.group} not at the input's end {ends}"


# --- the tests -------------------------------------------------------------------------------


@pytest.mark.long  # 95 s: make fault (make test keeps its 25-minute budget)
def test_driver_killed_mid_batch_then_restarted_lands_every_record_once(
    spark: Any, cluster: Any, jobs: Callable[..., Job]
) -> None:
    """Two driver crashes: while micro-batch N's data files are written but not in the Delta
    log (the restart writes N again; the orphaned files never join the table), then, in the
    restart, while batch M is committed to Delta but not to Spark's commit log (the next
    restart replays M and Delta skips it by txnVersion). Records produced between the
    crashes land too. The table holds every record once; the group ends at the input's end
    and is never ahead of the table."""
    from chispa import assert_df_equality

    topic = cluster.create_topic("delta-eos-driver", PARTITIONS)
    job = jobs(topic, partitions=PARTITIONS, max_offsets=24)
    records = _produce(
        cluster, topic, [(f"k{i}", f"v{i}", i % PARTITIONS) for i in range(240)]
    )  # 80 per partition: 10 micro-batches of 24
    probe = GroupProbe(cluster, job.group, topic, PARTITIONS)
    try:
        # 1. killed while batch N's files are written, before Delta commits it
        run = job.start("kill-mid-write")
        first = job.watch(
            run,
            probe,
            job.kill_driver_when(
                run,
                lambda p: (
                    p.in_flight is not None
                    and p.offsets >= 2
                    and p.delta_txn < p.offsets
                    and p.unlisted > 0
                ),
            ),
        )
        assert run.killed, f"the run ended before the kill:\n{run.output()[-4000:]}"
        n = first.offsets
        orphans = job.log().unlisted_files()
        assert (first.commits, first.delta_txn) == (n - 1, n - 1) and orphans, first

        # 2. restarted; killed while batch M > N is in Delta but not in Spark's commit log
        run = job.start("kill-after-delta-commit")
        second = job.watch(
            run,
            probe,
            job.kill_driver_when(
                run,
                lambda p: p.offsets > n and p.delta_txn == p.offsets and p.commits < p.offsets,
            ),
        )
        assert run.killed, f"the run ended before the kill:\n{run.output()[-4000:]}"
        m = second.offsets
        assert (second.commits, second.delta_txn) == (m - 1, m), second
        end = _batch_end(job.ckpt, m, topic)  # the table holds batches 0..m, nothing else
        assert_df_equality(
            _table_rows(spark, job),
            _rows_df(spark, [r for r in records if r[2] < end[r[1]]]),
            ignore_row_order=True,
            ignore_nullable=True,
        )
        group_at_kill = probe.committed()
        assert group_at_kill in (
            _batch_end(job.ckpt, m - 1, topic),
            _batch_end(job.ckpt, m, topic),
        ), group_at_kill
        print(
            f"\n[driver kill] first kill in batch {n} ({len(orphans)} data files written, "
            f"not committed); second in batch {m} (committed to Delta, not to Spark; group "
            f"{'at' if group_at_kill == _batch_end(job.ckpt, m, topic) else 'before'} its end)"
        )

        records += _produce(
            cluster, topic, [(f"late{i}", f"w{i}", i % PARTITIONS) for i in range(30)]
        )
        # 3. restarted with --available-now to the end
        job.finish(probe)
        delta = job.log()
        assert delta.txns[m] == 1, f"batch {m} committed to Delta {delta.txns[m]} times"
        assert orphans <= delta.unlisted_files(), "a killed write's files joined the table"
        _check_exactly_once(spark, job, records, "driver kill")
        _check_group_at_end(job, probe, _end_offsets(records, PARTITIONS))
    finally:
        probe.close()


@pytest.mark.long
def test_python_workers_killed_mid_write_are_retried_and_land_every_record_once(
    spark: Any, cluster: Any, jobs: Callable[..., Job]
) -> None:
    """The executor side's Python workers (the source's reads) SIGKILLed while micro-batches'
    tasks run: Spark retries the tasks (the log says so), the run completes, the table holds
    every record once and the group ends at the input's end, never ahead of the table."""
    topic = cluster.create_topic("delta-eos-workers", PARTITIONS)
    job = jobs(topic, partitions=PARTITIONS, max_offsets=30)
    records = _produce(cluster, topic, [(f"k{i}", f"v{i}", i % PARTITIONS) for i in range(240)])
    probe = GroupProbe(cluster, job.group, topic, PARTITIONS)
    killed: Counter[int] = Counter()  # batch -> workers killed
    attempts: Counter[int] = Counter()  # batch -> kills tried
    next_try = 0.0
    run = job.start("kill-workers")

    def lost_batches() -> set[int]:
        return {int(b) for b in LOST_TASK.findall(run.output())}

    def step(progress: Progress) -> bool:
        # while a batch's tasks may run (planned, its Delta commit not made), until tasks of
        # two batches were lost: kill the workers every 0.1 s (a kill may find them idle)
        nonlocal next_try
        batch = progress.in_flight
        if batch is None or batch < 1 or progress.delta_txn >= batch:
            return False
        if time.monotonic() < next_try or attempts[batch] >= 30:
            return False
        lost = lost_batches()
        if len(lost) >= 2 or batch in lost:
            return False
        attempts[batch] += 1
        killed[batch] += len(run.kill_workers())
        next_try = time.monotonic() + 0.1
        return False

    try:
        job.watch(run, probe, step)
        code = run.wait(60)
        assert code == 0, f"the run failed (exit {code}):\n{run.output()[-6000:]}"
        retried = lost_batches()
        print(
            f"\n[worker kill] workers killed per batch {dict(killed)} in {dict(attempts)} "
            f"kills; tasks lost (and retried) in batches {sorted(retried)}"
        )
        assert retried, f"no task was lost to the kills {dict(killed)}: nothing was tested"
        _check_exactly_once(spark, job, records, "worker kill")
        _check_group_at_end(job, probe, _end_offsets(records, PARTITIONS))
    finally:
        probe.close()


def _upserts(keys: int, rounds: range) -> list[tuple[str, str | None, int | None]]:
    """Round r writes every key, a tombstone for one key in five (a different fifth each
    round, so keys are deleted, then written again)."""
    return [
        (f"key-{k:02d}", None if (k + r) % 5 == 0 else f"key-{k:02d}@{r}", None)
        for r in rounds
        for k in range(keys)
    ]


def _latest(records: list[Record]) -> list[Record]:
    latest: dict[str, Record] = {}
    for rec in sorted(records, key=lambda r: (r[1], r[2])):
        latest[rec[3]] = rec
    return [r for r in latest.values() if r[4] is not None]


@pytest.mark.long
def test_merge_mode_keeps_the_latest_live_record_per_key_through_a_driver_kill(
    spark: Any, cluster: Any, jobs: Callable[..., Job]
) -> None:
    """``--mode merge`` on a compacted topic of upserts and tombstones, the driver killed
    while batch M was MERGEd into Delta but not committed by Spark (the restart replays the
    MERGE), more upserts and tombstones produced before the restart: the table equals the
    topic read as a table (``readAs=table``: the latest live record per key), which equals
    the latest live record per key the producer stored."""
    from chispa import assert_df_equality

    partitions = 2
    topic = cluster.create_topic("delta-eos-merge", partitions, {"cleanup.policy": "compact"})
    job = jobs(topic, partitions=partitions, mode="merge", max_offsets=40)
    records = _produce(cluster, topic, _upserts(30, range(6)))
    probe = GroupProbe(cluster, job.group, topic, partitions)
    try:
        run = job.start("kill-after-merge")
        killed = job.watch(
            run,
            probe,
            job.kill_driver_when(
                run,
                lambda p: p.offsets >= 1 and p.delta_txn == p.offsets and p.commits < p.offsets,
            ),
        )
        assert run.killed, f"the run ended before the kill:\n{run.output()[-4000:]}"
        m = killed.offsets
        print(f"\n[merge driver kill] killed with batch {m} MERGEd, not committed by Spark")
        end = _batch_end(job.ckpt, m, topic)  # the table holds batches 0..m
        assert_df_equality(
            _table_rows(spark, job).drop("topic"),
            _rows_df(spark, _latest([r for r in records if r[2] < end[r[1]]])).drop("topic"),
            ignore_row_order=True,
            ignore_nullable=True,
        )
        records += _produce(cluster, topic, _upserts(30, range(6, 8)))
        job.finish(probe)

        expected = _rows_df(spark, _latest(records)).drop("topic")
        as_table = (
            spark.read.format("millrace")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", topic)
            .option("readAs", "table")
            .load()
            .selectExpr(
                "partition",
                "offset",
                "CAST(key AS STRING) AS key",
                "CAST(value AS STRING) AS value",
            )
        )
        assert_df_equality(as_table, expected, ignore_row_order=True, ignore_nullable=True)
        table = _table_rows(spark, job).drop("topic")
        got = {(r["key"], r["value"]) for r in table.collect()}
        live = {(r[3], r[4]) for r in _latest(records)}
        print(
            f"\n[merge driver kill] records in: {len(records)}, live keys: {len(live)}, rows "
            f"in Delta: {table.count()}, duplicate keys: {table.count() - len(dict(got))}, "
            f"lost or stale: {len(live - got)}, extra: {len(got - live)}; group/table samples: "
            f"{job.samples}"
        )
        assert_df_equality(table, as_table, ignore_row_order=True, ignore_nullable=True)
        assert job.log().txns[m] == 1, f"batch {m} MERGEd {job.log().txns[m]} times"
        _check_group_at_end(job, probe, _end_offsets(records, partitions))
    finally:
        probe.close()
