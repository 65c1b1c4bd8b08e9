"""Exactly-once output of a Spark streaming job under the faults of ``docs/exactly-once.md``.

The job under test is ``jobs/enrich_exactly_once.py`` (``deliveryGuarantee=exactly-once``,
``commitOffsetsToGroup``), run as a real ``spark-submit`` subprocess on a 3-broker cluster
(topics with replication factor 3, ``min.insync.replicas=2``, failover within seconds). Each
test produces ``RECORDS`` records (key ``kNNNNN``, value ``vNNNNN``) into a 2-partition input
topic beforehand, runs the job with ``--available-now --max-offsets-per-trigger`` (several
micro-batches of two write tasks each, into a 3-partition output topic), injects one fault,
restarts the job from the same checkpoint with ``--available-now`` after a kill until a run
completes, and proves:

* a ``read_committed`` consumer of the output sees every input record exactly once: the set of
  ``(key, value)`` equals the enriched input, no duplicates, nothing lost;
* the consumer group's committed offsets equal the input's end offsets once the job finished,
  and are never ahead of the visible output: sampled while the job runs and right after every
  kill, every input record below the committed offsets is visible to a ``read_committed``
  reader of the output;
* nothing hangs: no transaction of the sink's prefix is left open and the output's last stable
  offset reaches its end;
* the fault really happened (the evidence of each test below): a test that cannot show its
  fault proves nothing, so it fails instead.

The faults (one test each; a one-line table row per fault is printed, ``-s`` shows them):

1. ``worker-killed``: while both write tasks of batch 1 hold open transactions (seen with
   ListTransactions), the Spark Python worker processes (the ``pyspark.daemon`` forks under the
   spark-submit JVM, found through ``/proc``) are SIGKILLed; Spark retries the tasks. Evidence:
   the batch is committed with the transactions of attempt 1, rows of the killed attempts were
   aborted.
2. ``speculation``: Spark standalone (a master and two workers from the venv's pyspark, on hosts
   127.0.0.1 and 127.0.0.2) with aggressive speculation; the first attempt of one write task of
   batch 1 stalls. Evidence: Spark's event log has a speculative task attempt and the batch is
   committed with the speculative attempt's transaction.
3. ``driver-killed-{before,during,after}-commit``: the spark-submit process tree is SIGKILLed
   during batch 1 while its tasks hold open transactions and the sink log has no ``1.json``;
   while the committer pauses at ``ended`` (``MILLRACE_SINK_FAULT_PAUSE``: ``1.json`` prepared,
   the first transaction of the batch committed and visible, the last one not); or while it
   pauses at ``committed`` (``1.json`` committed, Spark's ``commits/1`` not written). The job
   is restarted without the pause. Evidence: the state of the checkpoint at the kill, and after
   the restart: a batch killed before its commit is written again by fenced, newer producer
   epochs; a prepared one is finished with the very transactions it logged.
4. ``broker-killed``: the leader of output partition 0 is SIGKILLed while both write tasks of
   batch 1 hold open transactions, and started again once the job is done. Evidence: it led
   that partition at the kill; the batch was committed while it was down.
5. ``coordinator-killed``: the transaction coordinator (``__transaction_state`` has one
   partition here, so one broker coordinates every transaction of the batch) is SIGKILLed while
   the committer pauses at ``prepared``, and the commit goes on. Evidence: the batch was
   committed while the old coordinator was down, through a new one.

Cluster mode (test 2): the executors get the connector the way executors of a real cluster
must: the Python that runs every Python worker is ``PYSPARK_PYTHON`` (the driver's setting
travels with every Python function), here the venv's Python, in which ``make setup`` installed
the project (``pip install -e .``), so ``spark_connector`` and its dependencies
(confluent-kafka, kio, pyarrow) import on every executor. The test also puts this checkout
first on the workers' and executors' ``PYTHONPATH`` (``spark.executorEnv.PYTHONPATH``) so the
code under test is the checkout's even where the venv's editable install points at another
checkout (a git worktree). On a real cluster, install the project (and so its dependencies)
into the ``PYSPARK_PYTHON`` of every node.

Tests 1, 2, 3 (before) and 4 use ``tests/spark/enrich_stall_job.py``: the real job's query with
an identity UDF that stalls chosen task attempts (the only way to hold a task mid-write for
as long as a test needs); Spark is given small Arrow and Python-worker buffers so that rows
before the stall reach the sink and sit in open transactions.

Process hygiene: every process a test starts (spark-submit in a session of its own, the
standalone master and workers) carries ``MILLRACE_EOS_FAULT_TEST=<token>`` in its environment,
which its children (JVMs, Python daemons in process groups of their own, executors) inherit;
teardown SIGKILLs the process groups and then every process with the token, by pid, whatever
happened. The broker cluster (module-scoped) is the harness's.

Runtime: about 5 minutes for the module on 2 cores, 25-50 s per test: a spark-submit needs
15-30 s before its first batch, the driver-kill tests need two of them, and every batch of a
run with a committer pause pays ``PAUSE_S``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spark_connector.kafka.transactions import TxnClient, TxnError
from tests.harness.ports import free_port
from tests.harness.processes import kill_pid, pid_alive

pytestmark = [
    pytest.mark.spark,
    pytest.mark.fault,
    pytest.mark.timeout(300),
    pytest.mark.cluster_config(
        {
            # a SIGKILLed broker is noticed when its ZooKeeper session expires; a replica that
            # stops fetching leaves the ISR after replica.lag.time.max.ms
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "5000",
            "controlled.shutdown.retry.backoff.ms": "500",
            "min.insync.replicas": "2",
            "default.replication.factor": "3",
            # one __transaction_state partition: one broker coordinates every transaction,
            # so test 5 kills the coordinator of all of a batch's transactions at once
            "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "group.initial.rebalance.delay.ms": "0",
        },
        brokers=3,
    ),
]

REPO = Path(__file__).resolve().parents[2]
REAL_JOB = REPO / "jobs" / "enrich_exactly_once.py"
STALL_JOB = Path(__file__).resolve().with_name("enrich_stall_job.py")
PYTHON = sys.executable
SPARK_SUBMIT = Path(PYTHON).with_name("spark-submit")
TOKEN_ENV = "MILLRACE_EOS_FAULT_TEST"

RECORDS = 3000
INPUT_PARTITIONS = 2
OUTPUT_PARTITIONS = 3
MAX_OFFSETS = 1000  # per trigger: batches 0, 1, 2 of about 500 rows per write task
FAULT_BATCH = 1  # the micro-batch every fault hits (batch 0 commits normally first)
PAUSE_S = 10  # MILLRACE_SINK_FAULT_PAUSE: long enough to act in (every batch pays it)
RUN_TIMEOUT_S = 180
JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# Rows reach the sink's writer in Arrow batches of 100 and the Python workers' pipes are
# flushed every KiB, so the rows before a stall are in the task's open transaction.
STALL_CONF = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100",
    "spark.sql.execution.python.udf.buffer.size": "1024",
    "spark.buffer.size": "1024",
}

TABLE: list[str] = []
TABLE_HEADER = (
    "| fault | records in | records out | duplicates | lost | aborted rows | runs | seconds |"
)


# --- processes -------------------------------------------------------------------------------


def _read_proc(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _cmdline(pid: int) -> str:
    return _read_proc(pid, "cmdline").replace(b"\0", b" ").decode("utf-8", "replace").strip()


def _ppid(pid: int) -> int:
    stat = _read_proc(pid, "stat").decode("utf-8", "replace")
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 else -1


def tagged_pids(token: str) -> list[int]:
    """Live processes whose environment carries ``TOKEN_ENV=token`` (ours, and their children)."""
    needle = f"{TOKEN_ENV}={token}".encode()
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        if needle in _read_proc(int(entry.name), "environ").split(b"\0"):
            found.append(int(entry.name))
    return sorted(p for p in found if pid_alive(p))


def python_task_workers(token: str) -> list[int]:
    """The forked Python workers of a Spark run: children of a ``pyspark.daemon`` whose worker
    module is ``pyspark.worker`` (the processes that run tasks: readers, UDFs, writers)."""
    out = []
    for pid in tagged_pids(token):
        cmd = _cmdline(pid)
        # a worker is forked by its daemon: same command line as its parent
        if (
            "pyspark.daemon" in cmd
            and cmd.endswith("pyspark.worker")
            and _cmdline(_ppid(pid)) == cmd
        ):
            out.append(pid)
    return out


class Processes:
    """Every process one test starts, each in a session of its own and tagged with a token in
    its environment; :meth:`kill_all` (teardown) SIGKILLs them and their children by pid."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.tokens: list[str] = []

    def spawn(
        self, cmd: list[str], env: dict[str, str], log: Path, token: str, cwd: Path
    ) -> subprocess.Popen[bytes]:
        self.tokens.append(token)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**env, TOKEN_ENV: token},
                cwd=cwd,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill_tree(proc: subprocess.Popen[bytes], token: str) -> None:
        """SIGKILL ``proc``'s process group, then every process carrying ``token`` (Python
        daemons make process groups of their own)."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for _ in range(3):
            pids = tagged_pids(token)
            if not pids:
                break
            for pid in pids:
                kill_pid(pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
        for token in self.tokens:
            for _ in range(3):
                pids = tagged_pids(token)
                if not pids:
                    break
                for pid in pids:
                    kill_pid(pid)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


@dataclass
class SparkRun:
    """One spark-submit of the job."""

    proc: subprocess.Popen[bytes]
    token: str
    log: Path
    label: str

    def alive(self) -> bool:
        return self.proc.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])


# --- reading the cluster -----------------------------------------------------------------------


def read_topic(
    bootstrap: str, topic: str, partitions: int, *, committed: bool, timeout_s: float = 30.0
) -> list[tuple[int, int, Any, Any]] | None:
    """Every record of ``topic`` up to its current end (its last stable offset for
    ``committed``), as (partition, offset, key, value); None if that takes longer than
    ``timeout_s`` (a broker is failing over)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-check-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        deadline = time.monotonic() + timeout_s
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        try:
            ends = [
                consumer.get_watermark_offsets(tp, timeout=min(10.0, timeout_s))[1] for tp in tps
            ]
        except KafkaException:
            return None
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        rows: list[tuple[int, int, Any, Any]] = []
        positions = [0] * partitions
        while any(positions[p] < ends[p] for p in range(partitions)):
            if time.monotonic() > deadline:
                return None
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    return None
                rows.append((msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value()))
            positions = [max(0, tp.offset) for tp in consumer.position(tps)]
        return rows
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int, *, committed: bool) -> list[int]:
    """The high watermarks (or, ``committed``, the last stable offsets) of ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-ends-{topic}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def group_offsets(
    bootstrap: str, group: str, topic: str, partitions: int, timeout_s: float = 10.0
) -> dict[int, int] | None:
    """The group's committed offsets of ``topic`` (0 where none), None if the cluster did not
    answer in time. Read without ``require_stable``: the committed offsets, not pending ones."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        found = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=timeout_s
        )
    except KafkaException:
        return None
    finally:
        consumer.close()
    return {tp.partition: max(tp.offset, 0) for tp in found}


# --- one test's pipeline --------------------------------------------------------------------------


@dataclass
class Pipeline:
    """One test's input and output topics, checkpoint, group, transactional id prefix and
    expected output, and the spark-submit runs of the job over them."""

    name: str
    cluster: Any
    dir: Path
    procs: Processes
    prefix: str
    input: str = ""
    output: str = ""
    group: str = ""
    value_of: dict[tuple[int, int], tuple[bytes, bytes]] = field(default_factory=dict)
    input_ends: dict[int, int] = field(default_factory=dict)
    runs: list[SparkRun] = field(default_factory=list)
    samples: int = 0
    started: float = field(default_factory=time.monotonic)
    _last_sample: float = 0.0

    @property
    def bootstrap(self) -> str:
        return str(self.cluster.bootstrap)

    @property
    def checkpoint(self) -> Path:
        return self.dir / "checkpoint"

    def produce_input(self) -> None:
        from confluent_kafka import Producer

        placed: dict[int, tuple[int, int]] = {}
        errors: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                placed[int(msg.key()[1:])] = (msg.partition(), msg.offset())

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "partitioner": "murmur2_random",
            }
        )
        for i in range(RECORDS):
            producer.produce(
                self.input, key=f"k{i:05d}", value=f"v{i:05d}", on_delivery=on_delivery
            )
        assert producer.flush(60) == 0 and not errors, errors[:5]
        assert len(placed) == RECORDS
        for i, where in placed.items():
            self.value_of[where] = (f"k{i:05d}".encode(), f"V{i:05d}|enriched".encode())
        for p in range(INPUT_PARTITIONS):
            offsets = sorted(o for q, o in placed.values() if q == p)
            assert offsets == list(range(len(offsets))), f"input partition {p} is not dense"
            self.input_ends[p] = len(offsets)
        assert all(self.input_ends.values()), self.input_ends

    # --- the job ---

    def submit(
        self,
        *,
        script: Path = REAL_JOB,
        job_args: tuple[str, ...] = (),
        pause: str | None = None,
        master: str = "local[2,4]",
        conf: dict[str, str] | None = None,
    ) -> SparkRun:
        """Start one spark-submit of the job over this pipeline (``--available-now``)."""
        label = f"run-{len(self.runs) + 1}"
        token = f"{self.name}-{uuid.uuid4().hex[:12]}"
        confs = {
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "2",
            **(STALL_CONF if script == STALL_JOB else {}),
            **(conf or {}),
        }
        cmd = [str(SPARK_SUBMIT), "--master", master, "--driver-java-options", JAVA_OPTS]
        for key, value in confs.items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += [
            str(script),
            *job_args,
            "--bootstrap",
            self.bootstrap,
            "--input",
            self.input,
            "--output",
            self.output,
            "--group",
            self.group,
            "--checkpoint",
            str(self.checkpoint),
            "--max-offsets-per-trigger",
            str(MAX_OFFSETS),
            "--available-now",
            "--option",
            f"transactionalIdPrefix={self.prefix}",
        ]
        env = spark_env()
        if pause is not None:
            env["MILLRACE_SINK_FAULT_PAUSE"] = pause
        log = self.dir / f"{label}.log"
        proc = self.procs.spawn(cmd, env, log, token, self.dir)
        run = SparkRun(proc, token, log, label)
        self.runs.append(run)
        return run

    def kill(self, run: SparkRun) -> None:
        """SIGKILL the run's whole process tree (the driver, its JVM, every Python worker)."""
        Processes.kill_tree(run.proc, run.token)
        assert not tagged_pids(run.token), "processes of the killed run are still alive"

    def wait_run(self, run: SparkRun, timeout_s: float = RUN_TIMEOUT_S) -> int:
        deadline = time.monotonic() + timeout_s
        while run.alive():
            assert time.monotonic() < deadline, (
                f"{run.label} still running after {timeout_s:g}s; its log ends:\n{run.tail()}"
            )
            self.maybe_sample(f"{run.label} running")
            time.sleep(0.5)
        return int(run.proc.returncode)

    def complete(
        self, run: SparkRun | None, *, script: Path = REAL_JOB, job_args: tuple[str, ...] = ()
    ) -> None:
        """Wait for ``run`` (None: it was killed); while the last run did not succeed, restart
        the job from the checkpoint with ``--available-now`` (no fault injected; ``job_args``
        as the first run had them), up to 3 times."""
        rc = self.wait_run(run) if run is not None else None
        restarts = 0
        while rc != 0:
            assert restarts < 3, (
                f"the job did not complete in {len(self.runs)} runs; the last one "
                f"(exit {rc}) ends:\n{self.runs[-1].tail()}"
            )
            restarts += 1
            rc = self.wait_run(self.submit(script=script, job_args=job_args))

    def until(
        self,
        predicate: Callable[[], Any],
        what: str,
        run: SparkRun,
        timeout_s: float = 150.0,
        *,
        sample: bool = True,
    ) -> Any:
        """Poll ``predicate`` while ``run`` is alive (failing if it ends first), sampling the
        group's offsets against the visible output on the way (unless ``sample`` is False: a
        sample can take seconds, longer than a short window to act in)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = predicate()
            if value:
                return value
            assert run.alive(), (
                f"{run.label} ended (exit {run.proc.returncode}) before {what}; its log "
                f"ends:\n{run.tail()}"
            )
            assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g}s"
            if sample:
                self.maybe_sample(f"waiting for {what}")
            time.sleep(0.1)

    # --- the checkpoint, the sink's log, the coordinator ---

    def sink_log(self, batch: int) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(
                (self.checkpoint / "millrace-sink" / f"{batch}.json").read_text()
            )
        except FileNotFoundError:
            return None
        return data

    def spark_log_has(self, kind: str, batch: int) -> bool:
        """Whether Spark's ``<checkpoint>/<kind>/<batch>`` (offsets or commits) exists."""
        return (self.checkpoint / kind / str(batch)).exists()

    def ongoing(self) -> set[str]:
        """The sink's open transactions (ListTransactions on every broker); empty if the
        cluster does not answer within seconds."""
        try:
            with TxnClient(self.bootstrap, timeout_s=5) as client:
                return set(client.list_ongoing(self.prefix + "-"))
        except (TxnError, OSError):
            return set()

    def describe(self, txn_id: str) -> Any:
        with TxnClient(self.bootstrap, timeout_s=30) as client:
            return client.describe(txn_id)

    @staticmethod
    def partition_of(txn_id: str) -> int:
        """The Spark partition of a task's transactional id ``<prefix>-<sink id>-<p>-<slot>``."""
        return int(txn_id.rsplit("-", 2)[1])

    def open_tasks(self) -> dict[int, set[str]]:
        """The sink's open task transactions by Spark partition."""
        out: dict[int, set[str]] = {}
        for txn_id in self.ongoing():
            if not txn_id.endswith("-driver"):
                out.setdefault(self.partition_of(txn_id), set()).add(txn_id)
        return out

    def tasks_open(self, batch: int) -> bool:
        """Batch ``batch`` is running (Spark planned it, so the batch before it is
        committed), its write tasks hold open transactions and its commit has not begun (no
        ``<batch>.json``)."""
        return (
            self.spark_log_has("offsets", batch)
            and set(range(INPUT_PARTITIONS)) <= set(self.open_tasks())
            and self.sink_log(batch) is None
        )

    @staticmethod
    def committed_tasks(record: dict[str, Any]) -> dict[int, dict[str, Any]]:
        """A batch record's tasks that wrote, by Spark partition."""
        return {t["partition"]: t for t in record["tasks"] if t["txn"] is not None}

    # --- the checks ---

    def maybe_sample(self, note: str, every_s: float = 3.0) -> None:
        if time.monotonic() - self._last_sample >= every_s:
            self.sample(note)

    def sample(self, note: str) -> None:
        """The group's committed offsets are never ahead of the visible output: every input
        record below them is visible to a read_committed reader (offsets read first, the
        output after; skipped while the cluster cannot answer)."""
        self._last_sample = time.monotonic()
        committed = group_offsets(self.bootstrap, self.group, self.input, INPUT_PARTITIONS)
        if committed is None:
            return
        rows = read_topic(
            self.bootstrap, self.output, OUTPUT_PARTITIONS, committed=True, timeout_s=10
        )
        if rows is None:
            return
        visible = {(key, value) for _p, _o, key, value in rows}
        behind = [
            (p, o)
            for p, upto in committed.items()
            for o in range(upto)
            if self.value_of.get((p, o)) not in visible
        ]
        self.samples += 1
        assert not behind, (
            f"{self.name} ({note}): the group's offsets {committed} are ahead of the visible "
            f"output: {len(behind)} input records below them are not visible to read_committed "
            f"(first {behind[:5]}); {len(rows)} output records visible"
        )

    def verify(self, fault: str, evidence: str) -> None:
        """The end state: nothing hanging, every record exactly once, offsets at the end."""
        bs = self.bootstrap
        deadline = time.monotonic() + 60
        while True:
            open_txns = self.ongoing()
            stable: list[int] | str
            ends: list[int] | str
            try:
                stable = end_offsets(bs, self.output, OUTPUT_PARTITIONS, committed=True)
                ends = end_offsets(bs, self.output, OUTPUT_PARTITIONS, committed=False)
            except Exception as exc:  # noqa: BLE001 - a broker may still be failing over
                stable, ends = "unknown", repr(exc)
            if not open_txns and stable == ends:
                break
            assert time.monotonic() < deadline, (
                f"{fault}: a transaction hangs 60s after the job finished: open transactions "
                f"{sorted(open_txns)}, last stable offsets {stable} vs log ends {ends}"
            )
            time.sleep(0.5)
        rows = read_topic(bs, self.output, OUTPUT_PARTITIONS, committed=True, timeout_s=60)
        everything = read_topic(bs, self.output, OUTPUT_PARTITIONS, committed=False, timeout_s=60)
        assert rows is not None and everything is not None, "the output could not be read"
        got = Counter((key, value) for _p, _o, key, value in rows)
        expected = set(self.value_of.values())
        out = len(rows)
        duplicates = out - len(got)
        lost = expected - set(got)
        unexpected = set(got) - expected
        aborted = len(everything) - out
        seconds = time.monotonic() - self.started
        row = (
            f"| {fault} | {RECORDS} | {out} | {duplicates} | {len(lost)} | {aborted} | "
            f"{len(self.runs)} | {seconds:.0f} |"
        )
        TABLE.append(row)
        print(f"\n{TABLE_HEADER}\n{row}\n  evidence: {evidence}; offset samples: {self.samples}")
        counts = (
            f"{fault}: records in {RECORDS}, out {out}, duplicates {duplicates}, lost "
            f"{len(lost)}, unexpected {len(unexpected)} (aborted rows in the log {aborted}, "
            f"{len(self.runs)} runs, logs in {self.dir})"
        )
        assert duplicates == 0 and not lost and not unexpected, (
            f"{counts}; duplicated {[k for k, n in got.items() if n > 1][:5]}, lost "
            f"{sorted(lost)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
        committed = group_offsets(bs, self.group, self.input, INPUT_PARTITIONS, timeout_s=60)
        assert committed == self.input_ends, (
            f"{counts}; the group's offsets {committed} are not the input's end offsets "
            f"{self.input_ends}"
        )
        self.sample("at the end")


def spark_env() -> dict[str, str]:
    import pyspark

    env = {k: v for k, v in os.environ.items() if k != "MILLRACE_SINK_FAULT_PAUSE"}
    env.update(
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        PYSPARK_PYTHON=PYTHON,
        PYSPARK_DRIVER_PYTHON=PYTHON,
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    )
    return env


@pytest.fixture(scope="module", autouse=True)
def fault_table() -> Iterator[None]:
    yield
    if TABLE:
        print("\n" + "\n".join([TABLE_HEADER, "|---|---|---|---|---|---|---|---|", *TABLE]))


@pytest.fixture
def pipeline(
    cluster: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Pipeline]]:
    """``pipeline(name)``: fresh topics with the input produced, a checkpoint directory, a
    group and a transactional id prefix; every process started through it is killed at
    teardown."""
    procs = Processes()

    def make(name: str) -> Pipeline:
        cluster.ensure_all_running()
        tag = uuid.uuid4().hex[:6]
        p = Pipeline(name, cluster, tmp_path, procs, f"eos-{name}-{tag}")
        p.input = cluster.create_topic(
            f"eos-{name}-{tag}-in", INPUT_PARTITIONS, replication_factor=3
        )
        p.output = cluster.create_topic(
            f"eos-{name}-{tag}-out", OUTPUT_PARTITIONS, replication_factor=3
        )
        p.group = f"eos-{name}-{tag}"
        p.produce_input()
        return p

    try:
        yield make
    finally:
        procs.kill_all()


# --- the faults -------------------------------------------------------------------------------


@pytest.mark.long  # make fault: 28 s of make test's budget
def test_python_worker_killed_mid_task(pipeline: Callable[..., Pipeline]) -> None:
    p = pipeline("worker-killed")
    run = p.submit(
        script=STALL_JOB, job_args=("--stall-batch", str(FAULT_BATCH), "--stall-seconds", "120")
    )
    p.until(
        lambda: p.tasks_open(FAULT_BATCH),
        f"both write tasks of batch {FAULT_BATCH} holding open transactions",
        run,
    )
    workers = python_task_workers(run.token)
    assert workers, "no Python worker processes found under the spark-submit JVM"
    for pid in workers:
        kill_pid(pid)
    p.sample("Python workers killed")
    p.complete(run, script=STALL_JOB)
    log = run.text()
    lost = re.findall(r"Lost task \d+\.0 in stage \d+\.0 .*", log)
    assert lost, "Spark logged no failed task after its Python workers were killed"
    record = p.sink_log(FAULT_BATCH)
    assert record is not None and record["state"] == "committed", record
    tasks = p.committed_tasks(record)
    committed_ids = {t["txn"][0] for t in tasks.values()}
    attempts = {t["attempt"] for t in tasks.values()}
    assert len(tasks) == INPUT_PARTITIONS and min(attempts) >= 1, (
        f"batch {FAULT_BATCH} was not committed by retried attempts: {record['tasks']}"
    )
    p.verify(
        "Python worker killed mid-task",
        f"{len(workers)} workers killed; {len(lost)} tasks lost; batch {FAULT_BATCH} committed "
        f"as {sorted(committed_ids)}",
    )


@dataclass
class Standalone:
    """A Spark standalone master and two one-core workers, on 127.0.0.1 and 127.0.0.2."""

    url: str
    dir: Path


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    import pyspark

    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    procs = Processes()
    token = f"standalone-{uuid.uuid4().hex[:12]}"
    directory = tmp_path / "standalone"
    directory.mkdir()
    port = free_port()
    env = spark_env()
    try:
        procs.spawn(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(free_port()),
            ],
            env,
            directory / "master.log",
            token,
            directory,
        )
        for i, host in enumerate(("127.0.0.1", "127.0.0.2")):
            work = directory / f"worker-{i}"
            work.mkdir()
            procs.spawn(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    host,
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work),
                    f"spark://127.0.0.1:{port}",
                ],
                {**env, "SPARK_LOCAL_IP": host},
                directory / f"worker-{i}.log",
                token,
                directory,
            )
        master_log = directory / "master.log"
        deadline = time.monotonic() + 90
        while master_log.read_text(errors="replace").count("Registering worker") < 2:
            assert time.monotonic() < deadline, (
                "two Spark workers did not register with the master within 90s:\n"
                + master_log.read_text(errors="replace")[-3000:]
            )
            time.sleep(0.25)
        yield Standalone(f"spark://127.0.0.1:{port}", directory)
    finally:
        procs.kill_all()


def _event_log(directory: Path) -> list[dict[str, Any]]:
    """The events of Spark's event log(s) under ``directory`` (rolling logs are directories)."""
    events = []
    for path in sorted(f for f in directory.rglob("events_*") if f.is_file()):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return events


@pytest.mark.long
def test_speculative_duplicate_tasks(
    pipeline: Callable[..., Pipeline], standalone: Standalone
) -> None:
    p = pipeline("speculation")
    events_dir = p.dir / "events"
    events_dir.mkdir()
    run = p.submit(
        script=STALL_JOB,
        job_args=(
            "--stall-batch",
            str(FAULT_BATCH),
            "--stall-partition",
            "0",
            "--stall-seconds",
            "30",
        ),
        master=standalone.url,
        conf={
            "spark.executor.cores": "1",
            "spark.cores.max": "2",
            "spark.executor.memory": "512m",
            "spark.executorEnv.PYTHONPATH": str(REPO),
            "spark.executor.extraJavaOptions": JAVA_OPTS,
            "spark.speculation": "true",
            "spark.speculation.interval": "100ms",
            "spark.speculation.multiplier": "1.0",
            "spark.speculation.quantile": "0.1",
            "spark.speculation.minTaskRuntime": "0",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.compress": "false",
            "spark.eventLog.dir": events_dir.as_uri(),
        },
    )
    both: set[str] = set()

    def batch_done() -> bool:
        open_now = p.open_tasks()
        if len(open_now.get(0, ())) >= 2:  # both attempts of task 0 (ids of their own)
            both.update(open_now[0])
        return p.spark_log_has("commits", FAULT_BATCH)

    p.until(batch_done, f"batch {FAULT_BATCH} committed", run)
    p.complete(run, script=STALL_JOB)
    events = _event_log(events_dir)
    hosts = {
        e["Executor Info"]["Host"] for e in events if e.get("Event") == "SparkListenerExecutorAdded"
    }
    assert hosts == {"127.0.0.1", "127.0.0.2"}, f"executors on hosts {hosts}"
    speculative = [
        (e["Stage ID"], e["Task Info"]["Index"], e["Task Info"]["Attempt"])
        for e in events
        if e.get("Event") == "SparkListenerTaskStart" and e["Task Info"].get("Speculative")
    ]
    assert speculative, "Spark's event log shows no speculative task attempt"
    record = p.sink_log(FAULT_BATCH)
    assert record is not None and record["state"] == "committed", record
    tasks = p.committed_tasks(record)
    committed_ids = {t["txn"][0] for t in tasks.values()}
    assert tasks[0]["attempt"] == 1, (
        f"batch {FAULT_BATCH} was not committed with the speculative attempt of task 0: "
        f"{record['tasks']}"
    )
    p.verify(
        "speculative duplicate task (standalone, 2 hosts)",
        f"speculative attempts (stage, task, attempt) {speculative}; batch {FAULT_BATCH} "
        f"committed as {sorted(committed_ids)}; both attempts of task 0 open at once: "
        f"{bool(both)}",
    )


@pytest.mark.parametrize(
    "when",
    [
        pytest.param("before", marks=pytest.mark.long),
        pytest.param("during", marks=pytest.mark.long),  # 55 s: make fault
        pytest.param("after", marks=pytest.mark.long),
    ],
)
def test_driver_killed(pipeline: Callable[..., Pipeline], when: str) -> None:
    p = pipeline(f"driver-{when}")
    n = FAULT_BATCH
    evidence: list[str] = []
    script = STALL_JOB if when == "before" else REAL_JOB
    old: dict[str, tuple[int, int]] = {}
    logged: dict[str, Any] | None = None
    if when == "before":
        old = _kill_driver_before_the_commit(p, n, evidence)
    elif when == "during":
        logged = _kill_driver_during_the_commit(p, n, evidence)
    else:
        logged = _kill_driver_after_the_commit(p, n, evidence)
    p.sample("driver killed")
    p.complete(None, script=script)
    record = p.sink_log(n)
    assert record is not None and record["state"] == "committed", record
    assert p.spark_log_has("commits", n)
    if when == "before":
        _check_the_killed_runs_transactions_fenced(p, n, record, old, evidence)
    else:
        assert logged is not None
        txns = [t["txn"] for t in record["tasks"]]
        assert txns == [t["txn"] for t in logged["tasks"]], (
            f"batch {n} was committed with other transactions than it logged: "
            f"{record['tasks']} vs {logged['tasks']}"
        )
        evidence.append("finished with the logged transactions")
    p.verify(f"driver killed {when} the commit", "; ".join(evidence))


def _kill_driver_before_the_commit(
    p: Pipeline, n: int, evidence: list[str]
) -> dict[str, tuple[int, int]]:
    """Kill the driver while batch ``n``'s write tasks hold open transactions (planned, no
    sink log yet); returns those transactions' (producer id, epoch)."""
    run = p.submit(script=STALL_JOB, job_args=("--stall-batch", str(n), "--stall-seconds", "120"))
    p.until(lambda: p.tasks_open(n), f"the write tasks of batch {n} holding open transactions", run)
    old = {}
    for txn_id in sorted(set().union(*p.open_tasks().values())):
        state = p.describe(txn_id)
        old[txn_id] = (int(state.producer_id), int(state.producer_epoch))
    p.kill(run)
    assert p.sink_log(n) is None and p.spark_log_has("offsets", n)
    assert not p.spark_log_has("commits", n)
    evidence.append(f"killed with batch {n} planned, open transactions {old}, no {n}.json")
    return old


def _kill_driver_during_the_commit(p: Pipeline, n: int, evidence: list[str]) -> dict[str, Any]:
    """Kill the driver with batch ``n`` prepared and its first transaction committed; returns
    the sink log's record of the batch."""
    run = p.submit(pause=f"ended={PAUSE_S}")

    def at_ended() -> bool:
        record = p.sink_log(n)
        if record is None or record["state"] != "prepared":
            return False
        first = record["tasks"][0]["txn"][0]
        return str(p.describe(first).state) == "CompleteCommit"

    p.until(at_ended, f"the committer of batch {n} pausing at 'ended'", run)
    p.kill(run)
    logged = p.sink_log(n)
    assert logged is not None and logged["state"] == "prepared"
    # the group's offsets are still the batch before's, though part of the batch may be
    # visible (below the open last transaction's first offset in each partition)
    before = p.sink_log(n - 1)
    assert before is not None
    committed = group_offsets(p.bootstrap, p.group, p.input, INPUT_PARTITIONS)
    ends_before = {int(q): o for q, o in before["offsets"][p.input].items()}
    ends_now = {int(q): o for q, o in logged["offsets"][p.input].items()}
    visible = read_topic(p.bootstrap, p.output, OUTPUT_PARTITIONS, committed=True)
    assert committed == ends_before, (committed, ends_before)
    assert visible is not None
    assert sum(ends_before.values()) <= len(visible) < sum(ends_now.values()), (
        f"{len(visible)} records visible with batch {n} half committed: expected at least "
        f"batch {n - 1}'s end {ends_before} and less than batch {n}'s {ends_now}"
    )
    evidence.append(
        f"killed with {n}.json prepared, its first transaction committed: {len(visible)} "
        f"records visible, group offsets {committed} (batch {n - 1}'s end)"
    )
    return logged


def _kill_driver_after_the_commit(p: Pipeline, n: int, evidence: list[str]) -> dict[str, Any]:
    """Kill the driver with batch ``n`` committed but no ``commits/n`` written by Spark;
    returns the sink log's record of the batch."""
    run = p.submit(pause=f"committed={PAUSE_S}")
    p.until(
        lambda: (p.sink_log(n) or {}).get("state") == "committed",
        f"the committer of batch {n} pausing at 'committed'",
        run,
    )
    p.kill(run)
    logged = p.sink_log(n)
    assert logged is not None and logged["state"] == "committed"
    assert not p.spark_log_has("commits", n), "Spark wrote commits/N before the kill"
    evidence.append(f"killed with {n}.json committed and no commits/{n}")
    return logged


def _check_the_killed_runs_transactions_fenced(
    p: Pipeline,
    n: int,
    record: dict[str, Any],
    old: dict[str, tuple[int, int]],
    evidence: list[str],
) -> None:
    """Batch ``n`` was rewritten by new producers and the killed run's are fenced."""
    newer = {t["txn"][0]: (t["txn"][1], t["txn"][2]) for t in record["tasks"] if t["txn"]}
    assert not any(old.get(i) == pair for i, pair in newer.items()), (
        f"batch {n} was committed with a transaction of the killed run: {newer} vs {old}"
    )
    for txn_id, (pid, epoch) in old.items():
        state = p.describe(txn_id)
        assert not (
            state.state == "Ongoing" and (state.producer_id, state.producer_epoch) == (pid, epoch)
        ), f"the killed run's transaction {txn_id} is still open: {state}"
    evidence.append(f"rewritten by other producers {newer}; the killed run's fenced")


@pytest.mark.long
def test_broker_killed_mid_batch(pipeline: Callable[..., Pipeline]) -> None:
    p = pipeline("broker-killed")
    cluster = p.cluster
    n = FAULT_BATCH
    run = p.submit(script=STALL_JOB, job_args=("--stall-batch", str(n), "--stall-seconds", "10"))
    p.until(lambda: p.tasks_open(n), f"the write tasks of batch {n} holding open transactions", run)
    victim = cluster.describe(p.output)[0][0]
    covered = {
        t: sorted(p.describe(t).partitions) for t in sorted(set().union(*p.open_tasks().values()))
    }
    assert all((p.output, 0) in parts for parts in covered.values()), covered
    kill_broker(cluster, victim)
    assert p.sink_log(n) is None, f"batch {n} began its commit before the broker was killed"
    try:
        p.sample(f"broker {victim} killed")
        p.complete(run, script=STALL_JOB)
        record = p.sink_log(n)
        assert record is not None and record["state"] == "committed", record
        leaders = {part: view[0] for part, view in cluster.describe(p.output).items()}
        assert victim not in leaders.values(), leaders
    finally:
        cluster.start_broker(victim)
    for topic in (p.input, p.output, "__transaction_state", "__consumer_offsets"):
        cluster.wait_isr_complete(topic, 90)
    p.verify(
        "broker SIGKILLed mid-batch",
        f"broker {victim} (leader of {p.output}[0]) killed while the open transactions of "
        f"batch {n} covered that partition; the job finished while it was down (leaders then "
        f"{leaders})",
    )


def kill_broker(cluster: Any, broker_id: int) -> None:
    """SIGKILL one broker by its pid at once, then record it as stopped in cluster.json."""
    kill_pid(cluster.broker_pid(broker_id))
    cluster.stop_broker(hard=True, broker_id=broker_id)


@pytest.mark.long
def test_coordinator_killed_during_commit(pipeline: Callable[..., Pipeline]) -> None:
    p = pipeline("coordinator-killed")
    cluster = p.cluster
    n = FAULT_BATCH
    run = p.submit(pause=f"prepared={PAUSE_S}")
    p.until(
        lambda: (p.sink_log(n) or {}).get("state") == "prepared",
        f"the committer of batch {n} pausing at 'prepared'",
        run,
    )
    victim = cluster.describe("__transaction_state")[0][0]
    open_txns = p.ongoing()
    kill_broker(cluster, victim)
    try:
        assert (p.sink_log(n) or {}).get("state") == "prepared", "the commit was not paused"
        p.sample(f"coordinator {victim} killed")
        p.complete(run)
        record = p.sink_log(n)
        assert record is not None and record["state"] == "committed", record
        new_coordinator = cluster.describe("__transaction_state")[0][0]
        assert new_coordinator not in (victim, -1), new_coordinator
    finally:
        cluster.start_broker(victim)
    for topic in (p.input, p.output, "__transaction_state", "__consumer_offsets"):
        cluster.wait_isr_complete(topic, 90)
    p.verify(
        "transaction coordinator SIGKILLed during the commit",
        f"broker {victim} (coordinator of {sorted(open_txns)}) killed with {n}.json prepared; "
        f"batch {n} committed through broker {new_coordinator} while it was down",
    )


# --- several sinks per batch (foreachBatch fan-out) ----------------------------------------------

FAN_OUT_JOB = REPO / "jobs" / "fan_out_exactly_once.py"
FAN_OUT_PAUSE_S = 4


@pytest.mark.parametrize("when", ["between", pytest.param("during", marks=pytest.mark.long)])
def test_fan_out_sinks_survive_a_driver_kill(pipeline: Callable[..., Pipeline], when: str) -> None:
    """``jobs/fan_out_exactly_once.py``: every batch to two topics with two ``write_batch``
    sinks, the source offsets with the second. The driver is SIGKILLed between the two
    sinks' commits of batch 0 (the first committed, the second not begun), or during the
    second's (prepared, nothing ended). The restarted job replays batch 0: the first sink
    skips it, the second writes or finishes it; both outputs hold every record once and the
    group's offsets are never ahead of either. (The old sink kept one log per checkpoint and
    skipped the second sink's writes of every batch for good.)"""
    p = pipeline(f"fan-out-{when}")
    # the job writes its first --output (``first``, from job_args) then the pipeline's own,
    # which the source offsets go with
    first = p.cluster.create_topic(f"{p.output}-1", OUTPUT_PARTITIONS, replication_factor=3)
    n = 0  # the first batch: the run is killed at its first commit
    sinks = p.checkpoint / "millrace-sink" / "sinks"

    def record(topic: str) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads((sinks / topic / f"{n}.json").read_text())
        except FileNotFoundError:
            return None
        return data

    point = "committed" if when == "between" else "prepared"
    job_args = ("--output", first)
    run = p.submit(script=FAN_OUT_JOB, job_args=job_args, pause=f"{point}={FAN_OUT_PAUSE_S}")
    if when == "between":
        p.until(
            lambda: (record(first) or {}).get("state") == "committed" and record(p.output) is None,
            f"batch {n} committed to the first sink only",
            run,
            sample=False,
        )
    else:
        p.until(
            lambda: (record(p.output) or {}).get("state") == "prepared",
            f"batch {n} prepared in the second sink",
            run,
            sample=False,
        )
    p.kill(run)
    first_record, second_record = record(first), record(p.output)
    assert first_record is not None and first_record["state"] == "committed"
    assert not p.spark_log_has("commits", n)
    p.sample(f"driver killed {when} the sinks")
    p.complete(None, script=FAN_OUT_JOB, job_args=job_args)
    after = record(p.output)
    assert after is not None and after["state"] == "committed", after
    assert record(first) == first_record, "the first sink wrote the batch again"
    rows = read_topic(p.bootstrap, first, OUTPUT_PARTITIONS, committed=True, timeout_s=60)
    assert rows is not None
    got = Counter((key, value) for _p, _o, key, value in rows)
    assert set(got) == set(p.value_of.values()) and max(got.values()) == 1, (
        f"the first output is not exactly the input once: {len(rows)} rows, "
        f"{len(set(got))} distinct, {len(p.value_of)} expected"
    )
    p.verify(
        f"foreachBatch fan-out, driver killed {when} the sinks' commits",
        f"killed with batch {n} {'committed to the first sink only' if when == 'between' else 'prepared in the second sink'}"
        f" (second sink's record then: {None if second_record is None else second_record['state']})",
    )
